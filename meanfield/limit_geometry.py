r"""The limit shapes of pure self-attention in :math:`\mathbb{R}^d`, as measurements of a configuration.

Geshkovski, Letrouit, Polyanskiy and Rigollet ("The emergence of clusters in self-attention
dynamics") describe where the rescaled tokens :math:`z_i(t) = e^{-tV}x_i(t)` of
:class:`meanfield.PureAttention` go as :math:`t\to\infty`; each function here measures one of
those statements on tokens ``z`` of shape ``(n, d)``:

* :func:`hull_vertices`, :func:`vertex_distance`, :func:`hull_boundary_distance`: ``V = I``,
  :math:`Q^TK > 0` (Thm 3.1): every token tends to 0 or to the boundary of a convex polytope,
  for almost every start to one of its vertices ("leaders").
* :func:`leading_coordinates`, :func:`levels`: a good triple (Thm 4.1): the coordinate
  :math:`\varphi_1^*(z_i)` along the eigenvector of the simple positive leading eigenvalue
  tends to one of at most three values: the tokens approach at most three parallel hyperplanes.
* :func:`paranormal_split`: ``V`` equal to :math:`\lambda I` on a subspace :math:`F` and of smaller
  spectral radius on an invariant complement :math:`G` (Thm 5.1): a polytope in :math:`F` times :math:`G`.
* :func:`boolean_limit`: ``d = 1`` (Thm 2.1): the attention matrix tends to a Boolean matrix
  of rank 1 or 2 (one column of ones per leader), with at most one row of arbitrary weights.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.linalg import null_space, orth
from scipy.spatial import ConvexHull

from .checks import check_real


def _tokens(z: object, name: str = "z") -> np.ndarray:
    array = np.asarray(z, dtype=float)
    if array.ndim != 2 or array.shape[0] < 1 or array.shape[1] < 1:
        raise ValueError(f"{name} must be one configuration of shape (n, d), got shape {array.shape}")
    if not np.all(np.isfinite(array)):
        raise ValueError(f"{name} contains NaN or infinite values")
    return array


def hull_vertices(z: object) -> np.ndarray:
    r"""Indices of the tokens at the vertices of :math:`\mathrm{conv}\{z_i\}` (:class:`scipy.spatial.ConvexHull`).

    ``d = 1``: the smallest and the largest token. Tokens that coincide (to round-off) are
    one vertex; the index of one of them is returned.
    """
    z = _tokens(z)
    if z.shape[1] == 1:
        return np.unique([int(np.argmin(z[:, 0])), int(np.argmax(z[:, 0]))])
    return np.sort(ConvexHull(z).vertices)


def cluster_centres(z: object, tolerance: float) -> np.ndarray:
    """Means of the groups of tokens chained at distances ``<= tolerance`` (single linkage), shape ``(k, d)``."""
    from scipy.cluster.hierarchy import fcluster, linkage  # here: slow to import, and only this function needs it

    z = _tokens(z)
    if z.shape[0] == 1:
        return z.copy()
    labels = fcluster(linkage(z, "single"), t=tolerance, criterion="distance")
    return np.array([z[labels == label].mean(axis=0) for label in np.unique(labels)])


def polytope_vertices(z: object, tolerance: float) -> np.ndarray:
    """The vertices of the hull of the tokens' clusters (:func:`cluster_centres` at ``tolerance``), shape ``(k, d)``.

    Their number is the number of leaders of Thm 3.1, which :func:`hull_vertices` of the raw
    tokens overcounts when several tokens of one cluster sit at a vertex to round-off.
    """
    centres = cluster_centres(z, tolerance)
    return centres[hull_vertices(centres)] if centres.shape[0] > centres.shape[1] else centres


def vertex_distance(z: object, vertices: object | None = None) -> np.ndarray:
    """Distance of each token to the nearest of ``vertices`` (points ``(k, d)``; default: the tokens' own hull vertices)."""
    z = _tokens(z)
    corners = z[hull_vertices(z)] if vertices is None else _tokens(vertices, "vertices")
    return np.min(np.linalg.norm(z[:, None, :] - corners[None, :, :], axis=-1), axis=1)


def hull_boundary_distance(z: object, reference: object | None = None) -> np.ndarray:
    r"""Signed distance of each token to the boundary of :math:`\mathrm{conv}(\text{reference})` (default: the tokens' own hull).

    Positive inside (exact: the smallest distance to a facet's hyperplane), zero on the
    boundary, negative outside (minus the largest violated facet distance, a lower bound of
    the distance). Prop. C.2 of the paper (the hull shrinks) says that no token of a later
    time is outside the hull of an earlier one.
    """
    z = _tokens(z)
    points = z if reference is None else _tokens(reference, "reference")
    if z.shape[1] == 1:
        return np.minimum(z[:, 0] - points.min(), points.max() - z[:, 0])
    equations = ConvexHull(points).equations  # unit normals n, offsets b: n . z + b <= 0 inside
    return -(z @ equations[:, :-1].T + equations[:, -1]).max(axis=1)


def leading_eigenpair(value: object) -> tuple[float, np.ndarray, np.ndarray]:
    r"""``(lambda_1, phi_1, dual)`` of ``V``: the eigenvalue of largest modulus, a unit eigenvector and its dual.

    ``dual`` is the left eigenvector scaled so that :math:`\langle \mathrm{dual}, \varphi_1\rangle = 1`:
    :math:`\varphi_1^*(z) = \langle \mathrm{dual}, z\rangle` is the coordinate of ``z`` along
    :math:`\varphi_1` in an eigenbasis (for a symmetric ``V``, :math:`\langle z, \varphi_1\rangle`).
    Raises when that eigenvalue is not real, positive and simple (no good triple).
    """
    v = np.atleast_2d(np.asarray(value, dtype=float))
    eigenvalues, right = np.linalg.eig(v)
    order = np.argsort(-np.abs(eigenvalues))
    lead = eigenvalues[order[0]]
    simple = v.shape[0] == 1 or abs(eigenvalues[order[1]]) < abs(lead) * (1 - 1e-9)
    if abs(lead.imag) > 1e-12 * abs(lead) or lead.real <= 0 or not simple:
        raise ValueError(f"value: the eigenvalue of largest modulus must be real, positive and simple (a good "
                         f"triple), got eigenvalues {np.round(eigenvalues, 6).tolist()}")
    phi = np.real(right[:, order[0]])
    phi /= np.linalg.norm(phi)
    if phi[np.argmax(np.abs(phi))] < 0:
        phi = -phi
    left_values, left = np.linalg.eig(v.T)
    dual = np.real(left[:, np.argmin(np.abs(left_values - lead))])
    return float(lead.real), phi, dual / (dual @ phi)


def leading_coordinates(z: object, value: object) -> np.ndarray:
    r""":math:`\varphi_1^*(z_i)`, the coordinate of each token along the leading eigenvector of ``value`` (:func:`leading_eigenpair`)."""
    z = _tokens(z)
    return z @ leading_eigenpair(value)[2]


def levels(values: object, tolerance: float) -> np.ndarray:
    """The distinct levels of ``values`` (1-d): sorted values grouped where consecutive ones differ by at most ``tolerance``.

    Returns each group's mean; Thm 4.1 says that at most three remain for :func:`leading_coordinates`.
    """
    values = np.asarray(values, dtype=float).ravel()
    if not np.all(np.isfinite(values)):
        raise ValueError("values contains NaN or infinite entries: their levels are undefined")
    check_real(tolerance, "tolerance", minimum=0.0)
    sorted_values = np.sort(values)
    breaks = np.flatnonzero(np.diff(sorted_values) > tolerance) + 1
    return np.array([group.mean() for group in np.split(sorted_values, breaks)])


@dataclass(frozen=True)
class ParanormalSplit:
    r"""``V`` as :math:`\lambda I` on ``leading`` (an orthonormal basis of :math:`F`, ``(d, k)``) plus
    ``rest`` (a basis of the invariant complement :math:`G`, ``(d, d - k)``), and the tokens'
    coordinates in them: ``polytope`` ``(n, k)``, ``subspace`` ``(n, d - k)``."""

    eigenvalue: float
    leading: np.ndarray
    rest: np.ndarray
    polytope: np.ndarray
    subspace: np.ndarray


def paranormal_split(z: object, value: object, *, tolerance: float = 1e-9) -> ParanormalSplit:
    r"""Split tokens into their coordinates in :math:`F` (where ``V`` is :math:`\lambda I`) and in :math:`G` (Thm 5.1).

    :math:`\lambda` is the eigenvalue of largest real part; paranormal means that
    :math:`V - \lambda I` vanishes on :math:`F = \ker(V - \lambda I)` and is invertible on an
    invariant complement, which is then :math:`G = \mathrm{range}(V - \lambda I)`; the spectral
    radius of ``V`` on :math:`G` must be below :math:`\lambda`. The coordinates are those of the
    decomposition :math:`z = F a + G b`, so that ``polytope`` tends to the boundary of a polytope
    (or 0) and ``subspace`` is free.
    """
    z = _tokens(z)
    v = np.atleast_2d(np.asarray(value, dtype=float))
    eigenvalues = np.linalg.eigvals(v)
    lead = eigenvalues[np.argmax(eigenvalues.real)]
    shifted = v - lead.real * np.eye(v.shape[0])
    leading, rest = null_space(shifted, rcond=tolerance), orth(shifted, rcond=tolerance)
    basis = np.hstack([leading, rest])
    others = np.delete(eigenvalues, np.argsort(np.abs(eigenvalues - lead))[:leading.shape[1]])
    if (lead.real <= 0 or abs(lead.imag) > tolerance or np.linalg.matrix_rank(basis, tol=tolerance) < v.shape[0]
            or np.max(np.abs(others), initial=0.0) >= lead.real):
        raise ValueError(f"value: not paranormal (V = lambda I on ker(V - lambda I), lambda > 0 the leading "
                         f"eigenvalue, smaller spectral radius on an invariant complement), eigenvalues "
                         f"{np.round(eigenvalues, 6).tolist()}")
    coordinates = np.linalg.solve(basis, z.T).T
    k = leading.shape[1]
    return ParanormalSplit(float(lead.real), leading, rest, coordinates[:, :k], coordinates[:, k:])


@dataclass(frozen=True)
class BooleanLimit:
    """How far an attention matrix is from the Boolean limit of Thm 2.1.

    ``distance``: the largest distance of an entry to 0 or 1 over every row but the most
    mixed one (the theorem's row of arbitrary weights); ``rank``: the numerical rank of the
    rounded matrix; ``leaders``: the columns that hold the ones; ``mixed_row``: that row.
    """

    distance: float
    rank: int
    leaders: tuple[int, ...]
    mixed_row: int


def boolean_limit(attention: object) -> BooleanLimit:
    """Measure one attention matrix ``(n, n)`` against the Boolean, rank-1-or-2 limit of ``d = 1`` (Thm 2.1).

    A dataset's matrix of one head, ``(1, n, n)`` (``ds.attention.values[-1]``), is taken as it is.
    """
    p = np.asarray(attention, dtype=float)
    if p.ndim == 3 and p.shape[0] == 1:  # the head axis of a one-head dataset
        p = p[0]
    if p.ndim != 2 or p.shape[0] != p.shape[1]:
        hint = "; pass one head, attention[h]" if p.ndim == 3 and p.shape[1] == p.shape[2] else ""
        raise ValueError(f"attention must be one square matrix (n, n), got shape {p.shape}{hint}")
    if not np.all(np.isfinite(p)):
        raise ValueError("attention contains NaN or infinite entries (a run that overflowed?)")
    per_row = np.minimum(p, 1.0 - p).max(axis=1)
    mixed = int(np.argmax(per_row))
    rest = np.delete(per_row, mixed)
    rounded = np.rint(np.delete(p, mixed, axis=0))
    leaders = tuple(int(j) for j in np.flatnonzero(rounded.sum(axis=0) > 0))
    return BooleanLimit(float(rest.max(initial=0.0)), int(np.linalg.matrix_rank(rounded)), leaders, mixed)
