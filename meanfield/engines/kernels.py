r"""The velocity kernels behind the particle integrators, and which one a run uses.

Four implementations of the same three operations on batches ``(b, n, d)`` of tokens:
the attention output :math:`a_i` and the velocity :math:`P_{x_i} a_i` at ``x / |x|``, and one
step :math:`x \leftarrow (x + h v + \sigma P_x \xi)/|\cdot|` with :math:`v = P_x a`
(projected Euler) or :math:`v = a` (the Transformer layer):

``"fused"``
    :class:`meanfield.engines.fused.FusedAttention` (numba passes around batched BLAS products, in
    cache-sized blocks of systems): :class:`SelfAttention` with at most
    :data:`meanfield.engines.fused.MAX_TOKENS` tokens; the default there.
``"numpy"``
    The model's own methods (:func:`meanfield.interaction.pair_sums`' row blocks): any model,
    any ``n``; the fallback when numba is missing and the path for large systems.
``"series"``
    :class:`meanfield.engines.series.SeriesAttention`: the kernel's Fourier (circle) or harmonic
    (:math:`S^2`) series, exact to round-off, ``O(n K)`` per velocity for ``K`` harmonics
    instead of ``O(n^2)``: zonal :class:`SelfAttention` with ``d = 2`` or ``3``; the default
    there when its estimated cost (:func:`series_is_cheaper`) is below the direct sum's.
``"array_api"``
    Any namespace of the Python array API standard (CuPy, PyTorch, JAX, ``array_api_strict``):
    chosen by the array passed in, computed in its namespace and on its device, so a run on
    GPU arrays stays on the GPU. The noise is drawn on the host by the run's numpy generator
    (the same numbers on every path) and moved to the device.

Causal models (:class:`meanfield.causal.CausalAttention`) take ``"numpy"`` (their direct
causal sum) or, on the circle, ``"series"`` (:mod:`meanfield.engines.causal_series`: the Fourier
series with a causal scan over positions).

All implement the model's reference velocity and attention output (the model's own numpy
methods, ``"numpy"`` here) and agree with it to round-off: :func:`meanfield.engines.check_consistency`
compares them, and the tests run it for every engine and model.

The numba engines (:mod:`.fused`, :mod:`.series`, :mod:`.causal_series`) are imported where
a run chooses them, not at the top: importing them starts numba, which PDE runs and the light
start-up of sweep workers do not pay.
"""

from __future__ import annotations

import dataclasses
import importlib.util

import numpy as np
from array_api_compat import array_namespace, device, is_cupy_array, is_torch_array

from ..frequencies import NaturalFrequencies
from ..models import SelfAttention
from ..protocols import NO_SETTINGS
from ..sphere import normalize, project_tangent

KERNELS = ("auto", "fused", "numpy", "series")

#: Measured costs (``benchmarks/bench_series.py``, one core): seconds per point and harmonic of
#: the series, per pair of the fused kernel (``n <= MAX_TOKENS``) and of the row-blocked
#: numpy sum. Only their ratios matter: they place the crossover of ``"auto"``.
SERIES_COST, FUSED_PAIR_COST, NUMPY_PAIR_COST = 4e-9, 2e-9, 12e-9

#: The circle's series with its power table (:data:`meanfield.engines.series.TABLE_ELEMENTS`), in the
#: same units: per point and harmonic, and per point (the finish of the step, the table's
#: first rows), from ``benchmarks/bench_series.py`` like the costs above.
TABLED_SERIES_COST, TABLED_POINT_COST = 0.7e-9, 18e-9

#: Pair entries per block of systems on the array API path (2^24 doubles = 128 MiB): large
#: enough to fill a GPU, bounded whatever the ensemble size.
ARRAY_API_BLOCK_ELEMENTS = 2**24


def is_numpy(x: object) -> bool:
    return isinstance(x, np.ndarray)


