r"""Integrating-factor (Lawson) Dormand-Prince 5(4) for :math:`\dot q = -\mu\, q + N(q)`.

The stiff linear part (diffusion, :math:`\mu = D\, l(l+1)` in harmonics) is integrated
exactly; the nonlinear part by the explicit Dormand-Prince pair with its embedded
error estimate. Written so that only decaying exponentials :math:`e^{-\mu (c_j - c_i) h}`,
:math:`c_i \le c_j`, appear: nothing overflows however stiff the diffusion.
"""

from __future__ import annotations

from typing import Callable

import numpy as np

_C = np.array([0.0, 1 / 5, 3 / 10, 4 / 5, 8 / 9, 1.0])
_A = [
    [],
    [1 / 5],
    [3 / 40, 9 / 40],
    [44 / 45, -56 / 15, 32 / 9],
    [19372 / 6561, -25360 / 2187, 64448 / 6561, -212 / 729],
    [9017 / 3168, -355 / 33, 46732 / 5247, 49 / 176, -5103 / 18656],
]
_B = np.array([35 / 384, 0.0, 500 / 1113, 125 / 192, -2187 / 6784, 11 / 84])
_B_EMBEDDED = np.array([5179 / 57600, 0.0, 7571 / 16695, 393 / 640, -92097 / 339200, 187 / 2100])
# The embedded weights' seventh stage (1/40) multiplies N(q_new); it enters the error estimate.
_B7_EMBEDDED = 1 / 40


#: Largest y with |R(iy)| <= 1 for the 5th-order Dormand-Prince solution (0.997; beyond it
#: |R| rises to 1.03 at y = 2). Advection makes the transport operator's spectrum nearly
#: imaginary, so a step with dt * (largest advection frequency) above this amplifies the
#: highest degrees, unseen by the error estimate until they dominate it.
IMAGINARY_STABILITY = 0.99


class LawsonDormandPrince:
    """One adaptive step of the Lawson DP5(4) scheme.

    Parameters
    ----------
    nonlinear : callable
        :math:`N(q)`, same shape as ``q``.
    decay : numpy.ndarray
        :math:`\\mu \\ge 0`, broadcastable to ``q``.
    norm : callable
        Norm in which the local error is measured.
    tolerance : callable
        ``tolerance(q)``: the largest accepted local error of a step from ``q`` or to it
        (the larger of the two is used).
    """

    order = 5

    def __init__(self, nonlinear: Callable[[np.ndarray], np.ndarray], decay: np.ndarray,
                 norm: Callable[[np.ndarray], float], tolerance: Callable[[np.ndarray], float]):
        self.nonlinear, self.decay, self.norm, self.tolerance = nonlinear, decay, norm, tolerance
        self.evaluations = 0
        self._cached: tuple[np.ndarray, np.ndarray] | None = None

    def _evaluate(self, q: np.ndarray) -> np.ndarray:
        self.evaluations += 1
        return self.nonlinear(q)

    def step(self, q: np.ndarray, h: float) -> tuple[np.ndarray, float]:
        """Advance ``q`` by ``h``; returns the 5th-order solution and the scaled error (accept if <= 1)."""
        factors: dict[float, np.ndarray] = {}

        def damping(span: float) -> np.ndarray | float:
            if span == 0.0:
                return 1.0
            if span not in factors:
                factors[span] = np.exp(-self.decay * (span * h))
            return factors[span]

        first = self._cached[1] if self._cached is not None and self._cached[0] is q else self._evaluate(q)
        stages = [first]
        for j in range(1, 6):
            increment = sum(a * damping(_C[j] - _C[i]) * stages[i] for i, a in enumerate(_A[j]) if a != 0.0)
            stages.append(self._evaluate(damping(_C[j]) * q + h * increment))
        new = damping(1.0) * q + h * sum(b * damping(1.0 - _C[i]) * stages[i]
                                         for i, b in enumerate(_B) if b != 0.0)
        last = self._evaluate(new)
        error_vector = h * (sum((b - e) * damping(1.0 - _C[i]) * stages[i]
                                for i, (b, e) in enumerate(zip(_B, _B_EMBEDDED)) if b != e)
                            - _B7_EMBEDDED * last)
        self._cached = (new, last)
        scale = max(self.tolerance(q), self.tolerance(new))
        return new, self.norm(error_vector) / scale
