"""The adaptive time loop shared by the solvers: stepping, observation and bookkeeping apart.

A solver supplies ``attempt(state, dt) -> (new_state, proposed_dt, rejection_reason)``
(usually :class:`~meanfield.integration.controller.AdaptiveStep`); the driver hits every
output time exactly, retries rejected steps with the proposed step, calls the observer after
each accepted step, advances the progress bar, and declares a collapse (with the reason)
when the step becomes negligible or the step budget is spent. A ``stop`` condition ends the
run after the first accepted step that meets it (a solver handing over to another).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable, NoReturn

import numpy as np

from ..progress import time_progress

Attempt = Callable[[Any, float], "tuple[Any, float, str | None]"]


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


def integrate(state, times: np.ndarray, attempt: Attempt, *, first_step: float,
              record: Callable[[float, Any], None], collapse: Callable[[float, str], NoReturn],
              observer: Callable[[float, Any], None] | None, progress: bool | None, name: str,
              max_steps: int, counts: StepCounts, pace: Pace | None = None,
              stop: Callable[[float, Any], bool] | None = None) -> tuple[float, Any]:
    """Advance ``state`` from ``times[0]`` through every output time, or until ``stop(t, state)``.

    Returns the time and state reached: ``times[-1]``, or the first accepted step's (before its
    output time is recorded) at which ``stop`` holds.
    """
    t, dt = times[0], first_step
    started = time.monotonic()
    record(t, state)
    with time_progress(times[0], times[-1], progress, name) as bar:
        for target in times[1:]:
            while t < target:
                if counts.steps + counts.rejected >= max_steps:
                    collapse(t, f"{max_steps} steps did not reach t={times[-1]:.6g}")
                trial = min(dt, target - t)
                new, proposal, reason = attempt(state, trial)
                if reason:
                    counts.rejected += 1
                    counts.reasons[reason] = counts.reasons.get(reason, 0) + 1
                    dt = proposal
                    if dt < 1e-13 * max(1.0, abs(t)):
                        collapse(t, f"step size collapsed to {dt:.3g} ({reason})")
                    continue
                state = new
                t = target if trial == target - t else t + trial
                counts.steps += 1
                bar.update(trial)
                if observer is not None:
                    observer(t, state)
                if pace is not None:
                    _check_pace(pace, times[0], t, started, collapse)
                # A step shortened to land on an output time says nothing about the step size.
                dt = proposal if trial == dt else max(proposal, dt)
                if stop is not None and stop(t, state):
                    counts.next_step = dt
                    return t, state
            counts.next_step = dt
            record(target, state)
    return t, state


def _check_pace(pace: Pace, start: float, t: float, started: float, collapse) -> None:
    now = time.monotonic()
    if now - started < PACE_GRACE or t <= start:
        return
    needed = (pace.end - t) * (now - started) / (t - start)
    if now + needed > pace.deadline:
        collapse(t, f"at its pace so far (t = {t:.6g} after {now - started:.0f} s) it would need about "
                    f"{needed / 3600:.3g} h more to reach t = {pace.end:g}, past its time budget (max_hours)")
