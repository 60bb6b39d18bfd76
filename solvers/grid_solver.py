"""What both PDE solvers share: the solve loop, the run record, diagnostics and collapse.

A solver supplies its numerics through a few methods (see :class:`GridSolver`); the
scaffolding turns them into the same ``solve`` for both: input checks, the adaptive loop
of :mod:`meanfield.integration.driver`, an observer that always receives the density on the grid, one
diagnostic record per output time, the resolution warning, and a collapse that raises with
everything computed so far.
"""

from __future__ import annotations

from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from typing import Any, Callable, NoReturn

import numpy as np
import xarray as xr

from meanfield.checks import check_times
from meanfield.docstrings import fill_docstrings
from meanfield.errors import StepSizeCollapse
from meanfield.integration.driver import Attempt, Pace, StepCounts, integrate
from meanfield.datasets import assembled_dataset
from meanfield.records import PDE, dataset_settings, record_attrs

from .resolution import ResolutionMonitor, UpFrontChecks

#: The Parameters section of the methods that read a dataset of the solver's (``{dataset_parameters}``).
DATASET_PARAMETERS = """
Parameters
----------
ds : xarray.Dataset
    A dataset this solver returned.
"""


#: Attributes of the diagnostic variables a solver may report.
DIAGNOSTIC_ATTRS = {
    "mass": {"long_name": "total mass"},
    "lyapunov": {"long_name": "free energy F (or -cE); NaN where none is known"},
    "min_density": {"long_name": "smallest grid value of the density (ZonalSphereSpectral: of the law of u)"},
    "cluster_width": {"units": "cells", "long_name": "FWHM of the sharpest cluster"},
    "spectral_tail": {"long_name": "spectral energy fraction in the top 10% of degrees"},
    "negative_mass": {"long_name": "mass where the density is negative (ZonalSphereSpectral's Gauss rule)"},
    "order_parameter": {"long_name": "r = |int e^(i theta) rho| of the family's marginal (the tokens, whatever "
                                     "their label)"},
    "ghost_attention": {"long_name": "largest share of a face's attention on nearly empty cells since the previous "
                                     "output (LineFV)"},
    "error_estimate": {"long_name": "estimated max-norm error of the density (CircleFV: Richardson against a "
                                    "shadow grid; SphereSpectral: the spectrum's geometric tail; ZonalSphereSpectral: "
                                    "of the law of u in total variation)"},
}


@dataclass(frozen=True)
class Diagnosis:
    """A solver's diagnostics at one output time."""

    #: Named scalars (``mass``, ``energy``, ``lyapunov``: NaN where no functional is known, ...).
    values: dict[str, float]
    #: Whether the grid still resolves the solution.
    resolved: bool
    #: Why it does not (the warning's text), when it does not.
    reason: str


@dataclass(frozen=True)
class CostEstimate:
    """What a run costs, estimated from its stability limit alone (``UpFrontChecks.cost_estimate``).

    Parameters
    ----------
    steps : float
        The steps the stability limit allows over the run (at the speed ``cost_estimate`` takes).
    seconds_per_step : float
        One step's time here: a right-hand side per stage of its pair, timed.
    resolution : str
        The setting that sets the limit (``"cells"``, ``"lmax"``): what a user lowers.
    value : int
        Its value.
    """

    steps: float
    seconds_per_step: float
    resolution: str
    value: int

    @property
    def hours(self) -> float:
        """The run's estimated duration."""
        return self.steps * self.seconds_per_step / 3600


def attention_speed_bound(model) -> float:
    """``|v| <= sum_h ||V_h||`` for SA (``|c|`` when zonal): softmax averages of unit vectors; 0 for models
    whose velocity is linear in the density (no bound independent of it). Causal attention's is the sum of
    its mixed models' (each layer moves with their velocities at mixed densities)."""
    if model.velocity_is_linear:
        return 0.0
    mixed = [group for _, group in model.mixed_groups] if getattr(model, "causal", False) else [model]
    return sum(group.value_bound for group in mixed)


@dataclass(frozen=True)
class Interrupted:
    """What :meth:`GridSolver.solve_until` reached."""

    #: The outputs recorded (every output time before ``time``).
    dataset: xr.Dataset
    #: The time reached.
    time: float
    #: The density there, on the solver's grid.
    density: np.ndarray
    #: The step the run would have taken next.
    next_step: float


