r"""Finite-volume solver for the mean-field equation on the circle.

.. math:: \partial_t\rho + \partial_\theta(\rho\, v[\rho]) = D\,\partial_\theta^2\rho

Space: flux form, face velocities from an FFT convolution
(``solvers.circle.operators``). The state is the deviation from the uniform density and
``rtol`` bounds each step's local error relative to it (``solvers.tolerance``). Time,
with the step always adapted:

``D = 0``
    An embedded explicit Runge-Kutta pair (``tableau``; by default Heun's SSP-RK2 with Euler
    embedded) on the upwind flux with positivity-limited central slopes; the step obeys the
    CFL bound (positivity), the pair's error estimate (``rtol``) and must not decrease the
    energy (increase it, in the repulsive case) beyond round-off. The semi-discrete scheme
    is exactly energy-monotone, so a small enough step always passes.
``D > 0``
    Extrapolated linearly implicit Euler on the Scharfetter-Gummel drift-diffusion flux
    (:class:`~meanfield.integration.ExtrapolatedImplicitEuler`): the step ``dt`` is taken
    with 1, 2, ..., ``implicit_substeps`` substeps, the potential frozen at the start of each,
    and the results extrapolated (Aitken-Neville) to order ``implicit_substeps``; the member
    of one order less estimates the error, with no parabolic step restriction. Each linearly
    implicit step is positive and, for attractive gradient flows (USA, Kuramoto, zonal
    aggregation with a positive-definite potential), dissipates the discrete free energy
    whatever the step (convex-concave splitting). The extrapolation keeps neither property by
    construction: where it would be negative it is blended toward the positive finest
    implicit solution (one factor for all cells, so mass is kept), and a step whose free
    energy would rise beyond round-off is retried with half the step, so the free energy is
    checked at every step rather than guaranteed.

Resolution: the run carries a shadow solution on ``cells/2`` cells. Without diffusion it is
the same scheme at half the resolution in space and in time: after every ``SHADOW_PERIOD``
(two) accepted steps of the run, and at each output, the shadow takes one step of their total
length (the steps one by one where that would pass the shadow's own CFL bound): half the
cells and half the steps. Heun's error is second order in time as the scheme's is in
space, so the difference of the two solutions carries the run's time-stepping error with the
same factor as its spatial error. With diffusion the implicit steps are of order
``implicit_substeps`` and set by accuracy, not stability: the shadow takes the run's steps.
The shadow observes and never steers: the run's solution is bitwise that of a run without it.
The run records an estimate of the max-norm error of each output,
``error_estimate`` :math:`= \max_j |R\rho_N - \rho_{N/2}|_j / 2` (``R`` averages pairs of cells).
Richardson's factor for a second-order scheme would be :math:`1/3`; the calibrated
:math:`1/2` keeps the estimate above the error where clusters lower the effective order.
Calibrated against runs at ``2N`` cells (``tests/test_error_estimate.py``: growth-rate runs
and clustering runs): twice the true error while the scheme is in its asymptotic regime
(1.5 times the error against the exact solution), within a factor 3 up to errors of 5 % of
``max rho``; beyond, once the shadow grid has lost the clusters too, it underestimates (the
run has been declared under-resolved long before). The run is declared under-resolved once
the estimate exceeds ``error_level`` times ``max rho``.
"""

from __future__ import annotations

import math
import bisect
import time
from dataclasses import dataclass, field, replace
from typing import Callable, NamedTuple

import numpy as np

from meanfield.checks import check_density, check_int, check_real, check_rtol
from meanfield.docstrings import fill_docstrings
from meanfield.records import CIRCLE

from .operators import CircleOperators, gauss_cell_averages
from .transport import CompiledHeunTransport, transport_of
from meanfield.integration import (AdaptiveStep, ExplicitTableau, ExtrapolatedImplicitEuler,
                                   explicit_adaptive_step, tableau_named)

from ..grid_solver import DATASET_PARAMETERS, CostEstimate, Diagnosis, GridSolver, attention_speed_bound
from ..reference import circle_operators
from ..resolution import UnresolvedStart, sharpest_cluster_width
from ..tolerance import error_tolerance

#: The error estimate's shadow takes one step per this many of the run's (module docstring).
SHADOW_PERIOD = 2


