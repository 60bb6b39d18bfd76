"""Geometry of the unit sphere ``S^{d-1}`` in ``R^d``."""

from __future__ import annotations

import numpy as np
from scipy.special import gammaln


def sphere_area(d: int) -> float:
    r"""Surface measure of the unit sphere :math:`S^{d-1} \subset \mathbb{R}^d`.

    .. math:: |S^{d-1}| = \frac{2 \pi^{d/2}}{\Gamma(d/2)}

    so ``sphere_area(2) == 2 pi`` and ``sphere_area(3) == 4 pi``.

    Parameters
    ----------
    d : int
        Dimension of the ambient space (the sphere has dimension ``d - 1``).

    Returns
    -------
    float
        The area :math:`|S^{d-1}|`.
    """
    return float(np.exp(log_sphere_area(d)))


def log_sphere_area(d: int) -> float:
    r""":math:`\log|S^{d-1}|`, finite in every dimension (the area itself underflows past ``d = 340``).

    Parameters
    ----------
    d : int
        Dimension of the ambient space.

    Returns
    -------
    float
    """
    return float(np.log(2.0) + 0.5 * d * np.log(np.pi) - gammaln(0.5 * d))


def project_tangent(x: np.ndarray, v: np.ndarray) -> np.ndarray:
    r"""Tangential part :math:`P_x v = v - \langle x, v \rangle x` of ``v`` at ``x``.

    Parameters
    ----------
    x : numpy.ndarray, shape (..., d)
        Points of the unit sphere (the last axis is the component).
    v : numpy.ndarray, shape (..., d)
        Vectors at those points (broadcast against ``x``).

    Returns
    -------
    numpy.ndarray, shape (..., d)
        The projection of ``v`` onto the tangent space of the sphere at ``x``.
    """
    return v - np.sum(x * v, axis=-1, keepdims=True) * x


#: Up to this many components, norms are summed component by component (module function ``row_norms``).
SHORT_VECTORS = 4


def squared_norms(x: np.ndarray) -> np.ndarray:
    """:math:`|x|^2` over the last axis, as ``numpy.linalg.norm`` sums it (its square root is that norm, bit for bit).

    numpy reduces a short last axis element by element, which dominates a step of the circle's
    particle engines; up to :data:`SHORT_VECTORS` components the squares are added column by
    column instead, in numpy's order (the same sums).
    """
    if x.shape[-1] > SHORT_VECTORS:
        return np.add.reduce(x * x, axis=-1)
    squares = x[..., 0] * x[..., 0]
    for component in range(1, x.shape[-1]):
        squares += x[..., component] * x[..., component]
    return squares


def row_norms(x: np.ndarray, keepdims: bool = False) -> np.ndarray:
    """The Euclidean norms over the last axis: ``numpy.linalg.norm(x, axis=-1)``, bit for bit (:func:`squared_norms`)."""
    norms = np.sqrt(squared_norms(x))
    return norms[..., None] if keepdims else norms


def normalize(x: np.ndarray) -> np.ndarray:
    """Radial projection of nonzero vectors onto the unit sphere.

    Vectors beyond about 1e154 (a step of a huge velocity) have squares that overflow: their norm
    is then taken of the vector scaled by its largest entry, so that they land on the sphere
    instead of at 0; an infinite entry gives NaN, which the run reports. (A zero vector gives
    NaN too: it has no direction.)
    """
    norms = row_norms(x, keepdims=True)
    if norms.max(initial=0.0) == np.inf:
        largest = np.abs(x).max(axis=-1, keepdims=True)
        with np.errstate(divide="ignore", invalid="ignore"):
            norms = largest * np.linalg.norm(x / largest, axis=-1, keepdims=True)
    return x / norms


def periodic_angles(n: int) -> np.ndarray:
    r"""The ``n`` equispaced angles :math:`2\pi j/n`, :math:`j = 0 .. n-1`, of a periodic grid on the circle."""
    return np.arange(n) * (2 * np.pi / n)


def circle_points(theta: np.ndarray) -> np.ndarray:
    r"""Points :math:`(\cos\theta, \sin\theta)` of the unit circle.

    Parameters
    ----------
    theta : array_like
        Angles in radians (any shape).

    Returns
    -------
    numpy.ndarray, shape ``theta.shape + (2,)``
        The points; :func:`circle_angles` is the inverse.
    """
    theta = np.asarray(theta, dtype=float)
    return np.stack([np.cos(theta), np.sin(theta)], axis=-1)


def circle_angles(x: np.ndarray) -> np.ndarray:
    r"""Angles in ``[0, 2 pi)`` of points of the circle.

    Parameters
    ----------
    x : numpy.ndarray, shape (..., 2)
        Points of the plane (only their direction matters).

    Returns
    -------
    numpy.ndarray, shape ``x.shape[:-1]``
        The angles :math:`\theta` with :math:`x = |x| (\cos\theta, \sin\theta)`, in ``[0, 2 pi)``.
    """
    return np.mod(np.arctan2(x[..., 1], x[..., 0]), 2.0 * np.pi)


def sphere_points(colatitude: np.ndarray, longitude: np.ndarray) -> np.ndarray:
    r"""Points of :math:`S^2` from colatitude and longitude.

    :math:`x = (\sin t \cos p, \sin t \sin p, \cos t)` for colatitude :math:`t` and
    longitude :math:`p` (the convention of the sphere solver's grid).

    Parameters
    ----------
    colatitude : array_like
        Colatitude :math:`t \in [0, \pi]` in radians (``0`` is the north pole).
    longitude : array_like
        Longitude :math:`p` in radians; broadcast against ``colatitude``.

    Returns
    -------
    numpy.ndarray
        The points, of the broadcast shape plus ``(3,)``.
    """
    t, p = np.broadcast_arrays(np.asarray(colatitude, float), np.asarray(longitude, float))
    return np.stack([np.sin(t) * np.cos(p), np.sin(t) * np.sin(p), np.cos(t)], axis=-1)
