r"""Orthonormal Gegenbauer polynomials for the law of :math:`u = \langle x, e\rangle` on :math:`S^{d-1}`.

For :math:`x` uniform on :math:`S^{d-1}`, :math:`u = \langle x, e\rangle` has the law

.. math:: \pi_d(u)\,du = \frac{\Gamma(d/2)}{\sqrt\pi\,\Gamma((d-1)/2)}\,(1-u^2)^{(d-3)/2}\,du
   \quad\text{on } [-1, 1],

and a zonal function :math:`f(\langle x, e\rangle)` is a degree-:math:`l` spherical harmonic
exactly when :math:`f` is the Gegenbauer polynomial :math:`C_l^{((d-2)/2)}`. The basis here is
those polynomials orthonormal in :math:`L^2(\pi_d)`, :math:`\hat P_l`, computed by their
three-term recurrence (stable at any ``d``, where :math:`C_l^{((d-2)/2)}(1)` overflows):

.. math:: u\hat P_l = b_{l+1}\hat P_{l+1} + b_l\hat P_{l-1},\qquad
   b_l = \sqrt{\frac{l(l+d-3)}{(2l+d-2)(2l+d-4)}},\qquad \hat P_0 = 1.

Their derivatives are the next dimension's basis: :math:`\hat P_l' = c_l\,\hat Q_{l-1}` with
:math:`\hat Q` orthonormal in :math:`L^2(\pi_{d+2})` (:math:`\pi_{d+2} \propto (1-u^2)\pi_d`) and
:math:`c_l = \sqrt{l(l+d-2)\,d/(d-1)}` (the Sturm-Liouville form of
:math:`-\Delta_S \hat P_l = l(l+d-2)\hat P_l` and :math:`E_{\pi_d}[1-u^2] = (d-1)/d`). The
quadratures are the Gauss rules of :math:`\pi_d` (Gauss-Jacobi with
:math:`\alpha = \beta = (d-3)/2`, :func:`gauss_rule`), weights normalised to one.
"""

from __future__ import annotations

import numpy as np
from scipy.linalg import eigh_tridiagonal
from scipy.special import betainc, betaincinv, gammaln


def orthonormal_gegenbauer(d: int, max_degree: int, u: np.ndarray) -> np.ndarray:
    r""":math:`\hat P_l(u)`, ``l = 0 .. max_degree``, orthonormal in :math:`L^2(\pi_d)`.

    Parameters
    ----------
    d : int
        Ambient dimension, ``>= 3``.
    max_degree : int
        Largest degree.
    u : numpy.ndarray, shape (m,)
        Points of ``[-1, 1]``.

    Returns
    -------
    numpy.ndarray, shape (m, max_degree + 1)
    """
    u = np.asarray(u, dtype=float)
    values = np.empty((u.size, max_degree + 1))
    values[:, 0] = 1.0
    if max_degree == 0:
        return values
    b = recurrence_coefficients(d, max_degree)
    values[:, 1] = u / b[1]
    for l in range(1, max_degree):
        values[:, l + 1] = (u * values[:, l] - b[l] * values[:, l - 1]) / b[l + 1]
    return values


def recurrence_coefficients(d: int, max_degree: int) -> np.ndarray:
    """:math:`b_l`, ``l = 0 .. max_degree`` (``b_0 = 0``), of the orthonormal recurrence in :math:`L^2(\\pi_d)`."""
    l = np.arange(1, max_degree + 1, dtype=float)
    return np.concatenate([[0.0], np.sqrt(l * (l + d - 3) / ((2 * l + d - 2) * (2 * l + d - 4)))])


def derivative_factors(d: int, max_degree: int) -> np.ndarray:
    r""":math:`c_l` of :math:`\hat P_l' = c_l \hat Q_{l-1}`, ``l = 0 .. max_degree`` (``c_0 = 0``)."""
    l = np.arange(max_degree + 1, dtype=float)
    return np.sqrt(l * (l + d - 2) * d / (d - 1))


def gauss_rule(d: int, nodes: int) -> tuple[np.ndarray, np.ndarray]:
    r"""Gauss nodes (ascending) and weights (summing to one) of :math:`\pi_d`: exact to degree ``2 nodes - 1``.

    The nodes are the eigenvalues of the recurrence's Jacobi matrix (Golub-Welsch, scipy's
    ``eigh_tridiagonal``) refined by Newton's method on :math:`\hat P_{nodes}`; the weights are
    Christoffel's, :math:`1/\sum_{l<nodes}\hat P_l(u_k)^2`. The basis is then orthonormal on the
    rule to round-off, where scipy's ``roots_jacobi`` loses digits at a few hundred nodes, which
    the spectral tail would read as unresolved degrees.
    """
    u = eigh_tridiagonal(np.zeros(nodes), recurrence_coefficients(d, nodes - 1)[1:], eigvals_only=True)
    factor = derivative_factors(d, nodes)[-1]
    for _ in range(NEWTON_STEPS):
        u = u - orthonormal_gegenbauer(d, nodes, u)[:, -1] / (factor * orthonormal_gegenbauer(d + 2, nodes - 1, u)[:, -1])
    weights = 1.0 / np.sum(orthonormal_gegenbauer(d, nodes - 1, u) ** 2, axis=1)
    return u, weights / weights.sum()


