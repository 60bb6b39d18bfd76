r"""Stationary states by Newton-Krylov, and branches of them by pseudo-arclength continuation.

Works on any stationary problem with the interface of :class:`~solvers.stationary.circle.CircleStationary`
(unknowns, a residual that vanishes at the stationary states, a preconditioner, the
linearisation's leading eigenvalues, the uniform state's modes). Every nonlinear solve is
:func:`scipy.optimize.newton_krylov`.

From the uniform state. For a rotation-invariant model the uniform density is stationary
at every parameter value and mode :math:`k` is an eigenvector of the linearisation; its
eigenvalue crosses zero at the bifurcation points, found by :func:`scipy.optimize.brentq` on
the discrete linearisation itself (they coincide with the zeros of the dispersion relation,
:func:`validation.growth_rate`, to round-off: the discrete Laplacian scales the growth rate by
a positive factor and moves no zero). The bifurcating branch is entered with the amplitude
of the mode as the parameter (the state with :math:`\frac1\pi\int\rho\cos k\theta = a` and the
parameter value as unknowns; the symmetry makes every such bifurcation a pitchfork and its
two sides one orbit), then followed by pseudo-arclength: a secant predictor and the
constraint :math:`\langle z - z_{pred}, t\rangle = 0` in the metric that weighs the state by
:math:`\bar\rho` and the parameter by its scale, with the step adapted to Newton's iteration
count. A step whose Newton iteration fails, strays to a parameter value the problem
refuses, or lands at more than 18 degrees from the branch's direction (:data:`TURN_COSINE`: a
bend the step cannot follow, or a jump to another branch) is retried with half the step. A fold is where the tangent's parameter component
changes sign; it is located to Newton's tolerance as the extremum of the parameter along the
branch (a bounded scalar search over the states at a fixed distance along the tangent there)
and inserted as a point of the branch. A change of the number of unstable eigenvalues marks a
secondary bifurcation.

A branch stops where it reaches the interval's end (the last point solved at the end value
itself), leaves the resolved range (a cluster narrower than the problem's
``min_cluster_cells``, a density that is not positive), where Newton fails at the smallest
step, or where a parameter value is refused at the smallest step (no diffusion left); what
was computed is kept and the reason recorded.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
from scipy.optimize import NoConvergence, brentq, minimize_scalar, newton_krylov
from scipy.sparse.linalg import LinearOperator

from meanfield.checks import check_int, check_real
from meanfield.docstrings import fill_docstrings
from meanfield.progress import count_progress

#: Largest Newton iteration count per continuation step; more means the step was too long.
NEWTON_ITERATIONS = 12

#: The relative residual each Krylov solve of a Newton step stops at (inexact Newton's forcing term).
#: A Newton step then leaves at most this fraction of the residual besides its quadratic error, which
#: from a continuation step's prediction adds no Newton step, while each further decade costs GMRES
#: Krylov steps: its preconditioner, frozen at the prediction, leaves a fixed fraction of the residual
#: per step (``bench_stationary.py`` counts both).
INNER_RTOL = 1e-4

#: Largest Newton iteration count of a solve from a user's guess (line search from afar).
GUESS_ITERATIONS = 60

#: A continuation step whose secant makes a larger angle than this cosine with the last one is
#: retried shorter: the branch bends more than a step may follow, or Newton jumped to another branch.
TURN_COSINE = 0.95

#: Leading eigenvalues recorded per point.
EIGENVALUES = 4

#: The stationary problem's entry (``{problem}``).
PROBLEM = """
problem : CircleStationary, SphereStationary or SphereStationaryGeneral
    The stationary problem (``solvers.stationary.circle``, ``solvers.stationary.sphere``,
    ``solvers.stationary.sphere_general``).
"""

#: The entries of how far a branch is followed and how it shows progress (``{branch_limits}``).
BRANCH_LIMITS = """
max_points : int
    Points of the branch at most.
max_step : float, optional
    Largest continuation step, in the metric's units (default: a fifth of the interval).
progress : bool, optional
    A progress bar (default: on a terminal).
stability : bool
    Compute each state's leading eigenvalues (its stability; most of a point's cost: ARPACK's
    Jacobian-vector products). ``False`` follows the branch alone: the states' ``eigenvalues``
    stay NaN.
