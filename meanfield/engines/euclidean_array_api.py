r"""Pure attention in :math:`\mathbb{R}^d` in the namespace, and on the device, of the arrays it is given.

:class:`EuclideanArrayAPIKernel` implements the reference right-hand side
:meth:`meanfield.PureAttention.velocity_at` (original variables :math:`\sum_h V_h P^h x`,
rescaled :math:`V\sum_h (P^h z - z)`, the logits :math:`\langle Q_h M x_i, K_h M x_j\rangle`)
(with pre-LN at :math:`N_g(x)`, and the post-LN layer's :math:`N_g`) with the operations of the Python array API standard: CuPy, PyTorch or JAX arrays stay on
their device, and ``array_api_strict`` runs it on the CPU for the tests.
:func:`meanfield.engines.check_consistency` compares it with the reference.

The matrices :math:`M(t)` (``scipy.linalg.expm`` or the product of the layer's :math:`R`)
and :math:`Q_h M`, :math:`K_h M` are ``d x d``: they are formed on the host by the
reference's own code and moved to the device, one small copy per evaluation.
"""

from __future__ import annotations

import numpy as np
from array_api_compat import array_namespace, device

from ..protocols import NO_SETTINGS
from .kernels import ARRAY_API_BLOCK_ELEMENTS


class EuclideanArrayAPIKernel:
    """:meth:`PureAttention.velocity_at` on arrays of any array API namespace, blocked over systems
    so that one block's ``(systems, n, n)`` logits hold at most :data:`ARRAY_API_BLOCK_ELEMENTS` entries."""

    name = "array_api"
    settings = NO_SETTINGS

    def __init__(self, model, like) -> None:
        if model.on_sphere:
            raise TypeError(f"EuclideanArrayAPIKernel computes PureAttention, got {type(model).__name__}")
        if model.attention != "softmax":
            raise ValueError("attention='sinkhorn' in R^d runs on numpy arrays (its iteration is the host's)")
        self.model = model
        self.xp = array_namespace(like)
        self.device = device(like)

    def asarray(self, values):
        """Host values as a float64 array of this namespace and device."""
        return self.xp.asarray(np.asarray(values, dtype=float), dtype=self.xp.float64, device=self.device)

    def velocity_at(self, x, rescaling: np.ndarray):
        r"""The velocity of tokens ``x`` ``(..., n, d)`` (this namespace) with the logits at :math:`M x`,
        ``rescaling`` = :math:`M` (numpy, ``(d, d)``)."""
        xp = self.xp
        shape = x.shape
        flat = self._attention_inputs(xp.reshape(x, (-1,) + tuple(shape[-2:])))
        d = shape[-1]
        heads = [(self.asarray(q @ rescaling).T, self.asarray(k @ rescaling).T, self.asarray(v).T)
                 for q, k, v in self.model.head_matrices(d)]
        b, n = flat.shape[0], flat.shape[1]
        block = max(1, ARRAY_API_BLOCK_ELEMENTS // (n * n))
        parts = [self._velocity_block(flat[start:min(b, start + block), ...], heads) for start in range(0, b, block)]
        total = parts[0] if len(parts) == 1 else xp.concat(parts, axis=0)
        return xp.reshape(total, shape)

    def _attention_inputs(self, x):
        r"""The reference's ``attention_inputs``: :math:`g \odot x/|x|` with pre-LN, else ``x``."""
        return self.normalized(x) if self.model.normalization == "pre" else x

    def normalized(self, x):
        r"""The reference's ``normalized``: :math:`N_g(x) = g \odot x/|x|` (the layer's output with post-LN)."""
        unit = x / self.xp.sqrt(self.xp.sum(x * x, axis=-1, keepdims=True))
        return unit if self.model.gain is None else unit * self.asarray(self.model.gain)

    def _velocity_block(self, x, heads):
        xp = self.xp
        total = None
        for query, key, value in heads:
            logits = (x @ query) @ xp.matrix_transpose(x @ key)
            weights = self._weights(logits)
            average = (weights @ x) / xp.sum(weights, axis=-1, keepdims=True)
            if self.model.rescaled:
                average = average - x
            head = average @ value
            total = head if total is None else total + head
        return total

    def _weights(self, logits):
        """Softmax numerators, or the argmax indicator of hardmax: the reference's ``_weight``."""
        xp, model = self.xp, self.model
        row_max = xp.max(logits, axis=-1, keepdims=True)
        if model.hardmax:
            scale = xp.clip(xp.max(xp.abs(logits), axis=-1, keepdims=True), min=1.0)
            return xp.astype(logits >= row_max - model.tie_tolerance * scale, xp.float64)
        return xp.exp((logits - row_max) * model.beta)
