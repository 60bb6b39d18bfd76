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
these tails falls below :math:`2^{-56}` of the maximum gives a degree :math:`L_k` (17 at
:math:`\beta\|A\| = 1.5`, 33 at 10, 90 at 100), and then :math:`f \mapsto \int k_h(\cdot, y) f(y)\,dy` is a
dense real matrix from the coefficients of ``f`` of degree :math:`\le L_k + 2` to those of
degree :math:`\le L_k` (per head 13 MB at :math:`\beta\|A\| = 10`, 0.6 GB at 100). It is
assembled once, by Gauss quadrature exact at these degrees: the kernel is analysed in ``x``
at every node ``y_j``, each resulting row in ``y`` (two real analyses per row, which
sidesteps the phase conventions of complex harmonics). Per
right-hand side the four functions :math:`\rho, y_1\rho, y_2\rho, y_3\rho` are formed on the
small quadrature grid (one synthesis, three analyses: exact at the degrees the kernel
sees), one product of the stacked heads' matrices with these four columns gives
:math:`Z_h, N_h`, and they are synthesised from degree :math:`L_k` onto the solver's grid (four
per head for SA; USA combines the value matrices in coefficient space first, three in
all); then the zonal path's divergence. Against the zonal right-hand side (one synthesis
and one gradient synthesis) this costs a few times more (``benchmarks/bench_general.py``,
``docs/performance.md``). Direct quadrature on the solver's grid would cost
:math:`(2 l_{max}^2)^2` kernel values per step; the rotation to the singular frames of
:math:`A_h` plus a Jacobi-Anger expansion in longitude would need Wigner rotations of
``rho`` at every step.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np

from meanfield.models import SelfAttention
from meanfield.spectra import attention_spectrum, truncation_degree
from meanfield.sphere import sphere_points

from ..heads import energy_factors, head_matrices, is_gradient_flow, kernel_shifts
from .grid import MIN_LATITUDES, SphereGrid, shtns

#: Kernel values are computed in blocks of this many nodes ``y`` (memory: blocks times nodes).
NODE_BLOCK = 256


def kernel_degree(kappa: float) -> int:
    r"""Smallest ``L`` with :math:`\sum_{l > L}\lambda_l(\kappa)(2l+1) \le 2^{-56}\sum_l\lambda_l(\kappa)(2l+1)`.

    :math:`\lambda_l(2l+1)/(4\pi)` bounds the degree-``l`` part of :math:`e^{\kappa\,\omega\cdot x}`
    (:math:`|P_l| \le 1`), and the sum over all degrees is its maximum :math:`e^\kappa`.
    """
    guess = int(np.ceil(kappa + 10.0 * np.sqrt(kappa + 1.0) + 24))
    return truncation_degree(lambda top: attention_spectrum(kappa, top, 3, scaled=True) * (2 * np.arange(top + 1) + 1),
                             guess)


def _sht(lmax: int, nlat: int, nphi: int):
    # One thread: at these low degrees OpenMP's start-up costs more than it saves.
    sh = shtns.sht(lmax, lmax, nthreads=1)
    sh.set_grid(nlat=nlat, nphi=nphi, flags=shtns.sht_gauss, polar_opt=0.0)
    return sh


def _points(sh) -> np.ndarray:
    """Nodes of a shtns grid as unit vectors, shape ``(nlat * nphi, 3)`` in its memory order."""
    longitude = 2 * np.pi * np.arange(sh.nphi) / sh.nphi
    return sphere_points(np.arccos(sh.cos_theta)[:, None], longitude[None, :]).reshape(-1, 3)


