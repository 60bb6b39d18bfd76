r"""The particle system of :class:`~meanfield.euclidean.PureAttention`: tokens in :math:`\mathbb{R}^d`.

:func:`meanfield.simulate_particles` and :func:`meanfield.observe_particles` come here when
the model's ``on_sphere`` is false; the schemes are those of the sphere without its
projection:

``"dop853"`` (default), or another embedded pair of ``meanfield.integration``
    Adaptive steps with error control: each step's local error in every coordinate below
    ``atol + rtol |x_k|`` (RMS over coordinates).
``"rk4"``
    Classical RK4 with fixed steps, the stages at their own times (the rescaled velocity
    depends on ``t`` through :math:`M(t) = e^{tHV}`).
``"euler"``
    Forward Euler of the model's equation (original or rescaled variables).
``"layer"``
    The paper's discrete Transformer :math:`x \leftarrow x + \Delta t\sum_h V_h P^h x` (post-LN:
    :math:`x \leftarrow N_g(x + \Delta t\sum_h V_h P^h x)`, the only scheme of post-LN); in rescaled
    variables its Remark 4: :math:`z \leftarrow z + \Delta t\,R^{-1}V\sum_h(P^h z - z)`,
    :math:`R = I + \Delta t\,HV`, the logits at :math:`S z` with :math:`S` the product of the
    :math:`R` of the steps taken (from :math:`S = M(t_0)`), so that :math:`z^{[k]} = S_k^{-1}x^{[k]}`
    exactly.

The time-dependent right-hand side goes through the library's Runge-Kutta steppers with time
as one more coordinate (:math:`\dot t = 1`, integrated exactly by every consistent tableau);
the error norm ignores it.

Tokens of another array API namespace (CuPy, PyTorch, JAX, ``array_api_strict``) run the
fixed-step schemes in that namespace and on its device, through
:class:`meanfield.engines.euclidean_array_api.EuclideanArrayAPIKernel`; the adaptive ones
integrate numpy arrays on the host.
"""

from __future__ import annotations

from typing import NoReturn

import numpy as np
from array_api_compat import array_namespace, is_array_api_obj

from .engines.euclidean_array_api import EuclideanArrayAPIKernel
from .engines.kernels import is_numpy, to_numpy
from .errors import NonFiniteState, StepSizeCollapse
from .euclidean import check_tokens
from .integration import CLASSICAL_RK4, ExplicitRungeKutta, ExplicitTableau
from .integration.runs import embedded_pair_run, fixed_step_run, rms
from .records import PARTICLES, euclidean_name, record_attrs


class EuclideanFlow:
    """The model's velocity as a function of ``(t, x)`` on batches ``(systems, n, d)`` like ``like``,
    and its rescaling: the reference :meth:`~meanfield.PureAttention.velocity_at` on numpy arrays,
    :class:`EuclideanArrayAPIKernel` on those of another namespace."""

    def __init__(self, model, like):
        self.model, self.d = model, like.shape[-1]
        self.identity = np.eye(self.d)
        self.xp = array_namespace(like)
        if is_numpy(like):
            self.kernel, self.velocity_at, self.asarray = "numpy", model.velocity_at, np.asarray
            self.normalized = model.normalized
        else:
            engine = EuclideanArrayAPIKernel(model, like)
            self.kernel, self.velocity_at, self.asarray = engine.name, engine.velocity_at, engine.asarray
            self.normalized = engine.normalized

    def rescaling(self, t: float) -> np.ndarray:
        return self.model.rescaling(t, self.d) if self.model.rescaled else self.identity

    def velocity(self, t: float, x):
        return self.velocity_at(x, self.rescaling(t))

    def timed_state(self, t: float, x):
        """The state ``[t, x.ravel()]`` of the autonomous system."""
        xp = self.xp
        return xp.concat([self.asarray([t]), xp.reshape(x, (-1,))])

    def tokens(self, q, shape: tuple[int, ...]):
        """The tokens of a timed state."""
        return self.xp.reshape(q[1:], shape)

    def timed_rhs(self, shape: tuple[int, ...]):
        """The autonomous right-hand side of the state ``[t, x.ravel()]`` (``dt/dt = 1``)."""
        def rhs(q):  # [dt/dt, dx/dt]
            return self.timed_state(1.0, self.velocity(float(q[0]), self.tokens(q, shape)))
        return rhs


