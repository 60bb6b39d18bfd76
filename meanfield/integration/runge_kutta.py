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

from functools import lru_cache
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
        :math:`\\mu \\ge 0`, broadcastable to ``q`` (its trailing axes).
    norm : callable, optional
        Norm in which the local error is measured (adaptive tableaux).
    tolerance : callable, optional
        ``tolerance(q)``: the largest accepted local error of a step from ``q`` or to it
        (the larger of the two is used): a float, or an array of ``q``'s shape (one
        tolerance per entry, the error divided by it entry by entry before the norm, as
        :mod:`scipy.integrate` scales it).
    """

    #: NumPy states without decay form each combination of a step as one weighted sum over the
    #: stages, stored in one array (:func:`weighted_sum`, as :mod:`scipy.integrate` forms them
    #: but without BLAS), when the tableau's rows hold more than two terms on average (the
    #: Dormand-Prince pairs): it reads each stage once however many terms the row has, where the
    #: termwise sum makes a temporary per term, but storing the stages costs a copy each, which
    #: short rows (Heun's, RK4's) do not win back.
    PRODUCTS = True

    #: With decay (each weight an array of exponentials), NumPy states of at most this many
    #: entries form every combination as one array operation over the stages (the cost of a
    #: small state is the calls, not the arithmetic); larger ones, and other array namespaces,
    #: add term by term, with one temporary the size of the state and no products of zero
    #: weights (faster from a few hundred entries on, see the performance page). Both add the
    #: same nonzero products in the same order.
    STACKED_SIZE = 128

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
        self._cached: tuple[np.ndarray, np.ndarray] | None = None  # f at the last step's new solution
        self._start: tuple[np.ndarray, np.ndarray] | None = None  # the last evaluated first stage
        self._rows = _step_rows(tableau)
        self._last_step: tuple | None = None  # (q, h, stages) of the last step, for its dense output
        self._extended: tuple | None = None  # (stages, every stage with the extension's) of the last step
        if tableau.continuous_extension is not None:
            self._extension_rows = [np.array(row) for row in tableau.continuous_extension.a]
            self._dense_weights = np.array(tableau.continuous_extension.weights)
            self._dense_powers = np.arange(1, self._dense_weights.shape[1] + 1)

    def _evaluate(self, q: np.ndarray) -> np.ndarray:
        self.evaluations += 1
        return self.rhs(q)

    def first_stage(self, q: np.ndarray) -> np.ndarray:
        """:math:`N(q)`, the first stage of a step from ``q``: the last step's :math:`f` at its new
        solution, or the last first stage (a step retried after a rejection starts from the same
        state), else evaluated and kept for the step (a caller that needs it first, such as
        a first-step rule, shares the evaluation)."""
        for known in (self._start, self._cached):
            if known is not None and known[0] is q:
                self._start = known
                return known[1]
        self._start = (q, self._evaluate(q))
        return self._start[1]

    def advance(self, q: np.ndarray, h: float) -> tuple[np.ndarray, "_Stages"]:
        """The kept solution after ``h``, and the stages (whose error row :meth:`step` forms)."""
        rows = self._rows
        if not isinstance(q, np.ndarray):
            kind = _TermwiseStages
        elif self.decay is None and self.PRODUCTS and rows.long:
            kind = _ProductStages
        else:
            kind = _StackedStages if q.size <= self.STACKED_SIZE else _TermwiseStages
        stages = kind(rows, q, h, self.decay)
        stages.add(self.first_stage(q))
        for row in range(self.tableau.stages - 1):
            stages.add(self._evaluate(stages.start(row, q) + stages.total(row)))
        return stages.start(rows.solution, q) + stages.total(rows.solution), stages

    def step(self, q: np.ndarray, h: float) -> tuple[np.ndarray, float]:
        """Advance ``q`` by ``h``; returns the kept solution and the scaled error (accept if <= 1)."""
        new, stages = self.advance(q, h)
        if self.tableau.first_same_as_last:
            last = self._evaluate(new)
            stages.add(last)
            self._cached = (new, last)
        if self.tableau.continuous_extension is not None:
            self._last_step = (q, h, stages)
        scaled = self._scaled_norm(q, new)
        error = scaled(stages.total(self._rows.error))
        if self._rows.coarse is None:
            return new, error
        coarse = scaled(stages.total(self._rows.coarse))
        if error == 0.0 and coarse == 0.0:
            return new, 0.0
        return new, error * error / np.sqrt(error * error + 0.01 * coarse * coarse)  # Hairer's blend

    def _scaled_norm(self, q: np.ndarray, new: np.ndarray) -> Callable[[np.ndarray], float]:
        """The norm of an error vector over the tolerance of a step from ``q`` to ``new`` (the larger
        of the two): a number, or per entry (then the entries are divided before the norm)."""
        before, after = self.tolerance(q), self.tolerance(new)
        if isinstance(before, np.ndarray) and before.ndim:
            scale = np.maximum(before, after)
            return lambda error: self.norm(error / scale)
        scale = max(before, after)
        return lambda error: self.norm(error) / scale

    def interpolate(self, theta: float) -> np.ndarray:
        r"""The dense output of the last step taken at :math:`t + \theta h`, :math:`0 \le \theta \le 1`
        (numpy states, no decay; evaluates the continuous extension's stages once per step).

        The driver calls it right after the step is accepted: a later :meth:`step` replaces it.
        """
        extension = self.tableau.continuous_extension
        if extension is None or self.decay is not None:
            raise ValueError(f"tableau {self.tableau.name!r}: no dense output"
                             + (" in integrating-factor form" if extension is not None else ""))
        if self._last_step is None:
            raise ValueError("interpolate reads the last step: take one first")
        q, h, stages = self._last_step
        if self._extended is None or self._extended[0] is not stages:
            known = self.tableau.stages + 1
            flat = np.empty((known + len(extension.c), q.size), dtype=np.result_type(q, stages.stages[0]))
            for i in range(known):
                flat[i] = stages.stages[i].reshape(-1)
            for j, row in enumerate(self._extension_rows, start=known):
                flat[j] = self._evaluate(q + h * weighted_sum(row, flat[:j]).reshape(q.shape)).reshape(-1)
            self._extended = (stages, flat)
        weights = self._dense_weights @ theta ** self._dense_powers
        return q + h * weighted_sum(weights, self._extended[1]).reshape(q.shape)


@lru_cache(maxsize=None)
def _step_rows(tableau: ExplicitTableau) -> "_StepRows":
    """A tableau's rows, built once (a solver builds a stepper per run)."""
    return _StepRows(tableau)


class _StepRows:
    r"""The combinations a step forms, :math:`h\sum_i w_{ri} e^{-\mu (u_r - c_i) h} k_i` for each row ``r``.

    Rows: the stages ``1 .. s-1`` (:math:`u_r = c_{r+1}`), the kept solution, the error
    estimate and the coarse one if the tableau has it (:math:`u = 1`); columns: the stages
    and :math:`f` at the new solution (abscissa 1). The time spans whose exponentials a step
    needs are listed once (``spans``, with 0 for the zero weights), each term pointing at its
    own.
    """

    def __init__(self, tableau: ExplicitTableau):
        s = tableau.stages
        c = tableau.c + (1.0,)
        coarse = tableau.coarse_error or ()
        weights = np.zeros((s + 1 + bool(coarse), s + 1))
        for row in range(s - 1):
            weights[row, : row + 1] = tableau.a[row + 1]
        weights[s - 1, :s] = tableau.b
        weights[s, : len(tableau.error or ())] = tableau.error or ()
        weights[s + 1:, : len(coarse)] = coarse
        until = [*tableau.c[1:], 1.0, 1.0] + [1.0] * bool(coarse)
        nonzero = weights != 0.0
        spans = sorted({0.0, *until} | {until[r] - c[i] for r, i in zip(*np.nonzero(nonzero))})
        self.solution, self.error, self.coarse = s - 1, s, s + 1 if coarse else None
        self.weights, self.spans = weights, np.array(spans)
        self.until = np.array([spans.index(u) for u in until])
        self.term_span = np.array([[spans.index(until[r] - c[i]) if nonzero[r, i] else spans.index(0.0)
                                    for i in range(s + 1)] for r in range(len(until))])
        #: Per row, its nonzero terms as (stage, weight, span index): what the termwise sums loop over.
        #: Python numbers, which every array namespace takes.
        self.terms = [[(int(i), float(weights[r, i]), int(self.term_span[r, i])) for i in np.flatnonzero(nonzero[r])]
                      for r in range(len(until))]
        #: Whether the rows hold more than two terms on average (where products over the stages pay).
        self.long = np.count_nonzero(nonzero) > 2 * len(until)

    def exponentials(self, decay: np.ndarray | None, h: float) -> np.ndarray | None:
        """:math:`e^{-\\mu\\,\\mathrm{span}\\,h}` for every span (axis 0), ``None`` without decay."""
        if decay is None:
            return None
        decay = np.asarray(decay)
        return np.exp(-decay * (self.spans.reshape(-1, *(1,) * decay.ndim) * h))


class _Stages:
    """The stages of one step and the step's exponentials; ``total(row)`` sums them with the row's weights."""

    def __init__(self, rows: _StepRows, q: np.ndarray, h: float, decay: np.ndarray | None):
        self.rows, self.h = rows, h
        self.exponentials = rows.exponentials(decay, h)

    def start(self, row: int, q: np.ndarray) -> np.ndarray:
        """``q`` damped over the row's span (the exactly integrated linear part)."""
        return q if self.exponentials is None else self.exponentials[self.rows.until[row]] * q


class _TermwiseStages(_Stages):
    """The stages as a list; each sum accumulates ``((h w_i) e_i) k_i`` in place, term by term."""

    def __init__(self, rows: _StepRows, q: np.ndarray, h: float, decay: np.ndarray | None):
        super().__init__(rows, q, h, decay)
        self.stages: list[np.ndarray] = []

    def add(self, stage: np.ndarray) -> None:
        self.stages.append(stage)

    def total(self, row: int) -> np.ndarray:
        total = None
        for i, weight, span in self.rows.terms[row]:
            factor = self.h * weight if self.exponentials is None else (self.h * weight) * self.exponentials[span]
            term = factor * self.stages[i]
            if total is None:
                total = term
            else:
                total += term
        return total


class _StackedStages(_Stages):
    """The stages along the first axis of one array, every factor ``(h w_ri) e_ri`` of the step formed at once."""

    def __init__(self, rows: _StepRows, q: np.ndarray, h: float, decay: np.ndarray | None):
        super().__init__(rows, q, h, decay)
        weights = h * rows.weights
        if self.exponentials is None:
            factors = weights.reshape(*weights.shape, *(1,) * q.ndim)
        else:
            damped = weights.reshape(*weights.shape, *(1,) * (self.exponentials.ndim - 1)) * self.exponentials[rows.term_span]
            factors = damped.reshape(*weights.shape, *(1,) * (q.ndim - self.exponentials.ndim + 1), *damped.shape[2:])
        self.factors, self.count, self.q = factors, 0, q

    def add(self, stage: np.ndarray) -> None:
        if self.count == 0:
            self.stages = np.empty((self.rows.weights.shape[1], *stage.shape), dtype=np.result_type(self.q, stage))
        self.stages[self.count] = stage
        self.count += 1

    def total(self, row: int) -> np.ndarray:
        # The rows' weights vanish beyond their last stage: summing over every stage so far adds zeros.
        return (self.factors[row, : self.count] * self.stages[: self.count]).sum(axis=0)


class _ProductStages(_Stages):
    """The stages along the first axis of one array (no decay); each sum one product of the row's weights with it."""

    def __init__(self, rows: _StepRows, q: np.ndarray, h: float, decay: None):
        super().__init__(rows, q, h, decay)
        self.weights, self.count, self.q = h * rows.weights, 0, q

    def add(self, stage: np.ndarray) -> None:
        if self.count == 0:
            self.stages = np.empty((self.rows.weights.shape[1], *stage.shape), dtype=np.result_type(self.q, stage))
            self.flat = self.stages.reshape(self.stages.shape[0], -1)
        self.stages[self.count] = stage
        self.count += 1

    def total(self, row: int) -> np.ndarray:
        return weighted_sum(self.weights[row, : self.count], self.flat[: self.count]).reshape(self.stages.shape[1:])


#: Products of at most this many entries run on the calling thread in BLAS (OpenBLAS threads a
#: matrix-vector product from 2304 x 4 entries on, other libraries later).
SERIAL_PRODUCT_SIZE = 4096


def weighted_sum(weights: np.ndarray, stacked: np.ndarray) -> np.ndarray:
    r""":math:`\sum_i w_i s_i` over the rows of a C-contiguous ``(k, n)`` array, for real weights, on this thread.

    A BLAS product starts threads of its own on larger arrays, and their busy-waiting starves
    the OpenMP threads of shtns and numba that the right-hand side runs next. Small products
    (:data:`SERIAL_PRODUCT_SIZE`) go through BLAS, which is quickest there; larger ones
    through einsum's single-threaded loop, complex rows as their real view (real weights
    scale both parts alike).
    """
    if stacked.size <= SERIAL_PRODUCT_SIZE:
        return weights @ stacked
    if np.iscomplexobj(stacked):
        return np.einsum("i,ij->j", weights, stacked.view(stacked.real.dtype)).view(stacked.dtype)
    return np.einsum("i,ij->j", weights, stacked)


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
