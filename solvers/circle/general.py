r"""Finite-volume operators on the circle for general query, key and value matrices and several heads.

Head ``h`` has the kernel :math:`k_h(\theta, \varphi) = e^{\beta\langle Q_h x, K_h y\rangle} =
e^{\beta\, x^T A_h y}`, :math:`A_h = Q_h^T K_h`, :math:`x = (\cos\theta, \sin\theta)`,
:math:`y = (\cos\varphi, \sin\varphi)`, no longer a function of :math:`\theta - \varphi`:

.. math:: x^T A y = |\alpha|\cos(\theta - \varphi - \arg\alpha) + |\gamma|\cos(\theta + \varphi - \arg\gamma),
          \qquad \alpha = \tfrac{a_{11} + a_{22}}2 + i\,\tfrac{a_{21} - a_{12}}2, \quad
          \gamma = \tfrac{a_{11} - a_{22}}2 + i\,\tfrac{a_{12} + a_{21}}2

(rotation-like and reflection-like parts; :math:`|\alpha| + |\gamma| = \|A\|_2`). The
Jacobi-Anger expansion of each factor makes the kernel a double Fourier series,

.. math:: k(\theta, \varphi) = \sum_{m, l} c_{ml}\, e^{i(m+l)\theta} e^{-i(m-l)\varphi}, \qquad
          c_{ml} = I_m(\beta|\alpha|)\, I_l(\beta|\gamma|)\, e^{-i(m\arg\alpha + l\arg\gamma)},

truncated where the Bessel tails fall below :math:`2^{-56}` (the kernel's relative round-off).
So the convolutions are small dense matrices in coefficient space (the design the issue
suggests: smooth and low rank in harmonics): with :math:`\hat\rho(q) = \int e^{-iq\varphi}\rho`,

.. math:: D(\theta) = \int k\,\rho = \sum_{m,l} c_{ml}\, e^{i(m+l)\theta}\,\hat\rho(m - l), \qquad
          \tilde N(\theta) = \int k\, e^{i\varphi}\rho = \sum_{m,l} c_{ml}\, e^{i(m+l)\theta}\,\hat\rho(m - l - 1),

the weighted mean :math:`\tilde N` being the token average :math:`N_1 + i N_2`. The value
matrix acts as :math:`V N \leftrightarrow \mu\tilde N + \nu\bar{\tilde N}`, and the angular velocity
is :math:`v = \mathrm{Im}(e^{-i\theta}\,(\mu\tilde N + \nu\bar{\tilde N}))` (divided by ``D``
for SA), summed over heads. Evaluating a Fourier series at ``N`` equispaced points folds its
modes modulo ``N`` (exact, no aliasing error) before one inverse FFT.

Face velocities, as in the zonal scheme, are averages of the velocity over the dual cell
:math:`[\theta_j, \theta_{j+1}]` (the zonal :math:`(\phi_{j+1} - \phi_j)/h` is exactly that
for :math:`v = \phi'`): for the linear models (USA, ``beta = 0``) by the factor
:math:`\mathrm{sinc}(rh/2)` on mode ``r``; for SA, whose velocity is a quotient, by Gauss-Legendre
quadrature over the dual cell with enough nodes for round-off at the kernel's bandwidth. With
``Q = K = I``, ``V = cI`` and one head this is the zonal operator (tests: 1e-12 on a whole run).
The cost is one FFT of the density plus, per head, a few inverse FFTs and a matrix of a few
dozen modes squared, against one FFT pair for a zonal kernel.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
from scipy.special import ive, roots_legendre

from meanfield.spectra import truncation_degree

from .operators import CircleOperators
from ..heads import energy_factors, head_matrices, is_gradient_flow, kernel_shifts

#: Gauss nodes per dual cell are chosen so that the quadrature error bound
#: (K h / 2)^{2G} / (2G)! of a band-limited integrand of bandwidth K is below this.
QUADRATURE_ERROR = 1e-17


def bessel_degree(z: float) -> int:
    r"""Smallest ``M`` with :math:`2\sum_{m > M} I_m(z) \le 2^{-56}\sum_m I_m(z)` (Jacobi-Anger of :math:`e^{z\cos t}`)."""
    guess = int(np.ceil(z + 10.0 * np.sqrt(z + 1.0) + 16))
    return truncation_degree(lambda top: ive(np.arange(top + 1), z) * np.where(np.arange(top + 1) > 0, 2.0, 1.0), guess)


def dual_cell_quadrature(bandwidth: float, width: float) -> tuple[np.ndarray, np.ndarray]:
    r"""Gauss-Legendre offsets and weights that average a field of ``bandwidth`` over a dual cell to round-off.

    Node ``g`` of the dual cell :math:`[\theta_j, \theta_{j+1}]`, :math:`\theta_j = jh`, sits at
    ``offsets[g] + j h``; the weights sum to 1. The count is the smallest whose error bound
    :math:`(Kh/2)^{2G}/(2G)!` for a field of bandwidth ``K`` is below :data:`QUADRATURE_ERROR`.
    """
    count = next((g for g in range(1, 64)
                  if (bandwidth * width / 2) ** (2 * g) / math.factorial(2 * g) <= QUADRATURE_ERROR), 64)
    nodes, weights = roots_legendre(count)
    return width * (1.0 + 0.5 * nodes), weights / 2.0


@dataclass(frozen=True)
class _Head:
    """One head's kernel as a coefficient matrix and its value matrix in complex form."""

    matrix: np.ndarray      # (outputs, inputs): output mode p = p0 + row, input mode q = q0 + column
    p0: int
    q0: int
    mu: complex
    nu: complex


