r"""Fused kernels for the self-attention velocity and step of many small systems.

One step of ``b`` systems of ``n`` tokens in ``R^d`` runs over blocks of systems whose
arrays (tokens, weights, sums, output) fit in half the L2 cache (:data:`BLOCK_ELEMENTS`),
each block through all its passes while it is in the cache:

1. ``[u, 1]`` and the transposed keys :math:`\beta u^T` in one numba pass (a strided copy of
   the transpose would be a pass over memory of its own),
2. the logits :math:`\beta\langle Q_h u_i, K_h u_j\rangle` (:math:`(u_i M_h)\cdot u_j`
   with :math:`M_h = Q_h^T K_h` formed once), shifted where needed,
3. numpy's vectorized ``exp`` in place (numba's scalar ``exp`` is not vectorized, and the
   exponentials are the floor of the step),
4. the product of the weights with ``[u, 1]``, which gives the weighted sums and, in its
   last column, the softmax denominators,
5. division, the value matrix, the tangent projection, the residual step, the noise and the
   normalization in one numba pass over the tokens (:func:`finish_rows`).

The products are BLAS calls per system: numpy's batched ``matmul`` up to
:data:`SMALL_DIMENSION` and for general matrices; above it, for zonal models, a numba loop
over the systems that calls BLAS itself and does passes 1-2 and 4-5 of a system back to
back (two calls per block instead of six, the sums of a system never leave the L1 cache).
For zonal models on the circle and on S^2 (:data:`UNROLLED_DIMENSIONS`) passes 1-2 and 4-5
are numba loops compiled for that number of components, with no BLAS call.

Every intermediate of the numpy path that was an extra pass over memory (``normalize`` of
points already on the sphere, ``project_tangent``, ``concatenate``, ``zeros_like``) is gone.

The stabilising shift cancels in SA (the softmax is shift-invariant): with ``Q = K = I``
it is :math:`\beta` (the self term, the largest logit of unit vectors), otherwise the row
maximum. For USA it is the model's own (``0``, or :math:`\beta\|Q^TK\|` when
time-rescaled), which is part of the kernel.

The numbers equal :meth:`SelfAttention.velocity_unchecked` and the steps of :mod:`meanfield.particles`
on the numpy path up to round-off (sums in another order).
"""

from __future__ import annotations

import numba
import numpy as np

from ..checks import EXP_OVERFLOW
from ..protocols import NO_SETTINGS
from ..sphere import normalize

#: Doubles held at once per block of systems (tokens, weights, sums, keys, output): 2^17 = 1 MiB,
#: half the L2 cache of the development machine.
BLOCK_ELEMENTS = 2**17

#: Largest token count the fused kernels take (one system's weights fill a block): beyond it
#: :func:`meanfield.interaction.pair_sums`' row blocks take over.
MAX_TOKENS = 256

#: Zonal SA below this beta skips the shift: row sums of up to e^100 terms of size e^beta stay finite.
UNSHIFTED_BETA = EXP_OVERFLOW - 100.0

# Reassociation lets LLVM vectorize the reductions; no flag that assumes finite values. The
# kernels run with numpy's error model: a division by zero gives inf or NaN (an overflowing run
# is then ended by the driver's finite check, with its time), not a ZeroDivisionError.
FAST_MATH = {"reassoc", "contract", "nsz", "arcp"}


#: Up to this dimension the zonal kernel takes numpy's batched products (one call per block,
#: less overhead per system at small sizes); above it a numba loop over the systems calls
#: BLAS itself and finishes each system in the L1 cache (the crossover is measured by
#: ``benchmarks/bench_particles.py``).
SMALL_DIMENSION = 12

NO_NOISE = np.empty((1, 0, 0))  # "no noise": one system of no tokens

# Passes of one system's rows (:func:`finish_rows`): the attention output, the velocity, a step.
OUTPUT, VELOCITY, STEP = 0, 1, 2


