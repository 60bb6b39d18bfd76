r"""Discrete operators of the finite-volume scheme on the circle.

Cells :math:`[jh, (j+1)h)`, :math:`h = 2\pi/N`, hold averages :math:`\rho_j`. The operators
take the deviation :math:`\delta = \rho - \bar\rho` from the uniform density
:math:`\bar\rho = 1/(2\pi)`, so that a perturbation of any size is represented and its
velocity computed to full relative precision (``solvers.tolerance``). The nonlocal
potential is a circular convolution, diagonal in the discrete Fourier basis (cost
:math:`O(N\log N)`); its symbol is the Funk-Hecke spectrum that :mod:`meanfield` exposes.
The constant mode carries no gradient and is left out of every velocity.

Face velocities are differences of the centre potential,

.. math:: v_{j+1/2} = \frac{\phi_{j+1} - \phi_j}{h}, \qquad
          \phi = \Phi * \rho \ \text{(linear models)}, \quad
          \phi = \frac{c}{\beta}\log(K*\rho) \ \text{(SA)},

so that the semi-discrete energy :math:`E_h = \frac h2 \sum_j \rho_j (\Psi*\rho)_j` obeys
:math:`\dot E_h = \sum_j F_{j+1/2}(\psi_{j+1}-\psi_j) \ge 0` exactly (summation by parts with
the upwind flux :math:`F = \rho^{\rm up} v`, whose face values are nonnegative).
Without diffusion, face values come from a linear reconstruction with the central slope
:math:`(\rho_{j+1}-\rho_{j-1})/2`, limited only as far as positivity needs
(:math:`|\text{slope}| \le 2\rho_j`): second order in the max norm on smooth solutions,
smooth extrema included (a TVD limiter clips them to first order), and positive under the
CFL bound :math:`\Delta t \max|v| \le h/2`. It is not TVD: steep fronts may carry small
over- and undershoots, never negative values. With diffusion, transport and diffusion share
one Scharfetter-Gummel flux (exponential fitting), whose generator is a reversible Markov
generator: stepped implicitly it is positive and, for gradient flows, dissipates the
discrete free energy at any step size.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

import numba
import numpy as np
from scipy.linalg.lapack import dgtsv, dgttrf, dgttrs
from scipy.special import roots_legendre

from meanfield.checks import check_density


#: Up to this many cells a convolution is a matrix product (:meth:`CircleOperators.convolve`).
DENSE_CONVOLUTION_CELLS = 256

#: Below this, 1 + (K*delta)/(K*rho_bar) is not computed by log1p (K*rho nearly vanishes there).
_LOG1P_RANGE = -0.5


def _bernoulli(x: np.ndarray) -> np.ndarray:
    """:math:`B(x) = x / (e^x - 1)`, with :math:`B(0) = 1` and no overflow for large :math:`|x|`."""
    small = np.abs(x) < 1e-8
    with np.errstate(over="ignore"):
        return np.where(small, 1.0 - 0.5 * x, x / np.where(small, 1.0, np.expm1(x)))


def _bordered(sub: np.ndarray, diag: np.ndarray, sup: np.ndarray) -> tuple[np.ndarray, np.ndarray, float]:
    """Sherman-Morrison's split of the periodic system: the tridiagonal diagonal without the corners, the
    correction's column ``u``, and the weight of the last entry in the row vector ``v`` (its first is one)."""
    gamma = -diag[0]
    corner_top, corner_bottom = sub[0], sup[-1]
    inner = np.array(diag, dtype=float)
    inner[0] -= gamma
    inner[-1] -= corner_top * corner_bottom / gamma
    u = np.zeros(diag.size)
    u[0], u[-1] = gamma, corner_bottom
    return inner, u, corner_top / gamma


