"""The interfaces of time integration: what a stepper, a discretisation and an observer provide.

They are structural (:class:`typing.Protocol`): a class provides one by having its members,
without inheriting from it. The PDE solvers (:mod:`solvers`) and the particle system
(:mod:`meanfield.particles`) are written against them.
"""

from __future__ import annotations

from typing import Any, Protocol

import numpy as np


class Stepper(Protocol):
    """One step of a time-integration method with an error estimate.

    ``order`` is the order of the solution it returns and ``error_estimator_order`` that of
    its error estimate (what the step-size controller uses); ``evaluations`` counts the
    right-hand sides (or implicit solves) so far.
    """

    order: int
    error_estimator_order: int
    evaluations: int

    def step(self, q: np.ndarray, h: float) -> tuple[np.ndarray, float]:
        """The state after ``h`` from ``q``, and the local error scaled by the tolerance (accept if ``<= 1``)."""
        ...


class Discretisation(Protocol):
    r"""A semi-discrete evolution :math:`\dot q = -\mu q + N(q)` as an explicit stepper needs it.

    ``decay`` is the diagonal linear part :math:`\mu`, integrated exactly (``None``: none);
    ``rhs(q)`` is :math:`N(q)`, same shape as ``q``; ``stable_step(q)`` the largest step the
    solver's method is stable for from ``q`` (``inf`` without a bound): a CFL bound, or
    ``ExplicitTableau.imaginary_stability`` over the fastest advection frequency;
    ``norm`` measures local errors and
    ``tolerance(q)`` is the largest accepted one; ``admit(old, new)`` returns the state an
    accepted step leads to, or ``(None, reason)`` when it must be retried with half the step.
    """

    decay: np.ndarray | None

    def rhs(self, q: np.ndarray) -> np.ndarray: ...

    def stable_step(self, q: np.ndarray) -> float: ...

    def norm(self, q: np.ndarray) -> float: ...

    def tolerance(self, q: np.ndarray) -> float: ...

    def admit(self, old: np.ndarray, new: np.ndarray) -> tuple[np.ndarray | None, str | None]: ...


class Observer(Protocol):
    """Called after every accepted step with the time and what the solver shows of its state.

    PDE solvers pass the density on their grid; the particle system the tokens. An observer
    must not modify what it receives nor keep a reference to it.
    """

    def __call__(self, t: float, state: Any) -> None: ...
