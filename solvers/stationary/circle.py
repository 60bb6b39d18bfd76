r"""The stationary problem of :class:`~solvers.CircleFV`'s drift-diffusion discretisation.

With diffusion :math:`D > 0` the finite volumes integrate
:math:`\dot\rho = L[\rho]\,\rho`, :math:`L[\rho]` the Scharfetter-Gummel generator of
:math:`\partial_\theta(D\partial_\theta\rho - \rho\,\partial_\theta\phi[\rho])`
(:meth:`~solvers.circle.operators.CircleOperators.drift_diffusion_rhs`). A stationary state is
a zero of that right-hand side with mass one. Where the velocity has a periodic potential
(every model on the circle without a circulating field) it is exactly the discrete Gibbs state
:math:`\rho_j \propto e^{\phi_j/D}` at the cell centres: read as point values it is the
trapezoidal discretisation of the self-consistency :math:`\rho \propto e^{\phi[\rho]/D}`
(spectrally accurate in ``cells``), while the dynamics' finite volumes read it as cell
averages (second order).

The unknown is the deviation :math:`\delta = \rho - \bar\rho`. Newton-Krylov solves the
residual :math:`R(\delta) = (D\Delta_h)^{-1} L[\rho]\rho + \bar\delta\,\mathbf 1` (the
inverse discrete Laplacian makes it a density, measured against ``tol``; the mean term fixes
the mass, which :math:`L` conserves), preconditioned by :math:`(L[\rho_k] + N[\rho_k] -
\sigma)^{-1} D\Delta_h`: the generator frozen at the current iterate (a periodic tridiagonal
matrix) plus, for the convolution's models, the right-hand side's response through the potential
(of low rank, inverted with it by Woodbury's identity), nearly the Jacobian's inverse, so that a
continuation step costs tens of right-hand sides (``benchmarks/bench_stationary.py``).

Symmetry. A model invariant under rotations has a circle of stationary states for each one,
and a zero eigenvalue (its generator :math:`\partial_\theta\rho`). If it is also invariant
under the reflection :math:`\theta \to -\theta` (every zonal model, general matrices that
commute with it), the states are sought among even densities, where rotations act no more and
the Jacobian is regular; the stability is still that of the full problem, with the rotation's
eigenvalue recognised by its eigenvector and left out. A rotation-invariant model without the
reflection (a value matrix with a rotation part) has rotating waves, not stationary states,
and is refused.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np
from scipy.linalg import lu_factor, lu_solve
from scipy.sparse.linalg import LinearOperator

from meanfield.checks import check_int, check_real
from meanfield.docstrings import fill_docstrings

from ..circle.transport import ROUNDOFF_NEGATIVE
from ..circle.operators import CircleOperators, CyclicTridiagonal, _next, _previous
from ..heads import head_matrices
from ..reference import circle_operators, interaction_path
from ..resolution import sharpest_cluster_width
from .problem import ParameterFamily, arpack_leading, dense_leading, state_sections

_ROTATION = np.array([[0.0, -1.0], [1.0, 0.0]])
_REFLECTION = np.diag([1.0, -1.0])

#: An eigenvector this aligned with :math:`\partial_\theta\rho` is the rotation's (cosine of the angle).
ROTATION_ALIGNMENT = 0.9

#: The central differences' shift of the Jacobian, relative to the uniform density (in the L2 norm of the cells).
DIFFERENCE_STEP = 1e-5

#: Up to this many cells the leading eigenvalues come from the dense Jacobian and LAPACK, beyond it from ARPACK
#: (``bench_stationary.py``: LAPACK's O(N^3) overtakes ARPACK's Jacobian-vector products between 256 and 512).
DENSE_EIGEN_CELLS = 256


def _commutes(a: np.ndarray, b: np.ndarray) -> bool:
    return bool(np.allclose(a @ b, b @ a, rtol=0, atol=1e-14 * max(1.0, np.abs(a).max())))


def symmetries(model) -> tuple[bool, bool]:
    """``(rotations, reflection)``: whether the model on the circle is invariant under each."""
    if model.external is not None:
        return False, False
    if model.is_zonal:
        return True, True
    pairs = head_matrices(model, 2)
    return (all(_commutes(a, _ROTATION) and _commutes(v, _ROTATION) for a, v in pairs),
            all(_commutes(a, _REFLECTION) and _commutes(v, _REFLECTION) for a, v in pairs))


#: The state's entry in a Parameters section (:func:`~solvers.stationary.problem.state_sections`).
UNKNOWNS = """
unknowns : numpy.ndarray, shape (size,)
    The state's unknowns: the deviation from the uniform density, on the first half of the
    cells where the states are even (:meth:`expand` gives all of them).
