"""Measures read from run datasets: particle clouds or gridded densities, per output time.

A dataset from :func:`meanfield.simulate_particles` carries ``x`` (time, particle,
component); one from a PDE solver carries ``rho`` on its grid. Both say what they are
through :mod:`meanfield.records`. Everything that compares measures goes through here.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np
import xarray as xr

from meanfield.records import (CIRCLE, PARTICLES, PDE, SPHERE, dataset_geometry, dataset_kind, dataset_settings,
                               euclidean_name, geometry_dimension)
from meanfield.engines.series import harmonic_sums
from meanfield.sphere import circle_angles
from solvers.line.lagrangian import label_cdf
from solvers.sphere.gegenbauer import mass_profile
from solvers.sphere.grid import SphereGrid

#: The line: tokens of :class:`meanfield.PureAttention` with ``d = 1``, :class:`solvers.LineFV`'s and
#: :class:`solvers.LineLagrangian`'s measures.
LINE = euclidean_name(1)

#: The geometries on which measures are compared; also ``"S^k"``, ``k >= 3``, through the law of
#: :math:`u = \langle x, e\rangle` (:func:`zonal_cdf`).
GEOMETRIES = (CIRCLE, SPHERE, LINE)


def is_high_sphere(geometry: str) -> bool:
    """Whether ``geometry`` is :math:`S^{d-1}` with ``d >= 4`` (``"S^3"``, ``"S^767"``, ...)."""
    return geometry.startswith("S^") and geometry_dimension(geometry) >= 4


def measure_geometry(ds: xr.Dataset, name: str) -> str:
    """The geometry of a particle or PDE dataset holding one measure per time; errors name ``name``."""
    try:
        kind, geometry = dataset_kind(ds), dataset_geometry(ds)
    except ValueError as error:
        raise ValueError(f"{name}: {error}") from None
    if kind not in (PARTICLES, PDE):
        raise ValueError(f"{name} must be a particle or PDE dataset, got a {kind} dataset")
    if geometry not in GEOMETRIES and not is_high_sphere(geometry):
        raise ValueError(f"{name} must be a dataset on one of {GEOMETRIES} or S^k, got geometry {geometry!r}")
    if kind == PARTICLES and "system" in ds["x"].dims:
        raise ValueError(f"{name} holds a batch of systems: select one with ds.isel(system=k)")
    return geometry


def is_particles(ds: xr.Dataset) -> bool:
    return dataset_kind(ds) == PARTICLES


# ---------------------------------------------------------------------------- circle
def circle_cdf(ds: xr.Dataset, time_index: int, points: np.ndarray, side: str = "right") -> np.ndarray:
    """CDF :math:`F(\\theta) = \\mu([0, \\theta])` at ``points`` in ``[0, 2 pi]``.

    ``side="left"`` gives the left limit :math:`\\mu([0, \\theta))`, which differs only at atoms.
    """
    if is_particles(ds):
        angles = np.sort(circle_angles(ds["x"].values[time_index]))
        return np.searchsorted(angles, points, side=side) / angles.size
    rho = ds["rho"].values[time_index]
    cells = rho.size
    width = 2 * np.pi / cells
    cumulative = np.concatenate([[0.0], np.cumsum(rho) * width])
    index = np.minimum((points // width).astype(int), cells - 1)
    return cumulative[index] + rho[index] * (points - index * width)


def circle_breakpoints(ds: xr.Dataset, time_index: int) -> np.ndarray:
    """Where the CDF is not affine: particle angles or cell boundaries."""
    if is_particles(ds):
        return circle_angles(ds["x"].values[time_index])
    cells = ds["rho"].shape[-1]
    return np.arange(cells + 1) * (2 * np.pi / cells)


# ---------------------------------------------------------------------------- line
def line_cdf(ds: xr.Dataset, time_index: int, points: np.ndarray, side: str = "right") -> np.ndarray:
    """CDF :math:`F(z) = \\mu((-\\infty, z])` at ``points``: of the tokens, of the mass labels of
    :class:`~solvers.LineLagrangian` (``position``), or of the cell masses (each spread evenly
    over its cell; cells centred at ``ds.z``, of equal width).

    ``side="left"`` gives the left limit :math:`\\mu((-\\infty, z))`, which differs only at atoms.
    """
    if is_particles(ds):
        z = np.sort(ds["x"].values[time_index, :, 0])
        return np.searchsorted(z, points, side=side) / z.size
    if "position" in ds:  # mass labels (solvers.LineLagrangian): their measure, exactly
        return label_cdf(ds["position"].values[time_index], points, side)
    rho = ds["rho"].values[time_index]
    faces = line_breakpoints(ds, time_index)
    width = faces[1] - faces[0]
    cumulative = np.concatenate([[0.0], np.cumsum(rho) * width])
    inside = np.clip(points, faces[0], faces[-1])
    index = np.clip(((inside - faces[0]) // width).astype(int), 0, rho.size - 1)
    return cumulative[index] + rho[index] * (inside - faces[index])


def line_breakpoints(ds: xr.Dataset, time_index: int) -> np.ndarray:
    """Where the CDF is not affine: the tokens, the mass labels, or the cell faces."""
    if is_particles(ds):
        return ds["x"].values[time_index, :, 0]
    if "position" in ds:
        return ds["position"].values[time_index]
    centres = ds["z"].values
    half = 0.5 * (centres[1] - centres[0])
    return np.concatenate([centres - half, centres[-1:] + half])


# ---------------------------------------------------------------------------- sphere
def harmonic_coefficients(ds: xr.Dataset, time_index: int, lmax: int) -> tuple[np.ndarray, np.ndarray]:
    r"""Coefficients :math:`\int \overline{Y_{lm}}\, d\mu` for ``0 <= m <= l <= lmax``.

    Returns ``(coefficients, parseval_weight)`` in shtns order (``m`` major). Particles are
    summed exactly, :math:`\mu_{lm} = \frac1n\sum_i \overline{Y_{lm}(x_i)}`; a PDE density is
    analysed on its own grid and truncated.
    """
    if is_particles(ds):
        x = ds["x"].values[time_index]
        sums = harmonic_sums(x, lmax)  # [l, m]
        coefficients = np.concatenate([sums[m:, m] for m in range(lmax + 1)]) / x.shape[0]
    else:
        rho = ds["rho"].values[time_index]
        source_lmax = int(dataset_settings(ds)["lmax"])
        if source_lmax < lmax:
            raise ValueError(f"the PDE dataset has lmax={source_lmax} < {lmax} needed by the distance")
        grid = sphere_grid(source_lmax)
        full = grid.analyse(rho)
        keep = (grid.transform.l <= lmax)
        coefficients = full[keep]
    m_index = np.concatenate([np.full(lmax + 1 - m, m) for m in range(lmax + 1)])
    return coefficients, np.where(m_index == 0, 1.0, 2.0)


@lru_cache(maxsize=8)
def sphere_grid(lmax: int) -> SphereGrid:
    """Transforms are planned once per degree, not once per output time."""
    return SphereGrid(lmax)


def coefficient_degrees(lmax: int) -> np.ndarray:
    """Degree of each coefficient in shtns order."""
    return np.concatenate([np.arange(m, lmax + 1) for m in range(lmax + 1)])


# ---------------------------------------------------------------------------- S^{d-1}: the law of u = <x, e>
def is_zonal(ds: xr.Dataset) -> bool:
    r"""Whether ``ds`` holds zonal measures on :math:`S^{d-1}` as laws of :math:`u` (a zonal solver's run)."""
    return not is_particles(ds) and "u" in ds["rho"].dims


def zonal_cdf(ds: xr.Dataset, time_index: int, points: np.ndarray, side: str = "right") -> np.ndarray:
    r"""The distribution function of :math:`u = \langle x, e\rangle` (``e`` the last axis) at ``points``.

    Of the tokens' last coordinates; of the rings of :class:`~solvers.ZonalRings` (``ring_u``,
    ``ring_mass``) or the atoms of :class:`~solvers.SphereWeightedParticles` (``atom_position``,
    ``atom_mass``); of a Gegenbauer series (``coefficient``), exactly. ``side="left"`` gives the
    left limits, which differ at atoms only.
    """
    if is_particles(ds):
        u = np.sort(ds["x"].values[time_index, :, -1])
        return np.searchsorted(u, points, side=side) / u.size
    rings = _rings(ds, time_index)
    if rings is not None:
        u, mass = rings
        return np.concatenate([[0.0], np.cumsum(mass)])[np.searchsorted(u, points, side=side)]
    d = geometry_dimension(dataset_geometry(ds))
    return mass_profile(ds["coefficient"].values[time_index], d, points)


def zonal_breakpoints(ds: xr.Dataset, time_index: int) -> np.ndarray:
    r"""Where the distribution function of :math:`u` jumps: the tokens' and the rings' :math:`u` (none for a series)."""
    if is_particles(ds):
        return ds["x"].values[time_index, :, -1]
    rings = _rings(ds, time_index)
    return np.empty(0) if rings is None else rings[0]


def _rings(ds: xr.Dataset, time_index: int) -> tuple[np.ndarray, np.ndarray] | None:
    """The rings or atoms (sorted ``u`` and masses) recorded at an output, or None where a series was."""
    if "ring_u" in ds:
        u, mass = ds["ring_u"].values[time_index], ds["ring_mass"].values[time_index]
    elif "atom_position" in ds:
        u, mass = ds["atom_position"].values[time_index, :, -1], ds["atom_mass"].values[time_index]
    else:
        return None
    kept = np.isfinite(u)
    if not kept.any():
        return None
    order = np.argsort(u[kept], kind="stable")
    return u[kept][order], mass[kept][order]