#: Newton steps that refine the eigenvalues to the nodes (each doubles the digits; two reach round-off).
NEWTON_STEPS = 2


def log_law_of_u(d: int, u: np.ndarray) -> np.ndarray:
    r""":math:`\log\pi_d(u)` (``-inf`` at :math:`u = \pm 1` for ``d > 3``)."""
    u = np.asarray(u, dtype=float)
    constant = gammaln(0.5 * d) - gammaln(0.5 * (d - 1)) - 0.5 * np.log(np.pi)
    if d == 3:  # uniform on [-1, 1], endpoints included
        return np.full(u.shape, constant)
    with np.errstate(divide="ignore"):
        return constant + 0.5 * (d - 3) * np.log1p(-u * u)


def uniform_cdf(d: int, u: np.ndarray) -> np.ndarray:
    r""":math:`\int_{-1}^u \pi_d`, the law of :math:`u` for uniform points (a regularised incomplete beta function)."""
    half = 0.5 * (d - 1)
    return betainc(half, half, 0.5 * (1.0 + np.asarray(u, dtype=float)))


def mass_profile(coefficients: np.ndarray, d: int, u: np.ndarray) -> np.ndarray:
    r""":math:`F(u) = \int_{-1}^u \tilde f\,\pi_d` of :math:`\tilde f = \sum_l a_l\hat P_l`, exactly.

    :math:`\int_{-1}^u \hat P_l\,\pi_d = -(1-u^2)\pi_d(u)\,c_l\hat Q_{l-1}(u)/(l(l+d-2))` for
    ``l >= 1`` (the Sturm-Liouville form of the basis), and the uniform law's distribution
    function (:func:`uniform_cdf`) for ``l = 0``.

    Parameters
    ----------
    coefficients : numpy.ndarray, shape (L + 1,)
        :math:`a_l`.
    d : int
        The dimension.
    u : numpy.ndarray
        Points of ``[-1, 1]``.

    Returns
    -------
    numpy.ndarray
    """
    u = np.asarray(u, dtype=float)
    top = coefficients.size - 1
    degrees = np.arange(1, top + 1)
    below = orthonormal_gegenbauer(d + 2, top - 1, u.ravel()) @ (
        coefficients[1:] * derivative_factors(d, top)[1:] / (degrees * (degrees + d - 2)))
    flat = u.ravel()
    profile = coefficients[0] * uniform_cdf(d, flat) - (1.0 - flat * flat) * np.exp(log_law_of_u(d, flat)) * below
    return profile.reshape(u.shape)


def sphere_product_rule(d: int, nodes: int) -> tuple[np.ndarray, np.ndarray]:
    r"""A product Gauss rule of :math:`S^{d-1}` (uniform probability measure): points ``(N, d)`` and weights.

    Hyperspherical coordinates, one at a time: :math:`x = (\sqrt{1-u^2}\,y, u)` with :math:`u` on
    the Gauss rule of :math:`\pi_d` (``nodes`` points) and :math:`y` on the rule of
    :math:`S^{d-2}`, down to :math:`2\,\mathrm{nodes}` equally spaced angles on the circle.
    Exact for polynomials of degree ``2 nodes - 1``; ``N = 2 nodes^{d-1}``.
    """
    if d == 2:
        angles = np.pi * np.arange(2 * nodes) / nodes
        return np.column_stack([np.cos(angles), np.sin(angles)]), np.full(2 * nodes, 0.5 / nodes)
    u, w = gauss_rule(d, nodes)
    inner, inner_weights = sphere_product_rule(d - 1, nodes)
    radius = np.sqrt(1.0 - u * u)
    points = np.concatenate([(radius[:, None, None] * inner[None]).reshape(-1, d - 1),
                             np.repeat(u, inner.shape[0])[:, None]], axis=1)
    return points, (w[:, None] * inner_weights[None]).ravel()


def law_cells(d: int, nodes: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """The edges in :math:`u` of cells around Gauss ``nodes`` of :math:`\\pi_d` whose uniform mass is each node's weight."""
    half = 0.5 * (d - 1)
    cumulative = np.clip(np.concatenate([[0.0], np.cumsum(weights)]), 0.0, 1.0)
    return 2.0 * betaincinv(half, half, cumulative) - 1.0


def cell_masses(edges: np.ndarray, u: np.ndarray, masses: np.ndarray) -> np.ndarray:
    """The masses of atoms at ``u`` summed per cell of ``edges``."""
    cell = np.clip(np.searchsorted(edges, u, side="right") - 1, 0, edges.size - 2)
    return np.bincount(cell, weights=masses, minlength=edges.size - 1)