@numba.njit(cache=True, error_model="numpy", fastmath=FAST_MATH)
def _inverse_norm(y):
    """``1 / |y|`` where the squares over- or underflow: the norm of ``y`` scaled by its largest entry
    (NaN for an infinite or zero vector, which the run reports)."""
    largest = 0.0
    for c in range(y.shape[0]):
        largest = max(largest, abs(y[c]))
    total = 0.0
    for c in range(y.shape[0]):
        total += (y[c] / largest) ** 2
    return 1.0 / (largest * np.sqrt(total))


@numba.njit(cache=True, error_model="numpy", fastmath=FAST_MATH, inline="always")
def _prepare_system(tokens, normalize, beta, ext, keys):
    r"""``ext = [u, 1]`` (``n x (d + 1)``) and ``keys[:d] = \beta u^T``, ``u = x / |x|`` or ``x``.

    The transpose is written contiguously in a loop of its own (one loop writing both would
    write one of them with a stride).
    """
    n, d = tokens.shape
    for i in range(n):
        scale = 1.0
        if normalize:
            norm = 0.0
            for c in range(d):
                norm += tokens[i, c] * tokens[i, c]
            scale = 1.0 / np.sqrt(norm) if 0.0 < norm < np.inf else _inverse_norm(tokens[i])
        for c in range(d):
            ext[i, c] = tokens[i, c] * scale
    for c in range(d):
        for i in range(n):
            keys[c, i] = beta * ext[i, c]


@numba.njit(cache=True, error_model="numpy", fastmath=FAST_MATH)
def _zonal_logits(x, start, normalize, beta, shift, extended, keys, logits):
    r"""For the systems ``x[start:start + len(logits)]``: prepare them (:func:`_prepare_system`)
    and write :math:`\beta\langle u_i, u_j\rangle - m` into ``logits``."""
    size, n, _ = logits.shape
    for s in range(size):
        ext, g = extended[s], logits[s]
        _prepare_system(x[start + s], normalize, beta, ext, keys[s])
        np.dot(ext, keys[s], g)  # the last row of the keys is zero: the 1 of [u, 1] adds nothing
        if shift != 0.0:
            for i in range(n):
                for j in range(n):
                    g[i, j] -= shift


@numba.njit(cache=True, error_model="numpy", fastmath=FAST_MATH)
def _zonal_finish(weights, extended, start, weight, denominator, mode, h, project, noise, noise_scale, sums,
                  out):
    """Per system: ``S = W [u, 1]`` into the scratch ``sums`` (``n x (d + 1)``), then its rows
    (:func:`finish_rows`) into ``out[start + s]``."""
    for s in range(weights.shape[0]):
        np.dot(weights[s], extended[s], sums[0])
        finish_rows(extended, s, sums, 0, out.shape[2], weight, denominator, mode, h, project, noise, start + s,
                     noise_scale, out, start + s)