def _check_scheme(model, method) -> None:
    """Refuse a continuous-time scheme for a post-LN model: its layer is a map with no such limit (in general)."""
    if model.normalization == "post" and method != "layer":
        name = method if isinstance(method, str) else method.name
        raise ValueError(f"method={name!r}: normalization='post' is the discrete layer x <- N_g(x + dt a(x)) "
                         f"(method='layer'); its continuous-time limit, for the gain g = e^(dt gamma), is the "
                         f"SelfAttention of model.post_ln_limit(dt) on the sphere")


def checked_tokens(model, x0):
    """``x0`` as tokens of ``model``, shape ``(n, d)`` or ``(systems, n, d)``, finite: a float numpy
    array, or a float64 array of ``x0``'s own array API namespace (checked on a host copy)."""
    foreign = is_array_api_obj(x0) and not is_numpy(x0)
    if not foreign and not isinstance(x0, (np.ndarray, list, tuple)):
        raise ValueError(f"x0: PureAttention computes on numpy arrays or arrays of an array API namespace, "
                         f"got {type(x0).__module__} objects")
    host = check_tokens(to_numpy(x0) if foreign else x0, "x0", model.dimension)
    if host.ndim > 3:
        raise ValueError(f"x0 must have shape (n, d) or (systems, n, d), got {host.shape}")
    if not foreign:
        return host
    xp = array_namespace(x0)
    return xp.astype(x0, xp.float64)


def _as_batch(x0):
    """Tokens ``(n, d)`` or ``(systems, n, d)`` as a batch ``(systems, n, d)``."""
    return x0 if x0.ndim == 3 else array_namespace(x0).expand_dims(x0, axis=0)


def _host_frame(x) -> np.ndarray:
    """A host copy of the tokens (the run goes on changing nothing it returns)."""
    return np.array(to_numpy(x), dtype=float, copy=True)


def simulate(model, x0: np.ndarray, times: np.ndarray, method, rtol: float, atol: float, dt: float, bar,
             settings: dict, attention: bool):
    """The run of ``model`` from checked tokens ``x0`` through checked ``times``, as a dataset."""
    _check_scheme(model, method)
    batch = _as_batch(x0)
    model.check_interval(to_numpy(batch), times[0], times[-1])
    flow = EuclideanFlow(model, batch)
    settings.update(kernel=flow.kernel)
    if flow.kernel != "numpy" and isinstance(method, ExplicitTableau):
        raise ValueError(f"method={method.name!r} integrates numpy arrays (adaptive steps on the host); "
                         f"tokens of {type(x0).__module__} take a fixed-step method ('rk4', 'euler', 'layer')")

    def dataset(frames, rescalings):
        return euclidean_dataset(model, frames, rescalings, times, settings, attention=attention,
                                 single=x0.ndim == 2)

    if not isinstance(method, ExplicitTableau):
        kept: list[np.ndarray] = []  # the frames so far, for the partial result of a run that overflows

        def keep(x) -> np.ndarray:
            kept.append(_host_frame(x))
            return kept[-1]

        try:
            frames, rescalings = fixed_step(flow, batch, times, method, dt, bar, keep, settings)
        except NonFiniteState as overflow:
            raise NonFiniteState(f"{overflow} ({_growth(model, batch.shape[-1], times)})", time=overflow.time,
                                 partial=dataset(kept, [flow.rescaling(s) for s in times[:len(kept)]])) from None
        return dataset(frames, rescalings)
    frames: list[np.ndarray] = []

    def fail(t: float, reason: str) -> NoReturn:
        raise StepSizeCollapse(f"adaptive integration failed at t={t:.6g}: {reason}", time=t,
                               partial=dataset(frames, [flow.rescaling(s) for s in times[:len(frames)]]))

    try:
        evaluations = embedded_pair_run(flow.timed_rhs(batch.shape), flow.timed_state(times[0], batch), times,
                                        method, rtol, atol, bar, norm=_rms_of_tokens,
                                        record=lambda t, q: frames.append(q[1:].reshape(batch.shape).copy()),
                                        fail=fail, settings=settings)
    except NonFiniteState as overflow:
        raise NonFiniteState(f"{overflow} ({_growth(model, batch.shape[-1], times)})", time=overflow.time,
                             partial=overflow.partial) from None
    settings.update(velocity_evaluations=evaluations)
    return dataset(frames, [flow.rescaling(t) for t in times])