def _kernel_matrix(a: np.ndarray, beta: float, shift: float, sh, outputs: np.ndarray) -> np.ndarray:
    r"""Real matrix from the packed coefficients of a field ``f`` to those of :math:`\int k(\cdot, y) f(y)\,dy`.

    ``sh`` is the quadrature transform (module docstring); ``outputs`` are its indices of
    the output coefficients. Packed vectors hold real parts, then imaginary parts; the
    result has shape ``(2 outputs, 2 nlm)``.
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
    matrix = np.empty((2, outputs.size, 2 * sh.nlm))
    for row, g in enumerate(analysed):
        # Z_a = sum_b int g Y_b f_b + [m > 0] int g conj(Y_b) conj(f_b), from real analyses of g
        real = sh.analys(np.ascontiguousarray(g.real.reshape(shape)))
        imag = sh.analys(np.ascontiguousarray(g.imag.reshape(shape)))
        with_y = real.conj() + 1j * imag.conj()                  # int g Y_b
        with_conj = np.where(sh.m > 0, real + 1j * imag, 0.0)   # int g conj(Y_b), m > 0 only
        plus, minus = with_y + with_conj, 1j * (with_y - with_conj)  # columns of Re f_b, Im f_b
        matrix[0, row] = np.concatenate([plus.real, minus.real])
        matrix[1, row] = np.concatenate([plus.imag, minus.imag])
    return matrix.reshape(2 * outputs.size, -1)


class _KernelTables(NamedTuple):
    """What :class:`GeneralSphereInteraction` computes once: its transforms, the kernel's matrix, the heads' values."""

    inputs: np.ndarray  # the grid's coefficients the quadrature's degrees read
    outputs: np.ndarray  # the quadrature's coefficients of the kernel's degrees
    quadrature: object  # shtns transform of the quadrature grid (exact for y_i rho)
    low: object  # shtns transform up to the kernel's degree, on the solver's grid
    directions: np.ndarray  # y_1, y_2, y_3 on the quadrature grid
    matrix: np.ndarray  # the heads' kernels, stacked (heads x 2 nlm_out, 2 nlm_in)
    values: np.ndarray  # V_h, (heads, 3, 3)
    projected_values: np.ndarray  # the tangent frame seen through each V_h
    energy_factors: np.ndarray  # per head


@dataclass(frozen=True, eq=False)
class GeneralSphereInteraction:
    """Attention velocity and energy on :math:`S^2` for any ``Q``, ``K``, ``V`` and heads (module docstring)."""

    model: SelfAttention
    grid: SphereGrid
    _tables: _KernelTables = field(init=False, repr=False)
    degree: int = field(init=False)
    linear: bool = field(init=False)
    energy_scaled: bool = field(init=False)

    def __post_init__(self) -> None:
        set_ = object.__setattr__
        model, grid = self.model, self.grid
        heads = head_matrices(model, 3)
        # The widest head sets the degree (model.logit_bound = max_h ||A_h||), the solver's lmax bounds it
        # (SphereSpectral has checked lmax resolves the kernel to 1e-8), and shtns needs at least 1.
        degree = min(max(kernel_degree(model.beta * model.logit_bound), 1), grid.lmax)
        set_(self, "degree", degree)
        set_(self, "linear", model.velocity_is_linear)
        inputs = min(degree + 2, grid.lmax)
        # Gauss with nlat nodes is exact to degree 2 nlat - 1 >= (inputs + 1) + inputs: the analyses of y_i rho
        nlat = max(MIN_LATITUDES, inputs + 1 + (inputs + 1) % 2)
        quadrature = _sht(inputs, nlat, 2 * nlat)
        low = _sht(degree, *grid.shape)
        outputs = np.array([quadrature.idx(int(l), int(m)) for l, m in zip(low.l, low.m)])
        frame = grid.tangent_frame()
        factors, scaled = energy_factors(model, 3)
        set_(self, "energy_scaled", scaled)
        set_(self, "_tables", _KernelTables(
            inputs=np.array([grid.transform.idx(int(l), int(m)) for l, m in zip(quadrature.l, quadrature.m)]),
            outputs=outputs, quadrature=quadrature, low=low,
            directions=np.moveaxis(_points(quadrature).reshape(nlat, 2 * nlat, 3), -1, 0).copy(),
            matrix=np.concatenate([_kernel_matrix(a, model.beta, s, quadrature, outputs)
                                   for (a, _), s in zip(heads, kernel_shifts(model, 3))]),
            values=np.stack([v for _, v in heads]),
            # e . V_h N = (V_h^T e) . N: the frame seen through each value matrix, (heads, 2, 3, nlat, nphi)
            projected_values=frame if self.linear else np.stack([np.einsum("ji,fjab->fiab", v, frame)
                                                                 for _, v in heads]),
            energy_factors=factors))

    # ------------------------------------------------------------------ fields
    def _sums(self, coefficients: np.ndarray) -> np.ndarray:
        r"""Coefficients of :math:`Z_h, N_{h,1}, N_{h,2}, N_{h,3}` up to the kernel's degree, shape ``(heads, 4, nlm)``.

        The kernel acts on ``rho`` and on :math:`y_i\rho` (formed on the quadrature grid, exact
        to the degrees the kernel sees): one product of the stacked heads' matrices with four columns.
        """
        tables = self._tables
        quadrature = tables.quadrature
        low_rho = np.ascontiguousarray(coefficients[tables.inputs])
        values = quadrature.synth(low_rho)
        moments = [low_rho] + [quadrature.analys(np.ascontiguousarray(values * y)) for y in tables.directions]
        packed = np.stack([np.concatenate([f.real, f.imag]) for f in moments], axis=-1)  # (2 nlm, 4)
        result = (tables.matrix @ packed).reshape(-1, 2, tables.outputs.size, 4)
        return np.moveaxis(result[:, 0] + 1j * result[:, 1], -1, 1)

    def _synthesise(self, fields: np.ndarray) -> np.ndarray:
        return np.stack([self._tables.low.synth(np.ascontiguousarray(f)) for f in fields])

    def velocity(self, coefficients: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Grid components (colatitude, longitude) of the attention velocity."""
        sums = self._sums(coefficients)
        if self.linear:
            # sum_h V_h N_h is linear: combine the coefficients, then three syntheses in all
            output = self._synthesise(np.einsum("hce,hej->cj", self._tables.values, sums[:, 1:]))
            along = np.einsum("fiab,iab->fab", self._tables.projected_values, output)
            return along[0], along[1]
        fields = self._synthesise(sums.reshape(-1, sums.shape[-1])).reshape(*sums.shape[:2], *self.grid.shape)
        means = fields[:, 1:] / np.maximum(fields[:, :1], np.finfo(float).tiny)
        # N_h / Z_h is an average of unit vectors: a larger norm is round-off where Z_h underflows
        norms = np.sqrt(np.sum(means * means, axis=1, keepdims=True))
        if norms.max() > 1.0:
            means /= np.maximum(norms, 1.0)
        along = np.einsum("hfiab,hiab->fab", self._tables.projected_values, means)
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
        potentials = self._sums(coefficients)[:, 0]
        low_rho = coefficients[self._tables.inputs[self._tables.outputs]]
        weight = np.where(self._tables.low.m == 0, 1.0, 2.0)
        inner = np.sum(weight * (potentials.conj() * low_rho).real, axis=-1)
        return float(np.dot(self._tables.energy_factors, inner) / (2.0 * model.beta))

    @property
    def gradient_flow(self) -> bool:
        """USA with every ``V_h = A_h`` symmetric: the flow ascends :meth:`energy`."""
        return self.linear and self.model.beta > 0 and is_gradient_flow(self.model, 3)