@numba.njit(cache=True, error_model="numpy", fastmath=FAST_MATH, inline="always")
def finish_rows(x, xs, sums, ss, d, weight, denominator, mode, h, project, noise, ns, noise_scale, out, os):
    r"""The rows of one system from its sums: ``a_i = w S_i / Z_i`` (``S = sums[ss, :, :d]``,
    ``Z`` the last column, or ``denominator`` if nonzero), then per ``mode``: ``out[os] = a``
    (OUTPUT), :math:`P_x a` (VELOCITY), or the step :math:`(x + h v + \sigma P_x \xi)/|\cdot|`
    with ``v = P_x a`` (``project``) or ``a`` (STEP), ``x = x[xs]`` unit.

    ``x`` and ``sums`` may carry more columns than ``out`` (``[x, 1]``, the sums with their
    denominators): only the first ``d`` are read. ``noise[ns]`` is the system's noise; ``noise``
    of no tokens stands for none. ``out`` may be ``sums``. Systems are indices into 3-d arrays,
    not 2-d views (``benchmarks/bench_particles.py`` times the step). ``d`` is the number of
    components of ``out``, a parameter so that a caller passing a constant gets its loops
    compiled for that size (:func:`_finish_of`).
    """
    n = out.shape[1]
    # one loop per mode: no branch inside the loop over the tokens
    if mode == OUTPUT:
        for i in range(n):
            scale = weight / (sums[ss, i, d] if denominator == 0.0 else denominator)
            for c in range(d):
                out[os, i, c] = sums[ss, i, c] * scale
    elif mode == VELOCITY:
        for i in range(n):
            scale = weight / (sums[ss, i, d] if denominator == 0.0 else denominator)
            radial = 0.0
            for c in range(d):
                radial += x[xs, i, c] * (sums[ss, i, c] * scale)
            for c in range(d):
                out[os, i, c] = sums[ss, i, c] * scale - radial * x[xs, i, c]
    else:
        noisy = noise.shape[1] > 0
        for i in range(n):
            scale = weight / (sums[ss, i, d] if denominator == 0.0 else denominator)
            radial = 0.0
            if project:
                for c in range(d):
                    radial += x[xs, i, c] * (sums[ss, i, c] * scale)
            radial_noise = 0.0
            if noisy:
                for c in range(d):
                    radial_noise += x[xs, i, c] * noise[ns, i, c]
            norm = 0.0
            for c in range(d):
                y = x[xs, i, c] + h * (sums[ss, i, c] * scale - radial * x[xs, i, c])
                if noisy:
                    y += noise_scale * (noise[ns, i, c] - radial_noise * x[xs, i, c])
                out[os, i, c] = y
                norm += y * y
            inverse = 1.0 / np.sqrt(norm) if 0.0 < norm < np.inf else _inverse_norm(out[os, i, :d])
            for c in range(d):
                out[os, i, c] *= inverse


@numba.njit(cache=True, error_model="numpy", fastmath=FAST_MATH)
def finish_systems(x, sums, weight, denominator, mode, h, project, noise, noise_scale, out):
    """:func:`finish_rows` for every system of ``(b, n, .)`` arrays (``noise`` as ``x``).

    On the circle and S^2 with the number of components compiled in: loops with ``d`` known
    only at run time cost several times the unrolled pass there.
    """
    if out.shape[2] == 2:
        _finish_each(x, sums, 2, weight, denominator, mode, h, project, noise, noise_scale, out)
    elif out.shape[2] == 3:
        _finish_each(x, sums, 3, weight, denominator, mode, h, project, noise, noise_scale, out)
    else:
        _finish_each(x, sums, out.shape[2], weight, denominator, mode, h, project, noise, noise_scale, out)


@numba.njit(cache=True, error_model="numpy", fastmath=FAST_MATH, inline="always")
def _finish_each(x, sums, d, weight, denominator, mode, h, project, noise, noise_scale, out):
    for s in range(out.shape[0]):
        finish_rows(x, s, sums, s, d, weight, denominator, mode, h, project, noise, s, noise_scale, out, s)


#: Dimensions whose zonal kernel runs as numba loops compiled for that number of components
#: (:func:`_unrolled_logits`, :func:`_unrolled_finish`) instead of the batched products,
#: which they beat at these dimensions.
UNROLLED_DIMENSIONS = (2, 3)


@numba.njit(cache=True, error_model="numpy", fastmath=FAST_MATH, inline="always")
def _logits_of(x, start, d, normalize, beta, shift, extended, tokens, logits):
    r"""For the systems ``x[start:start + len(logits)]``: ``tokens[s, :d] = u^T``,
    ``extended[s] = [u, 1]`` if ``normalize`` (else ``u = x``, read from ``x``), and the logits
    :math:`\beta\langle u_i, u_j\rangle - m`, vectorized along ``j``; ``d`` a constant of the caller."""
    size, n, _ = logits.shape
    for s in range(size):
        if normalize:
            _prepare_system(x[start + s], True, 1.0, extended[s], tokens[s])
        else:
            for j in range(n):
                for c in range(d):
                    tokens[s, c, j] = x[start + s, j, c]
        for i in range(n):
            for j in range(n):
                acc = -shift
                for c in range(d):
                    acc += (beta * tokens[s, c, i]) * tokens[s, c, j]
                logits[s, i, j] = acc


