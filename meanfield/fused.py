r"""Fused kernels for the self-attention velocity and step of many small systems.

One step of ``b`` systems of ``n`` tokens in ``R^d`` runs over blocks of systems whose
weights fit in a quarter of the L2 cache (:data:`BLOCK_ELEMENTS`), each block in four
passes that never leave the cache:

1. the logits :math:`\beta\langle Q_h x_i, K_h x_j\rangle` as one batched matrix product
   (per-system BLAS; :math:`\langle Q_h x_i, K_h x_j\rangle = (x_i M_h)\cdot x_j` with
   :math:`M_h = Q_h^T K_h` formed once),
2. scale and shift in one numba pass, then numpy's vectorized ``exp`` in place (numba's
   scalar ``exp`` costs five times more, and the exponentials are the floor of the step),
3. one batched product of the weights with ``[x, 1]``, which gives the weighted sums and,
   in its last column, the softmax denominators,
4. division, the value matrix, the tangent projection, the residual step, the noise and the
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

#: Weights held at once per block of systems: 2^16 doubles = 512 KiB, a quarter of the L2 cache.
BLOCK_ELEMENTS = 2**16

#: Largest token count the fused kernels take (one system's weights fill a block): beyond it
#: :func:`meanfield.interaction.pair_sums`' row blocks take over.
MAX_TOKENS = 256

#: Zonal SA below this beta skips the shift: row sums of up to e^100 terms of size e^beta stay finite.
UNSHIFTED_BETA = EXP_OVERFLOW - 100.0

# Reassociation lets LLVM vectorize the reductions; no flag that assumes finite values.
_FAST = {"reassoc", "contract", "nsz", "arcp"}


@numba.njit(cache=True, fastmath=_FAST)
def _normalize_into(x, out):
    """``out[..., :d] = x / |x|`` (``out`` may have one more column, left alone)."""
    b, n, d = x.shape
    for s in range(b):
        for i in range(n):
            norm = 0.0
            for c in range(d):
                norm += x[s, i, c] * x[s, i, c]
            scale = 1.0 / np.sqrt(norm)
            for c in range(d):
                out[s, i, c] = x[s, i, c] * scale


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
def _scale_sums(sums, normalized, value, out):
    r"""``out_i = c S_i / Z_i`` (the zonal case, ``V = c I``)."""
    b, n, d = out.shape
    for s in range(b):
        for i in range(n):
            scale = value / (sums[s, i, d] if normalized else n)
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
def _step_into(x, a, h, project, noise, noise_scale, out):
    r"""``out = (x + h v + \sigma P_x \xi) / |.|`` with ``v = P_x a`` (``project``) or ``a``; ``x`` unit.

    ``noise`` of shape ``(0, 0, 0)`` stands for no noise. ``x`` may carry more columns than
    ``a`` (the ``[x, 1]`` work array): only the first ``d`` are read. Pass the whole array, not
    a view of its first columns: numba vectorizes contiguous arrays only (the view made this
    pass 2.5x slower at d = 32).
    """
    b, n, d = a.shape
    noisy = noise.shape[0] > 0
    for s in range(b):
        for i in range(n):
            radial = 0.0
            radial_noise = 0.0
            for c in range(d):
                radial += x[s, i, c] * a[s, i, c]
            if noisy:
                for c in range(d):
                    radial_noise += x[s, i, c] * noise[s, i, c]
            if not project:
                radial = 0.0
            norm = 0.0
            for c in range(d):
                y = x[s, i, c] + h * (a[s, i, c] - radial * x[s, i, c])
                if noisy:
                    y += noise_scale * (noise[s, i, c] - radial_noise * x[s, i, c])
                out[s, i, c] = y
                norm += y * y
            scale = 1.0 / np.sqrt(norm)
            for c in range(d):
                out[s, i, c] *= scale


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
        self._extended_work: np.ndarray | None = None  # [x, 1], kept for the run (see _extended)

    name = "fused"
    normalize = staticmethod(normalize)

    def attention_output(self, x: np.ndarray) -> np.ndarray:
        """:math:`a_i` at ``x / |x|``, shape ``(b, n, d)``."""
        return self._attention(self._extended(x, normalize=True))

    def drift(self, x: np.ndarray) -> np.ndarray:
        """:math:`P_{x_i} a_i` at ``x / |x|``: the velocity, extended off the sphere."""
        extended = self._extended(x, normalize=True)
        a = self._attention(extended)
        _project_into(extended, a, a)
        return a

    def step(self, x: np.ndarray, h: float, *, project: bool, noise: np.ndarray | None = None,
             noise_scale: float = 0.0) -> np.ndarray:
        r"""One step from unit vectors ``x``: :math:`(x + h v + \sigma P_x\xi)/|\cdot|`, :math:`v = P_x a` or :math:`a`."""
        extended = self._extended(x, normalize=False)
        a = self._attention(extended)
        _step_into(extended, a, h, project, _NO_NOISE if noise is None else noise, noise_scale, a)
        return a

    def _extended(self, x: np.ndarray, *, normalize: bool) -> np.ndarray:
        """``[x, 1]``, shape ``(b, n, d + 1)``: one product with it gives sums and denominators.

        The array is kept from step to step (an instance serves one run, in one thread): a
        fresh one freed at every step, together with the previous state, pushed glibc's heap
        over its trim threshold at d = 32, and each step page-faulted both back.
        """
        shape = x.shape[:-1] + (x.shape[-1] + 1,)
        extended = self._extended_work
        if extended is None or extended.shape != shape:
            extended = self._extended_work = np.ones(shape)
        if normalize:
            _normalize_into(np.ascontiguousarray(x, dtype=float), extended)
        else:
            extended[..., :-1] = x
        return extended

    def _attention(self, extended: np.ndarray) -> np.ndarray:
        b, n, d1 = extended.shape
        out = np.empty((b, n, d1 - 1))
        heads = 1 if self.zonal else self.mixed.shape[0]
        block = max(1, BLOCK_ELEMENTS // (n * n))
        logits = np.empty((min(b, block), n, n))
        sums = np.empty((min(b, block), n, d1))
        keys = np.empty((min(b, block), d1 - 1, n))
        for start in range(0, b, block):
            stop = min(b, start + block)
            ext, unit = extended[start:stop], extended[start:stop, :, :-1]
            g, total, keys_t = logits[: stop - start], sums[: stop - start], keys[: stop - start]
            # numpy's batched matmul takes BLAS only with a contiguous second operand;
            # beta rides along with the copy, so that the product is the logits.
            np.multiply(np.swapaxes(unit, -1, -2), self.beta, out=keys_t)
            for head in range(heads):
                queries = unit if self.zonal else unit @ self.mixed[head]
                np.matmul(queries, keys_t, out=g)
                if self.shifted:
                    _exponents(g, self.normalized and not self.zonal, self.shift)
                np.exp(g, out=g)
                np.matmul(g, ext, out=total)
                if self.zonal:
                    _scale_sums(total, self.normalized, self.value, out[start:stop])
                else:
                    _add_head(total, self.normalized, self.values[head], head == 0, out[start:stop])
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
        _step_into(x, a, h, project, _NO_NOISE if noise is None else noise, noise_scale, a)
        return a

    def _attention(self, unit: np.ndarray) -> np.ndarray:
        raise NotImplementedError