@fill_docstrings(dataset_parameters=DATASET_PARAMETERS)
class GridSolver(UpFrontChecks):
    """The template of a PDE solver on a grid; subclasses are frozen dataclasses holding a ``model``.

    A subclass defines ``name``, ``geometry``, ``default_max_steps``, and

    ``_initial_state(rho0, continued)``
        the integrator's state from the user's initial density, or (``continued``) from the
        last density of an earlier run, taken as it is;
    ``_started(state, start)`` (optional)
        the state at the start time, for an equation whose state carries its time;
    ``_stepper(state, times)``
        ``(attempt, first_step, extra_settings)``: one adaptive step
        ``attempt(state, dt, t) -> (new_state, proposed_dt, rejection_reason)``, the first step,
        and a callable returning per-run counters for the settings; an attempt with a
        ``dense_output`` (:class:`~meanfield.integration.controller.AdaptiveStep`) steps past
        the output times and interpolates them;
    ``density(state)``
        the density on the grid (what observers and the record receive);
    ``_diagnose(state, rho)``
        a :class:`Diagnosis`: named scalar diagnostics at an output time, whether the
        solution is resolved there, and why not;
    ``_grid_coordinates()``
        the grid's coordinates, in the order of the density's axes;
    ``_recorded_settings()``
        the solver's parameters, recorded in the dataset;
    ``_recorded_fields(state)``, ``_recorded_coordinates()`` (optional)
        arrays recorded at each output besides the density, ``name -> (dims, values)``
        (dims after ``time``; a dimension whose length varies between outputs is padded with
        NaN), and the coordinates of their dimensions;
    ``_resolution_advice``
        what a user can change when the run stops resolving its solution.
    """

    name: str
    geometry: str
    default_max_steps: int

    def solve(self, rho0, times, *, progress: bool | None = None,
              observer: Callable[[float, np.ndarray], None] | None = None,
              max_steps: int | None = None, first_step: float | None = None,
              continued: bool = False, pace: Pace | None = None, underresolved: str = "stop") -> xr.Dataset:
        r"""Evolve ``rho0`` and record it at ``times``.

        Parameters
        ----------
        rho0 : callable or numpy.ndarray
            The initial density (see the solver's ``initial_density``); normalized to mass one.
        times : array_like
            Strictly increasing output times; the run starts at ``times[0]``.
        progress : bool or tqdm.tqdm, optional
            Progress bar (default: when stderr is a terminal), or an open bar to advance
            (one bar for a run made of several calls).
        observer : callable, optional
            Called as ``observer(t, rho)`` after every accepted step with the density on the
            grid (the array of ``ds.rho`` at one time); it must not modify ``rho``.
        max_steps : int, optional
            Steps allowed before the run is declared collapsed (default: the solver's).
        first_step : float, optional
            Initial step; pass ``dataset_settings(ds)["next_step"]`` of a run that ended at
            ``times[0]`` to continue it with the steps it would have taken.
        continued : bool
            ``rho0`` is the last density of an earlier run of this solver (``ds.rho[-1]``),
            continued here: it is taken as it is (not renormalized, and a slightly negative
            value is that run's resolution diagnosis, reported by ``resolved``, not an input
            error); only its shape and finiteness are checked.
        pace : meanfield.integration.Pace, optional
            A wall-clock budget: the run collapses (``StepSizeCollapse``) as soon as its pace
            says it cannot finish in time.
        underresolved : {"continue", "stop"}
            What the run does once an output is under-resolved (after the warning): ``"stop"``
            (the default) right after that output, so the dataset ends there, since what is
            computed past it would not be the solution; ``"continue"`` through every output time
            (the later outputs are flagged ``resolved = False``, and may be far from the solution).

        Returns
        -------
        xarray.Dataset
            ``rho`` (time, grid...) and per time ``mass``, ``energy``, ``lyapunov``,
            ``min_density``, the solver's resolution diagnostic and ``resolved``; ``attrs``
            hold the kind, geometry, model, settings (with step counts), version and
            ``underresolved_since``.

        Raises
        ------
        StepSizeCollapse
            With the time reached and the reason; ``partial`` holds the outputs so far.
        """
        if underresolved not in ("continue", "stop"):
            raise ValueError(f"underresolved must be 'continue' or 'stop', got {underresolved!r}")
        return self.solve_until(rho0, times, None, progress=progress, observer=observer, max_steps=max_steps,
                                first_step=first_step, continued=continued, pace=pace,
                                stop_underresolved=underresolved == "stop").dataset

    def solve_until(self, rho0, times, stop: Callable[[Any], bool] | None, *, progress: bool | None = None,
                    observer: Callable[[float, np.ndarray], None] | None = None, max_steps: int | None = None,
                    first_step: float | None = None, continued: bool = False,
                    pace: Pace | None = None, annotate: Callable[[int], tuple[dict, dict]] | None = None,
                    stop_underresolved: bool = False) -> "Interrupted":
        """:meth:`solve`, ended after the first accepted step whose state meets ``stop(state)``.

        How one solver hands a run over to another (:class:`~solvers.CircleAuto`,
        :class:`~solvers.CircleFVLagrangian`).

        Parameters
        ----------
        rho0, times
            As for :meth:`solve`.
        stop : callable or None
            ``stop(state)`` of the solver's state after each accepted step; ``None`` never stops.
        progress, observer, max_steps, first_step, continued, pace
            As for :meth:`solve`.
        annotate : callable, optional
            ``annotate(outputs) -> (variables, coordinates)``: more variables (name: ``(dims,
            values[, attrs])``) and their coordinates (name: one-dimensional array) for the dataset
            of ``outputs`` recorded times, built into it at once (what a solver handing over
            adds for the other one's records).
        stop_underresolved : bool
            End after the first accepted step past an under-resolved output (:meth:`solve`'s
            ``underresolved="stop"``).

        Returns
        -------
        Interrupted
            The outputs recorded before that step's output time, the time reached and the
            density there (all of ``times`` when ``stop`` never holds, or is ``None``), and the
            step the run would have taken next (``solvers.grid_solver.Interrupted``).

        Raises
        ------
        StepSizeCollapse
            As for :meth:`solve`.
        """
        times = check_times(times)
        state = self._started(self._initial_state(rho0, continued), float(times[0]))
        attempt, first, extra_settings = self._stepper(state, times)
        record = SolveRecord(self, times, extra_settings, stops=stop_underresolved)
        watch = None if observer is None else (lambda t, s: observer(t, self.density(s)))
        until = None if stop is None else (lambda t, s: stop(s))
        if stop_underresolved:
            handed = until
            until = (lambda t, s: record.monitor.since is not None or (handed is not None and handed(t, s)))
        with self._threads():
            reached, state = integrate(
                state, times, attempt, first_step=first_step or first, record=record.record,
                collapse=record.collapse, observer=watch, progress=progress, name=self.name,
                max_steps=self.default_max_steps if max_steps is None else max_steps, counts=record.counts,
                pace=pace, stop=until, interpolate=getattr(attempt, "dense_output", None))
        return Interrupted(record.dataset(annotate), float(reached), self.density(state), record.counts.next_step)

    def _threads(self) -> AbstractContextManager:
        """Context the steps run in (:mod:`solvers.threads`); none by default."""
        return nullcontext()

    # The numerics, supplied by each solver.
    def _initial_state(self, rho0, continued: bool) -> Any:
        raise NotImplementedError

    def _started(self, state, start: float) -> Any:
        """The state at the run's start time ``start``: the same for an autonomous equation (the
        line's carries its time, on which its velocity depends)."""
        return state

    def _stepper(self, state, times: np.ndarray) -> tuple[Attempt, float, Callable[[], dict]]:
        raise NotImplementedError

    def density(self, state) -> np.ndarray:
        raise NotImplementedError

    def _diagnose(self, state, rho: np.ndarray) -> Diagnosis:
        raise NotImplementedError

    def _grid_coordinates(self) -> dict[str, np.ndarray]:
        raise NotImplementedError

    def _recorded_settings(self) -> dict:
        raise NotImplementedError

    def _recorded_fields(self, state) -> dict[str, tuple[tuple[str, ...], Any]]:
        return {}

    def continuation_state(self, ds: xr.Dataset) -> np.ndarray:
        """What ``solve(..., continued=True)`` takes to go on from the end of ``ds``.

        {dataset_parameters}

        Returns
        -------
        numpy.ndarray
            Its last density (a solver with more state, such as a shadow grid, adds it).
        """
        return ds.rho.values[-1]

    def _recorded_coordinates(self) -> dict[str, np.ndarray]:
        return {}

    _resolution_advice: str