def _head(a: np.ndarray, value: np.ndarray, beta: float, scale: float) -> _Head:
    alpha = 0.5 * complex(a[0, 0] + a[1, 1], a[1, 0] - a[0, 1])
    gamma = 0.5 * complex(a[0, 0] - a[1, 1], a[0, 1] + a[1, 0])
    big_m, big_l = bessel_degree(beta * abs(alpha)), bessel_degree(beta * abs(gamma))
    m = np.arange(-big_m, big_m + 1)[:, None]
    l = np.arange(-big_l, big_l + 1)[None, :]  # noqa: E741
    # I_m(z) = ive(m, z) e^z: the common factor e^{beta (|alpha| + |gamma|)} goes into scale
    c = (scale * ive(m, beta * abs(alpha)) * ive(l, beta * abs(gamma))
         * np.exp(-1j * (m * np.angle(alpha) + l * np.angle(gamma))))
    p, q = m + l, m - l
    p0, q0 = -(big_m + big_l), -(big_m + big_l)
    matrix = np.zeros((2 * (big_m + big_l) + 1, 2 * (big_m + big_l) + 1), dtype=complex)
    np.add.at(matrix, ((p - p0).ravel(), (q - q0).ravel()), c.ravel())
    mu = 0.5 * complex(value[0, 0] + value[1, 1], value[1, 0] - value[0, 1])
    nu = 0.5 * complex(value[0, 0] - value[1, 1], value[1, 0] + value[0, 1])
    return _Head(matrix, p0, q0, mu, nu)