"""

#: The entry of the argument that names a mode (:func:`~solvers.stationary.problem.state_sections`).
MODE = """
wavenumber : int
    :math:`k`.
"""


@fill_docstrings(**state_sections(UNKNOWNS, MODE))
class CircleStationary(ParameterFamily):
    r"""Stationary states of the mean-field equation on the circle with diffusion, and their stability.

    Parameters
    ----------
    model : SelfAttention or ZonalAggregation
        Any model :class:`~solvers.CircleFV` takes, with ``diffusion > 0`` at every parameter
        value asked for.
    cells : int
        Cells of the discretisation (even).
    parameter : {"diffusion", "beta"}
        The parameter a branch follows (``beta``: :class:`~meanfield.SelfAttention` only).
    tol : float
        Newton's tolerance on the residual, relative to the uniform density (raised to the
        round-off floor of the residual, :math:`16\epsilon (N/\pi)^2`, at large ``cells``).
    min_cluster_cells : float
        A state with a cluster narrower than this (full width at half maximum) is under-resolved.
    interaction : {"auto", "zonal", "general", "reference"}
        As for :class:`~solvers.CircleFV`.
    """

    name = "CircleFV"

    def __init__(self, model, cells: int = 256, *, parameter: str = "diffusion", tol: float = 1e-10,
                 min_cluster_cells: float = 4.0, interaction: str = "auto"):
        if model.dimension not in (None, 2):
            raise ValueError(f"stationary states on the circle need 2 x 2 matrices, got {model.dimension} x {model.dimension}")
        self.cells = check_int(cells, "cells", minimum=8)
        if self.cells % 2:
            raise ValueError(f"cells must be even (the even states are half the cells), got {cells}")
        super().__init__(model, parameter, tol)
        self.min_cluster_cells = check_real(min_cluster_cells, "min_cluster_cells", minimum=0.0)
        self.interaction = interaction
        # a model known only by its field is assumed to have no symmetry
        path = interaction_path(model, interaction, self.name)
        self.rotations, reflection = symmetries(model) if path != "reference" else (False, False)
        if self.rotations and not reflection:
            raise ValueError("the model is invariant under rotations but not under reflections (a value or "
                             "query-key matrix with a rotation part): its states rotate, none is stationary")
        self.even = self.rotations
        self._operators: tuple[float | None, CircleOperators | None] = (None, None)
        base = self.base_operators = self.operators_at(self.value)
        self.uniform, self.width, self.theta = base.uniform, base.width, base.theta
        wavenumber = np.fft.rfftfreq(self.cells, 1.0 / self.cells)
        #: Eigenvalues of -Delta_h on the discrete Fourier modes.
        self.laplacian_symbol = (2.0 / self.width * np.sin(0.5 * wavenumber * self.width)) ** 2
        floor = 16 * np.finfo(float).eps * (self.cells / np.pi) ** 2
        self.residual_tolerance = max(self.tol, floor) * self.uniform
        self.size = self.cells // 2 if self.even else self.cells

    # ------------------------------------------------------------------ the parameter
    def operators_at(self, value: float) -> CircleOperators:
        """The finite-volume operators at this parameter value (the last one kept).

        {value_parameters}

        Returns
        -------
        CircleOperators
            :class:`~solvers.CircleFV`'s operators of the model there (the general ones for general matrices).
        """
        cached_value, operators = self._operators
        if operators is not None and (cached_value == value or self.parameter == "diffusion"):
            return operators
        model = self.model_at(value)
        operators = circle_operators(model, self.cells, self.interaction, self.name)
        self._operators = (value, operators)
        return operators

    # ------------------------------------------------------------------ unknowns
    def expand(self, unknowns: np.ndarray) -> np.ndarray:
        r"""The deviation on all cells from the unknowns (the even extension where the states are even).

        {unknowns_parameters}

        Returns
        -------
        numpy.ndarray, shape (cells,)
            :math:`\rho - \bar\rho` per cell.
        """
        return np.concatenate((unknowns, unknowns[::-1])) if self.even else unknowns

    def reduce(self, deviation: np.ndarray) -> np.ndarray:
        r"""The unknowns of a deviation given on all cells (its first half where the states are even).

        Parameters
        ----------
        deviation : numpy.ndarray, shape (cells,)
            :math:`\rho - \bar\rho` per cell.

        Returns
        -------
        numpy.ndarray, shape (size,)
            The unknowns.
        """
        return deviation[: self.size]

    def density(self, unknowns: np.ndarray) -> np.ndarray:
        r"""Cell values of the density.

        {unknowns_parameters}

        Returns
        -------
        numpy.ndarray, shape (cells,)
            :math:`\rho` per cell.
        """
        return self.uniform + self.expand(unknowns)

    @property
    def coordinate(self) -> tuple[str, np.ndarray]:
        """The name and values of the coordinate :meth:`density` is given on."""
        return "theta", self.theta

    def mode(self, wavenumber: int) -> np.ndarray:
        r"""The unknowns of :math:`\cos(k\theta)`, an eigenvector of the linearisation at the uniform state.

        {mode_sections}
        """
        return self.reduce(np.cos(wavenumber * self.theta))

    def modes(self) -> range:
        """Wavenumbers whose modes the grid carries (below the Nyquist mode).

        Returns
        -------
        range
            ``1 .. cells/2 - 1``.
        """
        return range(1, self.cells // 2)

    def amplitude(self, unknowns: np.ndarray, wavenumber: int) -> float:
        r"""The cosine coefficient :math:`\frac1\pi\int\rho\cos k\theta` of the state (point values, trapezoid).

        {unknowns_parameters}
        wavenumber : int
            :math:`k`.

        Returns
        -------
        float
            The coefficient.
        """
        return float(self.width / np.pi * np.dot(self.expand(unknowns), np.cos(wavenumber * self.theta)))

    def norm(self, unknowns: np.ndarray) -> float:
        r""":math:`\|\rho - \bar\rho\|_{L^2}` (the branch's measure in a bifurcation diagram).

        {unknowns_parameters}

        Returns
        -------
        float
            The norm.
        """
        return self.base_operators.deviation_norm(self.expand(unknowns))

    def order_parameters(self, unknowns: np.ndarray, count: int) -> np.ndarray:
        r""":math:`|\int\rho\,e^{ik\theta}|` for ``k = 1..count``, the state read as point values (trapezoid).

        {unknowns_parameters}
        count : int
            How many wavenumbers.

        {order_returns}
        """
        rho = self.density(unknowns)
        k = np.arange(1, count + 1)[:, None]
        return np.abs(self.width * (np.exp(1j * k * self.theta) @ rho))

    # ------------------------------------------------------------------ equations
    def rhs(self, deviation: np.ndarray, value: float) -> np.ndarray:
        r"""The finite volumes' right-hand side on all cells at this parameter value.

        Parameters
        ----------
        deviation : numpy.ndarray, shape (cells,)
            :math:`\rho - \bar\rho` per cell.
        {value}

        Returns
        -------
        numpy.ndarray, shape (cells,)
            :math:`\partial_t\rho` per cell: transport and diffusion.
        """
        return self.operators_at(value).drift_diffusion_rhs(deviation, self.diffusion_at(value))

    def residual(self, unknowns: np.ndarray, value: float) -> np.ndarray:
        """Newton's residual (module docstring): zero exactly at stationary states of mass one.

        {state_parameters}

        Returns
        -------
        numpy.ndarray, shape (size,)
            The right-hand side with the diffusion inverted, plus the mass defect.
        """
        deviation = self.expand(unknowns)
        return self.reduce(self._inverse_diffusion(self.rhs(deviation, value), value) + deviation.mean())

    def _inverse_diffusion(self, values: np.ndarray, value: float) -> np.ndarray:
        spectrum = np.fft.rfft(values)
        spectrum[0] = 0.0
        spectrum[1:] /= -self.diffusion_at(value) * self.laplacian_symbol[1:]
        return np.fft.irfft(spectrum, self.cells)

    def preconditioner(self, value: float) -> "_FrozenGenerator":
        """Approximate inverse of the residual's Jacobian, refreshed at each Newton iterate.

        {value_parameters}

        Returns
        -------
        scipy.sparse.linalg.LinearOperator
            The operator (its ``update`` takes the iterate, as :func:`scipy.optimize.newton_krylov` calls it).
        """
        return _FrozenGenerator(self, value)

    def resolved(self, unknowns: np.ndarray) -> tuple[bool, str]:
        """Whether the state is a positive density whose clusters span enough cells, and why not.

        {unknowns_parameters}

        Returns
        -------
        tuple of (bool, str)
            The verdict and, when it is ``False``, the reason.
        """
        rho = self.density(unknowns)
        # The state is known to the residual's tolerance: values below it are zeros, not a loss of positivity.
        if rho.min() < -max(ROUNDOFF_NEGATIVE * rho.max(), 10 * self.residual_tolerance):
            return False, f"the density is negative (min {rho.min():.3g})"
        width = sharpest_cluster_width(rho)
        if width < self.min_cluster_cells:
            return False, f"the sharpest cluster spans {width:.3g} cells (< {self.min_cluster_cells:g})"
        return True, ""

    # ------------------------------------------------------------------ stability
    def jacobian(self, unknowns: np.ndarray, value: float) -> LinearOperator:
        r"""The linearised right-hand side on all cells, ``(cells, cells)``.

        {state_parameters}

        {jacobian_returns}
        """
        deviation = self.expand(unknowns)
        step = DIFFERENCE_STEP * self.uniform

        def product(direction):
            direction = np.ravel(direction)
            scale = np.sqrt(self.width * np.dot(direction, direction)) or 1.0
            shift = (step / scale) * direction
            return (self.rhs(deviation + shift, value) - self.rhs(deviation - shift, value)) * (scale / (2 * step))
        return LinearOperator((self.cells, self.cells), matvec=product, dtype=float)

    def dense_jacobian(self, unknowns: np.ndarray, value: float) -> np.ndarray:
        r"""The linearised right-hand side on all cells as a matrix, ``(cells, cells)``: :meth:`jacobian`'s columns.

        {state_parameters}

        Returns
        -------
        numpy.ndarray, shape (cells, cells)
            Column ``j``: the product with the ``j``-th cell's unit perturbation, by central
            differences of the step :meth:`jacobian` takes; all columns in one batched
            right-hand side where the operators take a batch (the convolution's), else one
            product each.
        """
        if type(self.operators_at(value)) is not CircleOperators:  # the other paths take one density
            product = self.jacobian(unknowns, value).matvec
            return np.column_stack([product(column) for column in np.eye(self.cells)])
        deviation = self.expand(unknowns)
        delta = DIFFERENCE_STEP * self.uniform / np.sqrt(self.width)  # jacobian's shift along a unit vector
        shifts = delta * np.eye(self.cells)
        return ((self.rhs(deviation + shifts, value) - self.rhs(deviation - shifts, value)) / (2 * delta)).T

    def uniform_eigenvalue(self, wavenumber: int, value: float) -> float:
        r"""Eigenvalue of the linearisation at the uniform state on mode ``wavenumber``.

        Parameters
        ----------
        wavenumber : int
            The mode :math:`\cos(k\theta)`.
        {value}

        Returns
        -------
        float
            The growth rate (the dispersion relation of the discretisation).
        """
        direction = np.cos(wavenumber * self.theta)
        image = self.jacobian(np.zeros(self.size), value).matvec(direction)
        return float(np.dot(direction, image) / np.dot(direction, direction))

    def leading_eigenvalues(self, unknowns: np.ndarray, value: float, count: int = 4) -> tuple[np.ndarray, np.ndarray]:
        r"""The ``count`` eigenvalues of largest real part and their eigenvectors (columns), all cells.

        The linearisation restricted to mass-free perturbations: the constant mode, which the
        mass constraint removes, is shifted far left (Wielandt), and for a rotation-invariant
        model the rotation's eigenvalue (eigenvector along :math:`\partial_\theta\rho`) is left
        out. Up to ``DENSE_EIGEN_CELLS`` cells LAPACK on the dense Jacobian (its columns by
        central differences, every column in one batched right-hand side where the operators
        take a batch); beyond, ARPACK (``eigs``) on its products.

        {eigen_parameters}

        {eigen_returns}

        {arpack_raises}
        """
        shift = 1e3 * self.diffusion_at(value) * self.laplacian_symbol[-1]
        wanted = count + (1 if self.rotations else 0)
        if self.cells <= DENSE_EIGEN_CELLS:
            jacobian = self.dense_jacobian(unknowns, value)
            # J P - shift 1 1^T / n, P the projection on mass-free perturbations
            values, vectors = dense_leading(jacobian - (jacobian.sum(axis=1, keepdims=True) + shift) / self.cells,
                                            wanted)
        else:
            jacobian = self.jacobian(unknowns, value)

            def mass_free(direction):
                direction = np.ravel(direction)
                mean = direction.mean()
                return jacobian.matvec(direction - mean) - shift * mean
            operator = LinearOperator((self.cells, self.cells), matvec=mass_free, dtype=float)
            start = np.random.default_rng(0).standard_normal(self.cells)
            values, vectors = arpack_leading(operator, wanted, start - start.mean())
        keep = np.ones(values.size, bool)
        if self.rotations:
            generator = np.gradient(self.density(unknowns))
            size = np.linalg.norm(generator)
            if size > 1e-8 * self.uniform:
                alignment = np.abs(generator @ vectors) / (size * np.linalg.norm(vectors, axis=0))
                if alignment.max() > ROTATION_ALIGNMENT:
                    keep[np.argmax(alignment)] = False
        values, vectors = values[keep], vectors[:, keep]
        order = np.argsort(-values.real)[:count]
        return values[order], vectors[:, order]


#: Fourier modes of the kernel's gradient symbol below this fraction of its largest are left out of the
#: preconditioner's potential part (it only steers the Krylov iteration: Newton's answer does not depend on it).
POTENTIAL_MODES_CUTOFF = 1e-6


@lru_cache(maxsize=8)
def _potential_modes(operators: CircleOperators, even: bool) -> np.ndarray:
    """The kernel's significant Fourier modes on the cells, as rows (cosines only where the states are even): built
    once per operators (a branch over the diffusion keeps them)."""
    symbol = np.abs(operators.gradient_symbol[1:operators.cells // 2])
    wavenumbers = 1 + np.flatnonzero(symbol > POTENTIAL_MODES_CUTOFF * symbol.max())
    phases = np.outer(wavenumbers, operators.theta)
    return np.cos(phases) if even else np.concatenate([np.cos(phases), np.sin(phases)])


class _FrozenGenerator(LinearOperator):
    r""":math:`(L[\rho_k] + N[\rho_k] - \sigma)^{-1} D\Delta_h` on the unknowns; scipy's Newton-Krylov calls ``update``.

    :math:`L` is the generator frozen at the iterate (a periodic tridiagonal matrix, factored
    once per iterate), :math:`N` the right-hand side's response through the potential
    (:meth:`~solvers.circle.operators.CircleOperators.potential_response`), of low rank: the
    kernel's Fourier modes :math:`\phi_k` whose symbol is not negligible, so that
    :math:`N = \sum_k (N\phi_k)(\frac2N\phi_k)^T` and Woodbury's identity inverts the sum with
    one small dense solve. Together they are the residual's Jacobian up to the modes left out,
    and GMRES needs a few iterations per Newton step instead of about one per mode. The general
    and reference paths (no convolution) keep :math:`L` alone.
    """

    def __init__(self, problem: CircleStationary, value: float):
        super().__init__(float, (problem.size, problem.size))
        self.problem, self.value = problem, value
        self.generator = None
        self.potential = None  # (L^-1 N phi, the modes' rows, LU of I + modes L^-1 N phi), or None

    def update(self, unknowns: np.ndarray, _residual=None, value: float | None = None) -> None:
        problem = self.problem
        if value is not None:
            self.value = value
        operators = problem.operators_at(self.value)
        diffusion = problem.diffusion_at(self.value)
        deviation = problem.expand(unknowns)
        jumps = operators.potential_jumps(deviation)
        sub, diag, sup = operators.drift_diffusion_generator(jumps, diffusion)[:3]
        # The generator is singular on constants (mass); a small shift leaves the mass-free part. Factored once
        # per iterate: the Krylov steps apply it with the same generator.
        self.generator = CyclicTridiagonal(sub, diag - 1e-6 * diffusion, sup)
        self.laplacian_scale = diffusion / problem.width**2
        self.potential = None
        if type(operators) is CircleOperators:
            modes = _potential_modes(operators, problem.even)
            response = self.generator.solve(operators.potential_response(deviation, modes, diffusion, jumps).T)
            weighted = (2.0 / problem.cells) * modes
            self.potential = (response, weighted, lu_factor(np.eye(len(modes)) + weighted @ response))

    def _matvec(self, values: np.ndarray) -> np.ndarray:
        problem = self.problem
        full = problem.expand(np.ravel(values))
        mean = full.mean()
        # D Delta_h by its three-point stencil (the symbol problem.laplacian_symbol; constants in its kernel)
        solution = self.generator.solve(self.laplacian_scale * (_next(full) - 2.0 * full + _previous(full)))
        if self.potential is not None:  # Woodbury: (L + U V^T)^-1 = L^-1 - L^-1 U (I + V^T L^-1 U)^-1 V^T L^-1
            response, weighted, factors = self.potential
            solution = solution - response @ lu_solve(factors, weighted @ solution)
        return problem.reduce(solution - solution.mean() + mean)