@numba.njit(cache=True, error_model="numpy", fastmath=FAST_MATH, inline="always")
def _row_sums(weights, s, i, tokens, d, sums):
    """``sums[0, i] = (W u)_i, (W 1)_i`` in one pass along the row, the sums in scalars.

    A branch per dimension of :data:`UNROLLED_DIMENSIONS` (``d`` is a constant, so one stays):
    the same loop over an accumulator array keeps it in memory, and one pass per component
    loses part of the gain (``benchmarks/bench_particles.py``).
    """
    n = weights.shape[2]
    if d == 2:
        first, second, total = 0.0, 0.0, 0.0
        for j in range(n):
            w = weights[s, i, j]
            first += w * tokens[s, 0, j]
            second += w * tokens[s, 1, j]
            total += w
        sums[0, i, 0], sums[0, i, 1], sums[0, i, 2] = first, second, total
    else:
        first, second, third, total = 0.0, 0.0, 0.0, 0.0
        for j in range(n):
            w = weights[s, i, j]
            first += w * tokens[s, 0, j]
            second += w * tokens[s, 1, j]
            third += w * tokens[s, 2, j]
            total += w
        sums[0, i, 0], sums[0, i, 1], sums[0, i, 2], sums[0, i, 3] = first, second, third, total


@numba.njit(cache=True, error_model="numpy", fastmath=FAST_MATH, inline="always")
def _finish_of(weights, x, start, d, normalize, extended, tokens, weight, denominator, mode, h, project, noise,
               noise_scale, sums, out):
    """Per system: the sums of each row (:func:`_row_sums`), then :func:`finish_rows`, ``d`` a constant."""
    size, n, _ = weights.shape
    for s in range(size):
        for i in range(n):
            _row_sums(weights, s, i, tokens, d, sums)
        units, system = (extended, s) if normalize else (x, start + s)
        finish_rows(units, system, sums, 0, d, weight, denominator, mode, h, project, noise, start + s, noise_scale,
                     out, start + s)


# One entry per pass; each branch is its own copy of the loops with d compiled in (LLVM
# unrolls the components and vectorizes along the tokens).
@numba.njit(cache=True, error_model="numpy", fastmath=FAST_MATH)
def _unrolled_logits(x, start, normalize, beta, shift, extended, tokens, logits):
    if x.shape[2] == 2:
        _logits_of(x, start, 2, normalize, beta, shift, extended, tokens, logits)
    else:
        _logits_of(x, start, 3, normalize, beta, shift, extended, tokens, logits)


@numba.njit(cache=True, error_model="numpy", fastmath=FAST_MATH)
def _unrolled_finish(weights, x, start, normalize, extended, tokens, weight, denominator, mode, h, project, noise,
                     noise_scale, sums, out):
    if x.shape[2] == 2:
        _finish_of(weights, x, start, 2, normalize, extended, tokens, weight, denominator, mode, h, project, noise,
                   noise_scale, sums, out)
    else:
        _finish_of(weights, x, start, 3, normalize, extended, tokens, weight, denominator, mode, h, project, noise,
                   noise_scale, sums, out)


@numba.njit(cache=True, error_model="numpy", fastmath=FAST_MATH)
def _prepare_into(x, start, normalize, beta, extended, keys):
    """:func:`_prepare_system` for the systems ``x[start:start + len(extended)]``."""
    for s in range(extended.shape[0]):
        _prepare_system(x[start + s], normalize, beta, extended[s], keys[s])


@numba.njit(cache=True, error_model="numpy", fastmath=FAST_MATH)
def _exponents(g, row_max, shift):
    """``g <- g - m_i`` in place (``g`` the logits), ``m_i`` the row maximum (``row_max``) or ``shift``."""
    b, n, m = g.shape
    for s in range(b):
        for i in range(n):
            offset = shift
            if row_max:
                offset = -np.inf
                for j in range(m):
                    offset = max(offset, g[s, i, j])
            for j in range(m):
                g[s, i, j] = g[s, i, j] - offset


