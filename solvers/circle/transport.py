r"""``CircleFV``'s transport as the time integrators step it: the reference and its compiled engine.

:class:`FiniteVolumeTransport` is the reference: the solver's operators as a
:class:`~meanfield.integration.protocols.Discretisation` (right-hand side, CFL bound, norm,
tolerance) and the admission of a step (round-off negatives repaired, the Lyapunov
functional that must not rise), for any tableau, any operators and the layered families.

:class:`CompiledHeunTransport` is an engine for the default case: the Heun/Euler pair on the
convolution operators of one density without diffusion. It implements
``explicit_adaptive_step(FiniteVolumeTransport(solver), HEUN_EULER)`` (the
:class:`~meanfield.integration.ExplicitRungeKutta` step on :meth:`CircleOperators.rhs
<solvers.circle.operators.CircleOperators.rhs>`) with the same floating-point operations in
the same order, so its states, errors and step sizes are the reference's bit for bit
(``tests/test_transport.py`` runs both). What it saves is calls: a step of the reference is
dozens of NumPy calls, each a fixed cost whatever the grid, and on small grids they are most
of the step (``docs/performance.md``). The engine forms the face velocities, the upwind fluxes, the
stages and the positivity check in compiled passes (the loops of
:mod:`solvers.circle.operators`), and leaves to NumPy what must be NumPy's arithmetic: the
convolutions (FFT or circulant product), the logarithm of SA's potential, and the dot
products of the norms and the energy.
"""

from __future__ import annotations

import numba
import numpy as np

from meanfield.integration import HEUN_EULER, ExplicitRungeKutta

from .operators import CircleOperators, clipped_jump, row_flux_divergence

#: Relative round-off slack of the Lyapunov check (sums of N terms in double precision).
LYAPUNOV_SLACK = 1e-12

#: Negative values down to this fraction of max(rho) are round-off (FFT, cancelling fluxes in
#: a cell that empties), not a loss of positivity.
ROUNDOFF_NEGATIVE = 64 * np.finfo(float).eps


def repair_roundoff(rho: np.ndarray, roundoff: float) -> np.ndarray | None:
    """Zero the round-off negatives and restore the mass they carried; ``None`` if any is larger."""
    low = rho.min()
    if low >= 0:
        return rho
    if low < -roundoff:
        return None
    # Along the cells only: each layer of a layered density keeps its own mass.
    total = rho.sum(axis=-1, keepdims=True)
    repaired = np.maximum(rho, 0.0)
    return repaired * (total / repaired.sum(axis=-1, keepdims=True))


def transport_of(solver) -> "FiniteVolumeTransport":
    """The compiled engine where it serves ``solver`` (:meth:`CompiledHeunTransport.serves`), else the reference."""
    return CompiledHeunTransport(solver) if CompiledHeunTransport.serves(solver) else FiniteVolumeTransport(solver)


