r"""Explicit Runge-Kutta methods as data: Butcher tableaux with their embedded error weights.

A tableau names the stage abscissas :math:`c`, the coefficients :math:`a_{ij}` (strictly lower
triangular), the weights :math:`b` of the solution that is kept, and the weights
:math:`e = b - \hat b` of the local error estimate (the difference to the embedded solution).
One extra error weight multiplies :math:`f` at the new solution (first same as last, as in
Dormand-Prince and Bogacki-Shampine): that evaluation is the next step's first stage.

``order`` is the order of the kept solution and ``error_estimator_order`` that of the
estimate (the lower member of the pair); the step-size controller uses the latter, as
:mod:`scipy.integrate` does. A tableau may also carry a second, coarser error row that the
estimate is blended with (Hairer's DOP853) and a continuous extension (dense output: the
solution anywhere inside a step, from a few more stages). A new pair is added by writing its tableau here once: both PDE
solvers and the particle system take it by name (:data:`TABLEAUX`) or as the object.

Every abscissa is in :math:`[0, 1]`; those of the tableaux here never decrease along the
stages, as the integrating-factor form (:class:`~meanfield.integration.runge_kutta.ExplicitRungeKutta`
with a decay) requires: it then only ever applies decaying exponentials.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from fractions import Fraction
from functools import cached_property

import numpy as np

from . import dop853_data


@dataclass(frozen=True)
class ContinuousExtension:
    r"""Dense output of a tableau: :math:`y(t + \theta h) = y + h \sum_i b_i(\theta)\, k_i`, :math:`0 \le \theta \le 1`.

    The stages :math:`k_i` are the step's ``s``, :math:`f` at the new solution, then the
    extra stages given here, each evaluated at :math:`y + h \sum_j a_{ij} k_j` over all the
    stages before it.

    Parameters
    ----------
    c : tuple of float
        Abscissas of the extra stages (where they lie in the step; in ``[0, 1]``).
    a : tuple of tuples
        Row ``j``: the coefficients of the ``s + 1 + j`` stages before extra stage ``j``.
    weights : tuple of tuples
        Row ``i``: :math:`b_i(\theta)` as the coefficients of :math:`\theta, \theta^2, \dots`
        (no constant term: :math:`y(t)` is the step's start), one row per stage, extra ones
        included.
    order : int
        Order of the interpolated solution.
    """

    c: tuple[float, ...]
    a: tuple[tuple[float, ...], ...]
    weights: tuple[tuple[float, ...], ...]
    order: int


@dataclass(frozen=True)
class ExplicitTableau:
    r"""One explicit Runge-Kutta method, optionally with an embedded error estimate.

    Parameters
    ----------
    name : str
    c : tuple of float, shape (s,)
        Stage abscissas in ``[0, 1]``, the first 0 (nondecreasing for the integrating-factor form).
    a : tuple of tuples
        Row ``j`` holds :math:`a_{j0}, \dots, a_{j,j-1}` (row 0 is empty).
    b : tuple of float, shape (s,)
        Weights of the kept solution.
    error : tuple of float, shape (s,) or (s + 1,), optional
        :math:`b - \hat b`; an ``s + 1``-th weight multiplies :math:`f` at the new solution.
        ``None``: a fixed-step method.
    order, error_estimator_order : int
    coarse_error : tuple of float, shape (s + 1,), optional
        Weights of a lower-order error estimate :math:`\tilde e` that the estimate is blended
        with, as in Hairer's DOP853: the scaled error is
        :math:`\|e\|^2 / \sqrt{\|e\|^2 + 0.01\,\|\tilde e\|^2}`. For small steps the
        third-order :math:`\tilde e \sim h^4` dominates the root and the blend, about
        :math:`10\|e\|^2/\|\tilde e\|` with the fifth-order :math:`e \sim h^6`, scales like
        :math:`h^8`: an estimate of order 7 (``error_estimator_order``), nearer the
        eighth-order solution's error than :math:`e` alone.
    continuous_extension : ContinuousExtension, optional
        Dense output (first same as last tableaux only: it uses :math:`f` at the new solution).
    """

    name: str
    c: tuple[float, ...]
    a: tuple[tuple[float, ...], ...]
    b: tuple[float, ...]
    order: int
    error: tuple[float, ...] | None = None
    error_estimator_order: int | None = None
    coarse_error: tuple[float, ...] | None = None
    continuous_extension: ContinuousExtension | None = None

    def __post_init__(self) -> None:
        stages = len(self.c)
        if len(self.a) != stages or any(len(row) != j for j, row in enumerate(self.a)) or len(self.b) != stages:
            raise ValueError(f"tableau {self.name!r}: c, a and b must describe {stages} stages")
        if self.c[0] != 0 or not all(0 <= c <= 1 for c in self.c):
            raise ValueError(f"tableau {self.name!r}: abscissas must start at 0 and lie in [0, 1], got {self.c}")
        if (self.error is None) != (self.error_estimator_order is None):
            raise ValueError(f"tableau {self.name!r}: error weights and error_estimator_order go together")
        if self.error is not None and len(self.error) not in (stages, stages + 1):
            raise ValueError(f"tableau {self.name!r}: {len(self.error)} error weights for {stages} stages")
        if self.coarse_error is not None and (self.error is None or len(self.coarse_error) != len(self.error)):
            raise ValueError(f"tableau {self.name!r}: a coarse error row needs error weights of its length")
        dense = self.continuous_extension
        if dense is not None:
            if not self.first_same_as_last:
                raise ValueError(f"tableau {self.name!r}: a continuous extension needs f at the new solution "
                                 "(first same as last)")
            if (any(len(row) != stages + 1 + j for j, row in enumerate(dense.a))
                    or len(dense.a) != len(dense.c) or len(dense.weights) != stages + 1 + len(dense.c)):
                raise ValueError(f"tableau {self.name!r}: the continuous extension's rows do not match "
                                 f"{stages} + 1 + {len(dense.c)} stages")

    @property
    def stages(self) -> int:
        return len(self.c)

    @property
    def adaptive(self) -> bool:
        return self.error is not None

    @property
    def nondecreasing_abscissas(self) -> bool:
        """Whether :math:`c` never decreases along the stages (the integrating-factor form needs it)."""
        return all(earlier <= later for earlier, later in zip(self.c, self.c[1:]))

    @property
    def first_same_as_last(self) -> bool:
        """Whether the estimate uses :math:`f` at the new solution (then the next step's first stage)."""
        return self.error is not None and len(self.error) == self.stages + 1

    @cached_property
    def matrix(self) -> np.ndarray:
        """:math:`A` as a strictly lower triangular ``(s, s)`` array."""
        a = np.zeros((self.stages, self.stages))
        for j, row in enumerate(self.a):
            a[j, :j] = row
        return a

    @cached_property
    def stability_polynomial(self) -> np.ndarray:
        r"""Coefficients :math:`\gamma_k = b^T A^{k-1}\mathbf 1` of :math:`R(z) = 1 + \sum_{k \ge 1}\gamma_k z^k`, lowest first."""
        a = self.matrix
        coefficients, power = [1.0], np.ones(self.stages)
        for _ in range(self.stages):
            coefficients.append(float(np.array(self.b) @ power))
            power = a @ power
        return np.array(coefficients)

    def stability_function(self, z: np.ndarray) -> np.ndarray:
        r""":math:`R(z) = 1 + z\, b^T (I - zA)^{-1}\mathbf 1` (a polynomial: :math:`A` is nilpotent): one step of
        :math:`\dot y = \lambda y` is :math:`y \mapsto R(h\lambda) y`."""
        return np.polynomial.polynomial.polyval(np.asarray(z, dtype=complex), self.stability_polynomial)

    @cached_property
    def imaginary_stability(self) -> float:
        r"""Largest :math:`y` with :math:`|R(i\eta)| \le 1` for every :math:`0 \le \eta \le y` (round-off aside).

        Advection has a nearly imaginary spectrum: a step with :math:`h\,\max|\lambda|` beyond
        this amplifies the fastest modes, unseen by the error estimate until they dominate it.
        """
        return float(self.damped_imaginary_stability(0.0))

    def damped_imaginary_stability(self, ratio: np.ndarray | float) -> np.ndarray:
        r"""Largest :math:`y` with :math:`e^{-a\eta}|R(i\eta)| \le 1` for every :math:`0 \le \eta \le y`, per ratio :math:`a \ge 0`.

        In integrating-factor form a mode that is advected at frequency :math:`\omega` and
        decays at rate :math:`\mu` (diffusion, integrated exactly) is multiplied by
        :math:`e^{-\mu h} R(i\omega h)` per step: with :math:`a = \mu/\omega` and
        :math:`\eta = \omega h` the step is stable for :math:`\omega h` below this. ``a = 0`` is
        :attr:`imaginary_stability`; ``inf`` where the damping outweighs every amplification.

        Parameters
        ----------
        ratio : float or numpy.ndarray
            :math:`a = \mu/\omega \ge 0`.

        Returns
        -------
        numpy.ndarray
            :math:`y(a)`, same shape as ``ratio`` (the first unstable point of a fine grid in
            :math:`\eta`, as :attr:`imaginary_stability`).
        """
        eta, growth = self._damped_stability_table
        first = np.searchsorted(growth, ratio, side="right")  # the first eta whose growth rate exceeds a
        return np.where(first < eta.size, eta[np.minimum(first, eta.size - 1)], np.inf)

    @cached_property
    def _damped_stability_table(self) -> tuple[np.ndarray, np.ndarray]:
        r"""The grid :math:`\eta > 0` and the running maximum over :math:`(0, \eta]` of the damping ratio
        each point needs, :math:`(\log|R(i\eta)| - 10^{-12})/\eta` (the round-off slack of
        :attr:`imaginary_stability`): :math:`y(a)` is the first point where it exceeds :math:`a`.

        Fine and linear to :math:`2s` (:math:`s` stages; where the imaginary stability of these
        tableaux lies), then geometric to :math:`10^4`, where the stability polynomial has long
        outgrown every ratio it needed before.
        """
        eta = np.concatenate([np.linspace(0.0, 2.0 * self.stages, 200_001)[1:],
                              np.geomspace(2.0 * self.stages, 1e4, 20_001)[1:]])
        needed = (np.log(np.abs(self.stability_function(1j * eta))) - 1e-12) / eta
        return eta, np.maximum.accumulate(needed)

    def check_order_conditions(self) -> None:
        """Raise unless the kept solution satisfies the order conditions up to order 4 (the quadrature ones beyond)."""
        a = self.matrix
        b, c = np.array(self.b), np.array(self.c)
        if not np.allclose(a.sum(axis=1), c, atol=1e-14):
            raise ValueError(f"tableau {self.name!r}: rows of a do not sum to c")
        conditions = [(b.sum(), 1.0)]
        if self.order >= 2:
            conditions += [(b @ c, 1 / 2)]
        if self.order >= 3:
            conditions += [(b @ c ** 2, 1 / 3), (b @ a @ c, 1 / 6)]
        if self.order >= 4:
            conditions += [(b @ c ** 3, 1 / 4), (b @ (c * (a @ c)), 1 / 8), (b @ a @ c ** 2, 1 / 12),
                           (b @ a @ a @ c, 1 / 24)]
        conditions += [(b @ c ** (k - 1), 1 / k) for k in range(5, self.order + 1)]
        for value, expected in conditions:
            if abs(value - expected) > 1e-13:
                raise ValueError(f"tableau {self.name!r}: an order condition fails ({value} != {expected})")


def _rationals(*rows: str) -> tuple[float, ...]:
    return tuple(float(Fraction(entry)) for entry in rows)


#: Heun's method with forward Euler embedded: the estimate is Euler's error. Heun is
#: strong-stability preserving (a convex combination of Euler steps): where an Euler step keeps
#: the density positive under a CFL bound, so does Heun.
HEUN_EULER = ExplicitTableau(
    name="heun_euler", c=(0.0, 1.0), a=((), (1.0,)), b=(0.5, 0.5), order=2,
    error=(-0.5, 0.5), error_estimator_order=1)

#: Bogacki-Shampine 3(2), first same as last (scipy's ``RK23``).
BOGACKI_SHAMPINE = ExplicitTableau(
    name="bogacki_shampine", c=_rationals("0", "1/2", "3/4"),
    a=((), _rationals("1/2"), _rationals("0", "3/4")),
    b=_rationals("2/9", "1/3", "4/9"), order=3,
    error=_rationals("5/72", "-1/12", "-1/9", "1/8"), error_estimator_order=2)

#: Dormand-Prince 5(4), first same as last, with its quartic dense output (scipy's ``RK45``).
DORMAND_PRINCE = ExplicitTableau(
    name="dormand_prince", c=_rationals("0", "1/5", "3/10", "4/5", "8/9", "1"),
    a=((), _rationals("1/5"), _rationals("3/40", "9/40"), _rationals("44/45", "-56/15", "32/9"),
       _rationals("19372/6561", "-25360/2187", "64448/6561", "-212/729"),
       _rationals("9017/3168", "-355/33", "46732/5247", "49/176", "-5103/18656")),
    b=_rationals("35/384", "0", "500/1113", "125/192", "-2187/6784", "11/84"), order=5,
    error=tuple(float(Fraction(b) - Fraction(e)) for b, e in zip(
        ("35/384", "0", "500/1113", "125/192", "-2187/6784", "11/84", "0"),
        ("5179/57600", "0", "7571/16695", "393/640", "-92097/339200", "187/2100", "1/40"))),
    error_estimator_order=4,
    # Shampine's quartic interpolant, as scipy's RK45 has it (Hairer, Norsett & Wanner I, II.6):
    # the seven stages the step already has, f at the new solution included, and no more.
    continuous_extension=ContinuousExtension(c=(), a=(), weights=(
        _rationals("1", "-8048581381/2820520608", "8663915743/2820520608", "-12715105075/11282082432"),
        (0.0, 0.0, 0.0, 0.0),
        _rationals("0", "131558114200/32700410799", "-68118460800/10900136933", "87487479700/32700410799"),
        _rationals("0", "-1754552775/470086768", "14199869525/1410260304", "-10690763975/1880347072"),
        _rationals("0", "127303824393/49829197408", "-318862633887/49829197408", "701980252875/199316789632"),
        _rationals("0", "-282668133/205662961", "2019193451/616988883", "-1453857185/822651844"),
        _rationals("0", "40617522/29380423", "-110615467/29380423", "69997945/29380423")), order=4))

#: Merson 4(3): five stages, and the imaginary axis up to :math:`2\sqrt 3` in its stability
#: region (Dormand-Prince's reaches 0.997): a step limited by stability costs 5 / 3.46 right-hand
#: sides per unit of time and frequency, against Dormand-Prince's 6 / 0.997.
MERSON = ExplicitTableau(
    name="merson", c=_rationals("0", "1/3", "1/3", "1/2", "1"),
    a=((), _rationals("1/3"), _rationals("1/6", "1/6"), _rationals("1/8", "0", "3/8"),
       _rationals("1/2", "0", "-3/2", "2")),
    b=_rationals("1/6", "0", "0", "2/3", "1/6"), order=4,
    error=tuple(float(Fraction(b) - Fraction(e)) for b, e in zip(
        ("1/6", "0", "0", "2/3", "1/6"), ("1/10", "0", "3/10", "2/5", "1/5"))),
    error_estimator_order=3)

#: The classical fourth-order method, fixed steps.
CLASSICAL_RK4 = ExplicitTableau(
    name="rk4", c=(0.0, 0.5, 0.5, 1.0), a=((), (0.5,), (0.0, 0.5), (0.0, 0.0, 1.0)),
    b=_rationals("1/6", "1/3", "1/3", "1/6"), order=4)

def dormand_prince_853() -> ExplicitTableau:
    r"""Dormand-Prince 8(5,3), Hairer's DOP853, with the coefficients of :class:`scipy.integrate.DOP853`.

    Twelve stages (the thirteenth, :math:`f` at the new solution, is the next step's first) and
    the imaginary axis up to 5.96 in its stability region: a step limited by stability costs
    12 / 5.96 right-hand sides per unit of time and frequency, against Dormand-Prince 5(4)'s
    6 / 0.997, and the kept solution is of order 8. The error estimate is the fifth-order one
    alone (:func:`dop853` blends it with the third-order one), which overestimates the error
    of the eighth-order solution. Its abscissas decrease once (:math:`c_7 < c_6`), so the
    integrating-factor form (diffusion) refuses it. It has DOP853's seventh-order dense output.
    """
    return ExplicitTableau(name="dormand_prince_853", **_dop853_steps(), order=8,
                           error=tuple(float(e) for e in dop853_data.E5), error_estimator_order=5,
                           continuous_extension=_dop853_extension())


def dop853() -> ExplicitTableau:
    r"""Hairer's DOP853 as :class:`scipy.integrate.DOP853` runs it: the tableau of :func:`dormand_prince_853`,
    its error estimate blended with the third-order one (estimator order 7, the controller's
    exponent :math:`-1/8`), and the seventh-order dense output of three more stages.

    The blend (:attr:`ExplicitTableau.coarse_error`) takes longer steps than the fifth-order
    estimate alone at the same tolerance; the dense output gives the solution at output
    times inside a step, so steps need not land on them. The particle system's default.
    """
    return ExplicitTableau(name="dop853", **_dop853_steps(), order=8,
                           error=tuple(float(e) for e in dop853_data.E5), error_estimator_order=7,
                           coarse_error=tuple(float(e) for e in dop853_data.E3),
                           continuous_extension=_dop853_extension())


def _dop853_extension() -> ContinuousExtension:
    """DOP853's seventh-order dense output: three more stages, and scipy's interpolant as weights."""
    stages = dop853_data.N_STAGES
    extended = dop853_data.N_STAGES_EXTENDED
    # scipy's interpolant: y(t + x h) = y + x (F0 + (1-x)(F1 + x (F2 + (1-x)(F3 + ...)))) with
    # F0 = y1 - y, F1 = h f(y) - F0, F2 = 2 F0 - h (f(y) + f(y1)), F3.. = h D K: each F_j is
    # h W_j . K, and the nested products are the basis x, x(1-x), x^2(1-x), x^2(1-x)^2, ...
    b = np.zeros(extended)
    b[:stages] = dop853_data.B
    first, last = np.eye(extended)[0], np.eye(extended)[stages]
    rows = np.vstack([b, first - b, 2 * b - first - last, dop853_data.D])
    x, one_minus_x = np.polynomial.Polynomial([0.0, 1.0]), np.polynomial.Polynomial([1.0, -1.0])
    basis = [x ** ((j + 2) // 2) * one_minus_x ** ((j + 1) // 2) for j in range(len(rows))]
    degree = max(p.degree() for p in basis)
    powers = np.array([np.pad(p.coef, (0, degree + 1 - p.coef.size))[1:] for p in basis])
    weights = rows.T @ powers  # stage i: b_i(x) as coefficients of x, x^2, ...
    return ContinuousExtension(
        c=tuple(float(c) for c in dop853_data.C[stages + 1:]),
        a=tuple(tuple(float(a) for a in dop853_data.A[j, :j]) for j in range(stages + 1, extended)),
        weights=tuple(tuple(float(w) for w in row) for row in weights), order=7)


def _dop853_steps() -> dict:
    """DOP853's ``c``, ``a`` and ``b``."""
    stages = dop853_data.N_STAGES
    return dict(c=tuple(float(c) for c in dop853_data.C[:stages]),
                a=tuple(tuple(float(a) for a in dop853_data.A[j, :j]) for j in range(stages)),
                b=tuple(float(b) for b in dop853_data.B))


class TableauRegistry(Mapping):
    """Tableaux by name; an entry given by a function is built on first access, then kept."""

    def __init__(self, tableaux: tuple[ExplicitTableau, ...], deferred: dict[str, Callable[[], ExplicitTableau]]):
        self._built = {t.name: t for t in tableaux}
        self._deferred = dict(deferred)

    def __getitem__(self, name: str) -> ExplicitTableau:
        if name not in self._built:
            self._built[name] = self._deferred[name]()
        return self._built[name]

    def __iter__(self) -> Iterator[str]:
        return iter([*self._built, *(name for name in self._deferred if name not in self._built)])

    def __len__(self) -> int:
        return len(set(self._built) | set(self._deferred))


_BUILT = (HEUN_EULER, BOGACKI_SHAMPINE, MERSON, DORMAND_PRINCE, CLASSICAL_RK4)
_DEFERRED = {"dormand_prince_853": dormand_prince_853, "dop853": dop853}

#: The pairs and methods by name (``tableau=`` of the solvers).
TABLEAUX = TableauRegistry(_BUILT, _DEFERRED)

#: The names of the embedded pairs (every deferred entry is one), known without building them.
ADAPTIVE_PAIRS = tuple(t.name for t in _BUILT if t.adaptive) + tuple(_DEFERRED)


def tableau_named(tableau: str | ExplicitTableau, *, adaptive: bool = True) -> ExplicitTableau:
    """The tableau a ``tableau`` argument names (or the tableau itself); adaptive ones need an error estimate."""
    if isinstance(tableau, ExplicitTableau):
        found = tableau
    elif tableau in TABLEAUX:
        found = TABLEAUX[tableau]
    else:
        raise ValueError(f"tableau must be an ExplicitTableau or one of {sorted(TABLEAUX)}, got {tableau!r}")
    if adaptive and not found.adaptive:
        raise ValueError(f"tableau {found.name!r} has no error estimate; an adaptive solver needs a pair")
    return found
