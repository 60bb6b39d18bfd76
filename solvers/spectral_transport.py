"""A spectral solver as the :class:`~meanfield.integration.protocols.Discretisation` its explicit pair steps.

Shared by :class:`~solvers.CircleSpectral` and :class:`~solvers.SphereSpectral`: the
transport as the right-hand side, the diffusion as the exactly integrated decay, and the
stability bound from the largest speed. It remembers the speed of the state it last
evaluated: a first-same-as-last pair evaluates the new state last, so after an accepted
step the bound of the next one is known without another velocity. The bound and the
tolerance of the last state asked about are kept too: each step asks for both at its end
and again, of the same state, at the start of the next.
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from meanfield.integration import ExplicitTableau, tableau_named


class SpectralTransport:
    """The discretisation of a spectral solver: ``solver`` provides ``_transport_and_speed(q)``,
    ``_largest_speed(q)``, ``_stable_step(speed)`` and ``_local_tolerance(q)``.

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
        # per quantity ("speed", "bound", "tolerance"): the state last asked about (by identity,
        # and held, so that a freed array cannot alias it) and its value
        self._kept: dict[str, tuple[np.ndarray, float]] = {}

    def _of(self, quantity: str, coefficients: np.ndarray, compute: Callable[[np.ndarray], float]) -> float:
        kept = self._kept.get(quantity)
        if kept is None or kept[0] is not coefficients:
            kept = self._kept[quantity] = (coefficients, compute(coefficients))
        return kept[1]

    def rhs(self, coefficients: np.ndarray) -> np.ndarray:
        result, speed = self.solver._transport_and_speed(coefficients)
        self._kept["speed"] = (coefficients, speed)
        return result

    def speed(self, coefficients: np.ndarray) -> float:
        """The largest speed of a state, remembered like the right-hand side's."""
        return self._of("speed", coefficients, self.solver._largest_speed)

    def stable_step(self, coefficients: np.ndarray) -> float:
        return self._of("bound", coefficients, lambda c: self.solver._stable_step(self.speed(c)))

    def tolerance(self, coefficients: np.ndarray) -> float:
        return self._of("tolerance", coefficients, self.solver._local_tolerance)

    @staticmethod
    def admit(old: np.ndarray, new: np.ndarray) -> tuple[np.ndarray, None]:
        return new, None


def transport_tableau(tableau: str | ExplicitTableau, diffusion: float) -> ExplicitTableau:
    """The pair a spectral solver's ``tableau`` argument names, checked against the model's diffusion.

    Diffusion is integrated exactly in integrating-factor form, which needs abscissas that
    never decrease (Dormand-Prince 8(5,3)'s do): such a pair is refused at once, by name.

    Raises
    ------
    ValueError
        For an unknown name, a pair without an error estimate, or a pair whose abscissas
        decrease when there is diffusion.
    """
    found = tableau_named(tableau)
    if diffusion > 0 and not found.nondecreasing_abscissas:
        raise ValueError(f"tableau {found.name!r} cannot integrate diffusion exactly (the integrating-factor form "
                         f"needs nondecreasing abscissas, got {found.c}); with diffusion={diffusion} use "
                         "'dormand_prince'")
    return found
