"""Bifurcation diagrams: the uniform branch, the branches that leave it, their stability, as a dataset."""

from __future__ import annotations

import json

import numpy as np
import xarray as xr

from meanfield.checks import check_int, check_real
from meanfield.records import CIRCLE, SPHERE, package_version

from .continuation import EIGENVALUES, Branch, Point, branch_from_uniform, uniform_bifurcations
from .circle import CircleStationary
from .sphere import SphereStationary

#: Order parameters |int rho e^{ik theta}| recorded per point, k = 1..ORDER_MODES.
ORDER_MODES = 4


def bifurcation_diagram(model, parameter: str, interval: tuple[float, float], *, geometry: str = CIRCLE,
                        cells: int = 256, lmax: int = 31, modes=None, max_points: int = 200,
                        uniform_points: int = 41, tol: float = 1e-10, stability: bool = True,
                        progress: bool | None = None) -> xr.Dataset:
    r"""Branches of stationary states from the uniform state, over ``interval`` of ``parameter``.

    The uniform branch with its stability; every bifurcation point on it (a mode's eigenvalue
    crossing zero: the dispersion relation's zero); from each, the bifurcating branch followed
    by pseudo-arclength continuation (``solvers.stationary.continuation``) until it leaves the
    interval or the resolved range, with the leading eigenvalues of every state (unless
    ``stability=False``).

    Parameters
    ----------
    model : SelfAttention or ZonalAggregation
        A rotation-invariant model with diffusion; its ``parameter`` value is replaced along
        the branches.
    parameter : {"diffusion", "beta"}
    interval : (float, float)
        The range of the parameter.
    geometry : {"circle", "sphere"}
        The circle (``solvers.stationary.circle.CircleStationary``, the finite volumes'
        discretisation) or :math:`S^2` (``solvers.stationary.sphere.SphereStationary``,
        spherical harmonics, axisymmetric states; a zonal model).
    cells : int
        Circle: cells of the finite-volume discretisation.
    lmax : int
        Sphere: highest degree.
    modes : iterable of int, optional
        Wavenumbers (sphere: degrees of the zonal harmonics) whose bifurcations are followed
        (default ``1..8``).
    max_points : int
        Points per bifurcating branch at most.
    uniform_points : int
        Parameter values at which the uniform branch's stability is recorded.
    tol : float
        Newton's tolerance (the stationary problem's ``tol``).
    stability : bool
        Whether the bifurcating branches' states get their leading eigenvalues (most of a
        point's cost); without, their ``stable``, ``growth_rate`` and ``frequency`` are NaN (the
        uniform branch's come from the dispersion relation either way).
    progress : bool, optional
        A progress bar per branch (default: on a terminal).

    Returns
    -------
    xarray.Dataset
        Per ``point``: ``on_branch`` (index of its ``branch``, 0 the uniform one), the parameter, ``norm``
        (:math:`\|\rho - \bar\rho\|_{L^2}`), ``order_parameter`` (``wavenumber`` 1..4: circle
        :math:`|\int\rho e^{ik\theta}|`, sphere :math:`|\int\rho P_k(\cos\theta)|`),
        ``density`` (``theta``; sphere: ``colatitude``), ``stable``, ``growth_rate`` and ``frequency`` (real and
        imaginary parts of the leading eigenvalues; NaN where not computed), ``fold``, ``residual_evaluations``. Per
        ``branch``: ``mode``, ``bifurcation_value`` and ``end`` (why it stopped).
    """
    low, high = (check_real(v, f"interval[{i}]") for i, v in enumerate(interval))
    if not low < high:
        raise ValueError(f"interval must be increasing, got {interval!r}")
    check_int(uniform_points, "uniform_points", minimum=2)
    if geometry == CIRCLE:
        problem = CircleStationary(model, cells, parameter=parameter, tol=tol)
    elif geometry == SPHERE:
        problem = SphereStationary(model, lmax, parameter=parameter, tol=tol)
    else:
        raise ValueError(f"geometry must be {CIRCLE!r} or {SPHERE!r}, got {geometry!r}")
    problem.check_value(low)  # a parameter range without diffusion is refused before any work
    problem.check_value(high)
    modes = [k for k in (range(1, 9) if modes is None else modes) if k in problem.modes()]
    uniform = _uniform_branch(problem, np.linspace(low, high, uniform_points), modes)
    branches = [uniform]
    for mode, value in uniform_bifurcations(problem, (low, high), modes):
        uniform.points.append(_uniform_point(problem, value, modes))
        branches.append(branch_from_uniform(problem, mode, value, (low, high), max_points=max_points,
                                            progress=progress, stability=stability))
    uniform.points.sort(key=lambda point: point.value)
    return _dataset(problem, branches, model, geometry)


