r"""Fused kernels for the self-attention velocity and step of many small systems.

One step of ``b`` systems of ``n`` tokens in ``R^d`` runs over blocks of systems whose
arrays (tokens, weights, sums, output) fit in half the L2 cache (:data:`BLOCK_ELEMENTS`),
each block in five passes that never leave the cache:

1. ``[x, 1]`` and the transposed keys :math:`\beta x^T` in one numba pass (numpy's strided
   copy of the transpose cost more than the product it feeds at d = 32),
2. the logits :math:`\beta\langle Q_h x_i, K_h x_j\rangle` as one batched matrix product
   (per-system BLAS; :math:`\langle Q_h x_i, K_h x_j\rangle = (x_i M_h)\cdot x_j` with
   :math:`M_h = Q_h^T K_h` formed once),
3. shift in a numba pass where needed, then numpy's vectorized ``exp`` in place (numba's
   scalar ``exp`` costs five times more, and the exponentials are the floor of the step),
4. one batched product of the weights with ``[x, 1]``, which gives the weighted sums and,
   in its last column, the softmax denominators,
5. division, the value matrix, the tangent projection, the residual step, the noise and the
   normalization in one numba pass over the tokens.

Every intermediate of the numpy path that was an extra pass over memory (``normalize`` of
points already on the sphere, ``project_tangent``, ``concatenate``, ``zeros_like``) is gone.

The stabilising shift cancels in SA (the softmax is shift-invariant): with ``Q = K = I``
it is :math:`\beta` (the self term, the largest logit of unit vectors), otherwise the row
maximum. For USA it is the model's own (``0``, or :math:`\beta\|Q^TK\|` when
time-rescaled), which is part of the kernel.

The numbers equal :meth:`SelfAttention.drift` and the steps of :mod:`meanfield.particles`
on the numpy path up to round-off (sums in another order).
"""

from __future__ import annotations

import numba
import numpy as np

from .checks import EXP_OVERFLOW
from .sphere import normalize

#: Doubles held at once per block of systems (tokens, weights, sums, keys, output): 2^17 = 1 MiB,
#: half the L2 cache of the development machine.
BLOCK_ELEMENTS = 2**17

#: Largest token count the fused kernels take (one system's weights fill a block): beyond it
#: :func:`meanfield.interaction.pair_sums`' row blocks take over.
MAX_TOKENS = 256

#: Zonal SA below this beta skips the shift: row sums of up to e^100 terms of size e^beta stay finite.
UNSHIFTED_BETA = EXP_OVERFLOW - 100.0

# Reassociation lets LLVM vectorize the reductions; no flag that assumes finite values.
_FAST = {"reassoc", "contract", "nsz", "arcp"}


@numba.njit(cache=True, fastmath=_FAST)
def _prepare_into(x, normalize, beta, extended, keys):
    r"""``extended[..., :d] = u`` and ``keys = \beta u^T`` per system, ``u = x / |x|`` or ``x``.

    One pass writes both operands of the logits' product: numpy's strided copy of the
    transposed keys alone cost more than the product at d = 32.
    """
    b, n, d = x.shape
    for s in range(b):
        for i in range(n):
            scale = 1.0
            if normalize:
                norm = 0.0
                for c in range(d):
                    norm += x[s, i, c] * x[s, i, c]
                scale = 1.0 / np.sqrt(norm)
            for c in range(d):
                u = x[s, i, c] * scale
                extended[s, i, c] = u
                keys[s, c, i] = beta * u


@numba.njit(cache=True, fastmath=_FAST)
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


@numba.njit(cache=True, fastmath=_FAST)
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


@numba.njit(cache=True, fastmath=_FAST)
def _scale_sums(sums, weight, denominator, out):
    r"""``out_i = w S_i / Z_i``: ``S = sums[..., :d]``, ``Z`` its last column or ``denominator`` if nonzero."""
    b, n, d = out.shape
    for s in range(b):
        for i in range(n):
            scale = weight / (sums[s, i, d] if denominator == 0.0 else denominator)
            for c in range(d):
                out[s, i, c] = sums[s, i, c] * scale