def _growth(model, d: int, times: np.ndarray) -> str:
    """What makes pure attention overflow: the tokens' growth rate over the run, and what to change."""
    rate = model.heads * max(float(np.linalg.norm(v, 2)) for _, _, v in model.head_matrices(d))
    return (f"the tokens grow up to e^(t H ||V||_2) and the logits as their squares: H ||V||_2 = {rate:.4g} over "
            f"t in [{times[0]:g}, {times[-1]:g}]; a smaller value, rescaled = True, or a shorter interval of times")


def observe(model, x0: np.ndarray, times: np.ndarray, method: str, dt: float, observer) -> list:
    """:func:`meanfield.observe_particles` for checked tokens: ``[observer(x(t)) for t in times]``."""
    _check_scheme(model, method)
    model.check_interval(to_numpy(x0), times[0], times[-1])
    single, batch = x0.ndim == 2, _as_batch(x0)
    observations, _ = fixed_step(EuclideanFlow(model, batch), batch, times, method, dt, False,
                                 lambda y: observer(y[0, ...] if single else y), {})
    return observations


def _rms_of_tokens(q: np.ndarray) -> float:
    """RMS of the tokens of a timed state ``[t, x.ravel()]`` (the time is not an error)."""
    return rms(q[1:])


def fixed_step(flow, batch, times, method: str, dt: float, bar, observe, settings: dict):
    """A fixed-step scheme on the shared driver; returns ``[observe(x(t)) for t in times]`` and :math:`M(t)` at each."""
    shape, model = batch.shape, flow.model
    scheme = {"rk4": "RK4", "euler": "forward Euler", "layer": "Transformer layer x + h V P x"}[method]
    post_ln = model.normalization == "post"
    if post_ln:
        scheme = "post-LN Transformer layer N_g(x + h V P x)"
    remark_four = method == "layer" and model.rescaled
    if remark_four:
        scheme += " (rescaled by R = I + h H V, Remark 4)"
    settings.update(scheme=scheme)
    stepper = ExplicitRungeKutta(CLASSICAL_RK4, flow.timed_rhs(shape)) if method == "rk4" else None
    initial_rescaling = flow.rescaling(times[0])
    frames, rescalings = [], []

    if stepper is not None:
        def advance(x, t: float, h: float):
            return flow.tokens(stepper.advance(flow.timed_state(t, x), h)[0], shape)
    elif method == "euler":
        def advance(x, t: float, h: float):
            return x + h * flow.velocity(t, x)
    elif post_ln:
        def advance(x, t: float, h: float):
            return flow.normalized(x + h * flow.velocity_at(x, initial_rescaling))
    elif not remark_four:
        def advance(x, t: float, h: float):
            return x + h * flow.velocity_at(x, initial_rescaling)
    else:
        advance = _remark_four_layer(flow, model.linear_part(flow.d))

    def record(t: float, state) -> None:
        x, cumulative = state if remark_four else (state, initial_rescaling)
        frames.append(observe(x))
        rescalings.append(cumulative if method == "layer" else flow.rescaling(t))

    steps = fixed_step_run(advance, (batch, initial_rescaling) if remark_four else batch, times, dt, bar, record)
    settings.update(velocity_evaluations=steps if stepper is None else stepper.evaluations)
    return frames, rescalings