def select_kernel(model, x, kernel: str = "auto", betas=None):
    """The kernel for ``model`` on arrays like ``x``: ``kernel`` is ``"auto"``, ``"fused"`` or ``"numpy"``.

    Arrays of another namespace take the array API path whatever ``kernel`` says, unless it
    names a numpy-only kernel, which is then an error. So do runs with per-system ``betas``
    (checked by :func:`check_betas`), numpy arrays included.
    """
    if kernel not in KERNELS:
        raise ValueError(f"kernel must be one of {KERNELS}, got {kernel!r}")
    if betas is not None:
        if kernel != "auto":
            raise ValueError(f"betas run on the array API kernel: pass kernel='auto', got {kernel!r}")
        return ArrayAPIKernel(model, x, check_betas(model, betas, x.shape[0]))
    if model.causal:
        return _causal_kernel(model, x, kernel)
    if isinstance(model, NaturalFrequencies):
        if not is_numpy(x):
            raise ValueError("natural frequencies run on numpy arrays; arrays of "
                             f"{type(x).__module__} take models without them")
        return RotationKernel(select_kernel(model.model, x, kernel), model)
    external = model.external
    if external is not None:
        if not is_numpy(x):
            raise ValueError("an external field (perceptron) is evaluated on numpy arrays; arrays of "
                             f"{type(x).__module__} take models without one")
        # the inner kernel sums attention only (the model's own numpy methods would add the field too)
        return ExternalFieldKernel(_attention_kernel(dataclasses.replace(model, external=None), x, kernel), external)
    return _attention_kernel(model, x, kernel)


def _attention_kernel(model, x, kernel: str):
    if not is_numpy(x):
        if kernel != "auto":
            raise ValueError(f"kernel={kernel!r} computes on numpy arrays; arrays of "
                             f"{type(x).__module__} take the array API path (kernel='auto')")
        return ArrayAPIKernel(model, x)
    if kernel == "series" or (kernel == "auto" and _series_pays(model, x)):
        return _series_kernel(model, x)
    fused = _fused_kernel(model)
    if kernel == "fused":
        if fused is None:
            raise ValueError(f"kernel='fused' needs numba and a SelfAttention model, got "
                             f"{type(model).__name__}{'' if _numba_available() else ' (numba is not installed)'}")
        return fused
    if kernel == "auto" and fused is not None and x.shape[-2] <= _max_fused_tokens():
        return fused
    return NumpyKernel(model)


def check_betas(model, betas, systems: int) -> np.ndarray:
    """Per-system inverse temperatures for ``model``: shape ``(systems,)``, each a valid ``model.beta``."""
    if not isinstance(model, SelfAttention) or model.external is not None:
        raise ValueError(f"betas (one beta per system) take a SelfAttention model without external field, "
                         f"got {model!r}")
    values = np.asarray(to_numpy(betas), dtype=float)
    if values.shape != (systems,):
        raise ValueError(f"betas must have shape ({systems},), one per system of x0, got shape {values.shape}")
    try:  # the model's own checks (range, USA overflow) at the extreme values
        for beta in (values.min(), values.max()) if values.size else ():
            dataclasses.replace(model, beta=float(beta))
    except ValueError as error:
        raise ValueError(f"betas: {error}") from None
    return values


def series_is_cheaper(n: int, harmonics: int, tabled: bool = False) -> bool:
    """Whether ``n`` tokens cost less through a series of ``harmonics`` terms than by the direct sum.

    ``tabled``: the circle's series keeps its powers in a table (:func:`meanfield.engines.series.circle_series_tabled`).
    """
    pair_cost = FUSED_PAIR_COST if n <= _max_fused_tokens() else NUMPY_PAIR_COST
    series_cost = n * (harmonics * TABLED_SERIES_COST + TABLED_POINT_COST) if tabled else n * harmonics * SERIES_COST
    return series_cost < n * n * pair_cost


