r"""A run that one solver starts and another finishes: the hand-over, written once, as data.

A hand-over is a policy, not a class: a :class:`Transition` says, for one pair of solver
classes, when the first stops resolving the density (``stop``), how its density becomes the
second's state (``handed``) and what the second records of the first's outputs
(``observed``); :data:`TRANSITIONS` holds every pair the package has, and
:class:`~solvers.Chain` runs any sequence of solvers whose consecutive pairs are in it (the
first runs until the first accepted step after which ``stop(state)`` holds, its density there
becomes the second's state, and the second runs from that time). The classes of one
hand-over (:class:`~solvers.CircleAuto`, :class:`~solvers.CircleFVLagrangian`,
:class:`~solvers.SphereSpectralParticles`, :class:`~solvers.ZonalSpectralRings`) are chains of
their two solvers (:class:`~solvers.chain.SolverPair`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np
import xarray as xr

from .grid_solver import Interrupted, stacked_fields


@dataclass(frozen=True)
class Transition:
    """When one solver class hands a run over to another, and how its density becomes the other's state.

    Parameters
    ----------
    source, target : str
        The two solver classes' names (``name``).
    stop : callable
        ``stop(first, second) -> criterion``: the criterion ``criterion(state)`` the first solver
        meets after the step at which it hands over (it no longer resolves the density).
    handed : callable
        ``handed(first, second, part) -> (state, moved)``: the second solver's state from the
        first's run up to the hand-over (an ``Interrupted``: the outputs so far, the time and the
        density reached), and the mass moved to make it one (negative density set to zero).
    keeps_step : bool
        Whether the second solver's first step is the one the first would have taken next (its
        stability limit is no shorter); else the second chooses its own.
    source_settings : dict
        Settings the first solver is built with when a chain is built from settings
        (:func:`~solvers.solve` with several ``then``), whatever the user gives: the criterion
        ``stop`` reads.
    observed : callable, optional
        ``observed(first, second, ds) -> ds``: outputs of densities on the second solver's
        grid with what the second records of them (the labels and their clusters, the clusters
        of the quadrature atoms), so that a run handed over records those at every output.
    """

    source: str
    target: str
    stop: Callable[[Any, Any], Callable[[Any], bool]]
    handed: Callable[[Any, Any, Interrupted], tuple[Any, float]]
    keeps_step: bool = False
    source_settings: dict = field(default_factory=dict)
    observed: Callable[[Any, Any, xr.Dataset], xr.Dataset] | None = None


def _until_series_unresolved(first, second) -> Callable[[Any], bool]:
    """A series' criterion: it hands over once it no longer resolves the density (its ``_resolves``)."""
    return lambda coefficients: not first._resolves(coefficients)


def _beyond_error_level(first, second) -> Callable[[Any], bool]:
    """The finite volumes' criterion: their estimated error past ``error_level`` times ``max rho``."""
    if first.error_level is None:
        raise ValueError(f"{first.name} hands over to {second.name} on its error estimate: its error_level must be "
                         f"a number, got None")
    return first._beyond_error_level


def clipped_averages(averages: np.ndarray, width: float) -> tuple[np.ndarray, float]:
    """Cell averages with negatives set to zero and each density's mass restored (rows: causal layers), and the
    mass moved."""
    if averages.min() >= 0:
        return averages, 0.0
    clipped = np.maximum(averages, 0.0)
    moved = float(width * (clipped - averages).sum())
    return clipped * (averages.sum(axis=-1, keepdims=True) / clipped.sum(axis=-1, keepdims=True)), moved


def _observed_labels(first, second, ds: xr.Dataset) -> xr.Dataset:
    """The outputs with the positions of the mass labels of their densities and those labels' clusters."""
    frames = [second._recorded_fields(second.initial_quantile(np.maximum(rho, 0.0))) for rho in ds.rho.values]
    return ds.assign_coords(second._recorded_coordinates()).assign(stacked_fields(frames))


def _observed_atom_clusters(first, second, ds: xr.Dataset) -> xr.Dataset:
    """The outputs with the clusters of their densities' quadrature atoms (the atoms' rule)."""
    grid = first.grid
    frames = [second.clusters(second.band_limited_atoms(grid.analyse(rho), grid, name="rho")[0])
              for rho in ds.rho.values]
    width = max(1, max(masses.size for masses, _ in frames))
    masses = np.full((len(frames), width), np.nan)
    where = np.full((len(frames), width, 3), np.nan)
    for index, (mass, position) in enumerate(frames):
        masses[index, : mass.size], where[index, : mass.size] = mass, position
    counts = np.array([float(mass.size) for mass, _ in frames])
    return ds.assign(cluster_mass=(("time", "cluster"), masses), cluster_position=(("time", "cluster", "xyz"), where),
                     cluster_count=("time", counts))


#: Every hand-over of the package, by the pair of solver classes' names.
TRANSITIONS: dict[tuple[str, str], Transition] = {
    (transition.source, transition.target): transition for transition in (
        # the spectral density's cell averages: negative ones (at most the spectral error, which the
        # tail criterion bounds) set to zero
        Transition("CircleSpectral", "CircleFV", _until_series_unresolved,
                   lambda first, second, part: clipped_averages(part.density, second.operators.width),
                   keeps_step=True, source_settings={"error_level": None}),
        # the same, layer by layer: causal attention's layered equation
        Transition("CausalCircleSpectral", "CausalCircleFV", _until_series_unresolved,
                   lambda first, second, part: clipped_averages(part.density, second.operators.width),
                   keeps_step=True, source_settings={"error_level": None}),
        # the quantile of the piecewise constant density, exactly
        Transition("CircleFV", "CircleLagrangian", _beyond_error_level,
                   lambda first, second, part: (second.initial_quantile(np.maximum(part.density, 0.0)), 0.0),
                   observed=_observed_labels),
        # the band-limited density's quadrature atoms
        Transition("SphereSpectral", "SphereWeightedParticles", _until_series_unresolved,
                   lambda first, second, part: second.band_limited_atoms(
                       first.grid.analyse(part.density), first.grid, name="the density at the hand-over"),
                   observed=_observed_atom_clusters),
        # the series' density as rings of mass
        Transition("ZonalSphereSpectral", "ZonalRings", _until_series_unresolved,
                   lambda first, second, part: second.density_rings(first._initial_state(part.density, True))),
    )
}


def transition(first, second) -> Transition:
    """The hand-over from solver ``first`` to solver ``second``; a ``ValueError`` listing the pairs there are."""
    try:
        return TRANSITIONS[first.name, second.name]
    except KeyError:
        pairs = ", ".join(f"{source} -> {target}" for source, target in TRANSITIONS)
        raise ValueError(f"no hand-over from {first.name} to {second.name}: the hand-overs are {pairs}") from None