def check_measure_model(model, solver: str, dimension: int, causal_alternative: str) -> None:
    """Refuse a model that a solver of the tokens' measure through its collapse cannot evolve.

    Raises
    ------
    ValueError
        If the model is off the sphere, of another dimension than ``dimension``, or causal (a
        measure has no token order; the error names ``causal_alternative``).
    """
    if not model.on_sphere or model.dimension not in (None, dimension):
        raise ValueError(f"{solver} solves on {'the circle' if dimension == 2 else f'S^{dimension - 1}'}: got a model of dimension "
                         f"{model.dimension}{'' if model.on_sphere else ' off the sphere'}")
    if model.causal:
        raise ValueError(f"{solver} evolves the tokens' measure, which has no token order: a causal model takes "
                         f"{causal_alternative}")


class UnboundedTransport:
    """A solver's ``rhs`` as a :class:`~meanfield.integration.protocols.Discretisation` with no
    linear part and no stability bound (the error control alone sets the steps: moving particles
    or labels is not stiff); a subclass gives ``norm``, ``tolerance`` and ``admit``."""

    decay = None

    def __init__(self, solver) -> None:
        self.solver = solver

    def rhs(self, state: np.ndarray) -> np.ndarray:
        return self.solver.rhs(state)

    @staticmethod
    def stable_step(state: np.ndarray) -> float:
        return np.inf