def _series_pays(model, x) -> bool:
    from .series import SERIES_DIMENSIONS, circle_series_tabled, series_harmonics
    if not (isinstance(model, SelfAttention) and model.is_zonal and x.shape[-1] in SERIES_DIMENSIONS
            and _numba_available()):
        return False
    n, d = x.shape[-2:]
    harmonics = series_harmonics(model, d)
    return series_is_cheaper(n, harmonics, tabled=d == 2 and circle_series_tabled(n, harmonics))


def energy_pair_sum(model, x):
    r"""``log_pair_sum`` for ``model.energy(x, log_pair_sum=...)``: the kernel's series or the Gram matrices, or ``None``.

    :math:`\log\sum_{i,j} e^{\beta\langle x_i, x_j\rangle}` per system for zonal
    :class:`SelfAttention`: through the series (``O(n K)``, the circle and :math:`S^2`) where the
    steps' kernel takes it, else through the batched Gram matrices,
    :math:`\beta + \log\sum_{i,j} e^{\beta(\langle x_i, x_j\rangle - 1)}` (one matrix product and
    one exponential per pair, no row maxima: :math:`\langle x_i, x_j\rangle \le 1` bounds the
    exponent and the diagonal's terms, 1 each, keep the sum from underflowing); ``None`` for
    other models (the model then sums the pairs, its reference).
    """
    if not (isinstance(model, SelfAttention) and model.is_zonal):
        return None
    if _series_pays(model, x):  # the decision of the steps' kernel
        from .series import SeriesAttention
        series = SeriesAttention(model, x.shape[-1])
        # The series sums the scaled kernel e^{beta (s - 1)} for SA and time-rescaled USA.
        shift = model.beta if (model.normalized or model.time_rescaled) else 0.0
        return lambda flat: np.log(series.pair_totals(flat)) + shift
    return lambda flat: _gram_log_pair_sum(flat, model.beta)


#: Gram entries a batch of :func:`_gram_log_pair_sum` holds at once.
GRAM_ELEMENTS = 1 << 22