@fill_docstrings(dataset_parameters=DATASET_PARAMETERS)
@dataclass(frozen=True, eq=False)
class CircleFV(GridSolver):
    r"""Second-order, positivity-preserving finite volumes on the circle.

    Parameters
    ----------
    model : SelfAttention, ZonalAggregation or any model with a velocity_field
        SA or USA with any query, key and value matrices (2 x 2) and heads, ``beta = 0``, a
        zonal aggregation, or any model that provides ``meanfield.protocols.Model``
        (through its ``velocity_field``); any diffusion.
    cells : int
        Number of cells ``N``; cell ``j`` is :math:`[2\pi j/N, 2\pi(j+1)/N)`.
    rtol : float
        Local error per step, in :math:`L^2`, relative to the deviation :math:`\rho - \bar\rho`
        from the uniform density (``solvers.tolerance``).
    cfl : float
        Courant number bound, at most 0.5 (positivity of the reconstruction).
    min_cluster_cells : float
        A cluster narrower than this (full width at half maximum, in cells) is under-resolved.
    interaction : {"auto", "zonal", "general", "reference"}
        How the velocity is computed: ``"zonal"`` (``Q = K = I``, ``V = cI``, one head: an FFT
        convolution, ``solvers.circle.operators``), ``"general"`` (any query, key and
        value matrices and heads: ``solvers.circle.general``) or ``"reference"`` (the model's
        ``velocity_field`` on the cell-centre quadrature, any model: ``solvers.reference``);
        ``"auto"`` takes the fastest path that serves the model.
    tableau : str or ExplicitTableau
        The embedded Runge-Kutta pair of the transport (``D = 0``;
        ``meanfield.integration.TABLEAUX``). The default, Heun/Euler, is strong-stability
        preserving: under the CFL bound every step keeps the density positive.
    implicit_substeps : int
        ``D > 0``: the linearly implicit Euler step is taken with 1, 2, ..., ``k`` substeps and
        extrapolated to order ``k``; the order ``k - 1`` member estimates the error.
    error_level : float or None
        The run is under-resolved once its estimated max-norm error (module docstring) exceeds
        this fraction of ``max rho``; ``None``: no shadow run and no estimate (cheaper: the shadow
        takes the same steps as the run).
    """

    model: object
    cells: int = 1024
    rtol: float = 1e-6
    cfl: float = 0.45
    min_cluster_cells: float = 4.0
    interaction: str = "auto"
    tableau: str | ExplicitTableau = "heun_euler"
    implicit_substeps: int = 3
    error_level: float | None = 1e-3
    operators: CircleOperators = field(init=False, repr=False)
    shadow: "CircleFV | None" = field(init=False, repr=False, default=None)

    def __post_init__(self) -> None:
        self._check_time_settings()
        if self.model.dimension not in (None, 2):
            raise ValueError(f"CircleFV solves on the circle: the model's matrices are "
                             f"{self.model.dimension} x {self.model.dimension}, not 2 x 2")
        object.__setattr__(self, "operators", circle_operators(self.model, self.cells, self.interaction, self.name))
        if self.error_level is not None:
            check_real(self.error_level, "error_level", minimum=0.0, strictly=True)
            if self.cells % 2 or self.cells < 16:
                raise ValueError(f"the error estimate runs a shadow on cells/2 cells: cells must be even and "
                                 f">= 16, got {self.cells} (or pass error_level=None)")
            object.__setattr__(self, "shadow", replace(self, cells=self.cells // 2, error_level=None))

    def _check_time_settings(self) -> None:
        """Check the grid and time-stepping arguments (shared with the layered causal solver)."""
        check_int(self.cells, "cells", minimum=8)
        check_rtol(self.rtol)
        if not 0 < check_real(self.cfl, "cfl") <= 0.5:
            raise ValueError(f"cfl must be in (0, 0.5] for positivity, got {self.cfl!r}")
        object.__setattr__(self, "tableau", tableau_named(self.tableau))
        check_int(self.implicit_substeps, "implicit_substeps", minimum=2)

    @property
    def theta(self) -> np.ndarray:
        """Cell centres, shape ``(cells,)``."""
        return self.operators.theta

    def initial_density(self, rho0: Callable[[np.ndarray], np.ndarray] | np.ndarray, *,
                        name: str = "rho0") -> np.ndarray:
        r"""Cell averages of ``rho0`` normalized to mass one (a callable is averaged by 4-point Gauss).

        Parameters
        ----------
        rho0 : callable or numpy.ndarray
            A vectorized density of :math:`\theta`, or an array of ``cells`` cell values.
        name : str
            The argument's name in error messages.

        Returns
        -------
        numpy.ndarray, shape (cells,)
            The cell averages, of mass one.

        Raises
        ------
        ValueError
            If the density is negative, not finite, of zero mass or of the wrong shape.
        """
        values = gauss_cell_averages(rho0, self.cells, name)
        return values / self.operators.mass(values)

    name = "CircleFV"
    geometry = CIRCLE
    default_max_steps = 10_000_000

    @property
    def _resolution_advice(self) -> str:
        return f"increase cells (now {self.cells}), add diffusion, or stop earlier"

    @property
    def energy_scaled(self) -> bool:
        """Whether ``energy`` is :math:`e^{-\\beta} E` (where :math:`E` would overflow)."""
        return self.operators.energy_scaled

    # The state is the deviation from the uniform density (with the shadow's, when there is one: ShadowedState).
    def _initial_state(self, rho0, continued: bool) -> np.ndarray | ShadowedState:
        if continued and self.shadow is not None and np.shape(rho0) == (self.cells + self.cells // 2,):
            # an earlier run's continuation_state: the shadow goes on with its own history
            joined = check_density(rho0, np.shape(rho0), "rho0", evolved=True) - self.operators.uniform
            return ShadowedState(joined[:self.cells], joined[self.cells:])
        rho = check_density(rho0, (self.cells,), "rho0", evolved=True) if continued else self.initial_density(rho0)
        deviation = rho - self.operators.uniform
        return deviation if self.shadow is None else ShadowedState(deviation, _restricted(deviation))

    def continuation_state(self, ds) -> np.ndarray:
        """What ``solve(..., continued=True)`` takes to go on from the end of ``ds``, the shadow included.

        Passing ``ds.rho[-1]`` instead restarts the shadow from the density: the estimate then
        counts only the error made after the restart.

        {dataset_parameters}

        Returns
        -------
        numpy.ndarray
            The last density, followed by the shadow grid's when the run kept one.
        """
        last = ds.rho.values[-1]
        if self.shadow is None or "shadow_rho" not in ds or not np.all(np.isfinite(ds.shadow_rho.values[-1])):
            return last
        return np.concatenate([last, ds.shadow_rho.values[-1]])

    def _recorded_fields(self, state: np.ndarray | ShadowedState) -> dict:
        if self.shadow is None:
            return {}
        shadow = _shadowed(state, self.cells).shadow
        shadow = np.full(self.cells // 2, np.nan) if shadow is None else self.operators.uniform + shadow
        return {"shadow_rho": (("shadow_theta",), shadow)}

    def _recorded_coordinates(self) -> dict[str, np.ndarray]:
        return {} if self.shadow is None else {"shadow_theta": self.shadow.theta}

    def density(self, deviation: np.ndarray) -> np.ndarray:
        """Cell averages of the density from the solver's state.

        Parameters
        ----------
        deviation : numpy.ndarray or ShadowedState
            The state: the deviation from the uniform density (followed by the shadow's, or with it).

        Returns
        -------
        numpy.ndarray, shape (cells,)
            The density's cell averages.
        """
        if isinstance(deviation, ShadowedState):
            return self.operators.uniform + deviation.solution
        return self.operators.uniform + deviation[..., :self.cells]

    def _stepper(self, state: np.ndarray | ShadowedState, times: np.ndarray):
        discretisation = transport_of(self)
        if self.model.diffusion > 0:
            stepper = ExtrapolatedImplicitEuler(discretisation.linearly_implicit_step, self.implicit_substeps,
                                                norm=discretisation.norm, tolerance=discretisation.tolerance,
                                                lower_bound=-self.operators.uniform)
            attempt = AdaptiveStep(stepper, admit=discretisation.admit)
        elif isinstance(discretisation, CompiledHeunTransport):  # the engine is the pair's stepper too
            attempt = AdaptiveStep(discretisation, stable_step=discretisation.stable_step,
                                   bound_after=self.tableau.first_same_as_last, admit=discretisation.admit)
        else:
            attempt = explicit_adaptive_step(discretisation, self.tableau)
        if self.shadow is not None:
            state, attempt = state.solution, _ShadowedStep(self, attempt, times)
        return attempt, self._initial_step(discretisation.stable_step(state), times), dict

    def error_estimate(self, state: np.ndarray | ShadowedState) -> float:
        """The Richardson estimate of the max-norm error of the density (module docstring).

        Parameters
        ----------
        state : numpy.ndarray or ShadowedState
            The solver's state (the density's deviation followed by the shadow's, or with it).

        Returns
        -------
        float
            Half the largest difference between the density restricted to the shadow's grid and
            the shadow; NaN without a shadow, or while the shadow lags behind (between outputs);
            infinite once the shadow has lost the solution (the error is unknown).
        """
        if self.shadow is None:
            return np.nan
        state = _shadowed(state, self.cells)
        if state.shadow is None:
            return np.inf
        if state.pending:
            return np.nan
        return float(np.abs(_restricted(state.solution) - state.shadow).max() / 2.0)

    def _beyond_error_level(self, state: np.ndarray | ShadowedState) -> bool:
        """Whether the estimated error exceeds ``error_level`` times ``max rho``.

        Parameters
        ----------
        state : numpy.ndarray or ShadowedState
            The solver's state.

        Returns
        -------
        bool
            Never true without a shadow, nor while the shadow lags behind the run.
        """
        return self.shadow is not None and self.error_estimate(state) > self.error_level * self.density(state).max()

    def resolved_start(self, rho0, *, name: str = "rho0") -> np.ndarray:
        """The initial cell averages (:meth:`initial_density`), refused where the cells do not resolve them.

        Parameters
        ----------
        rho0 : callable or numpy.ndarray
            As for :meth:`initial_density`.
        name : str
            The argument's name in error messages.

        Returns
        -------
        numpy.ndarray
            The cell averages (a layered family's rows): what :meth:`cost_estimate` takes.

        Raises
        ------
        UnresolvedStart
            If the sharpest peak (of any layer) spans fewer than ``min_cluster_cells`` cells.
        ValueError
            As :meth:`initial_density`.
        """
        rho = self.initial_density(rho0, name=name)
        width = min(sharpest_cluster_width(layer) for layer in np.reshape(rho, (-1, rho.shape[-1])))
        if width < self.min_cluster_cells:
            raise UnresolvedStart(f"its sharpest peak spans {width:.3g} cells (< {self.min_cluster_cells:g})", "cells",
                                  self.cells)
        return rho

    def cost_estimate(self, state: np.ndarray, span: float) -> CostEstimate | None:
        """The CFL bound's steps over ``span`` and one step's time (``UpFrontChecks.cost_estimate``).

        Parameters
        ----------
        state : numpy.ndarray
            The initial cell averages (``initial_density``'s result; a layered family's rows).
        span : float
            The run's duration.

        Returns
        -------
        CostEstimate or None
            ``None`` with diffusion: the implicit steps have no stability limit.
        """
        if self.model.diffusion > 0:
            return None
        ops = self.operators
        deviation = state - ops.uniform
        started = time.perf_counter()
        speed = float(np.abs(ops.face_velocity(deviation)).max())
        ops.rhs(deviation)
        if self.shadow is not None:  # the error estimate's shadow takes the same steps
            self.shadow.operators.rhs(_restricted(deviation))
        per_step = self.tableau.stages * (time.perf_counter() - started)  # a right-hand side per stage
        steps = span * max(speed, attention_speed_bound(self.model)) / (self.cfl * ops.width)
        return CostEstimate(steps, per_step, "cells", self.cells)

    def _diagnose(self, state: np.ndarray, rho: np.ndarray):
        ops = self.operators
        width = sharpest_cluster_width(rho)
        estimate = self.error_estimate(state)
        values = {"mass": ops.mass(rho), "energy": ops.energy(rho), "lyapunov": ops.lyapunov(rho),
                  "min_density": rho.min(), "cluster_width": width, "error_estimate": estimate}
        if estimate == np.inf:
            return Diagnosis(values, False, f"the error estimate's shadow grid ({self.cells // 2} cells) lost the "
                                            "solution (its values are not finite): the error is unknown")
        if self._beyond_error_level(state):
            return Diagnosis(values, False, f"the estimated error {estimate:.3g} exceeds error_level x max rho = "
                                            f"{self.error_level:g} x {rho.max():.4g}")
        resolved = bool(width >= self.min_cluster_cells and rho.min() >= 0)
        return Diagnosis(values, resolved, f"the sharpest cluster spans {width:.3g} cells (< {self.min_cluster_cells:g})")

    def _grid_coordinates(self) -> dict[str, np.ndarray]:
        return {"theta": self.theta}

    def _recorded_settings(self) -> dict:
        scheme = ({"implicit_substeps": self.implicit_substeps} if self.model.diffusion > 0
                  else {"tableau": self.tableau.name})
        return {"cells": self.cells, "rtol": self.rtol, "cfl": self.cfl, "error_level": self.error_level, **scheme}

    def _initial_step(self, stable_step: float, times: np.ndarray) -> float:
        span = times[-1] - times[0]
        return min(span, 0.1 * stable_step) if span > 0 else 1.0

    def _tolerance(self, deviation: np.ndarray) -> float:
        return error_tolerance(self.rtol, self.operators.deviation_norm(deviation), self.operators.uniform_norm)


def _shadowed(state: np.ndarray | ShadowedState, cells: int) -> ShadowedState:
    """The state with its shadow, from either form (a continuation state joins them)."""
    return state if isinstance(state, ShadowedState) else ShadowedState(state[:cells], state[cells:])


def _restricted(values: np.ndarray) -> np.ndarray:
    """Averages of pairs of cells: the values on the grid of half as many cells."""
    return values.reshape(values.shape[:-1] + (-1, 2)).mean(axis=-1)


class ShadowedState(NamedTuple):
    """A run's state with its shadow (``CircleFV`` with an error estimate): each a deviation from
    the uniform density, and the steps of the run the shadow has yet to take (none at outputs).
    ``shadow`` is ``None`` once it has lost the solution (values that are not finite): the error
    is then unknown, and the run's own solution goes on."""

    solution: np.ndarray
    shadow: np.ndarray | None
    pending: tuple[float, ...] = ()


class _ShadowedStep:
    """``attempt(state, dt, t)`` of the run with its shadow, on :class:`ShadowedState`.

    The run's own adaptive step decides everything (step, acceptance, admission), so its
    solution is bitwise that of a run without the shadow. The shadow observes: after every
    ``period`` accepted steps (``SHADOW_PERIOD`` for the explicit scheme, one for the implicit
    one), or one that lands on an output, it takes one step of their total length
    (``advance``), its round-off negatives repaired, whatever else it does (a negative value
    once it has lost the clusters) showing in the estimate.
    """

    def __init__(self, solver: CircleFV, run: Callable, outputs: np.ndarray):
        self.run, self.outputs = run, [float(t) for t in outputs]
        self.coarse = coarse = transport_of(solver.shadow)
        if solver.model.diffusion > 0:
            implicit = ExtrapolatedImplicitEuler(coarse.linearly_implicit_step, solver.implicit_substeps,
                                                 norm=coarse.norm, tolerance=coarse.tolerance)
            self._step = lambda shadow, h: implicit.step(shadow, h)[0]
            self.period, self.cfl_bound = 1, None
        else:
            self._step, self.period, self.cfl_bound = coarse.advance, SHADOW_PERIOD, coarse.stable_step

    def __call__(self, state: ShadowedState, dt: float, t: float):
        new, proposal, reason = self.run(state.solution, dt, t)
        if reason is not None:
            return None, proposal, reason
        if state.shadow is None:
            return ShadowedState(new, None), proposal, None
        pending = state.pending + (dt,)
        if len(pending) < self.period and not self._lands_on_output(t, dt):
            return ShadowedState(new, state.shadow, pending), proposal, None
        return ShadowedState(new, self.advance(state.shadow, pending)), proposal, None

    def _lands_on_output(self, t: float, dt: float) -> bool:
        """Whether the step ends on an output time (as the driver decides it: ``dt == output - t``)."""
        following = bisect.bisect_right(self.outputs, t)
        return following < len(self.outputs) and dt == self.outputs[following] - t

    def advance(self, shadow: np.ndarray, steps: tuple[float, ...]) -> np.ndarray | None:
        """The shadow after ``steps``: in one step of their sum, or one by one past its CFL bound;
        ``None`` once its values are not finite (it has lost the solution: the run's own goes on)."""
        total = sum(steps)
        if self.cfl_bound is None or total <= self.cfl_bound(shadow):
            steps = (total,)
        for h in steps:
            new = self._step(shadow, h)
            if not math.isfinite(np.dot(new, new)):  # one BLAS call, into which NaN and infinities propagate
                return None
            repaired = self.coarse.repaired(shadow, new)
            shadow = new if repaired is None else repaired
        return shadow


class StartsWithFiniteVolumes:
    """The grid and initial density of a solver whose run starts on :class:`CircleFV` (its ``finite_volumes``)."""

    @property
    def theta(self) -> np.ndarray:
        return self.finite_volumes.theta

    def initial_density(self, rho0, *, name: str = "rho0") -> np.ndarray:
        """Cell averages of ``rho0`` on the ``cells`` cells, mass one.

        Parameters
        ----------
        rho0 : callable or numpy.ndarray
            As for :meth:`CircleFV.initial_density <solvers.CircleFV.initial_density>`.
        name : str
            The argument's name in error messages.

        Returns
        -------
        numpy.ndarray, shape (cells,)
            The cell averages.
        """
        return self.finite_volumes.initial_density(rho0, name=name)