@numba.njit(cache=True, fastmath=_FAST)
def _project_into(x, a, out):
    """``out = P_x a`` for unit ``x`` (its first ``d`` columns: see :func:`_step_into`)."""
    b, n, d = a.shape
    for s in range(b):
        for i in range(n):
            radial = 0.0
            for c in range(d):
                radial += x[s, i, c] * a[s, i, c]
            for c in range(d):
                out[s, i, c] = a[s, i, c] - radial * x[s, i, c]


@numba.njit(cache=True, fastmath=_FAST)
def _step_into(x, sums, weight, denominator, h, project, noise, noise_scale, out):
    r"""``out = (x + h v + \sigma P_x \xi) / |.|`` with ``v = P_x a`` (``project``) or ``a``; ``x`` unit.

    ``a_i = w S_i / Z_i`` as in :func:`_scale_sums` (``w = 1``, ``denominator = 1`` for a
    finished attention output ``sums``): the scaling is done here rather than in a pass of its
    own. ``noise`` of shape ``(0, 0, 0)`` stands for no noise. ``x`` and ``sums`` may carry
    more columns than ``out`` (the ``[x, 1]`` work array and the sums with their
    denominators): only the first ``d`` are read. Pass whole arrays, not views of their first
    columns: numba vectorizes contiguous arrays only (a view made this pass 2.5x slower at
    d = 32). ``out`` may be ``sums``.
    """
    b, n, d = out.shape
    noisy = noise.shape[0] > 0
    for s in range(b):
        for i in range(n):
            scale = weight / (sums[s, i, d] if denominator == 0.0 else denominator)
            radial = 0.0
            radial_noise = 0.0
            for c in range(d):
                radial += x[s, i, c] * (sums[s, i, c] * scale)
            if noisy:
                for c in range(d):
                    radial_noise += x[s, i, c] * noise[s, i, c]
            if not project:
                radial = 0.0
            norm = 0.0
            for c in range(d):
                y = x[s, i, c] + h * (sums[s, i, c] * scale - radial * x[s, i, c])
                if noisy:
                    y += noise_scale * (noise[s, i, c] - radial_noise * x[s, i, c])
                out[s, i, c] = y
                norm += y * y
            inverse = 1.0 / np.sqrt(norm)
            for c in range(d):
                out[s, i, c] *= inverse


