"""The time loop shared by the PDE solvers and the particle systems: stepping, observation and bookkeeping apart.

A run supplies ``attempt(state, dt, t) -> (new_state, proposed_dt, rejection_reason)``, a
step of ``dt`` from ``state`` at time ``t``: adaptive
(:class:`~meanfield.integration.controller.AdaptiveStep`) or fixed
(:class:`~meanfield.integration.controller.FixedStep`, never rejected). The driver hits
every output time exactly: adaptive steps are shortened to land on it (or, with an
``interpolate`` dense output, step past it, the output interpolated inside the step) and
rejected ones retried with the proposed step; with ``fixed_step``, each output interval is
split into equal steps no larger than it (:func:`equal_steps`). It records each output, calls the
observer after each accepted step, advances the progress bar, and declares a collapse (with
the reason) when the step becomes negligible or the step budget is spent, and ends the run at
the first output whose state is not finite (:class:`~meanfield.errors.NonFiniteState`, or
``collapse`` where the run gives one: a result with NaN is never recorded). A ``stop``
condition ends the run after the first accepted step that meets it (a solver handing over
to another).
"""

from __future__ import annotations

import bisect
import time
from dataclasses import dataclass, field
from typing import Any, Callable, NoReturn

import numpy as np
from array_api_compat import array_namespace, is_array_api_obj

from ..errors import ModelFailure, NonFiniteState, ReductionRefused, StepSizeCollapse
from ..progress import time_progress
from .controller import FixedStep

Attempt = Callable[[Any, float, float], "tuple[Any, float, str | None]"]


@dataclass(frozen=True)
class Pace:
    """A wall-clock budget: the run that ends at time ``end`` must finish before ``deadline``.

    ``deadline`` is a :func:`time.monotonic` reading. After :data:`PACE_GRACE` seconds of a
    solve, the driver extrapolates its pace so far (wall seconds per unit of time) to ``end``
    and declares a collapse when that passes the deadline: no tolerance or step size can make
    a run grind on for days without a word.
    """

    end: float
    deadline: float

    @classmethod
    def hours(cls, end: float, hours: float) -> "Pace":
        return cls(end, time.monotonic() + 3600.0 * hours)


#: Seconds of a solve before its pace is judged (the first steps include set-up and caches).
PACE_GRACE = 20.0


@dataclass
class StepCounts:
    steps: int = 0
    rejected: int = 0
    reasons: dict[str, int] = field(default_factory=dict)
    next_step: float = float("nan")

    def as_dict(self) -> dict:
        # next_step lets a run that is continued from its last output take the same steps.
        return {"steps": self.steps, "rejected_steps": self.rejected, "rejections": dict(self.reasons),
                "next_step": self.next_step}


def equal_steps(t0: float, t1: float, dt: float) -> tuple[int, float]:
    """``(count, h)``: the interval ``[t0, t1]`` in ``count`` equal steps ``h`` no larger than ``dt``."""
    count = max(1, int(np.ceil((t1 - t0) / dt - 1e-9)))
    return count, float(t1 - t0) / count  # a Python float: numpy scalars would turn other arrays into numpy