def _gram_log_pair_sum(flat: np.ndarray, beta: float) -> np.ndarray:
    r""":math:`\log\sum_{i,j} e^{\beta\langle x_i, x_j\rangle}` of unit ``flat`` ``(systems, n, d)``, in batches of systems."""
    systems, n = flat.shape[0], flat.shape[1]
    per_batch = max(1, GRAM_ELEMENTS // (n * n))
    totals = np.empty(systems)
    for start in range(0, systems, per_batch):
        gram = np.matmul(flat[start:start + per_batch], np.swapaxes(flat[start:start + per_batch], -1, -2))
        gram -= 1.0
        gram *= beta
        np.exp(gram, out=gram)
        totals[start:start + per_batch] = gram.sum(axis=(-2, -1))
    return np.log(totals) + beta


class WeightedVelocity:
    r"""The velocity of a weighted measure :math:`\sum_j m_j\delta_{x_j}` at its atoms, by the cheapest engine.

    The model's reference is its ``velocity_field(x, x, masses)`` (pair sums, :math:`n^2`
    exponentials), taken through the model's ``weighted_velocity`` where it has one (the same
    field at the atoms themselves, without the input checks); for a zonal
    :class:`~meanfield.SelfAttention` on the circle or :math:`S^2` the kernel's series
    (``meanfield.engines.series.SeriesAttention.weighted_velocity``, ``O(n K)``) takes over
    where it costs less (``series_is_cheaper``), checked against the reference by
    ``meanfield.engines.check_consistency``. Measures whose atom count changes
    (merged clusters) are decided call by call, by the costs per term of the series and of the
    reference's row-blocked sums (``SERIES_COST``, ``NUMPY_PAIR_COST``; conservative on
    :math:`S^2`, where the series costs less per term than on the circle).

    Parameters
    ----------
    model : object
        Any model of the ``Model`` protocol.
    d : int
        The dimension of the points.
    """

    def __init__(self, model, d: int) -> None:
        from .series import SERIES_DIMENSIONS, SeriesAttention, series_harmonics
        self.model = model
        # The input checks cost more than the sums over a few atoms (FieldModel and the library's models skip them).
        self.reference = (getattr(model, "weighted_velocity", None)
                          or (lambda x, masses: model.velocity_field(x, x, masses)))
        self.series = None
        if (isinstance(model, SelfAttention) and model.is_zonal and d in SERIES_DIMENSIONS and model.external is None
                and _numba_available()):
            self.series, self.harmonics = SeriesAttention(model, d), series_harmonics(model, d)

    def engine(self, n: int) -> str:
        """The engine for ``n`` atoms: ``"series"`` or ``"reference"``.

        Parameters
        ----------
        n : int
            The atoms.

        Returns
        -------
        str
        """
        pays = self.series is not None and n * self.harmonics * SERIES_COST < n * n * NUMPY_PAIR_COST
        return "series" if pays else "reference"

    def __call__(self, x: np.ndarray, masses: np.ndarray) -> np.ndarray:
        """The velocities at the atoms ``x`` ``(..., n, d)`` of masses ``masses`` ``(..., n)``, tangent at ``x/|x|``."""
        if self.engine(x.shape[-2]) == "series":
            return self.series.weighted_velocity(x, masses)
        return self.reference(x, masses)

    def field_near_atoms(self, at: np.ndarray, x: np.ndarray, masses: np.ndarray) -> np.ndarray:
        r"""The model's ``velocity_field(at, x, masses)`` at points that each lie near atoms of the measure.

        What a cluster reduction checks: the field of the measure before it at the reduced
        atoms, each within the reduction's width of the atoms it replaces. The series evaluates
        it as the field at the atoms of :math:`\sum_j m_j\delta_{x_j} + \sum_k 0\,\delta_{y_k}`
        (an atom of no mass moves nothing), ``O((n + k) K)`` against the reference's ``n k``
        pairs, where that costs less. Its truncation error is relative to the kernel's largest
        value times the mass, so SA's softmax denominator at :math:`y_k` must hold mass near
        :math:`y_k` (as the self term holds it at an atom): far from all mass the quotient of
        the series is not accurate, and the reference is the one to call.

        Parameters
        ----------
        at : numpy.ndarray, shape (k, d)
            The points :math:`y_k`, nonzero, each near atoms of ``x``.
        x : numpy.ndarray, shape (n, d)
            The atoms.
        masses : numpy.ndarray, shape (n,)
            Their masses, nonnegative.

        Returns
        -------
        numpy.ndarray, shape (k, d)
            The velocities, tangent at ``at / |at|``.
        """
        points, queries = x.shape[-2], at.shape[-2]
        pays = self.series is not None and (points + queries) * self.harmonics * SERIES_COST < (
            points * queries * NUMPY_PAIR_COST)
        if not pays:
            return self.model.velocity_field(at, x, masses)
        weights = np.concatenate([masses, np.zeros(queries)])
        return self.series.weighted_velocity(np.concatenate([x, at]), weights)[points:]


def _series_kernel(model, x):
    from .series import SERIES_DIMENSIONS, SeriesAttention
    d = x.shape[-1]
    if not (isinstance(model, SelfAttention) and model.is_zonal and d in SERIES_DIMENSIONS) or not _numba_available():
        raise ValueError("kernel='series' needs numba and a zonal SelfAttention (Q = K = I, V = cI, one head) "
                         f"on the circle or S^2 (d = 2 or 3), got {model!r} with d={d}"
                         f"{'' if _numba_available() else ' (numba is not installed)'}")
    return SeriesAttention(model, x.shape[-1])


def _causal_kernel(model, x, kernel: str):
    from .causal_series import SA_SERIES_MAX_EXPONENT, CausalCircleSeries
    if not is_numpy(x) or kernel == "fused":
        raise ValueError(f"causal attention computes on numpy arrays with kernel='numpy' or 'series', got "
                         f"kernel={kernel!r} on {type(x).__module__} arrays")
    on_circle = x.shape[-1] == 2 and _numba_available()
    if kernel == "series" and not on_circle:
        raise ValueError(f"kernel='series' for causal attention needs numba and the circle (d = 2), got d={x.shape[-1]}"
                         f"{'' if _numba_available() else ' (numba is not installed)'}")
    if kernel == "auto" and on_circle and model.without_matrices and len(model.mixed_groups) == 1:
        ((alibi, mixed),) = model.mixed_groups
        accurate = not model.normalized or 2 * mixed.beta + alibi <= SA_SERIES_MAX_EXPONENT
        series = CausalCircleSeries(model)
        # The scan costs about as much per token and harmonic as the series of the non-causal sum.
        if accurate and series_is_cheaper(x.shape[-2], 2 * series.degree + 1):
            return series
    if kernel == "series":
        return CausalCircleSeries(model)
    return NumpyKernel(model)


def _numba_available() -> bool:
    return importlib.util.find_spec("numba") is not None


def _max_fused_tokens() -> int:
    from .fused import MAX_TOKENS
    return MAX_TOKENS


def _fused_kernel(model):
    if not isinstance(model, SelfAttention) or not _numba_available():
        return None
    from .fused import FusedAttention
    return FusedAttention(model)


class NumpyKernel:
    """The model's own numpy methods (any model, any number of tokens)."""

    name = "numpy"
    settings = NO_SETTINGS

    normalize = staticmethod(normalize)

    def __init__(self, model) -> None:
        self.velocity_unchecked = model.velocity_unchecked
        self.attention_output = model.attention_output

    def step(self, x: np.ndarray, h: float, *, project: bool, noise: np.ndarray | None = None,
             noise_scale: float = 0.0) -> np.ndarray:
        step = h * (self.velocity_unchecked(x) if project else self.attention_output(x))
        if noise is not None:
            step += noise_scale * project_tangent(x, noise)
        return normalize(x + step)


class ExternalFieldKernel(NumpyKernel):
    """A kernel's attention output plus an external field (``meanfield.external``), stepped like :class:`NumpyKernel`."""

    def __init__(self, inner, external) -> None:
        self.inner, self.external = inner, external
        self.name = inner.name
        self.settings = inner.settings

    def attention_output(self, x: np.ndarray) -> np.ndarray:
        return self.inner.attention_output(x) + self.external.field(normalize(x))

    def velocity_unchecked(self, x: np.ndarray) -> np.ndarray:
        return project_tangent(normalize(x), self.attention_output(x))


class RotationKernel(NumpyKernel):
    """The interaction's kernel (any engine: the series makes Kuramoto ``O(n)``) plus the tokens' own rotation
    (:class:`meanfield.NaturalFrequencies`), stepped like :class:`NumpyKernel`."""

    def __init__(self, inner, model) -> None:
        self.inner, self.rotation = inner, model.rotation
        self.name = inner.name
        self.settings = inner.settings

    def attention_output(self, x: np.ndarray) -> np.ndarray:
        return self.inner.attention_output(x) + self.rotation(normalize(x))

    def velocity_unchecked(self, x: np.ndarray) -> np.ndarray:
        return self.inner.velocity_unchecked(x) + self.rotation(normalize(x))


class ArrayAPIKernel:
    r""":class:`SelfAttention` in the namespace, and on the device, of the arrays it is given.

    Softmax rows are stabilised by their maximum (by :math:`\beta` with ``Q = K = I``), USA by
    the model's own shift, as on the numpy path. ``betas`` (shape ``(systems,)``) gives each
    system of the batch its own :math:`\beta` in place of the model's: a row of a phase
    diagram is then one batch, which is what keeps a GPU busy (one step of 90 betas costs
    about what one of a single beta costs there).
    """

    name = "array_api"
    settings = NO_SETTINGS

    def __init__(self, model, like, betas=None) -> None:
        if not isinstance(model, SelfAttention):
            raise TypeError(f"{type(model).__name__} evaluates numpy callables: pass numpy arrays "
                            f"(got {type(like).__module__} arrays)")
        self.xp = array_namespace(like)
        self.device = device(like)
        self.normalized = bool(model.normalized)
        self.identity = model.query is None and model.key is None
        # A Python float, or one value per system broadcast over its (n, n) logits.
        self.beta = model.beta if betas is None else self._array(np.asarray(betas, dtype=float)[:, None, None])
        self.shift = self.beta if (self.normalized and self.identity) else (
            0.0 if self.normalized or not model.time_rescaled else self.beta * model.logit_bound)
        self.heads = []
        for q, k, v in model.head_matrices():
            mixed = None
            if not self.identity:
                eye = np.eye(model.dimension)
                mixed = self._array((eye if q is None else q).T @ (eye if k is None else k))
            value = float(v) if np.ndim(v) == 0 else self._array(np.asarray(v).T)
            self.heads.append((mixed, value))

    def _array(self, values):
        return self.xp.asarray(values, dtype=self.xp.float64, device=self.device)

    def normalize(self, x):
        xp = self.xp
        return x / xp.sqrt(xp.sum(x * x, axis=-1, keepdims=True))

    def attention_output(self, x):
        return self._attention(self.normalize(x))

    def velocity_unchecked(self, x):
        unit = self.normalize(x)
        return self._project(unit, self._attention(unit))

    def step(self, x, h: float, *, project: bool, noise=None, noise_scale: float = 0.0):
        a = self._attention(x)
        y = x + h * (self._project(x, a) if project else a)
        if noise is not None:
            y = y + noise_scale * self._project(x, self._array(noise))
        return self.normalize(y)

    def _project(self, x, v):
        return v - self.xp.sum(x * v, axis=-1, keepdims=True) * x

    def _attention(self, unit):
        xp = self.xp
        b, n, _ = unit.shape
        block = max(1, ARRAY_API_BLOCK_ELEMENTS // (n * n))
        parts = []
        for start in range(0, b, block):
            systems = slice(start, min(b, start + block))
            parts.append(self._attention_block(unit[systems, ...], self._of(self.beta, systems),
                                               self._of(self.shift, systems)))
        return parts[0] if len(parts) == 1 else xp.concat(parts, axis=0)

    @staticmethod
    def _of(value, systems: slice):
        """A per-system ``value``'s entries for ``systems`` (a float as is)."""
        return value if isinstance(value, float) else value[systems, ...]

    def _attention_block(self, unit, beta, shift):
        xp = self.xp
        n = unit.shape[-2]
        keys = xp.matrix_transpose(unit)
        total = None
        for mixed, value in self.heads:
            queries = unit if mixed is None else unit @ mixed
            logits = beta * (queries @ keys)
            if self.normalized and not self.identity:
                logits = logits - xp.max(logits, axis=-1, keepdims=True)
            elif not isinstance(shift, float) or shift:
                logits = logits - shift
            weights = xp.exp(logits)
            sums = weights @ unit
            mean = sums / (xp.sum(weights, axis=-1, keepdims=True) if self.normalized else float(n))
            head = value * mean if isinstance(value, float) else mean @ value
            total = head if total is None else total + head
        return total


def to_numpy(x) -> np.ndarray:
    """A host numpy copy of an array of any array API namespace (GPU arrays are copied back)."""
    if is_numpy(x):
        return x
    if is_torch_array(x):
        return x.detach().cpu().numpy()
    if is_cupy_array(x):
        return x.get()
    return np.from_dlpack(x)