@dataclass(frozen=True, eq=False)
class GeneralCircleOperators(CircleOperators):
    """:class:`CircleOperators` whose velocity comes from general ``Q``, ``K``, ``V`` and heads (module docstring)."""

    heads: tuple = field(init=False, repr=False)
    energy_factors: np.ndarray = field(init=False, repr=False)
    zonal: CircleOperators | None = field(init=False, repr=False)
    offsets: np.ndarray = field(init=False, repr=False)
    weights: np.ndarray = field(init=False, repr=False)
    rotations: np.ndarray = field(init=False, repr=False)

    def __post_init__(self) -> None:
        set_ = object.__setattr__
        model, n = self.model, self.cells
        set_(self, "width", 2 * np.pi / n)
        set_(self, "uniform", 1.0 / (2 * np.pi))
        set_(self, "linear", model.velocity_is_linear)
        self._set_external()
        heads = []
        for (a, v), shift in zip(head_matrices(model, 2), kernel_shifts(model, 2)):
            # The Jacobi-Anger coefficients carry e^{-beta ||A||} (ive): scale gives e^{beta x^T A y - shift}
            heads.append(_head(a, v, model.beta, np.exp(model.beta * np.linalg.norm(a, 2) - shift)))
        factors, scaled = energy_factors(model, 2)
        set_(self, "energy_factors", factors)
        set_(self, "energy_scaled", scaled)
        set_(self, "heads", tuple(heads))
        # Same functional as the zonal scheme for a zonal model, so that both take the same steps.
        set_(self, "zonal", CircleOperators(model, n) if model.is_zonal else None)
        offsets, weights = dual_cell_quadrature(max(h.matrix.shape[0] for h in heads) + 1, self.width)
        set_(self, "offsets", offsets)
        set_(self, "weights", weights)
        # e^{-i theta} at node g of dual cell j
        set_(self, "rotations", np.exp(-1j * (self.offsets[:, None] + self.width * np.arange(n)[None, :])))

    # ------------------------------------------------------------------ Fourier machinery
    def _coefficients(self, rho: np.ndarray) -> tuple[np.ndarray, int]:
        r""":math:`\hat\rho(q)` for ``q = -N/2 .. N/2`` (the Nyquist mode split evenly), and the first mode.

        ``rho`` may hold several densities along leading axes (one FFT for all), as may the
        spectra every method below takes.
        """
        n, h = self.cells, self.width
        half = n // 2
        q = np.arange(-half, half + 1)
        spectrum = np.fft.fft(rho)[..., q % n] * h * np.exp(-1j * q * h / 2)  # cell centres (j + 1/2) h
        if n % 2 == 0:
            spectrum[..., 0] *= 0.5
            spectrum[..., -1] *= 0.5
        return spectrum, -half

    def _series(self, head: _Head, spectrum: np.ndarray, first: int, shift: int) -> tuple[np.ndarray, int]:
        """Coefficients of :math:`\\sum_q M[p, q]\\,\\hat\\rho(q - shift)` over the head's output modes."""
        inputs = np.arange(head.matrix.shape[1]) + head.q0 - shift - first
        inside = (inputs >= 0) & (inputs < spectrum.shape[-1])
        taken = np.zeros(spectrum.shape[:-1] + (inputs.size,), dtype=complex)
        taken[..., inside] = spectrum[..., inputs[inside]]
        # the input modes of rho beyond the kernel's reach meet zero columns: only the band is used
        return taken @ head.matrix.T, head.p0

    def _evaluate(self, coefficients: np.ndarray, first: int, offsets) -> np.ndarray:
        r"""Values of :math:`\sum_p c_p e^{ip\theta}` at :math:`\theta = o + jh`, ``j = 0..N-1``, for each offset ``o``.

        ``coefficients`` may hold several series along a leading axis (one inverse FFT for all);
        modes are folded modulo ``N``, which is exact evaluation at the ``N`` points.
        """
        n = self.cells
        p = np.arange(coefficients.shape[-1]) + first
        phased = coefficients[..., None, :] * np.exp(1j * np.multiply.outer(np.atleast_1d(offsets), p))
        folded = np.zeros(phased.shape[:-1] + (n,), dtype=complex)
        if p.size <= n:  # distinct residues: a plain scatter
            folded[..., p % n] = phased
        else:
            for start in range(0, p.size, n):
                folded[..., p[start:start + n] % n] += phased[..., start:start + n]
        return np.fft.ifft(folded, axis=-1) * n

    def _head_sums(self, head: _Head, spectrum, first):
        r"""Coefficients of :math:`D` and :math:`\tilde N` of one head (shared first mode)."""
        d, p0 = self._series(head, spectrum, first, 0)
        numerator, _ = self._series(head, spectrum, first, 1)
        return d, numerator, p0

    # ------------------------------------------------------------------ velocity
    def face_velocity(self, deviation: np.ndarray) -> np.ndarray:
        """Velocity averaged over each dual cell, at the faces ``j + 1/2``."""
        spectrum, first = self._coefficients(self.uniform + deviation)
        velocity = (self._linear_face_velocity if self.linear else self._quotient_face_velocity)(spectrum, first)
        return velocity if self.external_velocity is None else velocity + self.external_velocity

    def _linear_velocity_series(self, spectrum, first) -> tuple[np.ndarray, int]:
        """Fourier coefficients of the velocity of a linear model (the sum over heads), and the first mode."""
        total, low = None, None
        for head in self.heads:
            numerator, p0 = self._series(head, spectrum, first, 1)  # linear models need no denominator
            # F = e^{-i theta} (mu N + nu conj N): mode r gets mu N(r + 1) + nu conj(N(-r - 1)); the
            # head's modes are symmetric about 0, so both terms live on r = p0 - 1 .. -p0 - 1
            f = head.mu * numerator + head.nu * np.conj(numerator[..., ::-1])
            total, low = _accumulate(total, low, f, p0 - 1)
        total, low = _symmetric(total, low)
        # Im F: coefficient (F(r) - conj F(-r)) / 2i
        return (total - np.conj(total[..., ::-1])) / 2j, low

    def _linear_face_velocity(self, spectrum, first) -> np.ndarray:
        velocity, low = self._linear_velocity_series(spectrum, first)
        # the dual-cell average multiplies mode r by sinc(r h / 2)
        r = np.arange(velocity.shape[-1]) + low
        return self._evaluate(velocity * np.sinc(r * self.width / (2 * np.pi)), low, self.width)[..., 0, :].real

    def _quotient_at(self, head: _Head, spectrum, first, offsets, rotations) -> np.ndarray:
        r"""One head's SA velocity :math:`\mathrm{Im}(e^{-i\theta}(\mu\tilde N + \nu\bar{\tilde N}))/D` at ``offsets + jh``."""
        d, numerator, p0 = self._head_sums(head, spectrum, first)
        # D and N at every point of every offset: one batch of inverse FFTs
        denominator, mean = self._evaluate(np.stack([d, numerator]), p0, offsets)
        rotated = rotations * (head.mu * mean + head.nu * np.conj(mean))
        return rotated.imag / np.maximum(denominator.real, np.finfo(float).tiny)

    def _quotient_face_velocity(self, spectrum, first) -> np.ndarray:
        return sum(self.weights @ self._quotient_at(head, spectrum, first, self.offsets, self.rotations)
                   for head in self.heads)

    def point_velocity(self, spectrum: np.ndarray, first: int) -> np.ndarray:
        r"""The velocity at the points :math:`\theta_j = jh` from the density's coefficients :math:`\hat\rho(q)`, ``q >= first``.

        Without the external field (the spectral solver adds its own, pointwise).
        """
        if self.linear:
            velocity, low = self._linear_velocity_series(spectrum, first)
            return self._evaluate(velocity, low, 0.0)[..., 0, :].real
        rotations = np.exp(-1j * self.width * np.arange(self.cells))[None, :]
        return sum(self._quotient_at(head, spectrum, first, 0.0, rotations)[..., 0, :] for head in self.heads)

    def potential_jumps(self, deviation: np.ndarray) -> np.ndarray:
        """``h`` times the face velocity: the jumps the Scharfetter-Gummel step needs (a potential's, when there is one)."""
        return self.width * self.face_velocity(deviation)

    # ------------------------------------------------------------------ functionals
    def energy(self, rho: np.ndarray) -> float:
        r""":math:`\sum_h \frac1{2\beta}\int\!\!\int e^{\beta\langle x, A_h y\rangle}\rho\rho` (``beta = 0``: :math:`\frac12\sum_h m^T A_h m`)."""
        if self.zonal is not None:
            return self.zonal.energy(rho)
        spectrum, first = self._coefficients(rho)
        beta = self.model.beta
        if beta == 0:  # kernel 1 + beta x^T A y + ...: the energy's beta -> 0 limit, (1/2) m^T A m
            mean = np.conj(spectrum[1 - first])  # int e^{i phi} rho = m_1 + i m_2
            moments = np.array([mean.real, mean.imag])
            return float(sum(0.5 * moments @ a @ moments for a, _ in head_matrices(self.model, 2))
                         ) + self.external_energy(rho)
        total = 0.0
        for head, factor in zip(self.heads, self.energy_factors):
            d, _, p0 = self._head_sums(head, spectrum, first)
            values = self._evaluate(d, p0, 0.5 * self.width)[0].real
            total += factor * self.width * np.dot(rho, values) / (2.0 * beta)
        return float(total) + self.external_energy(rho)

    def lyapunov(self, rho: np.ndarray) -> float:
        """The zonal scheme's functional for a zonal model; for USA with every ``V_h = A_h`` symmetric, ``D int rho log rho - E``; NaN otherwise."""
        if self.zonal is not None:
            return self.zonal.lyapunov(rho)
        model = self.model
        if not self.linear or model.beta == 0 or not is_gradient_flow(model, 2):
            return np.nan
        if self.external_velocity is not None and self.external_potential is None:
            return np.nan
        diffusion = model.diffusion
        return (diffusion * self.entropy(rho) if diffusion else 0.0) - self.energy(rho)


def _accumulate(total, low, coefficients, first):
    """Add coefficient vectors over possibly different mode ranges."""
    if total is None:
        return coefficients.copy(), first
    size, added = total.shape[-1], coefficients.shape[-1]
    new_low = min(low, first)
    new_high = max(low + size, first + added)
    merged = np.zeros(total.shape[:-1] + (new_high - new_low,), dtype=complex)
    merged[..., low - new_low: low - new_low + size] += total
    merged[..., first - new_low: first - new_low + added] += coefficients
    return merged, new_low


def _symmetric(coefficients: np.ndarray, first: int) -> tuple[np.ndarray, int]:
    """The same series on the symmetric mode range ``-R .. R`` (zero-padded)."""
    size = coefficients.shape[-1]
    reach = max(-first, first + size - 1)
    padded = np.zeros(coefficients.shape[:-1] + (2 * reach + 1,), dtype=complex)
    padded[..., first + reach: first + reach + size] = coefficients
    return padded, -reach
