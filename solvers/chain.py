r"""Any solvers run one after another: the hand-overs of ``solvers.handover.TRANSITIONS`` composed.

:class:`Chain` takes solvers already built (each with its own settings) and runs the first
until it stops resolving the density, hands its density to the second by their pair's
:class:`~solvers.handover.Transition`, and so on; the last runs to the end. It is
:class:`~solvers.handover.HandOver`'s run folded to the right: a chain of ``k`` solvers is the
hand-over from its first solver to the chain of the other ``k - 1``. So the circle's whole
path from smooth data to merged clusters,

.. code-block:: python

    Chain((CircleSpectral(model, cells=512, error_level=None), CircleFV(model, cells=512),
           CircleLagrangian(model, cells=512)))

is one run (and :func:`~solvers.solve` builds it from ``method="fourier",
then=("finite_volumes", "mass_coordinates")``). Every solver must record its density on the
same grid, so that the outputs join into one dataset.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import xarray as xr

from meanfield.records import PDE, dataset_settings, record_attrs
from meanfield.docstrings import fill_docstrings

from .grid_solver import DATASET_PARAMETERS, earliest_underresolution, joined_runs, joined_settings
from .handover import STAGE, HandOver, transition
from .resolution import UnresolvedStart


@dataclass(frozen=True)
class ChainState:
    """Where a chain's run goes on from: the index of the solver that ran last, and that solver's state."""

    stage: int
    state: Any


@fill_docstrings(dataset_parameters=DATASET_PARAMETERS)
@dataclass(frozen=True, eq=False)
class Chain(HandOver):
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

    name = "Chain"

    def __post_init__(self) -> None:
        stages = tuple(self.stages)
        if len(stages) < 2:
            raise ValueError(f"stages: a chain runs at least two solvers, got {len(stages)}")
        for before, after in zip(stages, stages[1:]):
            transition(before, after)
            if after.model is not stages[0].model:
                raise ValueError(f"stages: every solver of a chain solves one model; {after.name}'s is "
                                 f"{after.model!r}, {stages[0].name}'s {stages[0].model!r}")
            _check_same_grid(before, after)
        object.__setattr__(self, "stages", stages)
        object.__setattr__(self, "_rest", stages[1] if len(stages) == 2 else Chain(stages[1:]))

    @property
    def model(self):
        """The model every stage solves."""
        return self.stages[0].model

    @property
    def geometry(self) -> str:
        """Where the density lives (the first solver's geometry)."""
        return self.stages[0].geometry

    # ------------------------------------------------------------------ the hand-over (solvers.handover)
    @property
    def _first(self):
        return self.stages[0]

    @property
    def _second(self):
        return self._rest

    @property
    def _handing_to(self):
        return self.stages[1]

    def _first_outputs(self, ds: xr.Dataset) -> xr.Dataset:
        # what the last solver records of a density (the labels, the atoms' clusters), at the outputs before it
        before, last = self.stages[-2], self.stages[-1]
        observed = transition(before, last).observed
        return ds if observed is None else observed(before, last, ds)

    def _first_state(self, rho0, continued: bool) -> tuple[Any, bool]:
        return (rho0.state if isinstance(rho0, ChainState) else rho0), continued

    def _starts_on_second(self, start, continued: bool) -> bool:
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

    def _second_state(self, state) -> Any | None:
        if not isinstance(state, ChainState) or state.stage == 0:
            return None
        return state.state if len(self.stages) == 2 else ChainState(state.stage - 1, state.state)

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

    def _annotated(self, first: xr.Dataset | None, rest: xr.Dataset | None, handover: float,
                   moved: float) -> xr.Dataset:
        parts = [(first, self.stages[0].name)] if first is not None else []
        later = [np.nan] * (len(self.stages) - 2), [0.0] * (len(self.stages) - 2)
        if rest is not None:
            nested = "stage" in rest  # the chain of the other solvers: its stages, hand-overs and runs
            parts.append((rest, rest.stage.values if nested else self.stages[1].name))
            if nested:
                inner = dataset_settings(rest)
                later = inner["handover_times"], inner["handover_moved"]
        ds = joined_runs(parts, "stage", STAGE)
        settings = {"solver": self.name, "stages": [stage.name for stage in self.stages],
                    "handover_times": [handover, *later[0]], "handover_moved": [moved, *later[1]],
                    **joined_settings(parts)}
        ds.attrs = record_attrs(PDE, self.geometry, self.model, settings)
        ds.attrs["underresolved_since"] = earliest_underresolution(parts)
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
