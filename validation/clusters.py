r"""Cluster statistics and the order parameter, from particle or PDE datasets.

A cluster of particles is a group linked by gaps smaller than ``separation`` (single
linkage, geodesic distance); a cluster of a density is a connected region where it
exceeds ``level`` times the uniform density; a dataset of the mass-coordinate solvers
records its own clusters (``cluster_count``). :func:`merge_times` lists when the count falls,
:func:`settling_time` dates the last fall to a given count. The order parameter is
:math:`|\int x\, d\mu|` (1 for a single Dirac mass, 0 for the uniform measure).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import xarray as xr
from scipy import ndimage
from scipy.cluster.hierarchy import fcluster, linkage
from scipy.special import roots_legendre

from meanfield.records import CIRCLE
from meanfield.sphere import circle_angles, circle_points, normalize, sphere_points

from .measures import measure_geometry, is_particles

#: Single linkage needs all pairwise distances: beyond this many particles on S^2 it is refused.
MAX_LINKAGE_PARTICLES = 5000


@dataclass(frozen=True)
class ClusterSummary:
    """Clusters at one time, heaviest first (what :func:`cluster_statistics` returns).

    Parameters
    ----------
    masses : numpy.ndarray, shape (k,)
        The clusters' masses, summing to at most one (mass outside every cluster is left out).
    positions : numpy.ndarray, shape (k, d)
        Their mean positions, on the circle or the sphere.
    """

    masses: np.ndarray
    positions: np.ndarray

    @property
    def count(self) -> int:
        return int(self.masses.size)


def cluster_statistics(ds: xr.Dataset, time_index: int = -1, *, separation: float = 0.2,
                       level: float = 2.0) -> ClusterSummary:
    r"""Number, masses and positions of the clusters of a particle or PDE dataset at one output.

    Parameters
    ----------
    ds : xarray.Dataset
        Particles (``x``) or a grid density (``rho``) on the circle or :math:`S^2`.
    time_index : int
        Which output (default: the last).
    separation : float
        Particles: tokens closer than this (in radians of arc) belong to one cluster.
    level : float
        Densities: a cluster is a connected region where :math:`\rho` exceeds ``level``
        times the uniform density.

    Returns
    -------
    ClusterSummary
        Masses and mean positions of the clusters, heaviest first (``count`` their number).
    """
    geometry = measure_geometry(ds, "ds")
    if is_particles(ds):
        x = ds["x"].values[time_index]
        labels = _circle_particle_labels(x, separation) if geometry == CIRCLE else _sphere_particle_labels(x, separation)
        weights = np.full(x.shape[0], 1.0 / x.shape[0])
        return _summarize(x, weights, labels)
    rho = ds["rho"].values[time_index]
    if geometry == CIRCLE:
        theta = ds["theta"].values
        width = 2 * np.pi / theta.size
        labels = _periodic_labels(rho > level / (2 * np.pi), axis_wraps=(True,))
        return _summarize(circle_points(theta), rho * width, labels)
    colatitude, longitude = ds["colatitude"].values, ds["longitude"].values
    labels = _periodic_labels(rho > level / (4 * np.pi), axis_wraps=(False, True))
    area = _sphere_cell_areas(colatitude, longitude)
    points = sphere_points(colatitude[:, None], longitude[None, :])
    return _summarize(points.reshape(-1, 3), (rho * area).ravel(), labels.ravel())


@dataclass(frozen=True)
class Merge:
    """Clusters merged between two consecutive outputs (what :func:`merge_times` returns).

    Parameters
    ----------
    start, end : float
        The output times between which the count fell.
    before, after : int
        The cluster counts at ``start`` and at ``end``.
    """

    start: float
    end: float
    before: int
    after: int


def merge_times(ds: xr.Dataset, **rule) -> list[Merge]:
    """The merges of a run: each pair of consecutive outputs between which the cluster count falls.

    The count is ``ds.cluster_count`` where the dataset records it (the Lagrangian solvers),
    otherwise :func:`cluster_statistics` at each output (``rule``: its ``separation`` and
    ``level``). A merge is known to the output spacing: refine the output times around it to
    pin it down.

    Parameters
    ----------
    ds : xarray.Dataset
        A particle or PDE run on the circle or :math:`S^2`.
    **rule
        ``separation`` and ``level`` of :func:`cluster_statistics`.

    Returns
    -------
    list of Merge
        One per fall of the count, in time order.
    """
    if "cluster_count" in ds:
        counts = ds.cluster_count.values
    else:
        counts = np.array([cluster_statistics(ds, index, **rule).count for index in range(ds.sizes["time"])])
    times = ds.time.values
    return [Merge(float(times[i]), float(times[i + 1]), int(counts[i]), int(counts[i + 1]))
            for i in range(times.size - 1) if counts[i + 1] < counts[i]]


def circle_cluster_counts(x: np.ndarray, *, separation: float = 0.2) -> np.ndarray:
    """Cluster counts of tokens on the circle, one per system, by :func:`cluster_statistics`' gap rule.

    Parameters
    ----------
    x : numpy.ndarray, shape (..., n, 2)
        Tokens on the unit circle; leading axes are systems.
    separation : float
        Tokens closer than this (radians) belong to one cluster.

    Returns
    -------
    numpy.ndarray of int, shape (...)
        The number of clusters of each system.

    Examples
    --------
    >>> from meanfield import circle_points
    >>> circle_cluster_counts(circle_points(np.array([0.0, 0.01, 2.0, 2.05, 4.0])))
    array(3)
    """
    x = np.asarray(x, dtype=float)
    flat = x.reshape(-1, *x.shape[-2:])
    counts = np.array([_circle_particle_labels(system, separation).max() + 1 for system in flat])
    return counts.reshape(x.shape[:-2])


def settling_time(times, counts, final: int) -> float:
    """The first output from which the cluster count stays at most ``final``, after having been above it.

    How a merge is dated in a run whose count also fluctuates on the way (clusters forming one
    after the other, a stray token): the last fall below ``final + 1``.

    Parameters
    ----------
    times : array_like, shape (k,)
        Output times.
    counts : array_like of int, shape (k,)
        The cluster count at each.
    final : int
        The count the run settles at.

    Returns
    -------
    float
        That output time; NaN if the count never exceeded ``final`` or is above it at the end.

    Examples
    --------
    >>> settling_time([0, 1, 2, 3, 4, 5], [1, 3, 2, 3, 2, 2], final=2)
    4.0
    """
    times, counts = np.asarray(times, dtype=float), np.asarray(counts)
    above = np.flatnonzero(counts > final)
    if above.size == 0 or above[-1] + 1 == counts.size:
        return float("nan")
    return float(times[above[-1] + 1])


def order_parameter(ds: xr.Dataset) -> xr.DataArray:
    r"""The order parameter :math:`|\int x\, d\mu_t|` at every output time.

    1 when all the mass sits at one point, near 0 for a uniform (or antipodally balanced)
    measure.

    Parameters
    ----------
    ds : xarray.Dataset
        Particles (``x``, any batch axes kept) or a grid density (``rho``) on the circle or
        :math:`S^2`.

    Returns
    -------
    xarray.DataArray
        The order parameter along ``time`` (and the batch axes of particles). On the circle the
        cell averages are corrected for averaging, so the value is that of the smooth density
        behind them (exact when it is band-limited).
    """
    geometry = measure_geometry(ds, "ds")
    if is_particles(ds):
        values = np.linalg.norm(ds["x"].values.mean(axis=-2), axis=-1)
    elif geometry == CIRCLE:
        theta = ds["theta"].values
        width = 2 * np.pi / theta.size
        # Cell averages of e^{i theta} are sinc(h/2) e^{i theta_j}: dividing by it recovers the first
        # Fourier moment of the smooth density behind the averages (exact when it is band-limited).
        first_moment = ds["rho"].values @ np.exp(1j * theta) * width / np.sinc(width / (2 * np.pi))
        values = np.abs(first_moment)
    else:
        colatitude, longitude = ds["colatitude"].values, ds["longitude"].values
        weights = ds["rho"].values * _sphere_cell_areas(colatitude, longitude)
        points = sphere_points(colatitude[:, None], longitude[None, :])
        values = np.linalg.norm(np.einsum("tij,ijc->tc", weights, points), axis=-1)
    return xr.DataArray(values, coords={"time": ds["time"].values}, dims=("time",), name="order_parameter")


def _circle_particle_labels(x: np.ndarray, separation: float) -> np.ndarray:
    angles = circle_angles(x)
    order = np.argsort(angles)
    sorted_angles = angles[order]
    gaps = np.diff(np.concatenate([sorted_angles, [sorted_angles[0] + 2 * np.pi]]))
    breaks = gaps > separation
    if not breaks.any():
        return np.zeros(x.shape[0], int)
    # Start numbering after the last break so the cluster wrapping through angle 0 stays whole.
    start = (np.flatnonzero(breaks)[-1] + 1) % x.shape[0]
    rolled = np.roll(breaks, -start)
    group = np.concatenate([[0], np.cumsum(rolled[:-1])])
    labels = np.empty(x.shape[0], int)
    labels[np.roll(order, -start)] = group
    return labels


def _sphere_particle_labels(x: np.ndarray, separation: float) -> np.ndarray:
    if x.shape[0] > MAX_LINKAGE_PARTICLES:
        raise ValueError(f"cluster_statistics links at most {MAX_LINKAGE_PARTICLES} particles on S^2 "
                         f"(all pairs), got n={x.shape[0]}: pass a subsample, e.g. ds.isel(particle=slice(0, 5000))")
    if x.shape[0] == 1:
        return np.zeros(1, int)
    chord = 2 * np.sin(separation / 2)
    return fcluster(linkage(x, method="single"), t=chord, criterion="distance") - 1


def _periodic_labels(mask: np.ndarray, axis_wraps: tuple[bool, ...]) -> np.ndarray:
    """Connected components of ``mask`` (-1 outside), merging components across periodic edges."""
    labels, count = ndimage.label(mask)
    parent = np.arange(count + 1)

    def find(a):
        while parent[a] != a:
            a = parent[a]
        return a

    for axis, wraps in enumerate(axis_wraps):
        if wraps:
            first = np.take(labels, 0, axis=axis).ravel()
            last = np.take(labels, -1, axis=axis).ravel()
            for a, b in zip(first, last):
                if a and b:
                    parent[find(a)] = find(b)
    roots = np.array([find(a) for a in range(count + 1)])
    return np.where(labels > 0, roots[labels], -1)


def _sphere_cell_areas(colatitude: np.ndarray, longitude: np.ndarray) -> np.ndarray:
    """Quadrature areas of the solver's Gauss grid (Gauss-Legendre in cos(colatitude))."""
    nodes, weights = roots_legendre(colatitude.size)
    order = np.argsort(-nodes)  # north to south, as cos(colatitude) is stored
    return weights[order][:, None] * (2 * np.pi / longitude.size) * np.ones(longitude.size)


def _summarize(points: np.ndarray, weights: np.ndarray, labels: np.ndarray) -> ClusterSummary:
    masses, positions = [], []
    for label in np.unique(labels[labels >= 0]):
        members = labels == label
        masses.append(weights[members].sum())
        positions.append(normalize(weights[members] @ points[members]))
    order = np.argsort(masses)[::-1]
    d = points.shape[-1]
    return ClusterSummary(np.array(masses)[order] if masses else np.zeros(0),
                          np.array(positions)[order] if positions else np.zeros((0, d)))
