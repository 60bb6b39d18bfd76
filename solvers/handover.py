r"""A run that one solver starts and another finishes: the hand-over, written once.

A hand-over is a policy, not a class: a :class:`Transition` says, for one pair of solver
classes, when the first stops resolving the density (``stop``) and how its density becomes
the second's state (``handed``); :data:`TRANSITIONS` holds every pair the package has, and
:class:`~solvers.Chain` runs any sequence of solvers whose consecutive pairs are in it.

:class:`HandOver` is the skeleton of every run of two solvers: of :class:`~solvers.Chain` and of
:class:`~solvers.CircleAuto` (Fourier, then finite volumes),
:class:`~solvers.CircleFVLagrangian` (finite volumes, then mass coordinates),
:class:`~solvers.SphereSpectralParticles` (harmonics, then weighted atoms) and
:class:`~solvers.ZonalSpectralRings` (Gegenbauer series, then rings), which keep their own
records of the same run. The first solver runs until the first accepted step after which
``stop(state)`` holds, its density there is turned into the second solver's state, and the
second runs from that time; a continued run whose state is already the second's goes straight
to it. A solver built on it says only what differs:

- ``_first`` and ``_second``: the two solvers (``_second`` may be ``None``: no hand-over);
  when and how the first hands over is their pair's :class:`Transition`;
- :meth:`~HandOver._second_state`: a continued run's state as the second's, if it is one;
- :meth:`~HandOver._annotated`: the joined dataset (to which every run adds ``stage`` and the
  settings ``stages``, ``handover_times``, ``handover_moved``, as a chain's).

The optional hooks (:meth:`~HandOver._first_state`, :meth:`~HandOver._starts_on_second`,
:meth:`~HandOver._annotate_first`) keep each solver's own start and records (the first solver's
outputs carry what the second records of their densities where the transition says,
:meth:`~HandOver._first_outputs`); ``_starting`` (the first, by default) is the solver whose grid and stability
limit the up-front checks read (:meth:`~HandOver.resolved_start`,
:meth:`~HandOver.cost_estimate`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np
import xarray as xr

from meanfield.checks import check_times
from meanfield.records import dataset_settings

from .grid_solver import CostEstimate, Interrupted, stacked_fields
from .resolution import UpFrontChecks


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


#: What the ``stage`` of a run of several solvers holds.
STAGE = "the solver that computed this output"


class HandOver(UpFrontChecks):
    """The ``solve`` of a run handed from ``_first`` to ``_second`` (module docstring); a mixin of the solvers."""

    _first: Any
    _second: Any

    # ------------------------------------------------------------------ what a hand-over says
    def _second_state(self, state) -> Any | None:
        """A continued run's state as the second solver takes it, if the run was handed over already; else ``None``."""
        raise NotImplementedError

    def _annotated(self, first: xr.Dataset | None, second: xr.Dataset | None, handover: float,
                   moved: float) -> xr.Dataset:
        """The run's dataset from the two parts (either may be absent), the hand-over time and the mass moved."""
        raise NotImplementedError

    # ------------------------------------------------------------------ the pair's transition
    def _stop(self) -> Callable[[Any], bool] | None:
        """``stop(state)`` of the first solver's state after each accepted step; ``None``: never (no second)."""
        if self._second is None:
            return None
        return transition(self._first, self._handing_to).stop(self._first, self._handing_to)

    def _handed(self, part: Interrupted) -> tuple[Any, float]:
        """The second solver's state from the first's run up to the hand-over, and the mass moved to make it."""
        return transition(self._first, self._handing_to).handed(self._first, self._handing_to, part)

    def _second_first_step(self, part: Interrupted) -> float | None:
        """The second solver's first step (``None``: its own choice)."""
        return part.next_step if transition(self._first, self._handing_to).keeps_step else None

    @property
    def _handing_to(self):
        """The solver the first hands its density to (the second; a chain's second is the rest of the chain)."""
        return self._second

    # ------------------------------------------------------------------ optional
    def _first_state(self, rho0, continued: bool) -> tuple[Any, bool]:
        """What the first solver starts from, and whether it takes it as its own state (``continued``)."""
        return rho0, continued

    def _starts_on_second(self, state, continued: bool) -> bool:
        """Whether the first solver cannot take even the initial state (the second runs from the start, from it,
        as its own state if ``_first_state`` said so: ``continued``)."""
        return False

    def _first_outputs(self, ds: xr.Dataset) -> xr.Dataset:
        """The first solver's outputs as the run records them: with what the second records of their densities,
        where their transition says (``Transition.observed``)."""
        if self._second is None:
            return ds
        observed = transition(self._first, self._handing_to).observed
        return ds if observed is None else observed(self._first, self._handing_to, ds)

    def _annotate_first(self) -> Callable[[int], tuple[dict, dict]] | None:
        """``annotate`` of the first solver's ``solve_until`` (what it records for the second's fields)."""
        return None

    @property
    def _starting(self):
        """The solver whose grid takes the initial density and whose stability limit bounds the run (the first)."""
        return self._first

    def resolved_start(self, rho0, *, name: str = "rho0"):
        """The starting solver's initial state, refused where its grid does not resolve it (its ``resolved_start``).

        Parameters
        ----------
        rho0 : callable or numpy.ndarray
            The initial density.
        name : str
            The argument's name in error messages.

        Returns
        -------
        numpy.ndarray
            What :meth:`cost_estimate` takes.

        Raises
        ------
        UnresolvedStart
            As the starting solver's.
        """
        return self._starting.resolved_start(rho0, name=name)

    def cost_estimate(self, state, span: float) -> CostEstimate | None:
        """The starting solver's estimate (``UpFrontChecks.cost_estimate``): the second has no stability limit.

        Parameters
        ----------
        state : numpy.ndarray
            The starting solver's initial state.
        span : float
            The run's duration.

        Returns
        -------
        CostEstimate or None
            As the starting solver's.
        """
        return self._starting.cost_estimate(state, span)

    # ------------------------------------------------------------------ the run
    def solve(self, rho0, times, *, progress: bool | None = None, observer=None, max_steps: int | None = None,
              first_step: float | None = None, continued: bool = False, pace=None,
              underresolved: str = "stop") -> xr.Dataset:
        """Run the first solver until it hands over, then the second; one dataset on one grid.

        ``attrs["settings"]`` records ``handover_time`` (NaN: the first solver covered every
        output; ``times[0]``: the second from the start) and both solvers' settings and step
        counts; each output's solver is flagged (the class docstring lists the fields). As every
        run of several solvers (:class:`~solvers.Chain`), ``stage`` names each output's solver
        and the settings hold ``stages``, ``handover_times`` and ``handover_moved``.

        Parameters
        ----------
        rho0 : callable or numpy.ndarray
            The initial density, as the first solver takes it; with ``continued``, what
            :meth:`continuation_state` returned.
        times : array_like
            Increasing output times.
        progress, observer, max_steps, first_step, pace
            As for the first solver's ``solve`` (both solvers take them).
        continued : bool
            ``rho0`` is a state this solver recorded (resuming a run in segments).
        underresolved : {"stop", "continue"}
            What the second solver does once one of its outputs is under-resolved (its
            ``solve``'s setting; the first one hands over instead).

        Returns
        -------
        xarray.Dataset
            The outputs of both solvers, joined in time.

        Raises
        ------
        StepSizeCollapse
            As for either solver's ``solve``.
        """
        times = check_times(times)
        common = dict(progress=progress, observer=observer, max_steps=max_steps, pace=pace)
        handed = self._second_state(rho0) if continued else None
        if handed is not None:
            if self._second is None:
                raise ValueError(f"{self.name}: this run has no second solver to continue (it never hands over)")
            rest = self._second.solve(handed, times, continued=True, first_step=first_step, underresolved=underresolved,
                                      **common)
            return self._joined(None, rest, float(times[0]), 0.0)
        start, own = self._first_state(rho0, continued)
        if self._starts_on_second(start, own):
            rest = self._second.solve(start, times, continued=own, first_step=first_step, underresolved=underresolved,
                                      **common)
            return self._joined(None, rest, float(times[0]), 0.0)
        part = self._first.solve_until(start, times, self._stop(), first_step=first_step, continued=own,
                                       annotate=self._annotate_first(), **common)
        outputs = self._first_outputs(part.dataset)
        if outputs.sizes["time"] == times.size:
            return self._joined(outputs, None, np.nan, 0.0)
        state, moved = self._handed(part)
        later = times[times > part.time]
        rest = self._second.solve(state, np.concatenate([[part.time], later]), continued=True,
                                  first_step=self._second_first_step(part), underresolved=underresolved, **common)
        if part.time not in times:
            rest = rest.isel(time=slice(1, None))
        return self._joined(outputs, rest, part.time, moved)

    def _joined(self, first: xr.Dataset | None, rest: xr.Dataset | None, handover: float, moved: float) -> xr.Dataset:
        """:meth:`_annotated`, with what every run of several solvers records alike (as :class:`~solvers.Chain`):
        ``stage``, each output's solver, and the settings ``stages``, ``handover_times``, ``handover_moved``."""
        ds = self._annotated(first, rest, handover, moved)
        if "stage" in ds:  # a chain's own
            return ds
        # a solver that is None (CircleAuto without a spectral part, a run never handed over) computed no output
        names = [getattr(solver, "name", "") for solver in (self._first, self._handing_to)]
        counts = [0 if part is None else part.sizes["time"] for part in (first, rest)]
        ds["stage"] = ("time", np.repeat(names, counts), {"long_name": STAGE})
        settings = dataset_settings(ds)
        settings.update(stages=[name for name in names if name], handover_times=[handover], handover_moved=[moved])
        ds.attrs["settings"] = json.dumps(settings)
        return ds
