"""Geometry of the unit sphere ``S^{d-1}`` in ``R^d``."""

from __future__ import annotations

import numpy as np
from scipy.special import gammaln


def sphere_area(d: int) -> float:
    r"""Surface measure of the unit sphere :math:`S^{d-1} \subset \mathbb{R}^d`.

    .. math:: |S^{d-1}| = \frac{2 \pi^{d/2}}{\Gamma(d/2)}

    so ``sphere_area(2) == 2 pi`` and ``sphere_area(3) == 4 pi``.
    """
    return float(2.0 * np.exp(0.5 * d * np.log(np.pi) - gammaln(0.5 * d)))


def project_tangent(x: np.ndarray, v: np.ndarray) -> np.ndarray:
    r"""Tangential part :math:`P_x v = v - \langle x, v \rangle x` (last axis is the component)."""
    return v - np.sum(x * v, axis=-1, keepdims=True) * x


def normalize(x: np.ndarray) -> np.ndarray:
    """Radial projection of nonzero vectors onto the unit sphere."""
    return x / np.linalg.norm(x, axis=-1, keepdims=True)


def circle_points(theta: np.ndarray) -> np.ndarray:
    r"""Points :math:`(\cos\theta, \sin\theta)` of the circle, shape ``theta.shape + (2,)``."""
    theta = np.asarray(theta, dtype=float)
    return np.stack([np.cos(theta), np.sin(theta)], axis=-1)


def circle_angles(x: np.ndarray) -> np.ndarray:
    """Angles in ``[0, 2 pi)`` of points ``(..., 2)`` of the circle."""
    return np.mod(np.arctan2(x[..., 1], x[..., 0]), 2.0 * np.pi)


def sphere_points(colatitude: np.ndarray, longitude: np.ndarray) -> np.ndarray:
    """Points of ``S^2`` from colatitude ``t`` in ``[0, pi]`` and longitude ``p``.

    ``x = (sin t cos p, sin t sin p, cos t)``; the result has the broadcast shape plus ``(3,)``.
    """
    t, p = np.broadcast_arrays(np.asarray(colatitude, float), np.asarray(longitude, float))
    return np.stack([np.sin(t) * np.cos(p), np.sin(t) * np.sin(p), np.cos(t)], axis=-1)
