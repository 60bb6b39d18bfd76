"""A spectral solver as the :class:`~meanfield.integration.protocols.Discretisation` its explicit pair steps.

Shared by :class:`~solvers.CircleSpectral` and :class:`~solvers.SphereSpectral`: the
transport as the right-hand side, the diffusion as the exactly integrated decay, and the
stability bound from the largest speed. It remembers the speed of the state it last
evaluated: a first-same-as-last pair evaluates the new state last, so after an accepted
step the bound of the next one is known without another velocity.
"""

from __future__ import annotations

from typing import Callable

import numpy as np


class SpectralTransport:
    """The discretisation of a spectral solver: ``solver`` provides ``transport_and_speed(q)``,
    ``largest_speed(q)``, ``stable_step(speed)`` and ``local_tolerance(q)``.

    Parameters
    ----------
    solver : CircleSpectral or SphereSpectral
    decay : numpy.ndarray or None
        The diffusion's symbol per coefficient (``None`` without diffusion).
    norm : callable
        The :math:`L^2` norm of a coefficient array.
    """

    def __init__(self, solver, decay: np.ndarray | None, norm: Callable[[np.ndarray], float]):
        self.solver, self.decay, self.norm = solver, decay, norm
        self._last: tuple[np.ndarray, float] | None = None

    def rhs(self, coefficients: np.ndarray) -> np.ndarray:
        result, speed = self.solver.transport_and_speed(coefficients)
        self._last = (coefficients, speed)
        return result

    def stable_step(self, coefficients: np.ndarray) -> float:
        if self._last is not None and self._last[0] is coefficients:
            return self.solver.stable_step(self._last[1])
        return self.solver.stable_step(self.solver.largest_speed(coefficients))

    def tolerance(self, coefficients: np.ndarray) -> float:
        return self.solver.local_tolerance(coefficients)

    @staticmethod
    def admit(old: np.ndarray, new: np.ndarray) -> tuple[np.ndarray, None]:
        return new, None
