"""The heads of a :class:`~meanfield.SelfAttention` model as full matrices, shared by the general PDE operators."""

from __future__ import annotations

import numpy as np

from meanfield.checks import EXP_OVERFLOW


def head_matrices(model, d: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """``(A_h, V_h)`` per head in ``R^{d x d}``: ``A = Q^T K`` (identity where omitted) and the value matrix."""
    eye = np.eye(d)
    return [((eye if q is None else q).T @ (eye if k is None else k), v * eye if np.ndim(v) == 0 else np.asarray(v))
            for q, k, v in model.head_matrices()]


def is_gradient_flow(model, d: int) -> bool:
    """Whether every head has ``V_h = A_h = Q_h^T K_h`` symmetric (then USA is a gradient flow of its energy)."""
    return all(np.allclose(a, a.T, rtol=0, atol=1e-14) and np.allclose(v, a, rtol=0, atol=1e-14)
               for a, v in head_matrices(model, d))


def kernel_shifts(model, d: int) -> list[float]:
    r"""Per head, the ``s_h`` of the kernel :math:`e^{\beta x^T A_h y - s_h}` the operators use.

    SA divides it out, so it takes :math:`s_h = \beta\|A_h\|_2` (the kernel's maximum: no
    overflow at any ``beta``); time-rescaled USA the model's :math:`\beta\max_h\|A_h\|_2`;
    plain USA 0.
    """
    beta = model.beta
    if model.normalized:
        return [beta * float(np.linalg.norm(a, 2)) for a, _ in head_matrices(model, d)]
    return [beta * model.logit_bound if model.time_rescaled else 0.0] * model.heads


def energy_factors(model, d: int) -> tuple[np.ndarray, bool]:
    r"""Per head :math:`e^{s_h - s}`, the factor from the operators' kernels to the energy's, and whether ``s > 0``.

    The energy is :math:`\frac1{2\beta}\sum_h\int\!\!\int e^{\beta x^T A_h y - s}\rho\rho` with
    ``s = 0`` (the particles' :meth:`~meanfield.SelfAttention.energy`) unless the kernel is
    time-rescaled or :math:`e^{\beta\max_h\|A_h\|}` would overflow; then
    :math:`s = \beta\max_h\|A_h\|_2` and the energy is reported scaled.
    """
    scaled = bool(model.time_rescaled or model.beta * model.logit_bound > EXP_OVERFLOW)
    common = model.beta * model.logit_bound if scaled else 0.0
    return np.exp(np.array(kernel_shifts(model, d)) - common), scaled