def _energy_note(solver) -> str:
    """What the energy series holds: ``E``, or ``E`` times the kernel's scaling where it would overflow."""
    if not solver.energy_scaled:
        return "E"
    bound = solver.model.logit_bound
    return "exp(-beta) E" if bound == 1.0 else f"exp(-beta B) E, B = max_h ||Q_h^T K_h||_2 = {bound:.6g}"


class SolveRecord:
    """Outputs, diagnostics and counters of one solve (observes the loop, never steers it)."""

    def __init__(self, solver: GridSolver, times: np.ndarray, extra_settings: Callable[[], dict], *,
                 stops: bool = False):
        self.solver, self.times, self.extra_settings = solver, times, extra_settings
        ending = ("; the run ends at this output (underresolved='continue' computes the later ones, flagged "
                  "unresolved)." if stops else "")
        self.monitor = ResolutionMonitor(solver._resolution_advice + ending)
        self.frames: list[np.ndarray] = []
        self.fields: list[dict] = []
        self.diagnostics: list[dict[str, float]] = []
        self.counts = StepCounts()
        self.failure: str | None = None

    def record(self, t: float, state) -> None:
        rho = self.solver.density(state)
        diagnosis = self.solver._diagnose(state, rho)
        self.monitor.record(t, diagnosis.resolved, diagnosis.reason)
        self.frames.append(np.array(rho, copy=True))
        self.fields.append(self.solver._recorded_fields(state))
        self.diagnostics.append({**diagnosis.values, "resolved": diagnosis.resolved})

    def dataset(self, annotate: Callable[[int], tuple[dict, dict]] | None = None) -> xr.Dataset:
        solver = self.solver
        coordinates = solver._grid_coordinates()
        added, added_coordinates = ({}, {}) if annotate is None else annotate(len(self.frames))
        series = {name: ("time", np.array([d[name] for d in self.diagnostics]), DIAGNOSTIC_ATTRS.get(name, {}))
                  for name in self.diagnostics[0]}
        if "energy" in series:  # the layered causal equation has none
            series["energy"] = ("time", series["energy"][1], {"note": _energy_note(solver)})
        ds = assembled_dataset({"rho": (("time", *coordinates), np.array(self.frames), {"long_name": "density"}),
                                **series, **stacked_fields(self.fields), **added},
                               {"time": self.times[:len(self.frames)], **coordinates,
                                **solver._recorded_coordinates(), **added_coordinates})
        settings = {"solver": solver.name, **solver._recorded_settings(), **self.extra_settings(), **self.counts.as_dict()}
        if self.failure is not None:
            settings["failure"] = self.failure
        ds.attrs.update(record_attrs(PDE, solver.geometry, solver.model, settings))
        ds.attrs["underresolved_since"] = np.nan if self.monitor.since is None else self.monitor.since
        return ds

    def collapse(self, t: float, reason: str) -> NoReturn:
        self.failure = reason
        raise StepSizeCollapse(f"{self.solver.name} stopped at t={t:.6g}: {reason}", time=t,
                               partial=self.dataset())


def stacked_fields(frames: list[dict[str, tuple[tuple[str, ...], Any]]]) -> dict:
    """Per-output fields (``name -> (dims, values)``, as ``_recorded_fields``) stacked over time,
    NaN-padded where their lengths vary."""
    stacked = {}
    for name, (dims, _) in (frames[0].items() if frames else ()):
        values = [np.asarray(frame[name][1], dtype=float) for frame in frames]
        shape = np.max([v.shape for v in values], axis=0) if values[0].ndim else ()
        padded = np.full((len(values), *shape), np.nan)
        for index, value in enumerate(values):
            padded[(index, *(slice(0, n) for n in value.shape))] = value
        stacked[name] = (("time", *dims), padded)
    return stacked


