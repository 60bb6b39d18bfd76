r"""Velocity of the mean-field equation on :math:`S^2` for general query, key and value matrices and heads.

Head ``h`` has the kernel :math:`k_h(x, y) = e^{\beta\, x^T A_h y - s_h}`, :math:`A_h = Q_h^T K_h`
(:func:`solvers.heads.kernel_shifts` for :math:`s_h`), and the velocity is

.. math:: v(x) = P_x \sum_h V_h\, \frac{N_h(x)}{Z_h(x)}\ \text{(SA)}, \qquad
          v(x) = P_x \sum_h V_h\, N_h(x)\ \text{(USA)}, \qquad
          Z_h = \int k_h(x, y)\rho(y)\,dy, \quad N_h = \int k_h(x, y)\, y\,\rho(y)\,dy.

Design: the kernel is not zonal, so it no longer acts diagonally on harmonics, but it is
smooth and of low degree in each variable: for fixed ``y`` it is the zonal kernel
:math:`e^{\kappa\,\omega\cdot x}`, :math:`\kappa = \beta|A_h y| \le \beta\|A_h\|_2`, whose degree-``l``
part is :math:`\lambda_l(\kappa)(2l+1)/(4\pi)\,P_l` (Funk-Hecke). Truncating where the sum of
these tails falls below :math:`2^{-56}` of the maximum gives a degree :math:`L_k` (about
17 at :math:`\beta\|A\| = 1.5`, 36 at 10), and then :math:`\rho \mapsto (Z, N_1, N_2, N_3)` is a
dense real matrix from the coefficients of degree :math:`\le L_k + 1` of ``rho`` (the ``y``
in ``N`` raises the degree by one) to those of degree :math:`\le L_k` of the four fields.
It is assembled once, by Gauss quadrature that is exact for these degrees: the kernel is
analysed in ``x`` at every node ``y_j``, and the result, times :math:`1, y_1, y_2, y_3`, in ``y``
(two real analyses per row, which sidesteps the phase conventions of complex harmonics).
Per right-hand side the cost is one matrix-vector product of size
:math:`\sim 8 H L_k^2 \times 2 L_k^2`, four syntheses per head from degree :math:`L_k` onto the
solver's grid (three in all for USA, whose value matrices are folded into the matrix), and
the divergence, against one synthesis and one gradient synthesis for a zonal kernel.
Direct quadrature on the solver's grid would cost :math:`(2 l_{max}^2)^2` kernel values per
step; the rotation to the singular frames of :math:`A_h` plus a Jacobi-Anger expansion in
longitude would need Wigner rotations of ``rho`` at every step.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from meanfield.spectra import attention_spectrum

from .heads import energy_factors, head_matrices, is_gradient_flow, kernel_shifts
from .sphere_grid import MIN_LATITUDES, SphereGrid, shtns

#: Relative bound on the part of the kernel (in sup norm, against its maximum) left out.
TAIL = 2.0**-56

#: Kernel values are computed in blocks of this many nodes ``y`` (memory: blocks times nodes).
NODE_BLOCK = 256


def kernel_degree(kappa: float) -> int:
    r"""Smallest ``L`` with :math:`\sum_{l > L}\lambda_l(\kappa)\frac{2l+1}{4\pi} \le 2^{-56}e^{\kappa}`.

    The left side bounds the sup norm of what truncating :math:`e^{\kappa\,\omega\cdot x}` at
    degree ``L`` leaves out (:math:`|P_l| \le 1`).
    """
    if kappa == 0:
        return 0
    top = int(np.ceil(kappa + 10.0 * np.sqrt(kappa + 1.0) + 24))
    while True:
        degrees = np.arange(top + 1)
        terms = attention_spectrum(kappa, top, 3, scaled=True) * (2 * degrees + 1) / (4 * np.pi)
        tails = np.cumsum(terms[::-1])[::-1]  # tails[L] = sum_{l >= L}
        below = np.flatnonzero(tails[1:] <= TAIL)
        if below.size:
            return int(below[0])
        top *= 2


def _sht(lmax: int, nlat: int, nphi: int):
    # One thread: at these low degrees OpenMP's start-up costs more than it saves (41 vs 54 us a synthesis).
    sh = shtns.sht(lmax, lmax, nthreads=1)
    sh.set_grid(nlat=nlat, nphi=nphi, flags=shtns.sht_gauss, polar_opt=0.0)
    return sh


def _points(sh) -> np.ndarray:
    """Nodes of a shtns grid as unit vectors, shape ``(nlat * nphi, 3)`` in its memory order."""
    cos_t = sh.cos_theta[:, None]
    sin_t = np.sqrt(1.0 - cos_t * cos_t)
    phi = 2 * np.pi * np.arange(sh.nphi)[None, :] / sh.nphi
    return np.stack(np.broadcast_arrays(sin_t * np.cos(phi), sin_t * np.sin(phi), cos_t), axis=-1).reshape(-1, 3)


def _kernel_matrix(a: np.ndarray, beta: float, shift: float, sh, outputs: np.ndarray) -> np.ndarray:
    r"""Real matrix from the packed coefficients of ``rho`` to those of :math:`(Z, N_1, N_2, N_3)`.

    ``sh`` is the quadrature transform (degree :math:`L_k + 1`, Gauss grid exact for the
    products); ``outputs`` are its indices of the output coefficients. Packed vectors hold
    real parts then imaginary parts; the result has shape ``(4, 2, outputs, 2 nlm)``.
    """
    nodes = _points(sh)
    shape = (sh.nlat, sh.nphi)
    # T[a, j] = int conj(Y_a(x)) k(x, y_j) dx, by analysis in x of the kernel at each node y_j
    analysed = np.empty((outputs.size, nodes.shape[0]), dtype=complex)
    for start in range(0, nodes.shape[0], NODE_BLOCK):
        block = nodes[start:start + NODE_BLOCK]
        values = np.exp(beta * (nodes @ a @ block.T) - shift)
        for j in range(block.shape[0]):
            analysed[:, start + j] = sh.analys(np.ascontiguousarray(values[:, j].reshape(shape)))[outputs]
    order = sh.m
    matrix = np.empty((4, 2, outputs.size, 2 * sh.nlm))
    for w, weight in enumerate((None, nodes[:, 0], nodes[:, 1], nodes[:, 2])):
        for row in range(outputs.size):
            g = analysed[row] if weight is None else analysed[row] * weight
            # Z_a = sum_b int g Y_b rho_b + [m > 0] int g conj(Y_b) conj(rho_b), from real analyses of g
            real = sh.analys(np.ascontiguousarray(g.real.reshape(shape)))
            imag = sh.analys(np.ascontiguousarray(g.imag.reshape(shape)))
            with_y = real.conj() + 1j * imag.conj()           # int g Y_b
            with_conj = np.where(order > 0, real + 1j * imag, 0.0)  # int g conj(Y_b), m > 0 only
            plus, minus = with_y + with_conj, 1j * (with_y - with_conj)  # columns of Re rho_b, Im rho_b
            matrix[w, 0, row] = np.concatenate([plus.real, minus.real])
            matrix[w, 1, row] = np.concatenate([plus.imag, minus.imag])
    return matrix


@dataclass(frozen=True, eq=False)
class GeneralSphereInteraction:
    """Attention velocity and energy on :math:`S^2` for any ``Q``, ``K``, ``V`` and heads (module docstring)."""

    model: object
    grid: SphereGrid
    degree: int = field(init=False)
    linear: bool = field(init=False)
    energy_scaled: bool = field(init=False)
    _inputs: np.ndarray = field(init=False, repr=False)
    _outputs: np.ndarray = field(init=False, repr=False)
    _low: object = field(init=False, repr=False)
    _matrix: np.ndarray = field(init=False, repr=False)
    _potentials: np.ndarray = field(init=False, repr=False)
    _projected_values: np.ndarray = field(init=False, repr=False)
    _energy_factors: np.ndarray = field(init=False, repr=False)

    def __post_init__(self) -> None:
        set_ = object.__setattr__
        model, grid = self.model, self.grid
        heads = head_matrices(model, 3)
        shifts = kernel_shifts(model, 3)
        # The solver's lmax bounds the degree: SphereSpectral has checked it resolves the kernel to 1e-8.
        degree = min(max([1] + [kernel_degree(model.beta * float(np.linalg.norm(a, 2))) for a, _ in heads]),
                     grid.lmax)  # shtns needs degree >= 1
        set_(self, "degree", degree)
        set_(self, "linear", model.velocity_is_linear)
        inputs = min(degree + 1, grid.lmax)
        nlat = max(MIN_LATITUDES, inputs + 2 + inputs % 2)  # Gauss: exact to degree 2 nlat - 1 >= 2 (L_k + 1) + 1
        quadrature = _sht(inputs, nlat, 2 * nlat)
        low = _sht(degree, *grid.shape)
        outputs = np.array([quadrature.idx(int(l), int(m)) for l, m in zip(low.l, low.m)])
        set_(self, "_inputs", np.array([grid.transform.idx(int(l), int(m))
                                        for l, m in zip(quadrature.l, quadrature.m)]))
        set_(self, "_outputs", outputs)
        set_(self, "_low", low)
        matrices = [_kernel_matrix(a, model.beta, s, quadrature, outputs) for (a, _), s in zip(heads, shifts)]
        set_(self, "_potentials", np.stack([m[0] for m in matrices]))  # Z rows, for the energy
        frame = grid.tangent_frame()
        if self.linear:
            # sum_h V_h N_h is linear in rho: fold the value matrices into one matrix of three fields
            folded = sum(np.einsum("ij,jrak->irak", v, m[1:]) for (_, v), m in zip(heads, matrices))
            set_(self, "_matrix", folded.reshape(-1, folded.shape[-1]))
            set_(self, "_projected_values", frame)
        else:
            set_(self, "_matrix", np.concatenate([m.reshape(-1, m.shape[-1]) for m in matrices]))
            # e . V_h N = (V_h^T e) . N: the frame seen through each value matrix, (heads, 2, 3, nlat, nphi)
            set_(self, "_projected_values", np.stack([np.einsum("ji,fjab->fiab", v, frame) for _, v in heads]))
        factors, scaled = energy_factors(model, 3)
        set_(self, "energy_scaled", scaled)
        set_(self, "_energy_factors", factors)

    # ------------------------------------------------------------------ fields
    def _fields(self, coefficients: np.ndarray, matrix: np.ndarray) -> np.ndarray:
        """Grid values of the fields whose packed coefficients are ``matrix`` times packed ``rho``."""
        taken = coefficients[self._inputs]
        packed = matrix @ np.concatenate([taken.real, taken.imag])
        packed = packed.reshape(-1, 2, self._low.nlm)
        return np.stack([self._low.synth(np.ascontiguousarray(f[0] + 1j * f[1])) for f in packed])

    def velocity(self, coefficients: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Grid components (colatitude, longitude) of the attention velocity."""
        fields = self._fields(coefficients, self._matrix)
        if self.linear:
            along = np.einsum("fiab,iab->fab", self._projected_values, fields)
            return along[0], along[1]
        fields = fields.reshape(-1, 4, *fields.shape[1:])
        means = fields[:, 1:] / np.maximum(fields[:, :1], np.finfo(float).tiny)
        # N_h / Z_h is an average of unit vectors: a larger norm is round-off where Z_h underflows
        norms = np.sqrt(np.sum(means * means, axis=1, keepdims=True))
        if norms.max() > 1.0:
            means /= np.maximum(norms, 1.0)
        along = np.einsum("hfiab,hiab->fab", self._projected_values, means)
        return along[0], along[1]

    def energy(self, coefficients: np.ndarray) -> float:
        r""":math:`E = \frac1{2\beta}\sum_h\int\!\!\int e^{\beta x^T A_h y}\rho\rho` (times :math:`e^{-\beta\max_h\|A_h\|}` if scaled).

        At ``beta = 0``, the limit of :math:`E - H/(2\beta)`: :math:`\frac12\sum_h m^T A_h m`.
        """
        model, grid = self.model, self.grid
        if model.beta == 0:
            rho = grid.synthesise(coefficients)
            mean = np.array([grid.integrate(c * rho) for c in np.moveaxis(grid.points(), -1, 0)])
            return float(sum(0.5 * mean @ a @ mean for a, _ in head_matrices(model, 3)))
        taken = coefficients[self._inputs]
        packed = self._potentials.reshape(-1, self._potentials.shape[-1]) @ np.concatenate([taken.real, taken.imag])
        potentials = packed.reshape(len(self._energy_factors), 2, -1)
        low_rho = coefficients[self._inputs[self._outputs]]
        weight = np.where(self._low.m == 0, 1.0, 2.0)
        inner = np.sum(weight * (potentials[:, 0] * low_rho.real + potentials[:, 1] * low_rho.imag), axis=-1)
        return float(np.dot(self._energy_factors, inner) / (2.0 * model.beta))

    @property
    def gradient_flow(self) -> bool:
        """USA with every ``V_h = A_h`` symmetric: the flow ascends :meth:`energy`."""
        return self.linear and self.model.beta > 0 and is_gradient_flow(self.model, 3)