def _remark_four_layer(flow, linear_part: np.ndarray):
    r"""The layer step of the rescaled tokens with their rescaling, ``(x, M) -> (x', R M)``,
    :math:`x' = x + h\, v(x, M) R^{-T}`, :math:`R = I + h H V` (Remark 4), ``R`` formed once per step size."""
    matrices: dict[float, tuple] = {}

    def advance(state, t: float, h: float):
        x, cumulative = state
        if h not in matrices:
            step_matrix = np.eye(flow.d) + h * linear_part
            _check_layer_rescaling(step_matrix, h)
            matrices[h] = (step_matrix, flow.asarray(np.linalg.inv(step_matrix).T))
        step_matrix, inverse_transpose = matrices[h]
        return x + h * (flow.velocity_at(x, cumulative) @ inverse_transpose), step_matrix @ cumulative
    return advance


def _check_layer_rescaling(step_matrix: np.ndarray, h: float) -> None:
    r"""Refuse a layer step whose rescaling :math:`R = I + hHV` is singular or reverses a direction.

    An eigenvalue :math:`1 + hH\lambda \le 0` of ``R`` (:math:`\lambda` one of ``V``'s) means the step
    overshoots that direction's decay: the rescaled tokens then grow without bound (or ``R``
    cannot be inverted), which no smaller tolerance repairs.
    """
    eigenvalues = np.linalg.eigvals(step_matrix)
    real_nonpositive = eigenvalues[(np.abs(eigenvalues.imag) <= 1e-12 * np.abs(eigenvalues).max()) &
                                   (eigenvalues.real <= 0)]
    if real_nonpositive.size or np.linalg.cond(step_matrix) > 1 / np.finfo(float).eps:
        worst = float(eigenvalues.real.min())
        limit = h / (1.0 - worst) if worst < 1 else h
        raise ValueError(f"dt = {h:g} is too large for the layer scheme of rescaled tokens: R = I + dt H V has the "
                         f"eigenvalue {worst:.4g} (<= 0: the step reverses the decay of value's negative "
                         f"eigenvalues); use dt < {limit:.4g}")


def euclidean_dataset(model, frames, rescalings, times, settings: dict, *, attention: bool, single: bool):
    """The run's dataset from batch frames ``(systems, n, d)``: ``x`` (the model's variables),
    ``rescaling`` (rescaled models: :math:`x = M z`), ``attention`` (:math:`P^h(t)`) on request."""
    import xarray as xr  # here, not at the top: sweep workers never build a dataset (xarray is half their start-up)

    x = np.stack(frames, axis=1)  # (system, time, n, d)
    matrices = np.stack(rescalings)
    variables = {"x": (("system", "time", "particle", "component"), x,
                       {"long_name": "rescaled tokens z = M(t)^-1 x" if model.rescaled else "tokens"})}
    if model.rescaled:
        variables["rescaling"] = (("time", "row", "column"), matrices,
                                  {"long_name": "M(t) with x = M z: e^(t H V), or the product of R = I + h H V"})
    if attention:
        matrix = np.stack([model.attention_matrix(x[:, k], matrices[k]) for k in range(x.shape[1])], axis=1)
        variables["attention"] = (("system", "time", "head", "particle", "key"), matrix,
                                  {"long_name": "attention matrix P(t), rows sum to one"})
    ds = xr.Dataset(variables, coords={"time": times[: x.shape[1]]})
    if single:
        ds = ds.isel(system=0, drop=True)
    ds.attrs.update(record_attrs(PARTICLES, euclidean_name(x.shape[-1]), model, settings))
    return ds