def _uniform_point(problem, value: float, modes) -> Point:
    rates = np.sort([problem.uniform_eigenvalue(k, value) for k in modes])[::-1][:EIGENVALUES]
    point = Point(np.zeros(problem.size), float(value))
    point.eigenvalues[: rates.size] = rates
    return point


def _uniform_branch(problem, values: np.ndarray, modes) -> Branch:
    return Branch([_uniform_point(problem, v, modes) for v in values], 0, np.nan, end="the uniform state")


def _stable(eigenvalues: np.ndarray) -> np.ndarray:
    """Per point whether no eigenvalue has a positive real part: booleans, or 1.0, 0.0 and NaN where some
    point's eigenvalues were not computed."""
    known = np.isfinite(eigenvalues.real).any(axis=1)
    largest = np.max(np.where(np.isfinite(eigenvalues.real), eigenvalues.real, -np.inf), axis=1)
    return largest < 0 if known.all() else np.where(known, (largest < 0).astype(float), np.nan)


def _dataset(problem, branches: list[Branch], model, geometry: str) -> xr.Dataset:
    points = [(b, point) for b, branch in enumerate(branches) for point in branch.points]
    eigen = np.array([point.eigenvalues for _, point in points])
    folds = {(b, i) for b, branch in enumerate(branches) for i in branch.folds}
    variables = {
        "on_branch": ("point", np.array([b for b, _ in points])),
        problem.parameter: ("point", np.array([p.value for _, p in points])),
        "norm": ("point", np.array([problem.norm(p.unknowns) for _, p in points])),
        "order_parameter": (("point", "wavenumber"),
                            np.array([problem.order_parameters(p.unknowns, ORDER_MODES) for _, p in points])),
        "density": (("point", problem.coordinate[0]), np.array([problem.density(p.unknowns) for _, p in points])),
        # A state is stable when no eigenvalue has a positive real part (NaN: not computed).
        "stable": ("point", _stable(eigen)),
        "growth_rate": (("point", "eigenvalue"), eigen.real),
        "frequency": (("point", "eigenvalue"), eigen.imag),
        "fold": ("point", np.array([(b, i) in folds for b, branch in enumerate(branches)
                                    for i in range(len(branch.points))])),
        "residual_evaluations": ("point", np.array([p.residual_evaluations for _, p in points])),
        "mode": ("branch", np.array([branch.mode for branch in branches])),
        "bifurcation_value": ("branch", np.array([branch.start_value for branch in branches])),
        "end": ("branch", np.array([branch.end for branch in branches], dtype=object)),
    }
    name, values = problem.coordinate
    coords = {name: values, "branch": np.arange(len(branches)), "wavenumber": np.arange(1, ORDER_MODES + 1)}
    resolution = {"cells": problem.cells} if geometry == CIRCLE else {"lmax": problem.lmax}
    attrs = {"geometry": geometry, "parameter": problem.parameter, "solver": problem.name, **resolution,
             "tol": problem.tol, "model": json.dumps(model.to_dict()), "version": package_version()}
    return xr.Dataset(variables, coords=coords, attrs=attrs)