def integrate(state, times: np.ndarray, attempt: Attempt, *, first_step: float | None = None,
              fixed_step: float | None = None, record: Callable[[float, Any], None],
              collapse: Callable[[float, str], NoReturn] | None = None,
              observer: Callable[[float, Any], None] | None = None, progress: bool | None, name: str,
              max_steps: int | None = None, counts: StepCounts, pace: Pace | None = None,
              stop: Callable[[float, Any], bool] | None = None,
              interpolate: Callable[[float], Any] | None = None) -> tuple[float, Any]:
    """Advance ``state`` from ``times[0]`` through every output time, or until ``stop(t, state)``.

    Exactly one of ``first_step`` (adaptive steps, the first of this size) and ``fixed_step``
    (each output interval ``[t0, t1]`` in equal steps no larger than it, the k-th from
    ``t0 + k h``) is given; fixed steps are never rejected (the scheme of a
    :class:`~meanfield.integration.controller.FixedStep` is called directly, another attempt's
    new state taken). ``collapse(t, reason)`` must raise; it may be left out only where
    nothing can collapse (fixed steps and no ``max_steps`` budget).
    ``interpolate(theta)`` (adaptive steps only): the state at the fraction ``theta`` of the last
    accepted step. Given, steps are shortened only to end at ``times[-1]``, and the outputs a
    step passes are recorded from it (as :mod:`scipy.integrate` does with ``dense_output``);
    with a ``stop``, those strictly inside a step are recorded before ``stop`` is asked, so that
    a run handed over at the step's end has lost none of them.
    Returns the time and state reached: ``times[-1]``, or the first accepted step's (before
    its output time is recorded) at which ``stop`` holds.
    """
    if (first_step is None) == (fixed_step is None):
        raise ValueError(f"give first_step (adaptive) or fixed_step, not both or neither: got {first_step}, {fixed_step}")
    fixed = fixed_step is not None
    if fixed and interpolate is not None:
        raise ValueError("interpolate is the dense output of adaptive steps; fixed steps land on every output")
    if fixed:
        advance = attempt.advance if isinstance(attempt, FixedStep) else lambda q, t, h: attempt(q, h, t)[0]
    outputs = [float(t) for t in times]  # Python floats: the loop's arithmetic is the same, its calls cheaper
    t, dt = outputs[0], first_step
    started = time.monotonic()

    def after_step(t: float, state) -> bool:
        """After an accepted step: the observer, the pace, and whether to stop."""
        if observer is not None:
            observer(t, state)
        if pace is not None:
            _check_pace(pace, outputs[0], t, started, collapse)
        return stop is not None and stop(t, state)

    after = None if observer is None and pace is None and stop is None else after_step
    last_finite = t
    # with a stop and a dense output, the outputs inside each accepted step are recorded as soon as it is
    # taken: the index of the first not yet recorded so far (never the last, which a step lands on)
    unrecorded = 1 if stop is not None and interpolate is not None else None

    def record_finite(t_out: float, state_out) -> None:
        """Record an output, or end the run at the first one that is not finite."""
        nonlocal last_finite
        if not all_finite(state_out):
            _non_finite(collapse, last_finite, f"the state is not finite (NaN or infinite) at t={t_out:.6g}; "
                                                f"it was at t={last_finite:.6g}: an overflow in between")
        record(t_out, state_out)
        last_finite = t_out

    record(t, state)
    # An overflow is detected at the next output (record_finite), with the time and the partial result:
    # numpy's warnings on the way would only say it less clearly.
    try:
        with time_progress(times[0], times[-1], progress, name) as bar, np.errstate(over="ignore", invalid="ignore"):
            advanced = bar.update
            for target in outputs[1:]:
                if fixed:  # a loop of its own, the scheme called directly: the smallest steps take a few microseconds
                    start = t
                    count, dt = equal_steps(start, target, fixed_step)
                    for taken in range(1, count + 1):
                        if max_steps is not None and counts.steps >= max_steps:
                            collapse(t, f"{max_steps} steps did not reach t={outputs[-1]:.6g}")
                        state = advance(state, t, dt)
                        t = target if taken == count else start + taken * dt
                        counts.steps += 1
                        advanced(dt)
                        if after is not None and after(t, state):
                            counts.next_step = dt
                            return t, state
                    counts.next_step = dt
                    record_finite(target, state)
                    continue
                if unrecorded is not None and target < outputs[unrecorded]:  # recorded inside an earlier step
                    continue
                landing = outputs[-1] if interpolate is not None else target  # where adaptive steps are cut short
                while t < target:
                    if max_steps is not None and counts.steps + counts.rejected >= max_steps:
                        collapse(t, f"{max_steps} steps did not reach t={outputs[-1]:.6g}")
                    trial = min(dt, landing - t)
                    new, proposal, reason = attempt(state, trial, t)
                    if reason:
                        counts.rejected += 1
                        counts.reasons[reason] = counts.reasons.get(reason, 0) + 1
                        dt = proposal
                        if dt < 1e-13 * max(1.0, abs(t)):
                            if reason == "non-finite":
                                _non_finite(collapse, t, f"every step from t={t:.6g} overflows, down to {dt:.3g}: "
                                                         f"the solution is not finite beyond t={t:.6g}")
                            collapse(t, f"step size collapsed to {dt:.3g} ({reason})")
                        continue
                    state, before, t = new, t, landing if trial == landing - t else t + trial
                    counts.steps += 1
                    advanced(trial)
                    # A step shortened to land on an output time says nothing about the step size.
                    dt = proposal if trial == dt else max(proposal, dt)
                    if unrecorded is not None:
                        inside = bisect.bisect_left(outputs, t, lo=unrecorded)  # outputs[unrecorded:inside] < t
                        for output in outputs[unrecorded:inside]:
                            record_finite(output, interpolate((output - before) / (t - before)))
                        unrecorded = inside
                    if after is not None and after(t, state):
                        counts.next_step = dt
                        return t, state
                counts.next_step = dt
                if unrecorded is None or target >= outputs[unrecorded]:
                    record_finite(target, state if t == target else interpolate((target - before) / (t - before)))
        return t, state
    except ReductionRefused as refusal:  # a cluster reduction would pass its error tolerance: end with the outputs so far
        if collapse is not None:
            try:
                collapse(t, str(refusal))
            except StepSizeCollapse as collapsed:  # the run's own collapse, with its outputs, kept a refusal
                raise ReductionRefused(str(collapsed), time=collapsed.time, partial=collapsed.partial) from None
        raise
    except ModelFailure as failure:  # the model cannot evaluate its velocity here: end with the outputs so far
        reason = f"the model cannot evaluate its velocity past t={t:.6g}: {failure}"
        if collapse is not None:
            collapse(t, reason)
        raise StepSizeCollapse(reason, time=t) from None


def all_finite(state) -> bool:
    """Whether every number of a state is finite: an array of any array API namespace, a number, or a
    tuple or list of them (a state of another kind has none to check)."""
    if isinstance(state, (tuple, list)):
        return all(all_finite(part) for part in state)
    if is_array_api_obj(state) and not isinstance(state, np.ndarray):
        xp = array_namespace(state)
        return bool(xp.all(xp.isfinite(state)))
    try:
        return bool(np.isfinite(np.asarray(state)).all())  # complex too: a spectral solver's coefficients
    except (TypeError, ValueError):
        return True


def _non_finite(collapse, t: float, reason: str) -> NoReturn:
    """End a run whose state is no longer finite: through ``collapse`` (which keeps the partial result) or
    as :class:`~meanfield.errors.NonFiniteState` for the caller to fill in."""
    if collapse is not None:
        try:
            collapse(t, reason)
        except StepSizeCollapse as stopped:
            raise NonFiniteState(str(stopped), time=stopped.time, partial=stopped.partial) from None
    raise NonFiniteState(reason, time=t)


def _check_pace(pace: Pace, start: float, t: float, started: float, collapse) -> None:
    now = time.monotonic()
    if now - started < PACE_GRACE or t <= start:
        return
    needed = (pace.end - t) * (now - started) / (t - start)
    if now + needed > pace.deadline:
        collapse(t, f"at its pace so far (t = {t:.6g} after {now - started:.0f} s) it would need about "
                    f"{needed / 3600:.3g} h more to reach t = {pace.end:g}, past its time budget (max_hours)")
