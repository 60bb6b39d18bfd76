r"""A run that one solver starts and another finishes: the hand-over, written once.

:class:`HandOver` is the skeleton of :class:`~solvers.CircleAuto` (Fourier, then finite
volumes), :class:`~solvers.CircleFVLagrangian` (finite volumes, then mass coordinates) and
:class:`~solvers.SphereSpectralParticles` (harmonics, then weighted atoms). The first solver
runs until the first accepted step after which ``stop(state)`` holds (it no longer resolves the
density), its density there is turned into the second solver's state, and the second runs from
that time; a continued run whose state is already the second's goes straight to it. A solver
built on it says only what differs:

- ``_first`` and ``_second``: the two solvers (``_second`` may be ``None``: no hand-over);
- :meth:`~HandOver._stop`: when the first hands over;
- :meth:`~HandOver._handed`: the second's state from the first's density at the hand-over
  (and the mass moved to make it one, recorded);
- :meth:`~HandOver._second_state`: a continued run's state as the second's, if it is one;
- :meth:`~HandOver._annotated`: the joined dataset.

The optional hooks (:meth:`~HandOver._first_state`, :meth:`~HandOver._starts_on_second`,
:meth:`~HandOver._first_outputs`, :meth:`~HandOver._annotate_first`,
:meth:`~HandOver._second_first_step`) keep each solver's own start and records;
``_starting`` (the first, by default) is the solver whose grid and stability limit the up-front
checks read (:meth:`~HandOver.resolved_start`, :meth:`~HandOver.cost_estimate`).
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np
import xarray as xr

from meanfield.checks import check_times

from .grid_solver import CostEstimate, Interrupted
from .resolution import UpFrontChecks


class HandOver(UpFrontChecks):
    """The ``solve`` of a run handed from ``_first`` to ``_second`` (module docstring); a mixin of the solvers."""

    _first: Any
    _second: Any

    # ------------------------------------------------------------------ what a hand-over says
    def _stop(self) -> Callable[[Any], bool] | None:
        """``stop(state)`` of the first solver's state after each accepted step; ``None``: never."""
        raise NotImplementedError

    def _handed(self, part: Interrupted) -> tuple[Any, float]:
        """The second solver's state from the first's run up to the hand-over, and the mass moved to make it."""
        raise NotImplementedError

    def _second_state(self, state) -> Any | None:
        """A continued run's state as the second solver takes it, if the run was handed over already; else ``None``."""
        raise NotImplementedError

    def _annotated(self, first: xr.Dataset | None, second: xr.Dataset | None, handover: float,
                   moved: float) -> xr.Dataset:
        """The run's dataset from the two parts (either may be absent), the hand-over time and the mass moved."""
        raise NotImplementedError

    # ------------------------------------------------------------------ optional
    def _first_state(self, rho0, continued: bool) -> tuple[Any, bool]:
        """What the first solver starts from, and whether it takes it as its own state (``continued``)."""
        return rho0, continued

    def _starts_on_second(self, state) -> bool:
        """Whether the first solver cannot take even the initial state (the second runs from the start)."""
        return False

    def _first_outputs(self, ds: xr.Dataset) -> xr.Dataset:
        """The first solver's outputs as the run records them."""
        return ds

    def _annotate_first(self) -> Callable[[int], tuple[dict, dict]] | None:
        """``annotate`` of the first solver's ``solve_until`` (what it records for the second's fields)."""
        return None

    def _second_first_step(self, part: Interrupted) -> float | None:
        """The second solver's first step (``None``: its own choice)."""
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
        counts; each output's solver is flagged (the class docstring lists the fields).

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
            return self._annotated(None, rest, float(times[0]), 0.0)
        start, own = self._first_state(rho0, continued)
        if self._starts_on_second(start):
            rest = self._second.solve(start, times, continued=True, first_step=first_step, underresolved=underresolved,
                                      **common)
            return self._annotated(None, rest, float(times[0]), 0.0)
        part = self._first.solve_until(start, times, self._stop(), first_step=first_step, continued=own,
                                       annotate=self._annotate_first(), **common)
        outputs = self._first_outputs(part.dataset)
        if outputs.sizes["time"] == times.size:
            return self._annotated(outputs, None, np.nan, 0.0)
        state, moved = self._handed(part)
        later = times[times > part.time]
        rest = self._second.solve(state, np.concatenate([[part.time], later]), continued=True,
                                  first_step=self._second_first_step(part), underresolved=underresolved, **common)
        if part.time not in times:
            rest = rest.isel(time=slice(1, None))
        return self._annotated(outputs, rest, part.time, moved)
