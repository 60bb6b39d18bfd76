r"""The step-size controller and the adaptive step every solver takes.

:class:`StepController` follows :mod:`scipy.integrate`'s explicit Runge-Kutta rules: from a
scaled error estimate :math:`e` of order :math:`q` the next step is
:math:`h\,\min(f_{max}, \max(f_{min}, 0.9\,e^{-1/(q+1)}))`, and right after a rejection it
does not grow. :class:`AdaptiveStep` puts a stepper, the controller and a discretisation's
own limits (a stability bound, checks of the new state) together into the
``attempt(state, dt, t) -> (new_state, proposed_dt, rejection_reason)`` that the driver
(:func:`meanfield.integration.driver.integrate`) retries until it is accepted.
:class:`FixedStep` is the attempt of a fixed-step scheme: always accepted.
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

from .protocols import Discretisation, Stepper
from .runge_kutta import ExplicitRungeKutta
from .tableaux import ExplicitTableau

#: scipy's constants: safety factor and the bounds of the ratio of successive steps.
SAFETY, MIN_FACTOR, MAX_FACTOR = 0.9, 0.2, 10.0

#: A step proposed from a stability bound stays this far inside it (round-off in the bound).
STABILITY_MARGIN = 0.95


class StepController:
    """Ratio of the next step to this one, from the scaled error of a stepper of a given estimator order."""

    def __init__(self, error_estimator_order: int):
        self.exponent = -1.0 / (error_estimator_order + 1)
        self.after_rejection = False

    def accepted(self, error: float) -> float:
        factor = MAX_FACTOR if error == 0 else min(MAX_FACTOR, SAFETY * error ** self.exponent)
        if self.after_rejection:
            factor = min(1.0, factor)
            self.after_rejection = False
        return factor

    def rejected(self, error: float | None = None) -> float:
        """The factor after a rejection for accuracy (``error``), or note one for another reason."""
        self.after_rejection = True
        return MIN_FACTOR if error is None else max(MIN_FACTOR, SAFETY * error ** self.exponent)


class AdaptiveStep:
    """``attempt(state, dt, t)`` of a stepper under the controller and a discretisation's limits.

    Parameters
    ----------
    stepper : Stepper
        ``step(q, h) -> (new, scaled_error)``.
    stable_step : callable, optional
        ``stable_step(q)``: the largest step the method is stable for from ``q`` (CFL, or the
        imaginary stability of the tableau over the advection speed). A longer trial step is
        rejected (reason ``"stability"``) and every proposal stays within the bound.
    bound_after : bool
        Whether ``stable_step(new)`` is cheap after a step (the stepper evaluated the new
        state, first same as last); otherwise the next proposal is bounded by the step's start.
    admit : callable, optional
        ``admit(old, new) -> (state, reason)``: the state an accepted step leads to (e.g. with
        round-off repaired), or ``(None, reason)`` to retry with half the step (positivity,
        a Lyapunov functional that must not rise).
    dense_output : callable, optional
        ``dense_output(theta)``: the state at the fraction ``theta`` of the last accepted step
        (the driver's ``interpolate``: steps then pass the output times); only where every
        accepted state is the stepper's own, as ``admit`` leaves it.
    """

    def __init__(self, stepper: Stepper, *, stable_step: Callable[[Any], float] | None = None,
                 bound_after: bool = True, admit: Callable[[Any, Any], tuple[Any, str | None]] | None = None,
                 dense_output: Callable[[float], Any] | None = None):
        self.stepper, self.stable_step, self.bound_after, self.admit = stepper, stable_step, bound_after, admit
        self.dense_output = dense_output
        self.controller = StepController(stepper.error_estimator_order)

    def __call__(self, state, dt: float, t: float | None = None):
        """A step of ``dt`` from ``state`` (``t``, the time, is not read: the discretisations are autonomous)."""
        bound = np.inf if self.stable_step is None else self.stable_step(state)
        if dt > bound:
            self.controller.rejected()
            return None, STABILITY_MARGIN * bound, "stability"
        # A step too long for the solution can overflow in its stages: it is rejected as
        # non-finite just below, so the overflow is the controller's business, not a warning.
        with np.errstate(over="ignore", invalid="ignore"):
            new, error = self.stepper.step(state, dt)
        if not np.isfinite(error):
            self.controller.rejected()
            return None, 0.25 * dt, "non-finite"
        if error > 1.0:
            return None, dt * self.controller.rejected(error), "accuracy"
        if self.admit is not None:
            new, reason = self.admit(state, new)
            if reason is not None:
                self.controller.rejected()
                return None, 0.5 * dt, reason
        proposal = dt * self.controller.accepted(error)
        if self.stable_step is not None:
            proposal = min(proposal, STABILITY_MARGIN * (self.stable_step(new) if self.bound_after else bound))
        return new, proposal, None


class FixedStep:
    """``attempt(state, dt, t)`` of a fixed-step scheme ``advance(state, t, h) -> new_state``: never rejected.

    The driver's ``fixed_step`` chooses the steps (equal steps per output interval).
    """

    def __init__(self, advance: Callable[[Any, float, float], Any]):
        self.advance = advance

    def __call__(self, state, dt: float, t: float):
        return self.advance(state, t, dt), dt, None


def explicit_adaptive_step(discretisation: Discretisation, tableau: ExplicitTableau, *,
                           dense_output: bool = False) -> AdaptiveStep:
    """The adaptive step of an embedded pair on a discretisation, within its stability bound.

    With ``dense_output``, a discretisation that admits every new state unchanged asks for the
    pair's continuous extension: the step then has one (:attr:`AdaptiveStep.dense_output`) where
    the tableau carries an extension and there is no decay (in integrating-factor form the
    extension would need growing exponentials).
    """
    stepper = ExplicitRungeKutta(tableau, discretisation.rhs, decay=discretisation.decay,
                                 norm=discretisation.norm, tolerance=discretisation.tolerance)
    dense = dense_output and tableau.continuous_extension is not None and discretisation.decay is None
    return AdaptiveStep(stepper, stable_step=discretisation.stable_step, bound_after=tableau.first_same_as_last,
                        admit=discretisation.admit, dense_output=stepper.interpolate if dense else None)