class FusedAttention:
    r"""The attention output, drift and Euler/layer step of a :class:`SelfAttention` on ``(b, n, d)`` arrays.

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
            self.shift = model.beta * model._bound if model.time_rescaled else 0.0
        # Zonal SA needs no shift while n e^beta stays finite: e^{-beta} cancels in the softmax.
        self.shifted = not (self.zonal and self.normalized and self.beta < UNSHIFTED_BETA) and self.shift != 0.0
        if self.zonal:
            self.value = float(model.value)
        else:
            self.mixed, self.values = _general_matrices(model)
        self._work: tuple[np.ndarray, ...] | None = None  # kept for the run: see _work_arrays

    name = "fused"
    normalize = staticmethod(normalize)

    def attention_output(self, x: np.ndarray) -> np.ndarray:
        """:math:`a_i` at ``x / |x|``, shape ``(b, n, d)``."""
        return self._run(x, normalize=True)

    def drift(self, x: np.ndarray) -> np.ndarray:
        """:math:`P_{x_i} a_i` at ``x / |x|``: the velocity, extended off the sphere."""
        return self._run(x, normalize=True, project=True)

    def step(self, x: np.ndarray, h: float, *, project: bool, noise: np.ndarray | None = None,
             noise_scale: float = 0.0) -> np.ndarray:
        r"""One step from unit vectors ``x``: :math:`(x + h v + \sigma P_x\xi)/|\cdot|`, :math:`v = P_x a` or :math:`a`."""
        return self._run(x, normalize=False, project=project,
                         step=(h, _NO_NOISE if noise is None else noise, noise_scale))

    def _work_arrays(self, block: int, n: int, d: int) -> tuple[np.ndarray, ...]:
        """Per block: ``[x, 1]`` ``(block, n, d + 1)``, ``beta x^T`` ``(block, d, n)``, logits, sums.

        Kept from step to step (an instance serves one run, in one thread): fresh ones freed
        at every step, together with the previous state, pushed glibc's heap over its trim
        threshold at d = 32, and each step page-faulted them back.
        """
        shapes = ((block, n, d + 1), (block, d, n), (block, n, n), (block, n, d + 1))
        if self._work is None or [w.shape for w in self._work] != list(shapes):
            self._work = tuple(np.empty(shape) for shape in shapes)
            self._work[0][..., -1] = 1.0
        return self._work

    def _run(self, x: np.ndarray, *, normalize: bool, project: bool = False, step: tuple | None = None):
        """The attention output (projected with ``project``), or with ``step = (h, noise, noise_scale)``
        the next positions.

        Each block of systems goes through all passes while its arrays are in the L2 cache:
        ``[x, 1]`` and ``beta x^T`` (:func:`_prepare_into`), the logits, their exponentials,
        the sums, and the output or the step (:func:`_step_into`).
        """
        x = np.ascontiguousarray(x, dtype=float)
        b, n, d = x.shape
        out = np.empty((b, n, d))
        heads = 1 if self.zonal else self.mixed.shape[0]
        weight, denominator = (self.value, 0.0 if self.normalized else float(n)) if self.zonal else (1.0, 1.0)
        block = max(1, min(b, BLOCK_ELEMENTS // (n * n + 5 * n * d)))
        extended, keys, logits, sums = self._work_arrays(block, n, d)
        for start in range(0, b, block):
            stop = min(b, start + block)
            size = stop - start
            ext, keys_t, g, total, result = extended[:size], keys[:size], logits[:size], sums[:size], out[start:stop]
            _prepare_into(x[start:stop], normalize, self.beta, ext, keys_t)
            unit = ext[..., :-1]
            for head in range(heads):
                queries = unit if self.zonal else unit @ self.mixed[head]
                np.matmul(queries, keys_t, out=g)
                if self.shifted:
                    _exponents(g, self.normalized and not self.zonal, self.shift)
                np.exp(g, out=g)
                np.matmul(g, ext, out=total)
                if not self.zonal:
                    _add_head(total, self.normalized, self.values[head], head == 0, result)
                elif step is None:
                    _scale_sums(total, weight, denominator, result)
            if step is not None:
                h, noise, noise_scale = step
                _step_into(ext, total if self.zonal else result, weight, denominator, h, project,
                           noise[start:stop] if noise.shape[0] else noise, noise_scale, result)
            elif project:
                _project_into(ext, result, result)
        return out


def _general_matrices(model) -> tuple[np.ndarray, np.ndarray]:
    """``M_h = Q_h^T K_h`` and ``V_h`` per head, shape ``(heads, d, d)`` each."""
    eye = np.eye(model.dimension)
    mixed, values = [], []
    for q, k, v in model._head_matrices():
        mixed.append((eye if q is None else q).T @ (eye if k is None else k))
        values.append(v * eye if np.ndim(v) == 0 else v)
    return np.ascontiguousarray(mixed, dtype=float), np.ascontiguousarray(values, dtype=float)


_NO_NOISE = np.empty((0, 0, 0))


class OutputKernel:
    """Attention output, drift and Euler/layer step of a kernel that defines ``_attention(unit)``.

    ``_attention`` maps unit vectors ``(b, n, d)`` (or ``(n, d)``) to the attention output of
    the same shape; the projection, the step, the noise and the normalization are the fused
    passes above.
    """

    normalize = staticmethod(normalize)

    def attention_output(self, x: np.ndarray) -> np.ndarray:
        return self._attention(normalize(x))

    def drift(self, x: np.ndarray) -> np.ndarray:
        unit = np.ascontiguousarray(normalize(x)).reshape((-1,) + x.shape[-2:])
        a = self._attention(unit)
        _project_into(unit, a, a)
        return a.reshape(x.shape)

    def step(self, x: np.ndarray, h: float, *, project: bool, noise: np.ndarray | None = None,
             noise_scale: float = 0.0) -> np.ndarray:
        x = np.ascontiguousarray(x, dtype=float)
        a = self._attention(x)
        _step_into(x, a, 1.0, 1.0, h, project, _NO_NOISE if noise is None else noise, noise_scale, a)
        return a

    def _attention(self, unit: np.ndarray) -> np.ndarray:
        raise NotImplementedError
