r"""The interacting particle system: ODE (``D = 0``) and SDE (``D > 0``) on the sphere, batched.

Three integrators, named by their scheme:

``method="dop853"`` (default without diffusion)
    Dormand-Prince 8(5,3) with error control (``rtol`` down to 1e-10 and below) for
    validation against exact references: Hairer's DOP853 as :class:`scipy.integrate.DOP853`
    runs it (blended error estimate, dense output at the output times), on the library's
    controller and driver. Stage points are not renormalized, so the norms stay one to the
    requested tolerance (and the run reports by how much).
``method="rk4"``
    Classical RK4 with step ``dt``, each step followed by the radial projection back to the
    sphere: norms stay one to round-off, cost is predictable, for throughput. ODE only.
``method="euler"`` (default with diffusion)
    Projected Euler(-Maruyama), order one (weak order one with noise):
    :math:`x \leftarrow \frac{x + v\,\Delta t + \sqrt{2 D \Delta t}\, P_x\xi}{|\cdot|}`,
    :math:`\xi \sim N(0, I_d)`, with a seeded generator, :math:`v = P_x a` the velocity.
``method="layer"``
    The paper's discrete layer, residual step plus layer normalization without the tangent
    projection: :math:`x \leftarrow \frac{x + a\,\Delta t\,(+ \sqrt{2 D \Delta t}\, P_x\xi)}{|\cdot|}`
    with :math:`a` the attention output (:meth:`SelfAttention.attention_output`). The radial
    part of :math:`a` only rescales the step, by :math:`1/(1 + \Delta t\langle x, a\rangle)`:
    the same ODE at order one, with different numbers during a transient, so a phase diagram
    made with it compares point by point with the paper's.

The velocity comes from a kernel (``meanfield.engines.kernels``): numba-fused passes for
:class:`SelfAttention` up to 256 tokens, the model's numpy methods otherwise, the array API
path for arrays of other libraries (CuPy, PyTorch, JAX: the run stays on their device).

Without noise, zonal models (``Q = K = I``, ``V = cI``) keep every token in the span of its
system's initial tokens: the velocity is a combination of the tokens with weights that
depend on their inner products only. With ``d > n`` the fixed-step schemes therefore run in
orthonormal coordinates of that span, ``n`` components instead of ``d``
(:class:`SpanCoordinates`), and map the frames back: the same numbers up to round-off, at
the cost of ``d = n``.

:func:`observe_particles` runs the fixed-step schemes and keeps only what an observer
extracts from each output frame, for ensembles too large to store whole (sweeps).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Callable, NoReturn, Sequence

import numpy as np
from array_api_compat import array_namespace, is_array_api_obj

from .checks import check_points, check_real, check_rtol, check_step, check_times
from .errors import NonFiniteState, StepSizeCollapse
from .integration import CLASSICAL_RK4, ExplicitRungeKutta, ExplicitTableau
from .integration.driver import equal_steps
from .integration.runs import embedded_pair_run, fixed_step_run, rms
from .integration.tableaux import ADAPTIVE_PAIRS, tableau_named
from . import euclidean_particles
from .engines.kernels import energy_pair_sum, is_numpy, select_kernel, to_numpy
from .causal import CausalAttention
from .models import SelfAttention
from .progress import time_progress
from .records import PARTICLES, geometry_name, record_attrs
from .sampling import reproducible_seed
from .sphere import normalize, squared_norms

if TYPE_CHECKING:
    import xarray as xr

#: Adaptive embedded pairs of ``meanfield.integration``, by name (``method=``); ``"dop853"`` the default.
PAIRS = ("dop853",) + tuple(name for name in ADAPTIVE_PAIRS if name != "dop853")
METHODS = PAIRS[:1] + ("rk4", "euler", "layer") + PAIRS[1:]
FIXED_STEP_METHODS = ("rk4", "euler", "layer")
NOISY_METHODS = ("euler", "layer")


def _scheme(method: str | ExplicitTableau | None, diffusion: float, allowed: tuple[str, ...]) -> str | ExplicitTableau:
    """The scheme a ``method`` argument names (default: DOP853 for the ODE, Euler-Maruyama for the SDE)."""
    if method is None:
        return "euler" if diffusion > 0 else allowed[0]
    if isinstance(method, ExplicitTableau) and set(PAIRS) <= set(allowed):  # simulate_particles, not observe
        method = tableau_named(method)
        if diffusion > 0:
            raise ValueError(f"method={method.name!r} integrates the ODE (diffusion = 0); with "
                             f"diffusion={diffusion} use method='euler' (Euler-Maruyama) with a step dt")
        return method
    if method not in allowed:
        raise ValueError(f"method must be one of {allowed}, got {method!r}")
    if diffusion > 0 and method not in NOISY_METHODS:
        raise ValueError(f"method={method!r} integrates the ODE (diffusion = 0); with "
                         f"diffusion={diffusion} use method='euler' (Euler-Maruyama) with a step dt")
    return method


def simulate_particles(model, x0: np.ndarray, times, *, method: str | None = None,
                       rtol: float = 1e-10, atol: float | None = None, dt: float | None = None,
                       rng: int | np.random.Generator | None = None,
                       progress: bool | None = None, kernel: str = "auto", attention: bool = False,
                       observables: Sequence[str] = ()) -> xr.Dataset:
    r"""Evolve particles under ``model`` and record them at ``times``.

    Parameters
    ----------
    model : SelfAttention, ZonalAggregation, CausalAttention or PureAttention
        A :class:`~meanfield.PureAttention` model runs tokens in :math:`\mathbb{R}^d`
        (``meanfield.euclidean_particles``: the same schemes without the projection, no
        noise; ``"layer"`` is the paper's discrete Transformer).
    x0 : array, shape (n, d) or (systems, n, d)
        Initial points on the unit sphere (any finite points of :math:`\mathbb{R}^d` for
        ``PureAttention``); a leading axis runs independent systems at once.
        A numpy array, or an array of any array API namespace (CuPy, PyTorch, JAX), in
        which the fixed-step schemes then compute, in float64, on its device.
    times : array_like, shape (T,)
        Strictly increasing output times; the run starts at ``times[0]``.
    method : str or ExplicitTableau, optional
        Default ``"dop853"`` without diffusion, ``"euler"`` (Euler-Maruyama) with it;
        ``"rk4"``: fixed steps for throughput; ``"euler"`` without noise: projected Euler;
        ``"layer"``: the Transformer layer ``normalize(x + h a)`` (module docstring). The
        adaptive methods are the embedded pairs of ``meanfield.integration`` (``"dop853"``,
        ``"dormand_prince"``, ``"dormand_prince_853"``, ``"bogacki_shampine"``, ``"merson"``,
        or an ``meanfield.integration.ExplicitTableau``) on the solvers' controller and
        driver: output times are interpolated where the pair has a dense output (DOP853 and
        Dormand-Prince 5(4) and 8(5,3)), hit exactly by the steps otherwise.
    rtol, atol : float
        Tolerances of the adaptive methods: each step's local error in every coordinate is
        below ``atol + rtol |x_k|`` (RMS over coordinates; ``atol`` defaults to ``rtol / 100``).
        As for the PDE solvers, ``rtol`` is relative to what moves, here the positions
        themselves. Any ``rtol`` in ``[1e-12, 1e-3]`` is supported.
    dt : float, optional
        Largest step of the fixed-step schemes (default ``0.01``); each output interval is
        split into equal steps no larger than ``dt``.
    rng : int, numpy.random.Generator or None
        Seed or generator of the noise (``D > 0``); the seed the noise was drawn from is
        recorded in the settings (``meanfield.sampling.reproducible_seed``), so passing it
        as ``rng`` repeats the run.
    progress : bool or tqdm.tqdm, optional
        Progress bar; by default shown when stderr is a terminal. An open bar is advanced
        instead (one bar for a run made of several calls).
    kernel : {"auto", "fused", "numpy", "series"}
        The velocity kernel for numpy arrays (``meanfield.engines.kernels``): ``"series"`` sums the
        kernel's Fourier or harmonic series (zonal models on the circle and :math:`S^2`,
        ``O(n K)``), ``"fused"`` and ``"numpy"`` the pairs (``O(n^2)``); ``"auto"`` takes the
        cheapest. Recorded in the settings (with ``series_degree``, and the span dimension
        when the run used the span reduction).
    attention : bool
        ``PureAttention`` only: also record the attention matrices :math:`P^h(t)` as
        ``attention`` (..., time, head, particle, key).
    observables : sequence of str
        What to record besides the tokens, by name: ``"energy"``, the interaction energy
        :math:`E` at every output (``O(n^2)`` per system and output, through the steps' kernel:
        as much as a step where every step is an output, hence on request only).

    Returns
    -------
    xarray.Dataset
        ``x`` (time, particle, component) or (system, time, particle, component),
        ``energy`` (time) or (system, time) when asked for, ``norm_error`` (time): the largest
        :math:`||x_i| - 1|` of the integrator's solution, which ``x`` then projects onto
        the sphere (a drift is reported, never raised). ``attrs`` hold the model, the method and its settings, the
        number of velocity evaluations and the package version.

    Raises
    ------
    StepSizeCollapse
        When the adaptive step collapses; its ``partial`` holds the output times reached.
    """
    observables = _checked_observables(model, observables)
    if not model.on_sphere:
        return _simulate_euclidean(model, x0, times, method, rtol, atol, dt, progress, kernel, attention)
    if attention:
        raise ValueError("attention=True records the attention matrices of PureAttention runs; "
                         f"got a {type(model).__name__} model")
    x0 = _checked_initial(model, x0)
    times = _run_times(times)
    method = _scheme(method, model.diffusion, METHODS)
    settings: dict = {"method": method}
    with time_progress(times[0], times[-1], progress, "particles") as bar:
        if isinstance(method, ExplicitTableau) or method in PAIRS:
            method = tableau_named(method)
            _require_numpy(x0, method.name)
            rtol, atol = _tolerances(rtol, atol, settings)
            settings["method"] = method.name
            _check_explicit_steps(model, times, method.name)
            try:
                frames, evaluations = _integrate_pair(model, x0, times, method, rtol, atol, bar, settings, kernel,
                                                      observables)
            except NonFiniteState as overflow:
                raise NonFiniteState(f"{overflow} ({_overflow_scale(model)})", time=overflow.time,
                                     partial=overflow.partial) from None
            frames, drift = _project(frames)
        else:
            # the frames so far, also for the partial result of a run that overflows; every step ends on the
            # sphere, so their drift is round-off, measured as each frame comes
            recorded = _RecordedFrames(x0.shape, times.size)
            try:
                _, evaluations = _integrate_fixed_step(model, x0, times, method, dt, rng, bar, recorded.keep, settings,
                                                       kernel)
            except NonFiniteState as overflow:
                raise NonFiniteState(f"{overflow} ({_overflow_scale(model)})", time=overflow.time,
                                     partial=particle_dataset(model, *recorded.so_far(), times, settings,
                                                              observables=observables)) from None
            except StepSizeCollapse as stopped:  # the model could not go on (ModelFailure): the outputs so far
                raise StepSizeCollapse(str(stopped), time=stopped.time,
                                       partial=particle_dataset(model, *recorded.so_far(), times, settings,
                                                                observables=observables)) from None
            frames, drift = recorded.so_far()
    settings["velocity_evaluations"] = evaluations
    return particle_dataset(model, frames, drift, times, settings, observables=observables)


class _RecordedFrames:
    """A fixed-step run's frames written into one array ``(..., time, n, d)`` as they come, each with its
    drift off the sphere, measured while the frame is in cache (one pass over the run's frames saved)."""

    def __init__(self, shape: tuple[int, ...], count: int) -> None:
        self.frames = np.empty(shape[:-2] + (count,) + shape[-2:])
        self.drift = np.empty(count)
        self.count = 0
        from .engines.frames import copy_with_norm_range
        self._copy = copy_with_norm_range

    def keep(self, x) -> np.ndarray:
        """Record the frame ``x`` (any namespace), and return the recorded host copy."""
        frame = self.frames[..., self.count, :, :]
        self.drift[self.count] = _drift_of_extremes(*self._copy(to_numpy(x), frame))
        self.count += 1
        return frame

    def so_far(self) -> tuple[np.ndarray, np.ndarray]:
        """The frames recorded so far and their drifts."""
        return self.frames[..., :self.count, :, :], self.drift[:self.count]


#: What :func:`simulate_particles` records besides the tokens on request (``observables``).
OBSERVABLES = ("energy",)


def _checked_observables(model, observables) -> tuple[str, ...]:
    """``observables`` as a tuple of known names that the model has."""
    names = (observables,) if isinstance(observables, str) else tuple(observables)
    for name in names:
        if name not in OBSERVABLES:
            raise ValueError(f"observables: {name!r} is not one of {', '.join(map(repr, OBSERVABLES))}")
        if name == "energy" and not model.has_energy:
            raise ValueError(f"observables: 'energy' is not defined for {type(model).__name__} (has_energy is False: "
                             "no known interaction energy)")
    return names


def observe_particles(model, x0, times, observe: Callable[[np.ndarray], object], *,
                      method: str | None = None, dt: float | None = None,
                      rng: int | np.random.Generator | None = None, kernel: str = "auto",
                      invariant: bool = False, betas=None) -> list:
    """Run a fixed-step scheme like :func:`simulate_particles` and return ``[observe(x(t)) for t in times]``.

    ``observe`` receives the particles, shape ``(n, d)`` or ``(systems, n, d)``, at each
    output time, as arrays of ``x0``'s namespace, and must not keep a reference to them. The
    steps taken, and the noise drawn from ``rng``, are those of ``simulate_particles`` with
    the same arguments. ``invariant=True`` declares that ``observe`` depends on the tokens only
    through their inner products within a system: under the span reduction it then receives
    them in the span's coordinates (``n`` components instead of ``d``), which saves mapping
    every frame back.

    Parameters
    ----------
    model, x0, times
        As for :func:`simulate_particles`.
    observe : callable
        ``observe(x)`` of the particles, shape ``(n, d)`` or ``(systems, n, d)``, at each
        output time; its results are returned in order.
    method : str, optional
        A fixed-step scheme of :func:`simulate_particles` (``"rk4"``, ``"euler"``, ``"layer"``;
        default ``"rk4"`` without diffusion, ``"euler"`` with it).
    dt : float, optional
        Largest step (default ``0.01``).
    rng : int, numpy.random.Generator or None
        Seed or generator of the noise (``D > 0``).
    kernel : {"auto", "fused", "numpy", "series"}
        As for :func:`simulate_particles`.
    invariant : bool
        ``observe`` depends on the tokens only through their inner products (see above).
    betas : array_like, shape (systems,), optional
        For :class:`SelfAttention` without external field: each system's own inverse
        temperature in place of ``model.beta`` (the systems of a whole row of a phase diagram
        in one batch, on the array API kernel, any namespace, numpy included: how a GPU is
        kept busy). System ``s`` then follows the run of
        ``dataclasses.replace(model, beta=betas[s])`` to round-off (noise, if any, is drawn for
        the whole batch).

    Returns
    -------
    list
        ``[observe(x(t)) for t in times]``.

    Raises
    ------
    ValueError
        For bad input (as :func:`simulate_particles`), an adaptive ``method``, or ``betas``,
        ``invariant`` or ``kernel`` with a :class:`~meanfield.PureAttention` model.
    """
    if not model.on_sphere:
        if betas is not None or invariant or kernel != "auto":
            raise ValueError("PureAttention runs take neither betas, invariant nor a kernel choice")
        times = _run_times(times)
        return euclidean_particles.observe(model, euclidean_particles.checked_tokens(model, x0), times,
                                           _scheme(method, 0.0, FIXED_STEP_METHODS),
                                           check_step(0.01 if dt is None else dt, times), observe)
    x0 = _checked_initial(model, x0)
    method = _scheme(method, model.diffusion, FIXED_STEP_METHODS)
    times = _run_times(times)
    if betas is not None and x0.ndim != 3:
        raise ValueError(f"betas take a batch x0 of shape (systems, n, d), got shape {tuple(x0.shape)}")
    observations, _ = _integrate_fixed_step(model, x0, times, method, dt, rng, False, observe, {}, kernel,
                                            invariant=invariant, betas=betas)
    return observations


def _simulate_euclidean(model, x0, times, method, rtol, atol, dt, progress, kernel, attention):
    """:func:`simulate_particles` for tokens in :math:`\\mathbb{R}^d` (``meanfield.euclidean_particles``)."""
    if kernel != "auto":
        raise ValueError(f"PureAttention has one kernel (its numpy pair sums): pass kernel='auto', got {kernel!r}")
    x0, times = euclidean_particles.checked_tokens(model, x0), _run_times(times)
    method = _scheme(method, 0.0, METHODS)
    settings: dict = {"method": method if isinstance(method, str) else method.name}
    if isinstance(method, ExplicitTableau) or method in PAIRS:
        rtol, atol = _tolerances(rtol, atol, settings)
        method = tableau_named(method)
    else:
        dt = check_step(0.01 if dt is None else dt, times)
        settings.update(dt=dt)
    with time_progress(times[0], times[-1], progress, "particles") as bar:
        return euclidean_particles.simulate(model, x0, times, method, rtol, atol, dt, bar, settings, attention)


def _require_numpy(x0, method: str) -> None:
    if not is_numpy(x0):
        raise ValueError(f"method={method!r} integrates numpy arrays (adaptive steps on the host); arrays of "
                         f"{type(x0).__module__} take a fixed-step method ('rk4', 'euler', 'layer')")


def _tolerances(rtol: float, atol: float | None, settings: dict) -> tuple[float, float]:
    rtol = check_rtol(rtol, below=0.1)
    atol = rtol / 100 if atol is None else check_real(atol, "atol", minimum=0.0, strictly=True)
    settings.update(rtol=rtol, atol=atol)
    return rtol, atol


def _run_times(times) -> np.ndarray:
    """Output times of a particle run: at least two (the run starts at the first)."""
    times = check_times(times)
    if times.size < 2:
        raise ValueError(f"times must hold at least two output times (the run starts at the first), got "
                         f"{times.tolist()}; the initial tokens alone are x0")
    return times


def _checked_initial(model, x0):
    """``x0`` checked (on a host copy when it lives in another namespace), in float64."""
    foreign = not is_numpy(x0) and is_array_api_obj(x0)
    host = check_points(to_numpy(x0) if foreign else x0, "x0")
    if host.ndim > 3:
        raise ValueError(f"x0 must have shape (n, d) or (systems, n, d), got {host.shape}")
    if model.causal and host.shape[-2] < 2:
        raise ValueError(f"x0 must hold n >= 2 tokens of a prompt (axis -2) for causal attention, got n={host.shape[-2]}")
    if model.dimension not in (None, host.shape[-1]):
        raise ValueError(f"x0 has points in R^{host.shape[-1]} but the model is {model.dimension}-dimensional")
    if not foreign:
        return host
    xp = array_namespace(x0)
    return xp.astype(x0, xp.float64)


class SpanCoordinates:
    r"""Orthonormal coordinates of the span of each system's initial tokens.

    With :math:`X_0^T = B R` (QR, :math:`B` of shape ``(d, n)`` with orthonormal columns),
    tokens in the span are :math:`x = B y`, inner products :math:`\langle x_i, x_j\rangle =
    \langle y_i, y_j\rangle` and norms are kept, so a zonal noiseless run of the ``y`` is the
    run of the ``x`` in ``n`` components instead of ``d``.
    """

    def __init__(self, x0: np.ndarray) -> None:
        self.basis, _ = np.linalg.qr(np.swapaxes(x0, -1, -2))  # (b, d, n)

    def reduce(self, x: np.ndarray) -> np.ndarray:
        return x @ self.basis

    def lift(self, y: np.ndarray) -> np.ndarray:
        return y @ np.swapaxes(self.basis, -1, -2)


def _span_reduces(model, x, method: str) -> bool:
    """Whether the run can take place in the span of the initial tokens, and gains from it."""
    n, d = x.shape[-2:]
    return (is_numpy(x) and method in FIXED_STEP_METHODS and model.is_zonal and model.diffusion == 0 and d > n
            and model.external is None)  # a field moves tokens out of their span


def _integrate_fixed_step(model, x0, times, method, dt, rng, bar, observe, settings, kernel="auto", *,
                          invariant=False, betas=None):
    dt = check_step(0.01 if dt is None else dt, times)
    # Each output interval is split into equal steps no larger than dt: record the step taken.
    largest = max(((t1 - t0) / equal_steps(t0, t1, dt)[0] for t0, t1 in zip(times[:-1], times[1:])), default=0.0)
    settings.update(dt=dt, largest_step=largest)
    shape = x0.shape
    x = x0 if len(shape) == 3 else x0[None, ...]
    span = SpanCoordinates(x) if _span_reduces(model, x, method) else None
    if span is not None:
        x = span.reduce(x)
        settings.update(span_dimension=x.shape[-1])
    engine = select_kernel(model, x, kernel, betas)
    settings.update(kernel=engine.name, **engine.settings)

    def emit(y):
        if span is not None and not invariant:
            y = span.lift(y)
        return observe(y if len(shape) == 3 else y[0, ...])

    x = engine.normalize(x)
    if method in NOISY_METHODS:
        noisy = model.diffusion > 0
        layer = method == "layer"
        name = "Transformer layer normalize(x + h a)" if layer else "projected Euler"
        settings.update(scheme=f"{name} with Euler-Maruyama noise" if noisy else name)
        generator = None
        if noisy:
            seed = reproducible_seed(rng)
            settings.update(seed=seed)
            generator = np.random.default_rng(seed)
        return _integrate_euler(engine, model.diffusion, x, times, dt, generator, bar, emit, project=not layer)
    settings.update(scheme="RK4 + projection")
    return _integrate_rk4(engine, x, times, dt, bar, emit)


def particle_dataset(model, x: np.ndarray, norm_error: np.ndarray, times: np.ndarray, settings: dict, *,
                     observables: tuple[str, ...] = ()) -> xr.Dataset:
    """Assemble the output dataset from the frames ``x`` ``(..., time, n, d)`` recorded at ``times[:x.shape[-3]]``.

    ``norm_error`` (per frame) is the integrator's drift off the sphere before the frames
    were projected onto it. ``observables``: the checked names of :func:`simulate_particles`.
    """
    dims = ("time", "particle", "component") if x.ndim == 3 else ("system", "time", "particle", "component")
    variables = {"x": (dims, x),
                 "norm_error": (("time",), norm_error, {"long_name": "max | |x_i| - 1 | before projection"})}
    if "energy" in observables:
        energy, energy_note = _energy_series(model, x)
        variables["energy"] = (dims[:-2], energy, {"long_name": "interaction energy", "note": energy_note})
    # here, not at the top: sweep workers never build a dataset (xarray is half their start-up)
    from .datasets import assembled_dataset

    ds = assembled_dataset(variables, {"time": times[: x.shape[-3]]})
    ds.attrs.update(record_attrs(PARTICLES, geometry_name(x.shape[-1]), model, settings))
    return ds


def _norm_drift(x: np.ndarray) -> np.ndarray:
    """Largest ``| |x_i| - 1 |`` per time of frames ``(..., time, n, d)``."""
    squares = squared_norms(x)
    return np.array([_largest_drift(squares[..., k, :]) for k in range(x.shape[-3])])


def _largest_drift(squares: np.ndarray) -> float:
    """Largest ``| |x_i| - 1 |`` of tokens with squared norms ``squares``."""
    return _drift_of_extremes(float(squares.min()), float(squares.max()))


def _drift_of_extremes(smallest: float, largest: float) -> float:
    """Largest ``| |x_i| - 1 |`` of tokens whose squared norms range from ``smallest`` to ``largest``.

    The square root is monotone, so the largest drift is that of the largest or the smallest
    squared norm: two square roots instead of one per token (the same numbers).
    """
    return max(math.sqrt(largest) - 1.0, 1.0 - math.sqrt(smallest))


def _project(frames: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """The frames stacked ``(..., time, n, d)`` and projected onto the sphere, and how far they had drifted
    (reported, never raised)."""
    stacked = np.stack(frames, axis=-3)
    return normalize(stacked), _norm_drift(stacked)


def _energy_series(model, x: np.ndarray) -> tuple[np.ndarray, str]:
    """Energies, or ``e^{-beta} E`` where ``E`` itself overflows (large-beta SA); through the series where it pays."""
    log_pair_sum = energy_pair_sum(model, x)
    faster = {} if log_pair_sum is None else {"log_pair_sum": log_pair_sum}
    try:
        return model.energy(x, **faster), "E"
    except OverflowError:
        return np.exp(model.log_energy(x, **faster) - model.beta), "exp(-beta) E (E overflows double precision)"


def _integrate_pair(model, x0, times, tableau: ExplicitTableau, rtol, atol, bar, settings, kernel="auto",
                    observables: tuple[str, ...] = ()):
    """An embedded pair through the shared controller and driver; each step's local error in
    every coordinate is below ``atol + rtol |x_k|`` in RMS over coordinates."""
    engine = select_kernel(model, x0, kernel)
    settings.update(kernel=engine.name, **engine.settings)
    frames: list[np.ndarray] = []

    def record(t: float, x: np.ndarray) -> None:
        frames.append(np.array(x.reshape(x0.shape), copy=True))

    def fail(t: float, reason: str) -> NoReturn:
        projected, drift = _project(frames)
        raise StepSizeCollapse(f"adaptive integration failed at t={t:.6g}: {reason}", time=t,
                               partial=particle_dataset(model, projected, drift, times, settings,
                                                        observables=observables))

    batch = x0 if x0.ndim == 3 else x0[None, ...]
    evaluations = embedded_pair_run(engine.velocity_unchecked, batch, times, tableau, rtol, atol, bar, norm=rms,
                                    record=record, fail=fail, settings=settings)
    return frames, evaluations


#: An adaptive run whose stability bound alone needs more steps than this is refused up front.
MOST_EXPLICIT_STEPS = 10**7

#: The reach of the explicit pairs' stability regions along the negative real axis (DOP853 about
#: 6, Dormand-Prince 5(4) about 3.3): the largest stable step times the stiffness.
STABILITY_REACH = 6.0


def _check_explicit_steps(model, times: np.ndarray, method: str) -> None:
    r"""Refuse USA at a ``beta`` whose stiffness no explicit pair can afford over ``times``.

    USA's kernel :math:`e^{\beta\langle Qx, Ky\rangle}` reaches :math:`e^{\beta B}` (``B`` the
    logit bound) once tokens gather, and a token displaced from its cluster is pulled back at a
    rate of about :math:`e^{\beta B}\|V\|`: an explicit step must stay below the pair's
    stability reach over it, after the clusters form too (the tests hold the estimate against
    DOP853's step count). ``time_rescaled=True`` (time in units of :math:`e^{\beta B}`) removes
    the exponential; causal USA, whose kernel is divided by the positional weights only, has
    the same rate per head (times its prefactor), and its prefactor rescales time.
    """
    stiffness = _usa_stiffness(model)
    if stiffness is None:
        return
    log_rate, remedy = stiffness
    log_steps = log_rate + math.log(float(times[-1] - times[0])) - math.log(STABILITY_REACH)
    if log_steps > math.log(MOST_EXPLICIT_STEPS):
        beta = f"{model.beta:g}" if np.ndim(model.beta) == 0 else np.asarray(model.beta).tolist()
        raise ValueError(f"times: USA at beta = {beta} is stiff: near a cluster its "
                         f"velocity changes at a rate of about e^beta |V| = 10^{log_rate / math.log(10):.3g}, "
                         f"so method={method!r} would take about 10^{log_steps / math.log(10):.3g} steps over "
                         f"t in [{times[0]:g}, {times[-1]:g}]; use {remedy}, a shorter interval, or a fixed-step "
                         "method with a step below the rate's inverse")


def _usa_stiffness(model) -> tuple[float, str] | None:
    """``(log of the rate, the remedy)`` of an unnormalized attention whose kernel grows like ``e^{beta B}``, or ``None``."""
    if isinstance(model, SelfAttention) and not model.normalized and not model.time_rescaled and model.beta > 0:
        exponent = model.beta * model.logit_bound
        if exponent >= 1.0:
            return math.log(max(model.value_bound, 1e-300)) + exponent, "time_rescaled=True (time in units of e^beta)"
    if isinstance(model, CausalAttention) and not model.normalized:
        groups = [mixed for _, mixed in model.mixed_groups]
        rates = [math.log(max(g.value_bound, 1e-300)) + g.beta * g.logit_bound for g in groups
                 if g.beta * g.logit_bound >= 1.0]
        if rates:
            return max(rates) + math.log(len(rates)), "a prefactor of about e^-beta (time in units of e^beta)"
    return None


def _overflow_scale(model) -> str:
    """What sets the velocity's scale, for a run that overflows or collapses: the parameters to change."""
    described = model.to_dict()
    named = {key: described[key] for key in ("beta", "value", "prefactor", "alibi") if key in described}
    scales = ", ".join(f"{key} = {np.asarray(value).tolist()!r}" for key, value in named.items()
                       if np.size(value) == 1) or "the model's own scale"
    return f"the velocity's scale: {scales}; a smaller value or a shorter interval of times"


def _integrate_rk4(engine, x0, times, dt, bar, observe):
    """RK4 steps, each projected back onto the sphere, on the shared driver."""
    frames: list = []
    stepper = ExplicitRungeKutta(CLASSICAL_RK4, engine.velocity_unchecked)
    fixed_step_run(lambda x, t, h: engine.normalize(stepper.advance(x, h)[0]), x0, times, dt, bar,
                   lambda t, x: frames.append(observe(x)))
    return frames, stepper.evaluations


def _integrate_euler(engine, diffusion, x0, times, dt, gen, bar, observe, project=True):
    """Projected Euler (``project=False``: the Transformer layer, the attention output not projected);
    with a generator ``gen`` the noise of Euler-Maruyama is added."""
    frames: list = []

    def advance(x, t: float, h: float):
        noise = None if gen is None else gen.standard_normal(tuple(x.shape))
        return engine.step(x, h, project=project, noise=noise, noise_scale=math.sqrt(2.0 * diffusion * h))

    steps = fixed_step_run(advance, x0, times, dt, bar, lambda t, x: frames.append(observe(x)))
    return frames, steps