class FiniteVolumeTransport:
    """The solver as a :class:`~meanfield.integration.protocols.Discretisation` of the transport.

    Remembers the face velocities of the state it last saw (the CFL bound and the first stage
    share them) and the Lyapunov functional of the state it last admitted.
    """

    def __init__(self, solver):
        self.solver, self.operators = solver, solver.operators
        self.decay = None
        self._velocity: tuple[np.ndarray, np.ndarray] | None = None
        self._functional: tuple[np.ndarray, float] | None = None
        self._stepper: ExplicitRungeKutta | None = None

    def linearly_implicit_step(self, deviation: np.ndarray, dt: float) -> np.ndarray:
        return self.operators.linearly_implicit_step(deviation, dt)

    def velocity(self, deviation: np.ndarray) -> np.ndarray:
        if self._velocity is None or self._velocity[0] is not deviation:
            self._velocity = (deviation, self.operators.face_velocity(deviation))
        return self._velocity[1]

    def rhs(self, deviation: np.ndarray) -> np.ndarray:
        return -self.operators.flux_divergence(deviation, self.velocity(deviation))

    def advance(self, deviation: np.ndarray, dt: float) -> np.ndarray:
        """One step of the solver's tableau, without an error estimate or admission (a shadow's step)."""
        if self._stepper is None:
            self._stepper = ExplicitRungeKutta(self.solver.tableau, self.rhs)
        return self._stepper.advance(deviation, dt)[0]

    def stable_step(self, deviation: np.ndarray) -> float:
        """The CFL bound: the upwind reconstruction stays positive for ``dt max|v| <= cfl h``."""
        speed = np.abs(self.velocity(deviation)).max()
        return self.solver.cfl * self.operators.width / max(speed, 1e-300)

    def norm(self, deviation: np.ndarray) -> float:
        return self.operators.deviation_norm(deviation)

    def tolerance(self, deviation: np.ndarray) -> float:
        return self.solver._tolerance(deviation)

    def functional(self, deviation: np.ndarray) -> float:
        if self._functional is None or self._functional[0] is not deviation:
            self._functional = (deviation, self.operators.lyapunov(self.operators.uniform + deviation))
        return self._functional[1]

    def repaired(self, old: np.ndarray, new: np.ndarray) -> np.ndarray | None:
        """The deviation ``new`` with its round-off negatives zeroed and their mass restored (the round-off of
        a step from ``old``); ``None`` where a negative is larger."""
        ops = self.operators
        repaired = repair_roundoff(ops.uniform + new, ROUNDOFF_NEGATIVE * (ops.uniform + old.max()))
        return None if repaired is None else repaired - ops.uniform

    def admit(self, old: np.ndarray, new: np.ndarray) -> tuple[np.ndarray | None, str | None]:
        """Round-off negatives repaired; retried when the density is negative or the Lyapunov functional rises."""
        repaired = self.repaired(old, new)
        if repaired is None:
            return None, "positivity"
        before, new = self.functional(old), repaired
        after = self.functional(new)
        if np.isfinite(before) and after > before + LYAPUNOV_SLACK * (abs(before) + abs(after)):
            return None, "lyapunov"
        return new, None


class CompiledHeunTransport(FiniteVolumeTransport):
    """The engine of the default step (module docstring): also the :class:`~meanfield.integration.protocols.Stepper`
    of the Heun/Euler pair, ``step(q, h) -> (new, scaled_error)``."""

    order, error_estimator_order = HEUN_EULER.order, HEUN_EULER.error_estimator_order

    @staticmethod
    def serves(solver) -> bool:
        """Whether ``solver`` steps one density by the Heun/Euler pair on the convolution operators."""
        return (type(solver.operators) is CircleOperators and solver.tableau == HEUN_EULER
                and solver.model.diffusion == 0)

    def __init__(self, solver):
        super().__init__(solver)
        ops = self.operators
        self.evaluations = 0
        self._clip = (False, 0.0, 0.0) if ops.linear else (True, *ops.jump_clip)
        self._external = np.zeros(0) if ops.external_velocity is None else ops.width * ops.external_velocity
        self._evaluated: tuple | None = None  # (q, face velocity, right-hand side, max |v|) of a step's start
        self._formed: tuple | None = None  # (new, min(rho), repaired deviation, its density) of the last step

    def _transport(self, deviation: np.ndarray) -> tuple[np.ndarray, np.ndarray, float]:
        """The face velocity, the right-hand side and the largest speed of ``deviation``."""
        self.evaluations += 1
        ops = self.operators
        return _velocity_and_rhs(deviation, ops.centre_potential(deviation), *self._clip, self._external,
                                 ops.uniform, ops.width)

    def _start(self, deviation: np.ndarray) -> tuple:
        if self._evaluated is None or self._evaluated[0] is not deviation:
            self._evaluated = (deviation, *self._transport(deviation))
        return self._evaluated

    def velocity(self, deviation: np.ndarray) -> np.ndarray:
        return self._start(deviation)[1]

    def rhs(self, deviation: np.ndarray) -> np.ndarray:
        return self._start(deviation)[2]

    def stable_step(self, deviation: np.ndarray) -> float:
        return self.solver.cfl * self.operators.width / max(self._start(deviation)[3], 1e-300)

    def _formed_step(self, q: np.ndarray, h: float) -> tuple[np.ndarray, np.ndarray]:
        """Both stages of a step of ``h`` from ``q``: the new deviation and the error of Euler's member."""
        (a,), (b1, b2), (e1, e2) = HEUN_EULER.a[1], HEUN_EULER.b, HEUN_EULER.error
        k1 = self._start(q)[2]
        k2 = self._transport(_shifted(q, h * a, k1))[1]
        new, error, low, repaired, density = _heun_combination(q, k1, k2, h * b1, h * b2, h * e1, h * e2,
                                                               self.operators.uniform)
        self._formed = (new, low, repaired, density)
        return new, error

    def advance(self, deviation: np.ndarray, dt: float) -> np.ndarray:
        return self._formed_step(deviation, dt)[0]

    def step(self, q: np.ndarray, h: float) -> tuple[np.ndarray, float]:
        """``ExplicitRungeKutta(HEUN_EULER, ...).step``: the kept solution and the scaled error of Euler's member."""
        new, error = self._formed_step(q, h)
        return new, self.norm(error) / max(self.tolerance(q), self.tolerance(new))

    def repaired(self, old: np.ndarray, new: np.ndarray) -> np.ndarray | None:
        formed = self._formed
        if formed is not None and formed[0] is new and formed[1] >= 0:  # nothing to repair: (u + new) - u
            return formed[2]
        return super().repaired(old, new)

    def functional(self, deviation: np.ndarray) -> float:
        formed = self._formed
        if formed is None or formed[2] is not deviation:
            return super().functional(deviation)
        if self._functional is None or self._functional[0] is not deviation:  # the density formed with it
            self._functional = (deviation, self.operators.lyapunov(formed[3]))
        return self._functional[1]