"""


@dataclass
class Point:
    """One stationary state: unknowns, parameter value, Newton's cost and its leading eigenvalues.

    Parameters
    ----------
    unknowns : numpy.ndarray
        The problem's unknowns (its ``density(unknowns)`` is the state).
    value : float
        The parameter value.
    residual_evaluations : int
        Right-hand sides Newton-Krylov took to find it.
    eigenvalues : numpy.ndarray
        The leading eigenvalues of the linearisation (NaN-padded to ``EIGENVALUES``).
    """

    unknowns: np.ndarray
    value: float
    residual_evaluations: int = 0
    eigenvalues: np.ndarray = field(default_factory=lambda: np.full(EIGENVALUES, np.nan + 0j))


@dataclass
class Branch:
    """A branch of stationary states: its points, where it came from and why it ended.

    Parameters
    ----------
    points : list of Point
        The states in the order of the continuation.
    mode : int
        The mode of the uniform state it bifurcates from.
    start_value : float
        The parameter value of that bifurcation.
    end : str
        Why the continuation stopped.
    folds : list of int
        Indices of the located folds among the points: where the parameter turns back.
    """

    points: list[Point]
    mode: int
    start_value: float
    end: str = ""
    folds: list[int] = field(default_factory=list)


class _Counted:
    """A residual that counts its evaluations (a Newton solve's cost, in right-hand sides).

    The last evaluation is kept: scipy's Newton-Krylov evaluates its start again, which the
    tolerance check and the preconditioner's parameter derivative have already done.
    """

    def __init__(self, function):
        self.function, self.calls = function, 0
        self.last: tuple[np.ndarray, np.ndarray] | None = None

    def __call__(self, z):
        z = np.asarray(z, dtype=float)
        if self.last is not None and np.array_equal(z, self.last[0]):
            return self.last[1].copy()
        self.calls += 1
        value = self.function(z)
        self.last = (z.copy(), np.array(value, dtype=float))
        return value


def _newton(counted: _Counted, start: np.ndarray, tolerance: float, preconditioner,
            iterations: int = NEWTON_ITERATIONS) -> tuple[np.ndarray, int, int]:
    """``(solution, residual evaluations, iterations)``; raises :class:`scipy.optimize.NoConvergence`."""
    if np.abs(counted(start)).max() <= tolerance:
        return np.asarray(start, dtype=float), counted.calls, 0
    taken = [0]

    def count(*_):
        taken[0] += 1
    # GMRES, not scipy's default LGMRES: LGMRES recycles Krylov vectors of earlier iterates, built
    # with the preconditioner of their own iterate (it is refreshed at each one); from a rough
    # guess those stale directions stalled Newton for tens of iterations.
    # Each linear solve to INNER_RTOL (with the preconditioner near the Jacobian's inverse, a few Krylov steps).
    # scipy's own forcing term tightens with the residual, to far below what Newton needs here.
    solution = newton_krylov(counted, start, f_tol=tolerance, inner_M=preconditioner, maxiter=iterations,
                             callback=count, line_search="armijo", method="gmres", inner_rtol=INNER_RTOL)
    return np.asarray(solution, dtype=float), counted.calls, taken[0]


@fill_docstrings(problem=PROBLEM)
def stationary_state(problem, guess: np.ndarray, value: float | None = None, *, stability: bool = True) -> Point:
    """The stationary state nearest ``guess`` (unknowns) at the parameter ``value`` (default: the model's).

    Parameters
    ----------
    {problem}
    guess : numpy.ndarray, shape (problem.size,)
        Unknowns to start Newton-Krylov from.
    value : float, optional
        The parameter value.
    stability : bool
        Compute the leading eigenvalues (its stability); ``False``: they stay NaN.

    Returns
    -------
    Point
        The state, with Newton's cost and the leading eigenvalues (its stability).

    Raises
    ------
    ValueError
        If ``guess`` has the wrong shape or ``value`` is refused by the problem.
    RuntimeError
        If Newton-Krylov does not reach the problem's tolerance.
    """
    value = problem.value if value is None else float(value)
    problem.check_value(value)
    guess = np.asarray(guess, dtype=float)
    if guess.shape != (problem.size,):
        raise ValueError(f"guess must hold the problem's {problem.size} unknowns, got shape {guess.shape}")
    preconditioner = problem.preconditioner(value)
    preconditioner.update(guess)
    try:
        unknowns, evaluations, _ = _newton(_Counted(lambda y: problem.residual(y, value)), guess,
                                           problem.residual_tolerance, preconditioner, GUESS_ITERATIONS)
    except NoConvergence as failure:
        raise RuntimeError(f"Newton-Krylov did not find a stationary state at {problem.parameter}={value:.6g} "
                           f"from this guess (residual above {problem.residual_tolerance:.3g} after "
                           f"{GUESS_ITERATIONS} iterations)") from failure
    point = Point(unknowns, value, evaluations)
    if stability:
        point.eigenvalues = _padded(problem.leading_eigenvalues(unknowns, value, EIGENVALUES)[0])
    return point


def _padded(values: np.ndarray) -> np.ndarray:
    out = np.full(EIGENVALUES, np.nan + 0j)
    out[: values.size] = values
    return out


# ---------------------------------------------------------------------- the uniform state
def uniform_bifurcations(problem, interval: tuple[float, float], modes) -> list[tuple[int, float]]:
    r"""``(wavenumber, value)`` where mode ``k``'s eigenvalue at the uniform state vanishes, inside ``interval``.

    Sign changes on 64 equispaced values, each refined by :func:`scipy.optimize.brentq` to
    relative ``1e-14``.

    Parameters
    ----------
    problem : CircleStationary or SphereStationary
        A stationary problem of a rotation-invariant model.
    interval : (float, float)
        The parameter range searched.
    modes : iterable of int
        The wavenumbers (sphere: degrees) whose eigenvalue is followed.

    Returns
    -------
    list of (int, float)
        The bifurcation points, by mode then value.

    Raises
    ------
    ValueError
        If the model is not rotation-invariant (the uniform density is then not stationary).
    """
    if not problem.rotations:
        raise ValueError("the uniform density is stationary only for a rotation-invariant model "
                         "(no external field, matrices that commute with rotations)")
    low, high = interval
    samples = np.linspace(low, high, 64)
    found = []
    for k in modes:
        growth = np.array([problem.uniform_eigenvalue(k, p) for p in samples])
        for i in np.flatnonzero(np.sign(growth[:-1]) * np.sign(growth[1:]) < 0):
            root = brentq(lambda p: problem.uniform_eigenvalue(k, p), samples[i], samples[i + 1],
                          xtol=1e-15, rtol=1e-14)
            found.append((int(k), float(root)))
        found.extend((int(k), float(p)) for p in samples[growth == 0])
    return sorted(found, key=lambda item: item[1])


# ---------------------------------------------------------------------- continuation
class _Metric:
    """The continuation's inner product: state against the uniform density, parameter against its scale."""

    def __init__(self, problem, scale: float):
        self.state_weight = 1.0 / (problem.size * problem.uniform**2)
        self.parameter_weight = 1.0 / scale**2

    def gradient(self, a: np.ndarray) -> np.ndarray:
        """The vector ``g`` with ``g @ b = dot(a, b)`` for every ``b``."""
        weighted = self.state_weight * a
        weighted[-1] = self.parameter_weight * a[-1]
        return weighted

    def dot(self, a: np.ndarray, b: np.ndarray) -> float:
        return float(self.gradient(a) @ b)

    def norm(self, a: np.ndarray) -> float:
        return math.sqrt(self.dot(a, a))


@dataclass(frozen=True)
class _Constraint:
    """The equation a continuation step adds to the residual, linear in the unknowns and the parameter:
    ``gradient @ z = target`` (an amplitude, a parameter value, a distance along a tangent)."""

    gradient: np.ndarray
    target: float

    def __call__(self, z: np.ndarray) -> float:
        return float(self.gradient @ z) - self.target


#: The parameter step of the difference that gives the residual's parameter derivative, relative to
#: ``max(|value|, 1)`` (square root of the machine epsilon: the preconditioner needs no more).
PARAMETER_DIFFERENCE = math.sqrt(np.finfo(float).eps)


class _Bordered(LinearOperator):
    r"""Approximate inverse of the augmented Jacobian :math:`\begin{pmatrix} J & f \\ c^T & d\end{pmatrix}`.

    :math:`J` is the residual's Jacobian in the state, :math:`f` its derivative in the parameter
    (one difference of residuals at the step's start) and :math:`(c, d)` the constraint's
    gradient. With the problem's preconditioner :math:`M \approx J^{-1}`, block elimination
    through the Schur complement :math:`s = d - c^T M f` gives
    :math:`\mu = (r_p - c^T M r_x) / s`, :math:`x = M r_x - \mu\, M f`: one application of
    :math:`M` per product, and GMRES sees the identity up to what :math:`M` leaves out, not
    also the rank-two border. Built at the step's prediction and kept through its Newton solve:
    it has no ``update`` for Newton-Krylov to refresh it with at each iterate. The prediction is
    near the solution, and a preconditioner refreshed at a poor intermediate iterate lost more
    than it gained (``bench_stationary.py``). Where the Schur complement vanishes (a border
    :math:`M` cannot see) the parameter is left to GMRES: identity on it.
    """

    def __init__(self, problem, start: np.ndarray, constraint: _Constraint, derivative: np.ndarray):
        super().__init__(float, (problem.size + 1, problem.size + 1))
        self.inner = problem.preconditioner(start[-1])
        self.inner.update(start[:-1], value=start[-1])
        self.border, self.corner = constraint.gradient[:-1], constraint.gradient[-1]
        self.response = self.inner.matvec(derivative)  # M f
        schur = self.corner - self.border @ self.response
        scale = abs(self.corner) + np.abs(self.border) @ np.abs(self.response)
        self.schur = schur if np.isfinite(schur) and abs(schur) > 1e-12 * scale else None

    def _matvec(self, values):
        values = np.ravel(values)
        state = self.inner.matvec(values[:-1])
        if self.schur is None:
            return np.append(state, values[-1])
        parameter = (values[-1] - self.border @ state) / self.schur
        return np.append(state - parameter * self.response, parameter)


def _solve_augmented(problem, start: np.ndarray, constraint: _Constraint) -> tuple[np.ndarray, int, int]:
    def residual(z):
        problem.check_value(z[-1])
        return np.append(problem.residual(z[:-1], z[-1]), constraint(z))
    counted = _Counted(residual)
    shifted = start.copy()
    shifted[-1] += PARAMETER_DIFFERENCE * max(abs(start[-1]), 1.0)  # up: no parameter refuses a larger value
    derivative = (counted(shifted)[:-1] - counted(start)[:-1]) / (shifted[-1] - start[-1])
    return _newton(counted, start, problem.residual_tolerance, _Bordered(problem, start, constraint, derivative))


def _accept(problem, z: np.ndarray, evaluations: int, stability: bool) -> Point:
    point = Point(z[:-1].copy(), float(z[-1]), evaluations)
    if stability:
        point.eigenvalues = _padded(problem.leading_eigenvalues(point.unknowns, point.value, EIGENVALUES)[0])
    return point


def _amplitude_gradient(problem, mode: int) -> np.ndarray:
    """The gradient of the mode's amplitude over the uniform density, a linear functional of the unknowns
    (zero on the parameter): its values on the unit vectors, one at a time."""
    gradient, unit = np.zeros(problem.size + 1), np.zeros(problem.size)
    for index in range(problem.size):
        unit[index] = 1.0
        gradient[index] = problem.amplitude(unit, mode) / problem.uniform
        unit[index] = 0.0
    return gradient


def _unit_parameter(size: int) -> np.ndarray:
    """The gradient of the constraint that fixes the parameter (the last of ``size`` entries)."""
    unit = np.zeros(size)
    unit[-1] = 1.0
    return unit


def _vector(point: Point) -> np.ndarray:
    """A point as the continuation's vector: its unknowns, then its parameter value."""
    return np.append(point.unknowns, point.value)


def _point_at_value(problem, current: np.ndarray, beyond: np.ndarray, value: float, stability: bool) -> Point | None:
    """The branch's state at the parameter ``value``, between ``current`` and ``beyond`` (which passed it), or ``None``."""
    weight = (value - current[-1]) / (beyond[-1] - current[-1])
    start = current + weight * (beyond - current)
    try:
        z, evaluations, _ = _solve_augmented(problem, start, _Constraint(_unit_parameter(start.size), value))
    except (NoConvergence, ValueError):
        return None
    return _accept(problem, z, evaluations, stability)


def _locate_fold(problem, metric, previous: np.ndarray, current: np.ndarray, after: np.ndarray,
                 rising: float, stability: bool) -> Point | None:
    r"""The fold between ``previous`` and ``after`` (the parameter turns at ``current``), to Newton's tolerance.

    The states at the distance ``a`` along the chord :math:`t` through ``current`` (the
    constraint :math:`\langle z - z_c, t\rangle = a`) form a smooth curve through the fold,
    and the parameter along it is extremal there (``rising > 0``: a maximum): a bounded
    scalar search in ``a``, whose error in ``a`` enters the parameter squared.
    """
    chord = after - previous
    tangent = chord / metric.norm(chord)
    bounds = sorted((metric.dot(previous - current, tangent), metric.dot(after - current, tangent)))
    # the hyperplanes meet the uniform branch too: a state much nearer to it is not on this branch
    nearest = 0.5 * min(problem.norm(z[:-1]) for z in (previous, current, after))
    solved: dict[float, tuple[np.ndarray, int]] = {}
    gradient = metric.gradient(tangent)

    def turned(a: float) -> float:
        try:
            z, evaluations, _ = _solve_augmented(problem, current + a * tangent,
                                                 _Constraint(gradient, gradient @ current + a))
        except (NoConvergence, ValueError):
            return np.inf
        if problem.norm(z[:-1]) < nearest:
            return np.inf
        solved[a] = (z, evaluations)
        return -rising * z[-1]

    found = minimize_scalar(turned, bounds=bounds, method="bounded",
                            options={"xatol": 1e-10 * (bounds[1] - bounds[0])})
    if found.x not in solved:
        return None
    z, evaluations = solved[found.x]
    return _accept(problem, z, evaluations, stability)


@fill_docstrings(problem=PROBLEM, branch_limits=BRANCH_LIMITS)
def branch_from_uniform(problem, mode: int, value: float, interval: tuple[float, float], *,
                        first_amplitude: float | None = None, max_points: int = 200,
                        max_step: float | None = None, progress: bool | None = None,
                        stability: bool = True) -> Branch:
    """Follow the branch that bifurcates from the uniform state in ``mode`` at ``value``.

    Parameters
    ----------
    {problem}
    mode : int
        The bifurcating mode (a wavenumber; sphere: the degree of a zonal harmonic).
    value : float
        The bifurcation point (:func:`uniform_bifurcations`).
    interval : (float, float)
        The parameter range the branch is followed in.
    first_amplitude : float, optional
        The mode's amplitude, over the uniform density, of the first two states (default 0.02 and 0.04).
    {branch_limits}

    Returns
    -------
    Branch
        Its points and why it ended (an unentered branch has none and says why).
    """
    amplitude = problem.uniform * (0.02 if first_amplitude is None else first_amplitude)
    direction = problem.mode(mode)
    gradient = _amplitude_gradient(problem, mode)
    branch = Branch([], mode, value)
    points = []
    for multiple in (1, 2):
        target = multiple * amplitude
        start = np.append(target * direction, value)
        try:
            z, evaluations, _ = _solve_augmented(problem, start, _Constraint(gradient, target / problem.uniform))
        except NoConvergence:
            branch.end = (f"the branch could not be entered: Newton-Krylov did not converge at amplitude "
                          f"{target:.3g} (another mode bifurcating at the same value?)")
            return branch
        except ValueError as refused:
            branch.end = f"the branch could not be entered at amplitude {target:.3g}: {refused}"
            return branch
        points.append(_accept(problem, z, evaluations, stability))
    branch.points = points
    return continue_branch(problem, branch, interval, max_points=max_points, max_step=max_step, progress=progress,
                           stability=stability)


@fill_docstrings(problem=PROBLEM, branch_limits=BRANCH_LIMITS)
def continue_branch(problem, branch: Branch, interval: tuple[float, float], *, max_points: int = 200,
                    max_step: float | None = None, progress: bool | None = None, stability: bool = True) -> Branch:
    """Extend ``branch`` (at least two points) by pseudo-arclength until it ends (module docstring).

    Parameters
    ----------
    {problem}
    branch : Branch
        The branch so far; extended in place.
    interval : (float, float)
        The parameter range.
    {branch_limits}

    Returns
    -------
    Branch
        ``branch``, with its new points, folds and ``end``.
    """
    max_points = check_int(max_points, "max_points", minimum=2)
    low, high = sorted(interval)
    scale = max(abs(low), abs(high))
    metric = _Metric(problem, scale)
    previous, current = _vector(branch.points[-2]), _vector(branch.points[-1])
    step = metric.norm(current - previous)
    # By default a step may cross a fifth of the interval (in the metric's parameter units).
    max_step = 0.2 * (high - low) / scale if max_step is None else check_real(max_step, "max_step", minimum=0.0, strictly=True)
    min_step = 1e-6 * max_step
    previous_direction = None
    # A branch entered at a bifurcation of the uniform state may come back to it at another one
    # (a loop between two bifurcations): it ends there rather than run round the loop again.
    entry = problem.norm(branch.points[0].unknowns) if np.isfinite(branch.start_value) else None
    left_uniform = False
    with count_progress(max_points, progress, f"branch of mode {branch.mode}", "point") as bar:
        bar.update(len(branch.points))
        while len(branch.points) < max_points:
            tangent = (current - previous) / metric.norm(current - previous)
            prediction = current + step * tangent
            refused = None
            try:
                gradient = metric.gradient(tangent)
                z, evaluations, iterations = _solve_augmented(problem, prediction,
                                                              _Constraint(gradient, gradient @ prediction))
            except NoConvergence:
                z = None
            except ValueError as error:  # an iterate strayed to a refused value: a shorter step may not
                z, refused = None, error
            if z is not None and step > min_step and metric.dot(z - current, tangent) < TURN_COSINE * metric.norm(
                    z - current):
                z = None  # the secant turned too far: a step that long may have jumped to another branch
            if z is None:
                step *= 0.5
                if step < min_step:
                    branch.end = (f"stopped at {problem.parameter}={current[-1]:.6g}: {refused}" if refused else
                                  f"Newton-Krylov failed at every step down to {min_step:.3g} near "
                                  f"{problem.parameter}={current[-1]:.6g}")
                    break
                continue
            if not low <= z[-1] <= high:
                end = _point_at_value(problem, current, z, high if z[-1] > high else low, stability)
                if end is not None and problem.resolved(end.unknowns)[0]:
                    branch.points.append(end)
                    bar.update(1)
                branch.end = f"reached the end of the interval [{low:g}, {high:g}] of {problem.parameter}"
                break
            resolved, reason = problem.resolved(z[:-1])
            if not resolved:
                branch.end = f"left the resolved range at {problem.parameter}={z[-1]:.6g}: {reason}"
                break
            if entry is not None:
                size = problem.norm(z[:-1])
                if left_uniform and size < entry:
                    branch.points.append(_accept(problem, z, evaluations, stability))
                    bar.update(1)
                    branch.end = (f"returned to the uniform state near {problem.parameter}={z[-1]:.6g} (a loop "
                                  f"between two of its bifurcations)")
                    break
                left_uniform = left_uniform or size > 3 * entry
            direction = np.sign(z[-1] - current[-1])
            if previous_direction is not None and direction != 0 and direction != previous_direction:
                fold = _locate_fold(problem, metric, previous, current, z, previous_direction, stability)
                if fold is None:  # not located: the point before the turn stands for it
                    branch.folds.append(len(branch.points) - 1)
                else:
                    before = metric.dot(_vector(fold) - current, z - previous) < 0
                    branch.points.insert(len(branch.points) - (1 if before else 0), fold)
                    branch.folds.append(len(branch.points) - (2 if before else 1))
            previous_direction = direction if direction != 0 else previous_direction
            branch.points.append(_accept(problem, z, evaluations, stability))
            bar.update(1)
            previous, current = current, z
            step = min(max_step, step * (1.5 if iterations <= 3 else 0.7 if iterations >= 6 else 1.0))
        else:
            branch.end = f"reached max_points={max_points}"
    return branch
