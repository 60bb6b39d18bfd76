"""Time integration shared by the PDE solvers and the particle system.

Tableaux as data (:mod:`.tableaux`), steppers (:mod:`.runge_kutta`), one step-size
controller (:mod:`.controller`), one driver loop with its observers and wall-clock guard
(:mod:`.driver`), and the interfaces they are written against (:mod:`.protocols`).
"""

from .controller import AdaptiveStep, FixedStep, StepController, explicit_adaptive_step
from .driver import Pace, StepCounts, equal_steps, integrate
from .protocols import Discretisation, Observer, Stepper
from .runge_kutta import ExplicitRungeKutta, ExtrapolatedImplicitEuler
from .tableaux import (BOGACKI_SHAMPINE, CLASSICAL_RK4, DORMAND_PRINCE, HEUN_EULER, MERSON, TABLEAUX,
                       ContinuousExtension, ExplicitTableau, tableau_named)

__all__ = ["AdaptiveStep", "FixedStep", "StepController", "explicit_adaptive_step", "Pace", "StepCounts",
           "equal_steps", "integrate", "Discretisation", "Observer",
           "Stepper", "ExplicitRungeKutta", "ExtrapolatedImplicitEuler", "ExplicitTableau", "ContinuousExtension",
           "TABLEAUX", "tableau_named", "HEUN_EULER", "BOGACKI_SHAMPINE", "MERSON", "DORMAND_PRINCE", "CLASSICAL_RK4"]
