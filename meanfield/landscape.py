r"""The energy landscape of ``n`` tokens: critical configurations, their Hessian index, spherical designs.

For a zonal model the interaction energy of tokens :math:`x_1..x_n` on :math:`S^{d-1}` is

.. math:: E(x) = \frac{1}{2n^2}\sum_{i,j} W(\langle x_i, x_j\rangle), \qquad
          W(s) = \frac{e^{\beta s}}{\beta}\ (W(s) = s \text{ at } \beta = 0),

and the dynamics climbs :math:`cE` (``c`` the value scalar: ``1`` attracts, ``-1`` repels).
USA is its gradient ascent up to the factor ``n``; SA's velocity is the same gradient with
each token's row divided by its positive partition function, so both have the same critical
points and, by Sylvester's law of inertia, the same number of unstable directions there.

Riemannian geometry of the product of spheres. With :math:`P_i = I - x_i x_i^T`, the gradient is
:math:`P_i\,\partial_i E` and the Hessian
:math:`\mathrm{Hess}\,E[\xi]_i = P_i(\nabla^2 E\,\xi)_i - \langle x_i, \partial_i E\rangle\,\xi_i`,
written here in an orthonormal basis of each tangent space (size :math:`n(d-1)`), with the
Euclidean blocks

.. math:: \partial_j\partial_i E = \frac1{n^2}\Big[\delta_{ij}\sum_l W''(s_{il})\,x_l x_l^T
          + W''(s_{ij})\,x_j x_i^T + W'(s_{ij})\,I\Big].

Newton's method on the manifold (the tangent system solved in least squares, which ignores the
directions of rotations, then the projective retraction) converges quadratically to a critical
configuration from the end state of a run. Rotations of :math:`\mathbb R^d` leave ``E``
invariant: a critical configuration has at least as many zero Hessian eigenvalues as the
dimension of its orbit, computed independently from the tangent vectors :math:`A x_i`,
:math:`A \in \mathfrak{so}(d)`. The index reported is the number of directions the dynamics
leaves by (positive eigenvalues of :math:`c\,\mathrm{Hess}\,E`); a configuration is a strict
local optimum of the dynamics' energy when that index is 0 and the only zero modes are the
rotations'.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, replace

import numpy as np

from .checks import check_int, check_points, check_real
from .models import SelfAttention
from .spectra import zonal_polynomial

#: Hessian eigenvalues below this fraction of the largest are zero (rotations, degeneracy).
ZERO_EIGENVALUE = 1e-8


@dataclass(frozen=True)
class CriticalConfiguration:
    """A critical configuration of the energy and its second-order character.

    ``eigenvalues`` are those of :math:`c\\,\\mathrm{Hess}\\,E` (ascending); ``index`` counts the
    positive ones (directions the dynamics leaves by), ``zero_modes`` the zero ones and
    ``rotation_modes`` the dimension of the configuration's orbit under rotations.
    ``start_gradient_norm`` is the gradient at the start (how far from critical it was, in the
    units of ``gradient_norm``) and ``displacement`` the largest distance a token moved: a start
    far from critical may lead Newton to another critical configuration than the one a run was near.
    """

    x: np.ndarray
    energy: float
    gradient_norm: float
    iterations: int
    eigenvalues: np.ndarray
    index: int
    zero_modes: int
    rotation_modes: int
    start_gradient_norm: float = np.nan
    displacement: float = np.nan

    @property
    def strict_optimum(self) -> bool:
        """No direction to leave by, and no flat direction but the rotations."""
        return self.index == 0 and self.zero_modes == self.rotation_modes

    @property
    def strict_saddle(self) -> bool:
        """At least one direction the dynamics leaves by."""
        return self.index > 0


def _potential_derivatives(model) -> tuple:
    """``(W', W'')`` of the model's zonal energy (the energy itself is the model's) and the sign ``c`` of the dynamics."""
    if not isinstance(model, SelfAttention) or not model.is_zonal or model.external is not None:
        raise ValueError("the energy landscape needs a zonal SelfAttention model (Q = K = I, V = cI, "
                         f"one head, no external field), got {model!r}")
    beta, c = model.beta, model.value_scale
    if beta == 0:
        return (np.ones_like, np.zeros_like), c
    return (lambda s: np.exp(beta * s), lambda s: beta * np.exp(beta * s)), c


def _tangent_bases(x: np.ndarray) -> np.ndarray:
    """Orthonormal bases of the tangent spaces, shape ``(n, d, d - 1)``."""
    n, d = x.shape
    # The last d - 1 columns of a full QR of x_i complete it to an orthonormal basis.
    q = np.linalg.qr(np.concatenate((x[:, :, None], np.broadcast_to(np.eye(d), (n, d, d))), axis=2),
                     mode="complete")[0]
    return q[:, :, 1:]


def _gradient_hessian(x: np.ndarray, derivatives) -> tuple[np.ndarray, np.ndarray]:
    """Euclidean gradient ``(n, d)`` and Hessian ``(n, d, n, d)`` of the energy."""
    first, second = derivatives
    n, d = x.shape
    s = np.clip(x @ x.T, -1.0, 1.0)
    w1, w2 = first(s), second(s)
    gradient = w1 @ x / n**2
    hessian = np.einsum("ij,ja,ib->iajb", w2, x, x) + np.einsum("ij,ab->iajb", w1, np.eye(d))
    diagonal = np.einsum("il,la,lb->iab", w2, x, x)
    hessian[np.arange(n), :, np.arange(n), :] += diagonal
    return gradient, hessian / n**2


def _riemannian(x: np.ndarray, derivatives) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Riemannian gradient and Hessian in the tangent bases, and the bases."""
    n, d = x.shape
    gradient, hessian = _gradient_hessian(x, derivatives)
    bases = _tangent_bases(x)
    riemannian_gradient = np.einsum("iak,ia->ik", bases, gradient).reshape(-1)
    block = np.einsum("iak,iajb,jbl->ikjl", bases, hessian, bases).reshape(n * (d - 1), n * (d - 1))
    normal = np.einsum("ia,ia->i", x, gradient)
    block -= np.diag(np.repeat(normal, d - 1))
    return riemannian_gradient, 0.5 * (block + block.T), bases


def riemannian_hessian(model, x) -> tuple[np.ndarray, np.ndarray]:
    r"""The Riemannian Hessian of the energy at ``x`` (shape ``(n, d)``) and the tangent bases it is written in.

    Returns the symmetric ``(n(d-1), n(d-1))`` matrix and the bases ``(n, d, d-1)``: coordinate
    ``(i, k)`` is the tangent vector ``bases[i, :, k]`` at token ``i``.
    """
    derivatives, _ = _potential_derivatives(model)
    _, hessian, bases = _riemannian(check_points(x, "x"), derivatives)
    return hessian, bases


def rotation_modes(x: np.ndarray) -> int:
    r"""Dimension of the orbit of ``x`` under rotations: the rank of :math:`\{(A x_i)_i : A \in \mathfrak{so}(d)\}`."""
    x = check_points(x, "x")
    d = x.shape[-1]
    generators = []
    for a in range(d):
        for b in range(a + 1, d):
            generator = np.zeros((d, d))
            generator[a, b], generator[b, a] = 1.0, -1.0
            generators.append((x @ generator.T).reshape(-1))
    values = np.linalg.svd(np.array(generators), compute_uv=False)
    return int(np.sum(values > 1e-8 * values.max()))


def critical_configuration(model, x0, *, tol: float = 1e-12, max_iterations: int = 50) -> CriticalConfiguration:
    r"""Riemannian Newton from ``x0`` (shape ``(n, d)``, e.g. a run's end state) to a critical configuration.

    Stops when the Riemannian gradient's largest component is below ``tol`` times
    :math:`\max|W'|/n` (the scale of one token's gradient).

    Raises
    ------
    RuntimeError
        If the gradient is not below the tolerance after ``max_iterations`` steps.
    """
    derivatives, c = _potential_derivatives(model)
    x = check_points(x0, "x0").copy()
    if x.ndim != 2:
        raise ValueError(f"x0 must be one configuration of shape (n, d), got shape {x.shape}")
    tol = check_real(tol, "tol", minimum=0.0, strictly=True)
    max_iterations = check_int(max_iterations, "max_iterations", minimum=1)
    n, d = x.shape
    start = x.copy()
    scale = float(np.abs(derivatives[0](np.array([-1.0, 1.0]))).max()) / n
    for iteration in range(max_iterations + 1):
        gradient, hessian, bases = _riemannian(x, derivatives)
        size = float(np.abs(gradient).max())
        if iteration == 0:
            start_size = size
        if size <= tol * scale:
            _warn_if_merged(start, x, start_size / scale)
            critical = _characterise(x, float(model.energy(x)), size, iteration, c * hessian)
            return replace(critical, start_gradient_norm=start_size,
                           displacement=float(np.linalg.norm(x - start, axis=1).max()))
        if iteration == max_iterations:
            break
        step = np.linalg.lstsq(hessian, -gradient, rcond=1e-10)[0].reshape(n, d - 1)
        x = x + np.einsum("iak,ik->ia", bases, step)
        x /= np.linalg.norm(x, axis=1, keepdims=True)
    raise RuntimeError(f"Riemannian Newton did not reach a critical configuration in {max_iterations} "
                       f"iterations (gradient {size:.3g}, tolerance {tol * scale:.3g}); start nearer, "
                       "e.g. from a longer run's end state")


#: Tokens closer than this are one point (a cluster) of a critical configuration.
COINCIDENT = 1e-6


def _warn_if_merged(start: np.ndarray, x: np.ndarray, start_gradient: float) -> None:
    """Warn when Newton made tokens coincide that the start held apart: it found a configuration of
    fewer points, and the index it reports counts the directions that split them again."""
    distance = np.linalg.norm(x[:, None, :] - x[None, :, :], axis=-1)
    apart = np.linalg.norm(start[:, None, :] - start[None, :, :], axis=-1) > COINCIDENT
    merged = np.argwhere(np.triu((distance <= COINCIDENT) & apart, k=1))
    if merged.size:
        i, j = merged[0]
        warnings.warn(f"the critical configuration found has coincident tokens ({i} and {j}, and {len(merged) - 1} "
                      f"more pairs) that the start held apart: Newton went to a configuration of fewer points from "
                      f"a start {start_gradient:.3g} (gradient / scale) from critical; start from a later state of "
                      f"the run", RuntimeWarning, stacklevel=3)


def _characterise(x, energy, gradient_norm, iterations, hessian) -> CriticalConfiguration:
    eigenvalues = np.linalg.eigvalsh(hessian)
    zero = ZERO_EIGENVALUE * max(np.abs(eigenvalues).max(), np.finfo(float).tiny)
    return CriticalConfiguration(x, energy, gradient_norm, iterations, eigenvalues, int(np.sum(eigenvalues > zero)),
                                 int(np.sum(np.abs(eigenvalues) <= zero)), rotation_modes(x))


def design_strength(x, *, max_strength: int = 20, tol: float = 1e-10) -> int:
    r"""The largest ``t`` for which the points ``x`` (shape ``(n, d)``) form a spherical ``t``-design.

    ``x`` is a ``t``-design when every polynomial of degree at most ``t`` has the same mean over
    the points as over the sphere, equivalently (the zonal polynomials being positive definite)
    when :math:`\sum_{i,j} G_l(\langle x_i, x_j\rangle) = 0` for ``l = 1..t``, ``G_l`` the
    Gegenbauer polynomial normalized to 1 at 1; "zero" means below ``tol`` times ``n^2``.
    Returns 0 when not even the mean vanishes.
    """
    x = check_points(x, "x")
    max_strength = check_int(max_strength, "max_strength", minimum=1)
    n, d = x.shape
    s = np.clip(x @ x.T, -1.0, 1.0)
    for degree in range(1, max_strength + 1):
        if abs(zonal_polynomial(degree, d, s).sum()) > tol * n * n:
            return degree - 1
    return max_strength