def joined_settings(parts: list[tuple[xr.Dataset, bool]]) -> dict:
    """What the settings of a run made of several solvers' parts add up to: each run's settings and the counts."""
    settings = [dataset_settings(part) for part, _ in parts]
    runs = {}
    for run in settings:  # a part that is itself a run of several solvers (a chain's rest) gives their runs
        runs.update(run.get("runs") or {run["solver"]: run})
    return {"runs": runs, "steps": sum(run["steps"] for run in runs.values()),
            "rejected_steps": sum(run["rejected_steps"] for run in runs.values()),
            "next_step": settings[-1]["next_step"]}


def earliest_underresolution(parts: list[tuple[xr.Dataset, bool]]) -> float:
    """The first time any part was declared under-resolved (NaN: none was)."""
    since = [part.attrs["underresolved_since"] for part, _ in parts if np.isfinite(part.attrs["underresolved_since"])]
    return min(since) if since else np.nan


def joined_runs(parts: list[tuple[xr.Dataset, bool]], flag: str, long_name: str, *,
                expected: dict[str, tuple[str, ...]] | None = None,
                coordinates: dict[str, np.ndarray] | None = None) -> xr.Dataset:
    """The outputs of the solvers of one run, in time order, each output flagged ``flag`` (which solver).

    Every variable is in every part (NaN where a solver has none), and so are ``expected``
    (name: dims) with their ``coordinates``: segments of one run then concatenate whichever
    solvers computed them. Dimensions whose length varies between parts (clusters) are
    padded with NaN. Each variable keeps its attributes (its name, units, what an energy
    series holds), which must be the same in every part that records it; a placeholder that
    no part records takes its :data:`DIAGNOSTIC_ATTRS`.

    Raises
    ------
    ValueError
        If two parts record a variable with different attributes (``E`` against
        ``exp(-beta) E``: one series cannot hold both).
    """
    attrs = _variable_attrs([part for part, _ in parts])
    dims = {name: part[name].dims for part, _ in parts for name in part.data_vars} | dict(expected or {})
    sizes = {dim: values.size for dim, values in (coordinates or {}).items()}
    for part, _ in parts:
        sizes.update({dim: max(size, sizes.get(dim, 0)) for dim, size in part.sizes.items() if dim != "time"})
    filled = []
    for part, value in zip(padded_to_longest([part for part, _ in parts]), [flag for _, flag in parts]):
        # one Dataset built per part (xarray's assign and assign_coords each merge and align:
        # on a short spectral run that was most of its time)
        outputs = part.sizes["time"]
        variables = {name: part[name].variable for name in part.data_vars}
        variables.update({name: (shape, np.full([outputs if d == "time" else sizes[d] for d in shape], np.nan))
                          for name, shape in dims.items() if name not in part.data_vars})
        variables[flag] = ("time", np.full(outputs, value))
        coords = {name: part.coords[name].variable for name in part.coords}
        coords.update({dim: values for dim, values in (coordinates or {}).items() if dim not in part.coords})
        filled.append(xr.Dataset(variables, coords=coords, attrs=part.attrs))
    ds = xr.concat(filled, dim="time", combine_attrs="drop") if len(filled) > 1 else filled[0]
    for name in dims:  # a placeholder no part records still says what it would hold
        ds[name].attrs = dict(attrs.get(name, DIAGNOSTIC_ATTRS.get(name, {})))
    ds[flag].attrs["long_name"] = long_name
    return ds


def _variable_attrs(parts: list[xr.Dataset]) -> dict[str, dict]:
    """The attributes of each variable of the parts, checked to be the same in every part that has it."""
    attrs: dict[str, dict] = {}
    for part in parts:
        for name in part.data_vars:
            found = attrs.setdefault(name, part[name].attrs)
            if found != part[name].attrs:
                raise ValueError(f"the parts of one run record {name!r} with different attributes, {found} and "
                                 f"{part[name].attrs}: they cannot be joined into one series")
    return attrs


def padded_to_longest(parts: list[xr.Dataset]) -> list[xr.Dataset]:
    """Parts of one run with each dimension that has no coordinate (clusters) NaN-padded to its longest length."""
    longest: dict[str, int] = {}
    for part in parts:
        for dim, size in part.sizes.items():
            if dim not in part.coords:
                longest[dim] = max(size, longest.get(dim, 0))
    return [part.pad({dim: (0, longest[dim] - part.sizes[dim]) for dim in part.dims
                      if dim in longest and part.sizes[dim] < longest[dim]}, constant_values=np.nan)
            if any(dim in longest and part.sizes[dim] < longest[dim] for dim in part.dims) else part
            for part in parts]