@numba.njit(cache=True, error_model="numpy")
def _velocity_and_rhs(deviation: np.ndarray, potential: np.ndarray, clipped: bool, factor: float, bound: float,
                      external: np.ndarray, uniform: float, width: float) -> tuple[np.ndarray, np.ndarray, float]:
    """:meth:`CircleOperators.face_velocity`, ``rhs`` and ``max |v|`` of one density, from its centre potential.

    The operators' operations in their order (the jumps, the external field's added, over ``h``;
    the flux divergence negated), so the values are theirs bit for bit; a NaN speed stays NaN, as
    NumPy's ``max`` keeps it.
    """
    n = deviation.size
    velocity = np.empty(n)
    speed = 0.0
    for j in range(n):
        jump = clipped_jump(potential, j, factor, bound) if clipped else potential[(j + 1) % n] - potential[j]
        if external.size:
            jump = jump + external[j]
        velocity[j] = jump / width
        size = abs(velocity[j])
        if size > speed or size != size:
            speed = size
    rhs = np.empty(n)
    row_flux_divergence(deviation, velocity, uniform, width, np.empty(n), rhs)
    for j in range(n):
        rhs[j] = -rhs[j]
    return velocity, rhs, speed


@numba.njit(cache=True, error_model="numpy")
def _shifted(q: np.ndarray, factor: float, stage: np.ndarray) -> np.ndarray:
    """``q + factor * stage``: a stage's start."""
    out = np.empty(q.size)
    for j in range(q.size):
        out[j] = q[j] + factor * stage[j]
    return out


@numba.njit(cache=True, error_model="numpy")
def _heun_combination(q: np.ndarray, k1: np.ndarray, k2: np.ndarray, b1: float, b2: float, e1: float, e2: float,
                      uniform: float) -> tuple[np.ndarray, np.ndarray, float, np.ndarray, np.ndarray]:
    """The step's new deviation ``q + (b1 k1 + b2 k2)``, its error ``e1 k1 + e2 k2``, ``min(u + new)`` (NaN kept),
    the deviation with nothing to repair ``(u + new) - u`` and its density ``u + that``: the reference's sums."""
    n = q.size
    new, error, repaired, density = np.empty(n), np.empty(n), np.empty(n), np.empty(n)
    low = np.inf
    for j in range(n):
        new[j] = q[j] + (b1 * k1[j] + b2 * k2[j])
        error[j] = e1 * k1[j] + e2 * k2[j]
        rho = uniform + new[j]
        if rho < low or rho != rho:
            low = rho
        repaired[j] = rho - uniform
        density[j] = uniform + repaired[j]
    return new, error, low, repaired, density
