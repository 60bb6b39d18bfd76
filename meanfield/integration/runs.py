"""The runs both particle systems share: fixed steps and embedded pairs through the library's
driver, and scipy's DOP853 with its dense output; and the runs along a stored noise path
(the homogenized SDE, the common-noise density solvers), on the same driver.

The particles on the sphere (:mod:`meanfield.particles`) and in :math:`\\mathbb{R}^d`
(``meanfield.euclidean_particles``) differ in their right-hand side and their records,
not in these loops.
"""

from __future__ import annotations

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


def dop853_frames(rhs: Callable[[float, np.ndarray], np.ndarray], x0: np.ndarray, times: np.ndarray,
                  rtol: float, atol: float, bar,
                  fail: Callable[[float, str, list], NoReturn]) -> tuple[list[np.ndarray], int]:
    """Frames ``x(t)`` of shape ``x0.shape`` at ``times`` by :class:`scipy.integrate.DOP853` and its dense output.

    ``rhs(t, y)`` acts on the flattened state; ``fail(t, message, frames)`` is called (and must
    raise) when the solver fails. Returns the frames and the number of evaluations.
    """
    from scipy.integrate import DOP853  # here: only this path needs scipy.integrate (slow to import)

    frames = [x0.copy()]
    solver = DOP853(rhs, times[0], x0.ravel(), times[-1], rtol=rtol, atol=atol)
    next_out = 1
    while next_out < times.size:
        message = solver.step()
        if solver.status == "failed":
            fail(solver.t, message, frames)
        bar.update(solver.t - solver.t_old)
        if solver.t >= times[next_out]:
            dense = solver.dense_output()
            while next_out < times.size and times[next_out] <= solver.t:
                frames.append(dense(times[next_out]).reshape(x0.shape))
                next_out += 1
    return frames, solver.nfev


def embedded_pair_run(rhs: Callable[[Any], Any], state: Any, times: np.ndarray, tableau: ExplicitTableau,
                      rtol: float, atol: float, bar, *, norm: Callable[[Any], float],
                      record: Callable[[float, Any], None], fail: Callable[[float, str], NoReturn],
                      settings: dict) -> int:
    """Run an embedded pair from ``state`` through ``times`` (each step's local error below
    ``atol + rtol * norm(q)`` in ``norm``), calling ``record(t, state)`` at each output time.

    The first step moves the state by about 1 % of its norm. The step counts go into
    ``settings``; on a collapse ``settings["failure"]`` says why and ``fail(t, reason)`` raises.
    Returns the number of right-hand side evaluations.
    """
    stepper = ExplicitRungeKutta(tableau, rhs, norm=norm, tolerance=lambda q: atol + rtol * norm(q))
    counts = StepCounts()

    def collapse(t: float, reason: str) -> NoReturn:
        settings.update(counts.as_dict(), failure=reason)
        fail(t, reason)

    speed = norm(rhs(state))
    first = min(times[-1] - times[0], 0.01 * norm(state) / speed if speed > 0 else np.inf)
    integrate(state, times, AdaptiveStep(stepper), first_step=first, record=record, collapse=collapse,
              observer=None, progress=bar, name="particles", max_steps=10_000_000, counts=counts)
    settings.update(counts.as_dict())
    return stepper.evaluations
