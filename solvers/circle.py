r"""Finite-volume solver for the mean-field equation on the circle.

.. math:: \partial_t\rho + \partial_\theta(\rho\, v[\rho]) = D\,\partial_\theta^2\rho

Space: flux form, face velocities from an FFT convolution
(:mod:`solvers.circle_operators`). The state is the deviation from the uniform density and
``rtol`` bounds each step's local error relative to it (:mod:`solvers.tolerance`). Time,
with the step always adapted:

``D = 0``
    Heun's SSP-RK2 on the upwind flux with positivity-limited central slopes; the step obeys
    the CFL bound (positivity), an embedded Euler/Heun error estimate (``rtol``) and must not
    decrease the energy (increase it, in the repulsive case) beyond round-off. The
    semi-discrete scheme is exactly energy-monotone, so a small enough step always passes.
``D > 0``
    Richardson-extrapolated linearly implicit Euler on the Scharfetter-Gummel
    drift-diffusion flux: one step of ``dt`` and two of ``dt/2``, the potential frozen at the
    start of each; ``2 * halves - full`` is second order, L-stable (its amplification
    :math:`2/(1-z/2)^2 - 1/(1-z)` lies in :math:`[-0.04, 1]` for real :math:`z \le 0`), with no
    parabolic step restriction; ``|halves - full|`` is the error estimate. Each linearly
    implicit step is positive and, for attractive gradient flows (USA, Kuramoto, zonal
    aggregation with a positive-definite potential), dissipates the discrete free energy
    whatever the step (convex-concave splitting). The extrapolation keeps neither property by
    construction: where ``2 * halves - full`` would be negative it is blended toward the
    positive ``halves`` (one factor for all cells, so mass is kept), and a step whose free
    energy would rise beyond round-off is retried with half the step, so the free energy is
    checked at every step rather than guaranteed.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import numpy as np
from scipy.special import roots_legendre

from meanfield.checks import check_density, check_int, check_real, check_rtol
from meanfield.records import CIRCLE

from .circle_general import GeneralCircleOperators
from .heads import takes_general_path
from .circle_operators import CircleOperators
from .driver import step_factor
from .grid_solver import GridSolver
from .resolution import sharpest_cluster_width
from .tolerance import error_tolerance

#: Relative round-off slack of the Lyapunov check (sums of N terms in double precision).
LYAPUNOV_SLACK = 1e-12

#: Negative values down to this fraction of max(rho) are round-off (FFT, cancelling fluxes in
#: a cell that empties), not a loss of positivity.
ROUNDOFF_NEGATIVE = 64 * np.finfo(float).eps


def _repair_roundoff(rho: np.ndarray, roundoff: float) -> np.ndarray | None:
    """Zero the round-off negatives and restore the mass they carried; ``None`` if any is larger."""
    low = rho.min()
    if low >= 0:
        return rho
    if low < -roundoff:
        return None
    # Along the cells only: each layer of a layered density keeps its own mass.
    total = rho.sum(axis=-1, keepdims=True)
    repaired = np.maximum(rho, 0.0)
    return repaired * (total / repaired.sum(axis=-1, keepdims=True))


@dataclass(frozen=True, eq=False)
class CircleFV(GridSolver):
    r"""Second-order, positivity-preserving finite volumes on the circle.

    Parameters
    ----------
    model : SelfAttention or ZonalAggregation
        SA or USA with any query, key and value matrices (2 x 2) and heads, ``beta = 0``, or a
        zonal aggregation; any diffusion.
    cells : int
        Number of cells ``N``; cell ``j`` is :math:`[2\pi j/N, 2\pi(j+1)/N)`.
    rtol : float
        Local error per step, in :math:`L^2`, relative to the deviation :math:`\rho - \bar\rho`
        from the uniform density (:mod:`solvers.tolerance`).
    cfl : float
        Courant number bound, at most 0.5 (positivity of the reconstruction).
    min_cluster_cells : float
        A cluster narrower than this (full width at half maximum, in cells) is under-resolved.
    interaction : {"auto", "zonal", "general"}
        How the velocity is computed: ``"zonal"`` (``Q = K = I``, ``V = cI``, one head: an FFT
        convolution, :mod:`solvers.circle_operators`) or ``"general"`` (any query, key and
        value matrices and heads: :mod:`solvers.circle_general`); ``"auto"`` takes the zonal
        path whenever the model allows it.
    """

    model: object
    cells: int = 1024
    rtol: float = 1e-6
    cfl: float = 0.45
    min_cluster_cells: float = 4.0
    interaction: str = "auto"
    operators: CircleOperators = field(init=False, repr=False)

    def __post_init__(self) -> None:
        check_int(self.cells, "cells", minimum=8)
        check_rtol(self.rtol)
        if not 0 < check_real(self.cfl, "cfl") <= 0.5:
            raise ValueError(f"cfl must be in (0, 0.5] for positivity, got {self.cfl!r}")
        if getattr(self.model, "dimension", None) not in (None, 2):
            raise ValueError(f"CircleFV solves on the circle: the model's matrices are "
                             f"{self.model.dimension} x {self.model.dimension}, not 2 x 2")
        general = takes_general_path(self.model, self.interaction, self.name)
        operators = GeneralCircleOperators if general else CircleOperators
        object.__setattr__(self, "operators", operators(self.model, self.cells))

    @property
    def theta(self) -> np.ndarray:
        """Cell centres, shape ``(cells,)``."""
        return self.operators.theta

    def initial_density(self, rho0: Callable[[np.ndarray], np.ndarray] | np.ndarray, *,
                        name: str = "rho0") -> np.ndarray:
        """Cell averages of ``rho0`` normalized to mass one (a callable is averaged by 4-point Gauss).

        ``rho0`` is a density of :math:`\\theta` or an array of ``cells`` cell values; errors
        call it ``name``.
        """
        if callable(rho0):
            nodes, weights = roots_legendre(4)
            h = self.operators.width
            left = np.arange(self.cells) * h
            samples = np.asarray(rho0(left[:, None] + 0.5 * h * (nodes + 1)), dtype=float)
            values = check_density(0.5 * samples @ weights if samples.shape == (self.cells, 4) else samples,
                                   (self.cells,), name)
        else:
            values = check_density(rho0, (self.cells,), name)
        return values / self.operators.mass(values)

    name = "CircleFV"
    geometry = CIRCLE
    default_max_steps = 10_000_000

    @property
    def _advice(self) -> str:
        return f"increase cells (now {self.cells}), add diffusion, or stop earlier"

    @property
    def energy_scaled(self) -> bool:
        """Whether ``energy`` is :math:`e^{-\\beta} E` (where :math:`E` would overflow)."""
        return self.operators.energy_scaled

    # The state is (deviation from the uniform density, Lyapunov functional of the density).
    def _initial_state(self, rho0, continued: bool):
        rho = check_density(rho0, (self.cells,), "rho0", evolved=True) if continued else self.initial_density(rho0)
        return rho - self.operators.uniform, self.operators.lyapunov(rho)

    def density(self, state) -> np.ndarray:
        """Cell averages of the density, shape ``(cells,)``, from the solver's state."""
        return self.operators.uniform + state[0]

    def _stepper(self, state, times: np.ndarray):
        return self._attempt, self._initial_step(state[0], times), dict

    def _diagnose(self, state, rho: np.ndarray):
        ops = self.operators
        width = sharpest_cluster_width(rho)
        functional = state[1]
        resolved = bool(width >= self.min_cluster_cells and rho.min() >= 0)
        values = {"mass": ops.mass(rho), "energy": ops.energy(rho),
                  "lyapunov": np.nan if functional is None else functional,
                  "min_density": rho.min(), "cluster_width": width}
        return values, resolved, f"the sharpest cluster spans {width:.3g} cells (< {self.min_cluster_cells:g})"

    def _coordinates(self) -> dict[str, np.ndarray]:
        return {"theta": self.theta}

    def _settings(self) -> dict:
        return {"cells": self.cells, "rtol": self.rtol, "cfl": self.cfl}

    def _initial_step(self, deviation: np.ndarray, times: np.ndarray) -> float:
        speed = np.abs(self.operators.face_velocity(deviation)).max()
        span = times[-1] - times[0]
        return min(span, 0.1 * self.cfl * self.operators.width / max(speed, 1e-300)) if span > 0 else 1.0

    def _tolerance(self, *deviations: np.ndarray) -> float:
        ops = self.operators
        scale = max(ops.deviation_norm(deviation) for deviation in deviations)
        return error_tolerance(self.rtol, scale, ops.uniform_norm)

    def _attempt(self, state: tuple[np.ndarray, float | None], dt: float):
        """One step from ``(deviation, lyapunov(rho))``: ``(new_state, next_dt, None)`` or ``(None, dt, reason)``."""
        deviation, functional = state
        step = self._implicit_step if self.model.diffusion > 0 else self._transport_step
        new, proposal, reason = step(deviation, dt)
        if reason is not None:
            return None, proposal, reason
        updated = self.operators.lyapunov(self.operators.uniform + new)
        if functional is not None and updated > functional + LYAPUNOV_SLACK * (abs(functional) + abs(updated)):
            return None, 0.5 * dt, "lyapunov"
        return (new, updated), proposal, None

    def _transport_step(self, deviation: np.ndarray, dt: float):
        ops, h = self.operators, self.operators.width
        velocity = ops.face_velocity(deviation)
        speed = np.abs(velocity).max()
        if dt * speed > self.cfl * h:
            return None, 0.95 * self.cfl * h / speed, "cfl"
        k1 = -ops.flux_divergence(deviation, velocity)
        stage = deviation + dt * k1
        roundoff = ROUNDOFF_NEGATIVE * (ops.uniform + deviation.max())
        if ops.uniform + stage.min() < -roundoff:
            return None, 0.5 * dt, "positivity"
        k2 = ops.rhs(stage)
        new = 0.5 * (deviation + stage + dt * k2)
        # Heun minus Euler estimates Euler's local error; the step controller is of order 2.
        error = ops.deviation_norm(0.5 * dt * (k2 - k1)) / self._tolerance(deviation, new)
        new, proposal, reason = self._finish(new, dt, error, roundoff, order=2)
        # Propose no more than the CFL bound at the current speed, so growth is not rejected next.
        return new, min(proposal, 0.95 * self.cfl * h / max(speed, 1e-300)), reason

    def _implicit_step(self, deviation: np.ndarray, dt: float):
        # Step doubling: the distance of two half steps to one full step estimates the error of the
        # half steps (first order); their extrapolation is kept. (The cheaper (dt/2)|f(new) - f(old)|
        # misses the splitting error of the frozen potential, which dominates when drift and
        # diffusion nearly balance.)
        ops = self.operators
        full = ops.linearly_implicit_step(deviation, dt)
        halves = ops.linearly_implicit_step(ops.linearly_implicit_step(deviation, 0.5 * dt), 0.5 * dt)
        correction = halves - full
        error = ops.deviation_norm(correction) / self._tolerance(deviation, halves)
        rho_halves = ops.uniform + halves
        # The largest blend factor in [0, 1] that keeps halves + factor * correction nonnegative.
        falling = correction < 0
        factor = min(1.0, float(np.min(rho_halves[falling] / -correction[falling]))) if falling.any() else 1.0
        new = halves + max(factor, 0.0) * correction
        return self._finish(new, dt, error, ROUNDOFF_NEGATIVE * (ops.uniform + deviation.max()), order=1)

    def _finish(self, new: np.ndarray, dt: float, error: float, roundoff: float, order: int):
        factor = step_factor(error, order)
        if error > 1.0:
            return None, dt * factor, "accuracy"
        repaired = _repair_roundoff(self.operators.uniform + new, roundoff)
        if repaired is None:
            return None, 0.5 * dt, "positivity"
        return repaired - self.operators.uniform, dt * factor, None
