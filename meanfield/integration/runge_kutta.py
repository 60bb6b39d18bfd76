r"""Steppers: one step of a method from a state, with its scaled local error.

:class:`ExplicitRungeKutta` takes any :class:`~meanfield.integration.tableaux.ExplicitTableau`
for :math:`\dot q = -\mu\, q + N(q)`: with ``decay`` :math:`\mu` (a diagonal symbol, e.g.
diffusion :math:`D\,l(l+1)` in harmonics) it is the integrating-factor (Lawson) form, the
linear part integrated exactly; without, the plain method for :math:`\dot q = N(q)`.
Written so that only decaying exponentials :math:`e^{-\mu (c_j - c_i) h}`, :math:`c_i \le c_j`,
appear: nothing overflows however stiff the linear part.

:class:`ExtrapolatedImplicitEuler` extrapolates a linearly implicit Euler step taken with
1, 2, ..., k substeps (Aitken-Neville), for discretisations that supply that step.
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from .tableaux import ExplicitTableau

Norm = Callable[[np.ndarray], float]


class ExplicitRungeKutta:
    """One step of an explicit Runge-Kutta tableau, in integrating-factor form when ``decay`` is given.

    Parameters
    ----------
    tableau : ExplicitTableau
    rhs : callable
        :math:`N(q)`, same shape as ``q``.
    decay : numpy.ndarray, optional
        :math:`\\mu \\ge 0`, broadcastable to ``q``.
    norm : callable, optional
        Norm in which the local error is measured (adaptive tableaux).
    tolerance : callable, optional
        ``tolerance(q)``: the largest accepted local error of a step from ``q`` or to it
        (the larger of the two is used).
    """

    def __init__(self, tableau: ExplicitTableau, rhs: Callable[[np.ndarray], np.ndarray], *,
                 decay: np.ndarray | None = None, norm: Norm | None = None,
                 tolerance: Callable[[np.ndarray], float] | None = None):
        if decay is not None and not tableau.nondecreasing_abscissas:
            raise ValueError(f"tableau {tableau.name!r}: the integrating-factor form needs nondecreasing "
                             f"abscissas (only decaying exponentials), got {tableau.c}")
        self.tableau, self.rhs, self.decay, self.norm, self.tolerance = tableau, rhs, decay, norm, tolerance
        self.order = tableau.order
        self.error_estimator_order = tableau.error_estimator_order
        self.evaluations = 0
        self._cached: tuple[np.ndarray, np.ndarray] | None = None
        # The nonzero weights of each row, as (stage, weight, abscissa): the step loops over these only.
        c = tableau.c + (1.0,)
        self._rows = [_nonzero(tableau.a[j], c) for j in range(tableau.stages)]
        self._weights = _nonzero(tableau.b, c)
        self._error_weights = _nonzero(tableau.error or (), c)

    def _evaluate(self, q: np.ndarray) -> np.ndarray:
        self.evaluations += 1
        return self.rhs(q)

    def advance(self, q: np.ndarray, h: float) -> tuple[np.ndarray, list[np.ndarray], Callable]:
        """The kept solution after ``h``, the stages, and the damping of the step (for the estimate)."""
        tableau = self.tableau
        factors: dict[float, np.ndarray] = {}
        decay = self.decay

        def damping(span: float) -> np.ndarray | float:
            if span == 0.0 or decay is None:
                return 1.0
            if span not in factors:
                factors[span] = np.exp(-decay * (span * h))
            return factors[span]

        def combination(weights, until: float) -> np.ndarray:
            # h sum_i w_i exp(-mu (until - c_i) h) k_i, accumulated in place (one pass per term).
            total = None
            for i, weight, abscissa in weights:
                term = (h * weight) * damping(until - abscissa) * stages[i]
                if total is None:
                    total = term
                else:
                    total += term
            return total

        first = self._cached[1] if self._cached is not None and self._cached[0] is q else self._evaluate(q)
        stages = [first]
        c = tableau.c
        for j in range(1, tableau.stages):
            start = q if decay is None else damping(c[j]) * q
            stages.append(self._evaluate(start + combination(self._rows[j], c[j])))
        new = (q if decay is None else damping(1.0) * q) + combination(self._weights, 1.0)
        return new, stages, damping

    def step(self, q: np.ndarray, h: float) -> tuple[np.ndarray, float]:
        """Advance ``q`` by ``h``; returns the kept solution and the scaled error (accept if <= 1)."""
        new, stages, damping = self.advance(q, h)
        if self.tableau.first_same_as_last:
            last = self._evaluate(new)
            stages.append(last)
            self._cached = (new, last)
        error_vector = None
        for i, weight, abscissa in self._error_weights:
            term = (h * weight) * damping(1.0 - abscissa) * stages[i]
            error_vector = term if error_vector is None else error_vector + term
        scale = max(self.tolerance(q), self.tolerance(new))
        return new, self.norm(error_vector) / scale


def _nonzero(weights, abscissas) -> list[tuple[int, float, float]]:
    return [(i, weight, abscissas[i]) for i, weight in enumerate(weights) if weight != 0.0]


class ExtrapolatedImplicitEuler:
    r"""Linearly implicit Euler with 1, 2, ..., ``k`` substeps, extrapolated (Aitken-Neville).

    The linearly implicit Euler step has an error expansion in powers of :math:`h`, so the
    table :math:`T_{j,m+1} = T_{j,m} + (T_{j,m} - T_{j-1,m}) / (n_j / n_{j-m} - 1)` over the
    substep counts :math:`n_j = j` raises the order by one per column: :math:`T_{kk}` is of
    order ``k`` and is kept, :math:`|T_{kk} - T_{k,k-1}|` estimates the error of the order
    ``k - 1`` member (local extrapolation, as Dormand-Prince keeps its fifth order). Where
    the kept solution would fall below ``lower_bound`` it is blended toward the finest
    implicit solution :math:`T_{k1}` (one factor for the whole state: linear invariants such as
    mass are kept), which is the implicit step's own, bound-preserving, answer.

    Parameters
    ----------
    implicit_step : callable
        ``implicit_step(q, h)``: one linearly implicit Euler step.
    substeps : int
        ``k >= 2``.
    norm, tolerance : callable
        As for :class:`ExplicitRungeKutta`.
    lower_bound : float or numpy.ndarray
        Elementwise floor the kept solution must respect (``-inf``: none), a number or one per entry.
    """

    def __init__(self, implicit_step: Callable[[np.ndarray, float], np.ndarray], substeps: int, *,
                 norm: Norm, tolerance: Callable[[np.ndarray], float], lower_bound: float | np.ndarray = -np.inf):
        if substeps < 2:
            raise ValueError(f"substeps must be at least 2 (an error estimate needs two columns), got {substeps}")
        self.implicit_step, self.substeps, self.norm, self.tolerance = implicit_step, substeps, norm, tolerance
        self.lower_bound = lower_bound
        self.order, self.error_estimator_order = substeps, substeps - 1
        self.evaluations = 0

    def _implicit_solution(self, q: np.ndarray, h: float, count: int) -> np.ndarray:
        for _ in range(count):
            q = self.implicit_step(q, h / count)
        self.evaluations += count
        return q

    def step(self, q: np.ndarray, h: float) -> tuple[np.ndarray, float]:
        rows: list[list[np.ndarray]] = []
        for j in range(1, self.substeps + 1):
            row = [self._implicit_solution(q, h, j)]
            for m in range(1, j):
                row.append(row[m - 1] + (row[m - 1] - rows[-1][m - 1]) / (j / (j - m) - 1.0))
            rows.append(row)
        finest, kept, lower = rows[-1][0], rows[-1][-1], rows[-1][-2]
        error = self.norm(kept - lower) / max(self.tolerance(q), self.tolerance(kept))
        return self._bounded(finest, kept), error

    def _bounded(self, finest: np.ndarray, kept: np.ndarray) -> np.ndarray:
        """``finest + f (kept - finest)`` with the largest ``f`` in [0, 1] that keeps it above the bound."""
        correction = kept - finest
        falling = correction < 0
        if not falling.any():
            return kept
        room = (finest[falling] - np.broadcast_to(self.lower_bound, finest.shape)[falling]) / -correction[falling]
        factor = min(1.0, float(np.min(room)))
        return kept if factor == 1.0 else finest + max(factor, 0.0) * correction