@numba.njit(cache=True, error_model="numpy", fastmath=FAST_MATH)
def _add_head(sums, normalized, values, first, out):
    r"""``out_i (+)= V (S_i / Z_i)``: ``S = sums[..., :d]``, ``Z`` its last column (SA) or ``n`` (USA)."""
    b, n, d = out.shape
    mean = np.empty(d)
    for s in range(b):
        for i in range(n):
            scale = 1.0 / (sums[s, i, d] if normalized else n)
            for c in range(d):
                mean[c] = sums[s, i, c] * scale
            for c in range(d):
                acc = 0.0
                for e in range(d):
                    acc += values[c, e] * mean[e]
                out[s, i, c] = acc if first else out[s, i, c] + acc


class FusedAttention:
    r"""The attention output, velocity and Euler/layer step of a :class:`SelfAttention` on ``(b, n, d)`` arrays.

    Parameters
    ----------
    model : SelfAttention
        Any query, key and value matrices and heads; ``beta = 0`` is exact (all weights one).
    """

    def __init__(self, model) -> None:
        self.beta = model.beta
        self.normalized = bool(model.normalized)
        self.zonal = model.is_zonal
        if self.normalized:
            self.shift = model.beta  # with Q = K = I; otherwise the row maximum
        else:
            self.shift = model.beta * model.logit_bound if model.time_rescaled else 0.0
        # Zonal SA needs no shift while n e^beta stays finite: e^{-beta} cancels in the softmax.
        self.shifted = not (self.zonal and self.normalized and self.beta < UNSHIFTED_BETA) and self.shift != 0.0
        if self.zonal:
            self.value = float(model.value)
        else:
            self.mixed, self.values = _general_matrices(model)
        self._work: tuple[np.ndarray, ...] | None = None  # kept for the run: see _work_arrays

    name = "fused"
    settings = NO_SETTINGS
    normalize = staticmethod(normalize)

    def attention_output(self, x: np.ndarray) -> np.ndarray:
        """:math:`a_i` at ``x / |x|``, shape ``(b, n, d)``."""
        return self._run(x, OUTPUT, normalize=True)

    def velocity_unchecked(self, x: np.ndarray) -> np.ndarray:
        """:math:`P_{x_i} a_i` at ``x / |x|``: the velocity, extended off the sphere."""
        return self._run(x, VELOCITY, normalize=True)

    def step(self, x: np.ndarray, h: float, *, project: bool, noise: np.ndarray | None = None,
             noise_scale: float = 0.0) -> np.ndarray:
        r"""One step from unit vectors ``x``: :math:`(x + h v + \sigma P_x\xi)/|\cdot|`, :math:`v = P_x a` or :math:`a`."""
        return self._run(x, STEP, normalize=False, h=h, project=project,
                         noise=NO_NOISE if noise is None else noise, noise_scale=noise_scale)

    def _work_arrays(self, block: int, n: int, d: int) -> tuple[np.ndarray, ...]:
        """Per block: ``[u, 1]``, ``beta u^T`` with a zero last row (``u^T`` for the unrolled loops), logits, sums.

        Kept from step to step (an instance serves one run, in one thread): fresh ones freed
        at every step, together with the previous state, pushed glibc's heap over its trim
        threshold at d = 32, and each step page-faulted them back.
        """
        shapes = ((block, n, d + 1), (block, d + 1, n), (block, n, n), (block, n, d + 1))
        if self._work is None or [w.shape for w in self._work] != list(shapes):
            self._work = tuple(np.zeros(shape) for shape in shapes)
            self._work[0][..., -1] = 1.0
        return self._work

    def _run(self, x: np.ndarray, mode: int, *, normalize: bool, h: float = 0.0, project: bool = True,
             noise: np.ndarray = NO_NOISE, noise_scale: float = 0.0) -> np.ndarray:
        """The attention output, the velocity or the next positions (``mode``), block by block:
        each block of systems goes through all passes while its arrays are in the L2 cache."""
        x = np.ascontiguousarray(x, dtype=float)
        b, n, d = x.shape
        out = np.empty((b, n, d))
        block = max(1, min(b, BLOCK_ELEMENTS // (n * n + 5 * n * d)))
        extended, keys, logits, sums = self._work_arrays(block, n, d)
        weight, denominator = (self.value, 0.0 if self.normalized else float(n)) if self.zonal else (1.0, 1.0)
        shift = self.shift if self.shifted else 0.0
        for start in range(0, b, block):
            size = min(block, b - start)
            g = logits[:size]
            if self.zonal and d in UNROLLED_DIMENSIONS:
                _unrolled_logits(x, start, normalize, self.beta, shift, extended, keys, g)
                np.exp(g, out=g)
                _unrolled_finish(g, x, start, normalize, extended, keys, weight, denominator, mode, h, project, noise,
                                 noise_scale, sums, out)
                continue
            if self.zonal and d > SMALL_DIMENSION:
                _zonal_logits(x, start, normalize, self.beta, shift, extended, keys, g)
                np.exp(g, out=g)
                _zonal_finish(g, extended, start, weight, denominator, mode, h, project, noise, noise_scale,
                              sums, out)
                continue
            ext, unit, keys_t = extended[:size], extended[:size, :, :-1], keys[:size, :-1]
            _prepare_into(x, start, normalize, self.beta, ext, keys[:size])
            total, result = sums[:size], out[start:start + size]
            for head in range(1 if self.zonal else self.mixed.shape[0]):
                np.matmul(unit if self.zonal else unit @ self.mixed[head], keys_t, out=g)
                if self.shifted:
                    _exponents(g, self.normalized and not self.zonal, self.shift)
                np.exp(g, out=g)
                np.matmul(g, ext, out=total)
                if not self.zonal:
                    _add_head(total, self.normalized, self.values[head], head == 0, result)
            finish_systems(ext, total if self.zonal else result, weight, denominator, mode, h, project,
                            noise[start:start + size] if noise.shape[1] else noise, noise_scale, result)
        return out


def _general_matrices(model) -> tuple[np.ndarray, np.ndarray]:
    """``M_h = Q_h^T K_h`` and ``V_h`` per head, shape ``(heads, d, d)`` each."""
    eye = np.eye(model.dimension)
    mixed, values = [], []
    for q, k, v in model.head_matrices():
        mixed.append((eye if q is None else q).T @ (eye if k is None else k))
        values.append(v * eye if np.ndim(v) == 0 else v)
    return np.ascontiguousarray(mixed, dtype=float), np.ascontiguousarray(values, dtype=float)


class OutputKernel:
    """Attention output, velocity and Euler/layer step of a kernel that defines ``_attention(unit)``.

    ``_attention`` maps unit vectors ``(b, n, d)`` (or ``(n, d)``) to the attention output of
    the same shape; the projection, the step, the noise and the normalization are the fused
    passes above.
    """

    normalize = staticmethod(normalize)
    settings = NO_SETTINGS

    def attention_output(self, x: np.ndarray) -> np.ndarray:
        return self._attention(normalize(x))

    def velocity_unchecked(self, x: np.ndarray) -> np.ndarray:
        unit = np.ascontiguousarray(normalize(x)).reshape((-1,) + x.shape[-2:])
        a = self._attention(unit)
        finish_systems(unit, a, 1.0, 1.0, VELOCITY, 0.0, True, NO_NOISE, 0.0, a)
        return a.reshape(x.shape)

    def step(self, x: np.ndarray, h: float, *, project: bool, noise: np.ndarray | None = None,
             noise_scale: float = 0.0) -> np.ndarray:
        x = np.ascontiguousarray(x, dtype=float)
        a = self._attention(x)
        finish_systems(x, a, 1.0, 1.0, STEP, h, project, NO_NOISE if noise is None else noise, noise_scale, a)
        return a

    def _attention(self, unit: np.ndarray) -> np.ndarray:
        raise NotImplementedError
