"""The runs both particle systems share: fixed steps and embedded pairs (DOP853, the default,
among them) through the library's driver; and the runs along a stored noise path (the
homogenized SDE, the common-noise density solvers), on the same driver.

The particles on the sphere (:mod:`meanfield.particles`) and in :math:`\\mathbb{R}^d`
(``meanfield.euclidean_particles``) differ in their right-hand side and their records,
not in these loops.
"""

from __future__ import annotations

import math
from typing import Any, Callable, NoReturn

import numpy as np

from .controller import AdaptiveStep, FixedStep
from .driver import StepCounts, equal_steps, integrate
from .runge_kutta import ExplicitRungeKutta
from .tableaux import ExplicitTableau


def fixed_step_run(advance: Callable[[Any, float, float], Any], state: Any, times: np.ndarray, dt: float, bar,
                   record: Callable[[float, Any], None]) -> int:
    """Run ``advance(state, t, h) -> state`` through ``times`` on the shared driver, each output
    interval in equal steps no larger than ``dt``, calling ``record(t, state)`` at each output
    time (``times[0]`` included). Returns the number of steps."""
    counts = StepCounts()
    integrate(state, times, FixedStep(advance), fixed_step=dt, record=record, progress=bar, name="particles",
              counts=counts)
    return counts.steps


def noise_grid_run(advance: Callable[[Any, int], Any], state: Any, times: np.ndarray, steps_at: np.ndarray,
                   dt: float, progress, record: Callable[[Any], None]) -> None:
    """Run ``advance(state, k) -> state``, the k-th step of ``dt`` (k = 1, 2, ...) of a noise's
    grid, through ``times`` on the shared driver, calling ``record(state)`` at each output
    (``times[0]`` included).

    A stochastic run draws its Brownian increments by step number on the grid of ``dt`` that
    ``times`` lie on (``steps_at``: the step count of each output, as
    :func:`meanfield.homogenized.output_steps` gives them). The driver is handed the outputs
    on that grid, ``times[0] + steps_at dt``: its equal steps are then ``dt`` up to round-off
    and as many per interval as the grid's, and ``advance`` steps by ``dt`` itself.
    """
    taken, recorded = 0, 0

    def step(state, t: float, h: float):
        nonlocal taken
        taken += 1
        return advance(state, taken)

    def on_grid(t: float, state) -> None:
        nonlocal recorded
        if taken != steps_at[recorded]:  # the driver's equal steps must be the grid's
            raise RuntimeError(f"output {recorded} reached after {taken} steps, not the grid's {steps_at[recorded]}")
        recorded += 1
        record(state)

    integrate(state, times[0] + steps_at * dt, FixedStep(step), fixed_step=dt, record=on_grid, progress=progress,
              name="diffusive time", counts=StepCounts())


def fixed_step_count(times: np.ndarray, dt: float) -> int:
    """Steps a fixed-step run takes through ``times`` (each interval in equal steps no larger than ``dt``)."""
    return sum(equal_steps(t0, t1, dt)[0] for t0, t1 in zip(times[:-1], times[1:]))


def embedded_pair_run(rhs: Callable[[np.ndarray], np.ndarray], state: np.ndarray, times: np.ndarray,
                      tableau: ExplicitTableau, rtol: float, atol: float, bar, *, norm: Callable[[np.ndarray], float],
                      record: Callable[[float, np.ndarray], None], fail: Callable[[float, str], NoReturn],
                      settings: dict) -> int:
    """Run an embedded pair from ``state`` through ``times``, calling ``record(t, state)`` at each output time.

    Tolerances as :mod:`scipy.integrate` sets them: each step's local error, divided entry by
    entry by ``atol + rtol |q|`` (the larger over the step's two ends), is at most 1 in
    ``norm``. The first step is Hairer's (:func:`initial_step`); a tableau with a continuous
    extension steps past the output times and interpolates them. The step counts go into
    ``settings``; on a collapse ``settings["failure"]`` says why and ``fail(t, reason)`` raises.
    Returns the number of right-hand side evaluations.
    """
    stepper = ExplicitRungeKutta(tableau, rhs, norm=norm, tolerance=lambda q: atol + rtol * np.abs(q))
    counts = StepCounts()

    def collapse(t: float, reason: str) -> NoReturn:
        settings.update(counts.as_dict(), failure=reason)
        fail(t, reason)

    first = initial_step(rhs, state, stepper.first_stage(state), times[-1] - times[0], tableau.error_estimator_order,
                         atol + rtol * np.abs(state), norm)
    dense = stepper.interpolate if tableau.continuous_extension is not None else None
    integrate(state, times, AdaptiveStep(stepper), first_step=first, record=record, collapse=collapse,
              observer=None, progress=bar, name="particles", max_steps=10_000_000, counts=counts, interpolate=dense)
    settings.update(counts.as_dict())
    return stepper.evaluations + 1  # and initial_step's trial


def rms(x: np.ndarray) -> float:
    """Root mean square of the entries of a real array, by one dot product (the particles' error norm, every step)."""
    return math.sqrt(float(np.vdot(x, x)) / x.size)


def _scaled_norm(norm: Callable[[np.ndarray], float], x: np.ndarray) -> float:
    """``norm(x)``, or where the squares overflow (a huge speed) ``max|x| norm(x / max|x|)``."""
    value = norm(x)
    if value < np.inf:
        return value
    largest = float(np.abs(x).max())
    with np.errstate(invalid="ignore"):
        return largest * norm(x / largest) if largest < np.inf else np.inf


def initial_step(rhs: Callable[[np.ndarray], np.ndarray], q: np.ndarray, f0: np.ndarray, span: float,
                 error_estimator_order: int, scale: np.ndarray, norm: Callable[[np.ndarray], float]) -> float:
    """Hairer's first step (Hairer, Norsett and Wanner, *Solving ODEs I*, II.4; scipy's ``select_initial_step``).

    From ``q`` and ``f0 = rhs(q)``: a trial Euler step of 1 % of the state over its speed
    (both scaled by ``scale``), then the step at which the estimated second derivative's term
    would reach 1 % of the tolerance, for an estimate of the given order; at most 100 times
    the trial, and ``span``. One evaluation of ``rhs`` (the trial's).
    """
    with np.errstate(over="ignore", invalid="ignore"):  # a speed that overflows is the controller's to refuse
        d0, d1 = _scaled_norm(norm, q / scale), _scaled_norm(norm, f0 / scale)
        h0 = min(1e-6 if d0 < 1e-5 or d1 < 1e-5 else 0.01 * d0 / d1, span)
        if not h0 > 0:
            return float(span)
        d2 = _scaled_norm(norm, (rhs(q + h0 * f0) - f0) / scale) / h0
    if d1 <= 1e-15 and d2 <= 1e-15:
        h1 = max(1e-6, h0 * 1e-3)
    else:
        h1 = (0.01 / max(d1, d2)) ** (1 / (error_estimator_order + 1))
    return float(min(100 * h0, h1, span))