def _bernoulli_slopes(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    r""":math:`(B'(x), B'(-x))`: :math:`B'(x) = B(x)\,(1 - B(-x))/x` (from :math:`B(-x) = B(x) + x`), and its
    series :math:`-1/2 + x/6` near 0."""
    small = np.abs(x) < 1e-4
    safe = np.where(small, 1.0, x)
    forward, backward = _bernoulli(safe), _bernoulli(-safe)
    return (np.where(small, -0.5 + x / 6.0, forward * (1.0 - backward) / safe),
            np.where(small, -0.5 - x / 6.0, backward * (1.0 - forward) / -safe))


def solve_cyclic_tridiagonal(sub: np.ndarray, diag: np.ndarray, sup: np.ndarray,
                             rhs: np.ndarray) -> np.ndarray:
    """Solve the periodic tridiagonal system (rows ``sub[j] x[j-1] + diag[j] x[j] + sup[j] x[j+1]``).

    Sherman-Morrison on the two corner entries plus one tridiagonal LU with two right-hand sides
    (LAPACK's ``gtsv``, cheaper than a general band solver in the implicit steps' hot loop);
    :class:`CyclicTridiagonal` keeps the factors for many right-hand sides, with the same result.
    """
    inner, u, weight = _bordered(sub, diag, sup)
    *_, solution, info = dgtsv(sub[1:], inner, sup[:-1], np.column_stack([rhs, u]))
    if info > 0:
        raise np.linalg.LinAlgError(f"singular periodic tridiagonal system (zero pivot {info})")
    y, z = solution.T
    v_dot = lambda w: w[0] + weight * w[-1]  # noqa: E731
    return y - z * (v_dot(y) / (1.0 + v_dot(z)))


class CyclicTridiagonal:
    """A periodic tridiagonal system factored once (LAPACK's ``gttrf``), solved for many right-hand sides.

    The same Sherman-Morrison split and pivoted LU as :func:`solve_cyclic_tridiagonal`, whose result each
    :meth:`solve` reproduces bit for bit; the stationary preconditioner applies it at every Krylov step.

    Parameters
    ----------
    sub, diag, sup : numpy.ndarray
        The rows ``sub[j] x[j-1] + diag[j] x[j] + sup[j] x[j+1]`` (periodic).

    Raises
    ------
    numpy.linalg.LinAlgError
        If the system is singular (a zero pivot).
    """

    def __init__(self, sub: np.ndarray, diag: np.ndarray, sup: np.ndarray):
        inner, u, self._weight = _bordered(sub, diag, sup)
        *self._factors, info = dgttrf(sub[1:], inner, sup[:-1])
        if info > 0:
            raise np.linalg.LinAlgError(f"singular periodic tridiagonal system (zero pivot {info})")
        self._correction = self._tridiagonal(u)
        self._denominator = 1.0 + self._v_dot(self._correction)

    def _tridiagonal(self, rhs: np.ndarray) -> np.ndarray:
        return dgttrs(*self._factors, rhs)[0]

    def _v_dot(self, w: np.ndarray) -> float:
        return w[0] + self._weight * w[-1]

    def solve(self, rhs: np.ndarray) -> np.ndarray:
        """The solution for ``rhs``.

        Parameters
        ----------
        rhs : numpy.ndarray, shape (n,) or (n, k)
            The right-hand side, or ``k`` of them as columns.

        Returns
        -------
        numpy.ndarray, shape of ``rhs``
            ``x``.
        """
        y = self._tridiagonal(rhs)
        return y - np.multiply.outer(self._correction, self._v_dot(y) / self._denominator)


#: 4-point Gauss-Legendre nodes and weights on [-1, 1] (computed once: a run's set-up pays for every call).
GAUSS_4 = roots_legendre(4)


def gauss_cell_averages(rho0, cells: int, name: str = "rho0") -> np.ndarray:
    r"""Cell averages of a density of :math:`\theta` on ``cells`` equal cells by 4-point Gauss, checked.

    ``rho0`` is a callable, or an array of ``cells`` values taken as they are.
    """
    if not callable(rho0):
        return check_density(rho0, (cells,), name, grid=f"{cells} equal cells")
    nodes, weights = GAUSS_4
    h = 2 * np.pi / cells
    left = np.arange(cells) * h
    samples = np.asarray(rho0(left[:, None] + 0.5 * h * (nodes + 1)), dtype=float)
    return check_density(0.5 * samples @ weights if samples.shape == (cells, 4) else samples, (cells,), name)


@numba.njit(cache=True, error_model="numpy")
def _upwind_flux_divergence(deviation: np.ndarray, velocity: np.ndarray, uniform: float, width: float) -> np.ndarray:
    """:meth:`CircleOperators.flux_divergence` of rows ``(rows, cells)``, in one pass (the step's hot loop)."""
    rows, n = deviation.shape
    result = np.empty((rows, n))
    flux = np.empty(n)
    for r in range(rows):
        row_flux_divergence(deviation[r], velocity[r], uniform, width, flux, result[r])
    return result


@numba.njit(cache=True, error_model="numpy")
def row_flux_divergence(d: np.ndarray, v: np.ndarray, uniform: float, width: float, flux: np.ndarray,
                        out: np.ndarray) -> None:
    """The flux divergence of one density's deviation ``d`` at face velocities ``v`` into ``out`` (``flux``: scratch).

    Without fast-math and in the order of the documented whole-array form (face values
    ``rho +- clip(s, -rho, rho)``, clip as ``min(max(s, -rho), rho)``, the upwind choice
    ``v > 0``), so its values are that form's bit for bit (tests/test_circle_fv.py writes it).
    """
    n = d.size
    for j in range(n):
        rho, after = uniform + d[j], (j + 1) % n
        slope = 0.25 * (d[after] - d[j - 1])  # d[-1] wraps
        slope = min(max(slope, -rho), rho)
        if v[j] > 0:
            flux[j] = v[j] * (rho + slope)
        else:
            rho_after = uniform + d[after]
            slope_after = min(max(0.25 * (d[(j + 2) % n] - d[j]), -rho_after), rho_after)
            flux[j] = v[j] * (rho_after - slope_after)
    for j in range(n):
        out[j] = (flux[j] - flux[j - 1]) / width


@numba.njit(cache=True, error_model="numpy")
def _clipped_jumps(values: np.ndarray, factor: float, bound: float) -> np.ndarray:
    """``clip(factor * (values[j + 1] - values[j]), -bound, bound)`` along periodic rows ``(rows, cells)``."""
    rows, n = values.shape
    result = np.empty((rows, n))
    for r in range(rows):
        for j in range(n):
            result[r, j] = clipped_jump(values[r], j, factor, bound)
    return result


@numba.njit(cache=True, error_model="numpy")
def clipped_jump(values: np.ndarray, j: int, factor: float, bound: float) -> float:
    """``clip(factor * (values[j + 1] - values[j]), -bound, bound)`` on the periodic grid.

    The array form's operations in its order (clip as ``min(max(x, -bound), bound)``, which
    keeps a NaN), so the values are bitwise the same.
    """
    return min(max(factor * (values[(j + 1) % values.size] - values[j]), -bound), bound)


def _next(a: np.ndarray) -> np.ndarray:
    """``a[..., j + 1]`` on the periodic grid (cheaper than ``np.roll``, which is in the hot loop)."""
    return np.concatenate((a[..., 1:], a[..., :1]), axis=-1)


def _previous(a: np.ndarray) -> np.ndarray:
    """``a[..., j - 1]`` on the periodic grid."""
    return np.concatenate((a[..., -1:], a[..., :-1]), axis=-1)


@dataclass(frozen=True, eq=False)
class CircleOperators:
    """Convolution, face velocity, fluxes, the drift-diffusion step and energies on ``cells`` cells."""

    #: ``face_velocity`` and ``potential_jumps`` take densities stacked along leading axes (a family's layers).
    batched: ClassVar[bool] = True

    model: object
    cells: int
    width: float = field(init=False)
    uniform: float = field(init=False)
    potential_symbol: np.ndarray = field(init=False, repr=False)
    gradient_symbol: np.ndarray = field(init=False, repr=False)
    energy_symbol: np.ndarray = field(init=False, repr=False)
    energy_scaled: bool = field(init=False)
    linear: bool = field(init=False)
    external_velocity: np.ndarray | None = field(init=False, repr=False)
    external_potential: np.ndarray | None = field(init=False, repr=False)
    # per symbol (by identity): the transposed circulant matrix of the convolution on small grids
    _circulants: dict = field(init=False, repr=False, default_factory=dict)
    # SA's c and beta, read once (the model's properties check their model at every call)
    _attention_scale: tuple[float, float] | None = field(init=False, repr=False, default=None)

    def __post_init__(self) -> None:
        set_ = object.__setattr__
        n, model = self.cells, self.model
        kmax = n // 2
        set_(self, "width", 2 * np.pi / n)
        set_(self, "uniform", 1.0 / (2 * np.pi))
        self._set_external()
        set_(self, "linear", model.velocity_is_linear)
        if self.linear:
            set_(self, "potential_symbol", model.potential_spectrum(kmax, 2))
        else:
            set_(self, "potential_symbol", model.kernel_spectrum(kmax, 2))
            set_(self, "_attention_scale", (model.value_scale, model.beta))
        # Mode 0 is a constant potential: no gradient, and left out it cannot cost precision.
        gradient_symbol = self.potential_symbol.copy()
        gradient_symbol[0] = 0.0
        set_(self, "gradient_symbol", gradient_symbol)
        try:
            set_(self, "energy_symbol", model.energy_spectrum(kmax, 2))
            set_(self, "energy_scaled", model.time_rescaled)
        except OverflowError:
            set_(self, "energy_symbol", model.energy_spectrum(kmax, 2, scaled=True))
            set_(self, "energy_scaled", True)

    @property
    def theta(self) -> np.ndarray:
        return (np.arange(self.cells) + 0.5) * self.width

    def _set_external(self) -> None:
        r"""Face velocity of the model's external field, and its potential at the centres (or ``None``).

        With a potential ``v`` (:math:`u = \frac12 v'`) the face velocity is the difference
        :math:`(v_{j+1} - v_j)/(2h)`, which keeps the scheme's exact energy balance for
        :math:`E + \frac12\int v\rho`; a field without potential is taken at the faces.
        """
        external = self.model.external
        velocity = potential = None
        if external is not None:
            centres = np.stack([np.cos(self.theta), np.sin(self.theta)], axis=-1)
            potential = external.potential(centres)
            if potential is not None:
                velocity = (_next(potential) - potential) / (2 * self.width)
            else:
                faces = self.theta + 0.5 * self.width
                points = np.stack([np.cos(faces), np.sin(faces)], axis=-1)
                tangent = np.stack([-np.sin(faces), np.cos(faces)], axis=-1)
                velocity = np.sum(external.field(points) * tangent, axis=-1)
        object.__setattr__(self, "external_velocity", velocity)
        object.__setattr__(self, "external_potential", potential)

    def _with_external(self, jumps: np.ndarray) -> np.ndarray:
        return jumps if self.external_velocity is None else jumps + self.width * self.external_velocity

    @property
    def uniform_norm(self) -> float:
        r""":math:`\|\bar\rho\|_{L^2}`, the scale of the round-off floor of the error tolerance."""
        return self.uniform * np.sqrt(2 * np.pi)

    def convolve(self, values: np.ndarray, symbol: np.ndarray) -> np.ndarray:
        """Circular convolution of cell values with the kernel whose spectrum is ``symbol``.

        Up to :data:`DENSE_CONVOLUTION_CELLS` cells, a product with the kernel's circulant
        matrix (one BLAS call; the FFT pair's calls cost more there), else the FFT pair.
        """
        if self.cells > DENSE_CONVOLUTION_CELLS:
            return np.fft.irfft(symbol * np.fft.rfft(values), self.cells)
        kept = self._circulants.get(id(symbol))
        if kept is None or kept[0] is not symbol:  # built once per symbol (an operator has three)
            column = np.fft.irfft(symbol, self.cells)  # the kernel's values: (C v)_j = sum_k column[j - k] v_k
            offsets = np.arange(self.cells)
            transposed = np.ascontiguousarray(column[(offsets[:, None] - offsets) % self.cells].T)
            kept = self._circulants[id(symbol)] = (symbol, transposed)
        return values @ kept[1]

    def potential_jumps(self, deviation: np.ndarray) -> np.ndarray:
        r"""Jumps :math:`\phi_{j+1} - \phi_j` of the velocity potential across the faces ``j + 1/2``.

        SA writes :math:`\log K*\rho = \log K*\bar\rho + \log(1 + K*\delta / K*\bar\rho)` and takes
        the second term by ``log1p``, so that the velocity of a tiny perturbation is not lost in
        the round-off of :math:`\log K*\rho`.
        """
        potential = self.centre_potential(deviation)
        if self.linear:
            return self._with_external(_next(potential) - potential)
        jumps = _clipped_jumps(potential.reshape(-1, self.cells), *self.jump_clip)
        return self._with_external(jumps.reshape(potential.shape))

    def centre_potential(self, deviation: np.ndarray) -> np.ndarray:
        r"""What the jumps of :meth:`potential_jumps` are taken of: :math:`\Phi*\delta` for linear models,
        :math:`\log(1 + K*\delta / K*\bar\rho)` for SA (:attr:`jump_clip` scales and clips its jumps)."""
        if self.linear:
            return self.convolve(deviation, self.gradient_symbol)
        ratio = self.convolve(deviation, self.gradient_symbol) / (self.potential_symbol[0] * self.uniform)
        if ratio.min() >= _LOG1P_RANGE:  # the common case; a NaN takes the branch below and stays NaN
            return np.log1p(ratio)
        log_relative = np.log1p(np.maximum(ratio, _LOG1P_RANGE))
        far = ratio < _LOG1P_RANGE
        log_relative[far] = np.log(np.maximum(1.0 + ratio[far], np.finfo(float).tiny))
        return log_relative

    @property
    def jump_clip(self) -> tuple[float, float]:
        r"""SA's ``(c / beta, |c| h)``: the jumps of :meth:`centre_potential` times the first, clipped to the second.

        :math:`|\partial_\theta \log K*\rho| \le \beta` for the exact kernel, so a jump is at
        most :math:`|c| h`: the bound removes the round-off noise of :math:`\log K*\rho` where
        :math:`K*\rho` is below machine precision of its maximum.
        """
        c, beta = self._attention_scale
        return c / beta, abs(c) * self.width

    def face_velocity(self, deviation: np.ndarray) -> np.ndarray:
        """Velocity at the faces ``j + 1/2`` (east face of cell ``j``)."""
        return self.potential_jumps(deviation) / self.width

    def flux_divergence(self, deviation: np.ndarray, velocity: np.ndarray) -> np.ndarray:
        r""":math:`(F_{j+1/2} - F_{j-1/2})/h` with the upwind flux :math:`F = \rho^{\rm up} v`.

        Face values :math:`\rho_j \pm s_j/2`, :math:`s_j` the central slope limited to
        :math:`|s_j| \le 2\rho_j` (nonnegative face values, nothing more).
        """
        shape = np.shape(deviation)
        rows = np.reshape(deviation, (-1, self.cells))
        if np.shape(velocity) != shape:  # one mixed density's velocity for every layer
            velocity = np.broadcast_to(velocity, shape)
        # contiguous (a broadcast velocity copied): one compiled signature, not one per memory layout
        velocity = np.ascontiguousarray(np.reshape(velocity, rows.shape))
        return _upwind_flux_divergence(rows, velocity, self.uniform, self.width).reshape(shape)

    def rhs(self, deviation: np.ndarray) -> np.ndarray:
        """Transport right-hand side :math:`-\\partial_\\theta(\\rho v[\\rho])` (no diffusion)."""
        return -self.flux_divergence(deviation, self.face_velocity(deviation))

    def linearly_implicit_step(self, deviation: np.ndarray, dt: float, jumps: np.ndarray | None = None) -> np.ndarray:
        r"""Solve :math:`(I - \Delta t\, L[\rho])\,\rho_{new} = \rho` for the new deviation (potential frozen).

        :math:`L` is the Scharfetter-Gummel generator of
        :math:`\partial_\theta(D\partial_\theta\rho - \rho\,\partial_\theta\phi)`: face flux
        :math:`J_{j+1/2} = \frac Dh\,[B(-\Delta_j)\rho_j - B(\Delta_j)\rho_{j+1}]`,
        :math:`\Delta_j = (\phi_{j+1}-\phi_j)/D`, :math:`B(x) = x/(e^x-1)`, with :math:`\phi` the
        potential of ``rho``. :math:`L` is a reversible Markov generator for the discrete Gibbs
        state :math:`\pi_j \propto e^{\phi_j/D}`, so the step is positive and conserves mass; for
        cell Peclet numbers :math:`|v|h/D \to 0` it is central differences (second order in
        space). Solved for :math:`\delta` with :math:`L\bar\rho = \bar\rho\,(\Delta\phi_{j-1} -
        \Delta\phi_j)/h^2` in closed form (:math:`B(-x) - B(x) = x`), which keeps the precision
        of a small deviation. ``jumps`` overrides the potential's jumps (the layered causal
        equation moves each layer by the potential of another density).
        """
        if jumps is None:
            jumps = self.potential_jumps(deviation)
        sub, diag, sup, uniform_drift = self.drift_diffusion_generator(jumps, self.model.diffusion)
        return solve_cyclic_tridiagonal(-dt * sub, 1.0 - dt * diag, -dt * sup, deviation + dt * uniform_drift)

    def drift_diffusion_rhs(self, deviation: np.ndarray, diffusion: float) -> np.ndarray:
        r""":math:`L[\rho]\,\rho` with the Scharfetter-Gummel generator of :meth:`linearly_implicit_step`.

        The semi-discrete right-hand side the implicit steps integrate (``diffusion > 0``); its
        zeros are the scheme's stationary states, exactly the discrete Gibbs states
        :math:`\rho_j \propto e^{\phi_j/D}` where the velocity has a periodic potential.
        """
        sub, diag, sup, uniform_drift = self.drift_diffusion_generator(self.potential_jumps(deviation), diffusion)
        return sub * _previous(deviation) + diag * deviation + sup * _next(deviation) + uniform_drift

    def drift_diffusion_generator(self, jumps: np.ndarray, diffusion: float):
        """Rows ``(sub, diag, sup)`` of the generator and its action on the uniform density."""
        scaled = jumps / diffusion
        rate = diffusion / self.width**2
        forward, backward = rate * _bernoulli(-scaled), rate * _bernoulli(scaled)
        # Row j: sub[j] rho[j-1] + diag[j] rho[j] + sup[j] rho[j+1] of L.
        sub, diag, sup = _previous(forward), -(forward + _previous(backward)), backward
        uniform_drift = self.uniform * (_previous(jumps) - jumps) / self.width**2
        return sub, diag, sup, uniform_drift

    def jump_derivative(self, deviation: np.ndarray, directions: np.ndarray) -> np.ndarray:
        r"""The derivative of :meth:`potential_jumps` at ``deviation`` along each row of ``directions``.

        Linear models: :math:`(\text{next} - 1)\,(\Phi * e)`. SA: :math:`\frac c\beta(\text{next} - 1)
        \big[(K*e)/(K*\rho)\big]` where the jumps are not clipped, zero where they are.

        Parameters
        ----------
        deviation : numpy.ndarray, shape (cells,)
            :math:`\delta = \rho - \bar\rho`.
        directions : numpy.ndarray, shape (..., cells)
            The perturbations :math:`e` of the deviation.

        Returns
        -------
        numpy.ndarray, shape of ``directions``
            The jumps' changes per unit of each direction.
        """
        convolved = self.convolve(directions, self.gradient_symbol)
        if self.linear:
            return _next(convolved) - convolved
        c, beta = self._attention_scale
        total = self.potential_symbol[0] * self.uniform  # K*rho_bar
        ratio = self.convolve(deviation, self.gradient_symbol) / total
        log_relative = np.log(np.maximum(1.0 + ratio, np.finfo(float).tiny))
        unclipped = np.abs((c / beta) * (_next(log_relative) - log_relative)) < abs(c) * self.width
        with np.errstate(over="ignore", invalid="ignore"):  # where K*rho vanishes the jumps are clipped: no change
            relative = convolved / (total * np.maximum(1.0 + ratio, np.finfo(float).tiny))  # d log(K*rho)
            return np.where(unclipped, (c / beta) * (_next(relative) - relative), 0.0)

    def potential_response(self, deviation: np.ndarray, directions: np.ndarray, diffusion: float,
                           jumps: np.ndarray | None = None) -> np.ndarray:
        r"""What :meth:`drift_diffusion_rhs` changes through the potential along each row of ``directions``.

        The right-hand side is :math:`F_{j-1/2} - F_{j+1/2}` with the Scharfetter-Gummel flux
        :math:`F_{j+1/2} = \frac{D}{h^2}[B(-\Delta_j)\rho_j - B(\Delta_j)\rho_{j+1}]`,
        :math:`\Delta_j` the jump over :math:`D`. Its derivative is the generator frozen at
        ``deviation`` (:meth:`drift_diffusion_generator`) plus this: each flux's derivative in its
        jump, :math:`-\frac{1}{h^2}[B'(-\Delta_j)\rho_j + B'(\Delta_j)\rho_{j+1}]`, times the jump's
        (:meth:`jump_derivative`). The stationary preconditioner inverts the sum, the potential's
        part of low rank (its kernel's few Fourier modes).

        Parameters
        ----------
        deviation : numpy.ndarray, shape (cells,)
            :math:`\delta = \rho - \bar\rho`.
        directions : numpy.ndarray, shape (..., cells)
            The perturbations of the deviation.
        diffusion : float
            :math:`D > 0`.
        jumps : numpy.ndarray, optional
            :meth:`potential_jumps` of ``deviation``, when the caller has them.

        Returns
        -------
        numpy.ndarray, shape of ``directions``
            The right-hand side's changes per unit of each direction, without the frozen generator's.
        """
        rho = self.uniform + deviation
        scaled = (self.potential_jumps(deviation) if jumps is None else jumps) / diffusion
        forward, backward = _bernoulli_slopes(scaled)
        slope = -(backward * rho + forward * _next(rho)) / self.width**2
        flux = slope * self.jump_derivative(deviation, directions)
        return _previous(flux) - flux

    def deviation_norm(self, deviation: np.ndarray) -> float:
        r""":math:`\|\delta\|_{L^2} = (h\sum_j \delta_j^2)^{1/2}`."""
        return float(np.sqrt(self.width * np.dot(deviation, deviation)))

    def mass(self, rho: np.ndarray) -> float:
        return float(self.width * rho.sum())

    def energy(self, rho: np.ndarray) -> float:
        r""":math:`E_h = \frac h2 \sum_j \rho_j (\Psi*\rho)_j` (times :math:`e^{-\beta}` if ``energy_scaled``)."""
        return float(0.5 * self.width * np.dot(rho, self.convolve(rho, self.energy_symbol))) + self.external_energy(rho)

    def external_energy(self, rho: np.ndarray) -> float:
        r""":math:`\frac12\int v\rho` of the external field's potential (0 without a field)."""
        return 0.0 if self.external_potential is None else float(0.5 * self.width * np.dot(rho, self.external_potential))

    def entropy(self, rho: np.ndarray) -> float:
        r""":math:`h\sum_j \rho_j \log\rho_j` (with :math:`0 \log 0 = 0`)."""
        positive = rho[rho > 0]
        return float(self.width * np.dot(positive, np.log(positive)))

    def lyapunov(self, rho: np.ndarray) -> float:
        r"""A functional the exact flow does not increase, or NaN where none is known.

        Gradient flows (:math:`v = \partial_\theta(\Phi*\rho)`): the free energy
        :math:`F_h = D h\sum\rho\log\rho - \frac h2\sum\rho\,(\Phi*\rho)`, which is
        :math:`D\int\rho\log\rho - E` for attractive USA. SA without diffusion: :math:`-cE`.
        SA with diffusion: none.
        """
        if self.external_velocity is not None and (self.external_potential is None or not self.linear):
            return np.nan  # no known functional: SA with a field, or a field without potential
        if self.linear:
            potential = 0.5 * self.width * np.dot(rho, self.convolve(rho, self.potential_symbol))
            diffusion = self.model.diffusion
            # The entropy (a log per cell) is only needed with diffusion; this runs every step.
            return (diffusion * self.entropy(rho) if diffusion else 0.0) - float(potential) - self.external_energy(rho)
        if self.model.diffusion == 0:
            return -self.model.value_scale * self.energy(rho)
        return np.nan
