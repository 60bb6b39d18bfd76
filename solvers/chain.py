r"""Any solvers run one after another: the hand-overs of ``solvers.handover.TRANSITIONS`` composed.

:class:`Chain` takes solvers already built (each with its own settings) and runs the first
until it stops resolving the density, hands its density to the second by their pair's
:class:`~solvers.handover.Transition`, and so on; the last runs to the end. A chain of ``k``
solvers is the hand-over from its first solver to the chain of the other ``k - 1`` (its run is
folded to the right). So the circle's whole path from smooth data to merged clusters,

.. code-block:: python

    Chain((CircleSpectral(model, cells=512, error_level=None), CircleFV(model, cells=512),
           CircleLagrangian(model, cells=512)))

is one run (and :func:`~solvers.solve` builds it from ``method="fourier",
then=("finite_volumes", "mass_coordinates")``). Every solver must record its density on the
same grid, so that the outputs join into one dataset.

:class:`SolverPair` is a chain of two solvers built from one set of settings: the classes of
one hand-over (:class:`~solvers.CircleAuto`, :class:`~solvers.CircleFVLagrangian`,
:class:`~solvers.SphereSpectralParticles`, :class:`~solvers.ZonalSpectralRings`) are thin
constructors over it, which also keep the records they had before chains (a flag per output,
``handover_time``, ``handover_clipped``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np
import xarray as xr

from meanfield.checks import check_times
from meanfield.records import PDE, dataset_settings, record_attrs
from meanfield.docstrings import fill_docstrings

from .grid_solver import DATASET_PARAMETERS, earliest_underresolution, joined_runs, joined_settings
from .handover import transition
from .resolution import UnresolvedStart, UpFrontChecks


#: What the ``stage`` of a run of several solvers holds.
STAGE = "the solver that computed this output"


@dataclass(frozen=True)
class ChainState:
    """Where a chain's run goes on from, or starts on.

    Parameters
    ----------
    stage : int
        The index of the solver (in the chain's ``stages``) that ran last, or that the run starts on.
    state : object
        That solver's state (what its ``solve`` takes with ``continued=True``, or its
        ``resolved_start``).
    """

    stage: int
    state: Any


@fill_docstrings(dataset_parameters=DATASET_PARAMETERS)
@dataclass(frozen=True, eq=False)
class Chain(UpFrontChecks):
    r"""Solvers run one after another, each handing the run to the next where it stops resolving the density.

    Parameters
    ----------
    stages : sequence of solvers
        At least two solvers of one model, built; each consecutive pair must be a hand-over of
        ``solvers.handover.TRANSITIONS`` (the message of a pair that is not lists them),
        and every solver must record its density on the same grid (for example the same
        ``cells``: :class:`~solvers.CircleSpectral` records on ``record_cells``,
        :class:`~solvers.CircleLagrangian` on ``cells``).

    Raises
    ------
    ValueError
        Naming the pair or the solver at fault.

    Notes
    -----
    :meth:`solve` records, at each output, what the solver that computed it records, every
    other solver's fields NaN there, and ``stage`` (that solver's name); where the last
    solver's hand-over says so, the earlier outputs also carry what the last solver records of
    their densities (the mass labels and their clusters, the clusters of the quadrature atoms).
    ``attrs["settings"]`` holds ``stages`` (the names), ``handover_times`` (one per hand-over; NaN: the run ended
    before it; the start time: a continued run began past it), ``handover_moved`` (the mass
    each hand-over moved) and ``runs`` (each solver's own settings and step counts).

    Examples
    --------
    >>> import numpy as np, meanfield as mf, solvers
    >>> model = mf.SelfAttention(9.0)
    >>> chain = solvers.Chain((solvers.CircleFV(model, cells=128),
    ...                        solvers.CircleLagrangian(model, cells=128, points=256)))
    >>> ds = chain.solve(lambda t: 1 + 0.2 * np.cos(2 * t), [0, 40], progress=False)
    >>> sorted(set(ds.stage.values.tolist()))
    ['CircleFV', 'CircleLagrangian']
    """

    stages: tuple
    _rest: Any = field(init=False, repr=False)
    model: Any = field(init=False, repr=False)

    name = "Chain"
    #: The fewest solvers a chain runs (a :class:`SolverPair` may run one: the other does not apply).
    _fewest_stages: ClassVar[int] = 2

    def __post_init__(self) -> None:
        stages = tuple(self.stages)
        if len(stages) < self._fewest_stages:
            raise ValueError(f"stages: a chain runs at least two solvers, got {len(stages)}")
        for before, after in zip(stages, stages[1:]):
            transition(before, after)
            if after.model is not stages[0].model:
                raise ValueError(f"stages: every solver of a chain solves one model; {after.name}'s is "
                                 f"{after.model!r}, {stages[0].name}'s {stages[0].model!r}")
            _check_same_grid(before, after)
        rest = None if len(stages) == 1 else stages[1] if len(stages) == 2 else Chain(stages[1:])
        object.__setattr__(self, "stages", stages)
        object.__setattr__(self, "_rest", rest)
        object.__setattr__(self, "model", stages[0].model)

    @property
    def geometry(self) -> str:
        """Where the density lives (the first solver's geometry)."""
        return self.stages[0].geometry

    # ------------------------------------------------------------------ the first hand-over
    def _stop(self):
        """The first solver's criterion ``stop(state)`` after each accepted step (its pair's ``Transition.stop``)."""
        return transition(self.stages[0], self.stages[1]).stop(self.stages[0], self.stages[1])

    def _first_outputs(self, ds: xr.Dataset) -> xr.Dataset:
        """The first solver's outputs with what the last solver records of their densities (the labels, the
        atoms' clusters), where its pair's transition says (``Transition.observed``)."""
        before, last = self.stages[-2], self.stages[-1]
        observed = transition(before, last).observed
        return ds if observed is None else observed(before, last, ds)

    def _first_state(self, rho0, continued: bool) -> tuple[Any, bool]:
        """What the first solver starts from, and whether it takes it as its own state (``continued``)."""
        return (rho0.state if isinstance(rho0, ChainState) else rho0), continued

    def _starts_on_second(self, start, continued: bool) -> bool:
        """Whether the first solver does not take the initial state (the rest of the chain starts from it)."""
        return not continued and self._first_start(start) is None

    def _first_start(self, rho0, name: str = "rho0"):
        """The first solver's ``resolved_start`` of the initial density if it takes it: its rule of resolution
        accepts it and its hand-over criterion does not hold there; else ``None`` (the run starts on the next
        one, as CircleAuto's)."""
        first = self.stages[0]
        try:
            start = first.resolved_start(rho0, name=name)
        except UnresolvedStart:
            return None
        return None if self._stop()(first._initial_state(rho0, False)) else start

    def _second_state(self, state) -> Any | None:
        """A continued run's state as the rest of the chain takes it, if the run was handed over already."""
        if not isinstance(state, ChainState) or state.stage == 0:
            return None
        return state.state if len(self.stages) == 2 else ChainState(state.stage - 1, state.state)

    # ------------------------------------------------------------------ up-front checks
    def resolved_start(self, rho0, *, name: str = "rho0") -> ChainState:
        """The initial state of the solver that :meth:`solve` starts on: the first that takes the density.

        Parameters
        ----------
        rho0 : callable or numpy.ndarray
            The initial density.
        name : str
            The argument's name in error messages.

        Returns
        -------
        ChainState
            That solver's index and its initial state (what :meth:`cost_estimate` takes).

        Raises
        ------
        UnresolvedStart
            If the last solver does not resolve it either.
        """
        if self._rest is None:  # one solver: its own rule, its refusal raised
            return ChainState(0, self.stages[0].resolved_start(rho0, name=name))
        start = self._first_start(rho0, name)
        if start is not None:
            return ChainState(0, start)
        later = self._rest.resolved_start(rho0, name=name)
        return ChainState(later.stage + 1, later.state) if isinstance(later, ChainState) else ChainState(1, later)

    def cost_estimate(self, state: ChainState, span: float):
        """The estimate of the solver the run starts on (``UpFrontChecks.cost_estimate``).

        Parameters
        ----------
        state : ChainState
            What :meth:`resolved_start` returned.
        span : float
            The run's duration.

        Returns
        -------
        CostEstimate or None
            That solver's.
        """
        return self.stages[state.stage].cost_estimate(state.state, span)

    # ------------------------------------------------------------------ the run
    def solve(self, rho0, times, *, progress: bool | None = None, observer=None, max_steps: int | None = None,
              first_step: float | None = None, continued: bool = False, pace=None,
              underresolved: str = "stop") -> xr.Dataset:
        """Run the first solver until it hands over, then the rest of the chain; one dataset on one grid.

        Parameters
        ----------
        rho0 : callable or numpy.ndarray or ChainState
            The initial density, as the first solver takes it; with ``continued``, what
            :meth:`continuation_state` returned.
        times : array_like
            Increasing output times.
        progress, observer, max_steps, first_step, pace
            As for the first solver's ``solve`` (every solver takes them).
        continued : bool
            ``rho0`` is a state this chain recorded (resuming a run in segments).
        underresolved : {"stop", "continue"}
            What the last solver does once one of its outputs is under-resolved (its
            ``solve``'s setting; the others hand over instead).

        Returns
        -------
        xarray.Dataset
            The outputs of every solver, joined in time (the class's Notes).

        Raises
        ------
        StepSizeCollapse
            As for any solver's ``solve``.
        """
        times = check_times(times)
        common = dict(progress=progress, observer=observer, max_steps=max_steps, pace=pace)
        handed = self._second_state(rho0) if continued else None
        if handed is not None:
            rest = self._rest.solve(handed, times, continued=True, first_step=first_step, underresolved=underresolved,
                                    **common)
            return self._annotated(None, rest, float(times[0]), 0.0)
        start, own = self._first_state(rho0, continued)
        if self._rest is None:  # one solver: no hand-over
            ds = self.stages[0].solve(start, times, continued=own, first_step=first_step, underresolved=underresolved,
                                      **common)
            return self._annotated(ds, None, np.nan, 0.0)
        if self._starts_on_second(start, own):
            rest = self._rest.solve(start, times, continued=own, first_step=first_step, underresolved=underresolved,
                                    **common)
            return self._annotated(None, rest, float(times[0]), 0.0)
        part = self.stages[0].solve_until(start, times, self._stop(), first_step=first_step, continued=own, **common)
        outputs = self._first_outputs(part.dataset)
        if outputs.sizes["time"] == times.size:
            return self._annotated(outputs, None, np.nan, 0.0)
        handing = transition(self.stages[0], self.stages[1])
        state, moved = handing.handed(self.stages[0], self.stages[1], part)
        later = times[times > part.time]
        rest = self._rest.solve(state, np.concatenate([[part.time], later]), continued=True,
                                first_step=part.next_step if handing.keeps_step else None,
                                underresolved=underresolved, **common)
        if part.time not in times:
            rest = rest.isel(time=slice(1, None))
        return self._annotated(outputs, rest, part.time, moved)

    def continuation_state(self, ds: xr.Dataset) -> ChainState:
        """What :meth:`solve` takes with ``continued=True`` to go on from the end of ``ds``.

        {dataset_parameters}

        Returns
        -------
        ChainState
            The solver that computed the last output, and its own continuation state.
        """
        names = [stage.name for stage in self.stages]
        last = names.index(str(ds.stage.values[-1]))
        return ChainState(last, self.stages[last].continuation_state(ds))

    def _placeholders(self) -> tuple[dict[str, tuple[str, ...]], dict[str, np.ndarray] | None]:
        """Fields (name: dims) every output of a run carries, NaN where no solver records them, and their
        coordinates: what lets segments of one run concatenate whichever solvers computed them."""
        return {}, None

    def _annotated(self, first: xr.Dataset | None, rest: xr.Dataset | None, handover: float,
                   moved: float) -> xr.Dataset:
        """The run's dataset from the first solver's outputs and the rest's (either may be absent), the
        hand-over time and the mass moved there."""
        hand_overs = len(self.stages) - 1
        parts = [(first, self.stages[0].name)] if first is not None else []
        later = [np.nan] * (hand_overs - 1), [0.0] * (hand_overs - 1)
        if rest is not None:
            nested = "stage" in rest  # the chain of the other solvers: its stages, hand-overs and runs
            parts.append((rest, rest.stage.values if nested else self.stages[1].name))
            if nested:
                inner = dataset_settings(rest)
                later = inner["handover_times"], inner["handover_moved"]
        expected, coordinates = self._placeholders()
        ds = joined_runs(parts, "stage", STAGE, expected=expected, coordinates=coordinates)
        settings = {"solver": self.name, "stages": [stage.name for stage in self.stages],
                    "handover_times": [handover, *later[0]][:hand_overs],
                    "handover_moved": [moved, *later[1]][:hand_overs], **joined_settings(parts)}
        ds.attrs = record_attrs(PDE, self.geometry, self.model, settings)
        ds.attrs["underresolved_since"] = earliest_underresolution(parts)
        return ds


@dataclass(frozen=True, eq=False)
class SolverPair(Chain):
    """A chain of two solvers built from one set of settings, recording what the classes of one hand-over did.

    A subclass builds its solvers in ``__post_init__`` and passes them to :meth:`_chained`
    (one of them ``None``: it does not apply, and the other runs alone). Besides a chain's
    records, its dataset holds the flag ``_flag`` (bool per output: whether solver
    ``_flagged`` of the pair ``_pair`` computed it) and its settings ``_recorded`` (the
    constructor's), ``handover_time`` (NaN: the first solver covered every output; ``times[0]``:
    the second from the start) and ``handover_clipped`` (the mass the hand-over moved).
    """

    stages: tuple = field(init=False, repr=False)

    _fewest_stages: ClassVar[int] = 1
    #: The two solver classes' names.
    _pair: ClassVar[tuple[str, str]]
    #: The flag's name and which of the pair (0, 1) it marks.
    _flag: ClassVar[tuple[str, int]]
    #: The constructor's settings the record holds.
    _recorded: ClassVar[tuple[str, ...]]

    def _chained(self, first, second) -> None:
        """Build the chain of ``first`` and ``second``, either of which may be ``None`` (not run)."""
        object.__setattr__(self, "stages", tuple(solver for solver in (first, second) if solver is not None))
        Chain.__post_init__(self)

    def _annotated(self, first: xr.Dataset | None, rest: xr.Dataset | None, handover: float,
                   moved: float) -> xr.Dataset:
        ds = super()._annotated(first, rest, handover, moved)
        flag, flagged = self._flag
        ds[flag] = ("time", ds.stage.values == self._pair[flagged],
                    {"long_name": f"whether {self._pair[flagged]} computed this output (else {self._pair[1 - flagged]})"})
        settings = dataset_settings(ds)
        if len(self.stages) == 2:
            handover_time, clipped = settings["handover_times"][0], settings["handover_moved"][0]
        else:  # one solver ran: the second from the start, or the first throughout
            handover_time = float(ds.time.values[0]) if self.stages[0].name == self._pair[1] else np.nan
            clipped = 0.0
        settings.update({name: getattr(self, name) for name in self._recorded})
        settings.update(handover_time=handover_time, handover_clipped=clipped)
        ds.attrs["settings"] = json.dumps(settings)
        return ds


def _check_same_grid(before, after) -> None:
    """A ``ValueError`` unless the two solvers record their densities on the same grid."""
    ours, theirs = before._grid_coordinates(), after._grid_coordinates()
    same = ours.keys() == theirs.keys() and all(
        np.shape(ours[name]) == np.shape(theirs[name]) and np.allclose(ours[name], theirs[name], rtol=0, atol=1e-12)
        for name in ours)
    if not same:
        sizes = ", ".join(f"{name}: {np.size(values)}" for name, values in ours.items())
        other = ", ".join(f"{name}: {np.size(values)}" for name, values in theirs.items())
        raise ValueError(f"stages: {before.name} records its density on ({sizes}) and {after.name} on ({other}); "
                         f"a chain's solvers must record on one grid")
