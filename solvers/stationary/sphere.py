r"""The stationary problem on :math:`S^2`: :class:`~solvers.SphereSpectral`'s discretisation, axisymmetric states.

With diffusion :math:`D > 0` the spherical-harmonic solver integrates
:math:`\dot q = T(q) - D\,l(l+1)\,q`, :math:`T` its dealiased transport
:math:`-\mathrm{div}_S(\rho\, v[\rho])` (:meth:`~solvers.SphereSpectral.transport`). A
stationary state is a zero of that right-hand side with mass one.

Symmetry. A zonal model is invariant under every rotation, so each non-uniform state comes
with a two-dimensional family of rotated copies (a rotation about its axis moves nothing if
the state is axisymmetric, which is what branches bifurcating from the uniform state in a
degree-``l`` zonal harmonic are). The states are sought among axisymmetric densities,
:math:`\rho = \sum_l q_{l0} Y_{l0}`: the unknowns are the ``lmax`` coefficients :math:`q_{l0}`,
:math:`l \ge 1` (the mass fixes :math:`q_{00} = 1/\sqrt{4\pi}`), where rotations act no more
and Newton's Jacobian is regular. Newton-Krylov solves the residual
:math:`R(q) = -(D\Delta)^{-1}\,\mathrm{rhs}(q) = q - T(q)/(D\,l(l+1))` on those coefficients
(the inverse Laplacian makes it a density; its Jacobian is the identity plus a compact
operator, so GMRES needs no further preconditioner).

Stability is that of the full problem: about an axisymmetric state the linearisation
commutes with rotations about the axis, so it splits into one block per azimuthal order
:math:`m`, acting on the coefficients :math:`q_{lm}`, :math:`l \ge \max(m, 1)` (the
:math:`\cos m\varphi` and :math:`\sin m\varphi` perturbations share the block, so each
eigenvalue of an ``m > 0`` block counts twice). All blocks are built together column by
column, each probe perturbing one coefficient per order at once (the orders do not mix to
first order, and central differences cancel the second-order products), so a state's whole
spectrum costs ``2 lmax`` right-hand sides and dense eigenvalue problems of size at most
``lmax``. The rotation about an axis through the equator is the zero eigenvalue of the
``m = 1`` block whose eigenvector is :math:`\cos\varphi\,\partial_\theta\rho`; it is
recognised and left out.
"""

from __future__ import annotations

import numpy as np
from scipy.sparse.linalg import LinearOperator

from meanfield.checks import check_int, check_real
from meanfield.docstrings import fill_docstrings

from ..sphere.spectral import SphereSpectral
from .problem import ParameterFamily, state_sections

#: An eigenvector this aligned with the rotation's generator is the rotation's (cosine of the angle).
ROTATION_ALIGNMENT = 0.9

#: Central-difference step of the Jacobian, in coefficient units (the uniform state's is 0.28).
JACOBIAN_STEP = 1e-6


#: The resolution threshold's entry (``{tail_threshold}``).
TAIL_THRESHOLD = """
tail_threshold : float
    A state whose top 10 % of degrees hold more than this fraction of the deviation's
    spectral energy is under-resolved (as for :class:`~solvers.SphereSpectral`).
"""

#: The state's entry in a Parameters section (:func:`~solvers.stationary.problem.state_sections`).
UNKNOWNS = """
unknowns : numpy.ndarray, shape (lmax,)
    The state's unknowns: the coefficients of the orthonormal zonal harmonics of degree
    ``1 .. lmax`` (:meth:`coefficients` gives all of them).
"""


@fill_docstrings(**state_sections(UNKNOWNS), tail_threshold=TAIL_THRESHOLD)
class SphereFamily(ParameterFamily):
    """What the stationary problems on :math:`S^2` share: :class:`~solvers.SphereSpectral`'s
    discretisation along the parameter, its right-hand side and the resolution of a state.

    A subclass defines its unknowns: ``size`` and ``coefficients(unknowns)``, the density's
    coefficients in the grid's layout.

    Parameters
    ----------
    model : SelfAttention or ZonalAggregation
        The model at the family's starting value.
    lmax : int
        Highest degree of the discretisation.
    {branch}
    {tail_threshold}
    """

    name = "SphereSpectral"

    def __init__(self, model, lmax: int, parameter: str, tol: float, tail_threshold: float):
        super().__init__(model, parameter, tol)
        self.lmax = check_int(lmax, "lmax", minimum=2)
        self.tail_threshold = check_real(tail_threshold, "tail_threshold", minimum=0.0, strictly=True)
        self._solver: tuple[float | None, SphereSpectral | None] = (None, None)
        self.grid = self.solver_at(self.value).grid
        self.uniform = 1.0 / (4 * np.pi)
        self.residual_tolerance = self.tol * self.uniform

    def solver_at(self, value: float) -> SphereSpectral:
        """The spectral solver of the model at this parameter value (its transport; the last one kept).

        {value_parameters}

        Returns
        -------
        SphereSpectral
            The solver at ``lmax``.
        """
        cached_value, solver = self._solver
        if solver is not None and (cached_value == value or self.parameter == "diffusion"):
            return solver  # the transport does not depend on D
        solver = SphereSpectral(self.model_at(value), lmax=self.lmax, tail_threshold=self.tail_threshold)
        self._solver = (value, solver)
        return solver

    def rhs(self, coefficients: np.ndarray, value: float) -> np.ndarray:
        r"""The solver's right-hand side, transport and diffusion, at this parameter value (any coefficients).

        Parameters
        ----------
        coefficients : numpy.ndarray
            Coefficients of a density in the grid's layout.
        {value}

        Returns
        -------
        numpy.ndarray
            :math:`\partial_t\rho` in the same layout.
        """
        transport = self.solver_at(value).transport(coefficients)
        return transport - self.diffusion_at(value) * self.grid.laplacian_eigenvalue * coefficients

    def preconditioner(self, value: float) -> "_Unpreconditioned":
        """The identity: the residual is already the identity plus a compact operator.

        {value_parameters}

        Returns
        -------
        scipy.sparse.linalg.LinearOperator
            The identity on the unknowns.
        """
        return _Unpreconditioned(self.size)

    def resolved(self, unknowns: np.ndarray) -> tuple[bool, str]:
        """Whether the state is a positive density its degrees resolve, and why not.

        Parameters
        ----------
        unknowns : numpy.ndarray, shape (size,)
            The state's unknowns (:meth:`coefficients` gives all the coefficients).

        Returns
        -------
        tuple of (bool, str)
            The verdict and, when it is ``False``, the reason.
        """
        coefficients = self.coefficients(unknowns)
        rho = self.grid.synthesise(coefficients)
        if rho.min() < -max(1e-8 * rho.max(), 10 * self.residual_tolerance):
            return False, f"the density is negative (min {rho.min():.3g})"
        tail = self.solver_at(self.value).spectral_tail(coefficients)
        if tail >= self.tail_threshold:
            return False, (f"the top 10% of degrees hold {tail:.2g} of the spectral energy "
                           f"(> {self.tail_threshold:g}): raise lmax (now {self.lmax})")
        return True, ""


#: The entry of the argument that names a mode (:func:`~solvers.stationary.problem.state_sections`).
MODE = """
degree : int
    :math:`l`.
"""


@fill_docstrings(**state_sections(UNKNOWNS, MODE), tail_threshold=TAIL_THRESHOLD)
class SphereStationary(SphereFamily):
    r"""Axisymmetric stationary states of the mean-field equation on :math:`S^2` with diffusion, and their stability.

    Parameters
    ----------
    model : SelfAttention or ZonalAggregation
        A zonal model (no external field) with ``diffusion > 0`` at every parameter value asked for.
    lmax : int
        Highest degree of :class:`~solvers.SphereSpectral`'s discretisation.
    {branch}
    {tail_threshold}

    Raises
    ------
    ValueError
        For a model that is not zonal or has an external field, matrices that are not 3 x 3,
        a bad parameter, or an ``lmax`` that does not resolve the kernel.
    """

    rotations = True

    def __init__(self, model, lmax: int = 31, *, parameter: str = "diffusion", tol: float = 1e-10,
                 tail_threshold: float = 1e-10):
        if not model.is_zonal or model.external is not None:
            raise ValueError("stationary states on S^2 are sought among axisymmetric densities, which needs a zonal "
                             f"model without external field, got {model!r}; SphereStationaryGeneral "
                             "(solvers.stationary.sphere_general) takes the others")
        super().__init__(model, lmax, parameter, tol, tail_threshold)
        transform = self.grid.transform
        self.size = self.lmax
        self.degree = np.arange(1, self.lmax + 1)
        #: :math:`Y_{l0} = \sqrt{(2l+1)/4\pi}\,P_l(\cos\theta)`, l = 1..lmax.
        self.legendre_scale = np.sqrt((2 * self.degree + 1) / (4 * np.pi))
        self.colatitude = self.grid.colatitude
        #: Index of coefficient (l, m) in the grid's layout, per order m: the degrees max(m, 1)..lmax.
        self.order_indices = [np.array([transform.idx(int(l), m) for l in range(max(m, 1), self.lmax + 1)])
                              for m in range(self.lmax + 1)]

    # ------------------------------------------------------------------ the discretisation
    def coefficients(self, unknowns: np.ndarray) -> np.ndarray:
        """The density's coefficients in the grid's layout from the unknowns (mass one).

        {unknowns_parameters}

        Returns
        -------
        numpy.ndarray
            Complex coefficients in the grid's (shtns) layout.
        """
        q = np.zeros(self.grid.transform.nlm, dtype=complex)
        q[0] = 1.0 / np.sqrt(4 * np.pi)
        q[self.order_indices[0]] = unknowns
        return q

    def residual(self, unknowns: np.ndarray, value: float) -> np.ndarray:
        """Newton's residual (module docstring): zero exactly at axisymmetric stationary states of mass one.

        {state_parameters}

        Returns
        -------
        numpy.ndarray, shape (lmax,)
            The zonal right-hand side with the diffusion inverted.
        """
        rhs = self.rhs(self.coefficients(unknowns), value)[self.order_indices[0]].real
        return -rhs / (self.diffusion_at(value) * self.degree * (self.degree + 1))

    # ------------------------------------------------------------------ the state
    def density(self, unknowns: np.ndarray) -> np.ndarray:
        r"""The density at the grid's colatitudes (it does not depend on the longitude).

        {unknowns_parameters}

        Returns
        -------
        numpy.ndarray, shape (nlat,)
            :math:`\rho` per colatitude.
        """
        return self.grid.synthesise(self.coefficients(unknowns))[:, 0]

    @property
    def coordinate(self) -> tuple[str, np.ndarray]:
        """The name and values of the coordinate :meth:`density` is given on."""
        return "colatitude", self.colatitude

    def mode(self, degree: int) -> np.ndarray:
        r"""The unknowns of :math:`P_l(\cos\theta)`, an eigenvector of the linearisation at the uniform state.

        {mode_sections}
        """
        direction = np.zeros(self.size)
        direction[degree - 1] = 1.0 / self.legendre_scale[degree - 1]
        return direction

    def modes(self) -> range:
        """Degrees whose zonal harmonics the grid carries, below the highest.

        Returns
        -------
        range
            ``1 .. lmax - 1``.
        """
        return range(1, self.lmax)

    def amplitude(self, unknowns: np.ndarray, degree: int) -> float:
        r"""The coefficient of :math:`P_l(\cos\theta)` in the density.

        {unknowns_parameters}
        degree : int
            :math:`l`.

        Returns
        -------
        float
            The coefficient.
        """
        return float(unknowns[degree - 1] * self.legendre_scale[degree - 1])

    def norm(self, unknowns: np.ndarray) -> float:
        r""":math:`\|\rho - \bar\rho\|_{L^2}` (orthonormal harmonics: the unknowns' Euclidean norm).

        {unknowns_parameters}

        Returns
        -------
        float
            The norm.
        """
        return float(np.linalg.norm(unknowns))

    def order_parameters(self, unknowns: np.ndarray, count: int) -> np.ndarray:
        r""":math:`|\int\rho\,P_k(\cos\theta)|` for ``k = 1..count``: :math:`\sqrt{4\pi/(2k+1)}\,|q_{k0}|`.

        {unknowns_parameters}
        count : int
            How many degrees.

        {order_returns}
        """
        return np.abs(unknowns[:count]) / self.legendre_scale[:count]

    # ------------------------------------------------------------------ stability
    def _jacobian_product(self, coefficients: np.ndarray, direction: np.ndarray, value: float) -> np.ndarray:
        """The linearised right-hand side at ``coefficients`` applied to ``direction`` (central differences)."""
        shift = JACOBIAN_STEP * direction
        return (self.rhs(coefficients + shift, value) - self.rhs(coefficients - shift, value)) / (2 * JACOBIAN_STEP)

    def uniform_eigenvalue(self, degree: int, value: float) -> float:
        """Eigenvalue of the linearisation at the uniform state on the zonal harmonic of degree ``degree``.

        Parameters
        ----------
        degree : int
            :math:`l`.
        {value}

        Returns
        -------
        float
            The growth rate.
        """
        direction = np.zeros(self.grid.transform.nlm, dtype=complex)
        index = self.order_indices[0][degree - 1]
        direction[index] = 1.0
        image = self._jacobian_product(self.coefficients(np.zeros(self.size)), direction, value)
        return float(image[index].real)

    def blocks(self, unknowns: np.ndarray, value: float) -> list[np.ndarray]:
        """The linearisation's block of each azimuthal order ``m = 0..lmax`` (module docstring), real matrices.

        {state_parameters}

        Returns
        -------
        list of numpy.ndarray
            Block ``m`` acts on the degrees ``max(m, 1) .. lmax`` of order ``m``.
        """
        coefficients = self.coefficients(unknowns)
        sizes = [indices.size for indices in self.order_indices]
        blocks = [np.empty((size, size)) for size in sizes]
        for column in range(self.lmax):
            probe = np.zeros_like(coefficients)
            orders = [m for m, size in enumerate(sizes) if column < size]
            for m in orders:
                probe[self.order_indices[m][column]] = 1.0
            image = self._jacobian_product(coefficients, probe, value)
            for m in orders:
                blocks[m][:, column] = image[self.order_indices[m]].real
        return blocks

    def _rotation_generator(self, unknowns: np.ndarray) -> np.ndarray:
        r"""The ``m = 1`` coefficients of :math:`\cos\varphi\,\partial_\theta\rho`: the state turned about an equatorial axis."""
        along_t, _ = self.grid.gradient(self.coefficients(unknowns))
        turned = self.grid.analyse(np.cos(self.grid.longitude)[None, :] * along_t)
        return turned[self.order_indices[1]].real

    def leading_eigenvalues(self, unknowns: np.ndarray, value: float, count: int = 4) -> tuple[np.ndarray, np.ndarray]:
        r"""The ``count`` eigenvalues of largest real part, with multiplicity, and their eigenvectors.

        Every order's block is solved densely; an ``m > 0`` eigenvalue is listed twice (its
        :math:`\cos m\varphi` and :math:`\sin m\varphi` eigenvectors), the rotations' zero
        eigenvalue is left out (module docstring). The eigenvectors (columns) are coefficient
        arrays in the grid's layout, the :math:`\cos m\varphi` member of each pair.

        {eigen_parameters}

        {eigen_returns}
        """
        generator = self._rotation_generator(unknowns)
        rotating = np.linalg.norm(generator) > 1e-8 * self.uniform
        values, vectors = [], []
        for m, block in enumerate(self.blocks(unknowns, value)):
            eigenvalues, eigenvectors = np.linalg.eig(block)
            keep = np.ones(eigenvalues.size, bool)
            if m == 1 and rotating:
                alignment = np.abs(generator @ eigenvectors) / (
                    np.linalg.norm(generator) * np.linalg.norm(eigenvectors, axis=0))
                if alignment.max() > ROTATION_ALIGNMENT:
                    keep[np.argmax(alignment)] = False
            for eigenvalue, eigenvector in zip(eigenvalues[keep], eigenvectors[:, keep].T):
                full = np.zeros(self.grid.transform.nlm, dtype=complex)
                full[self.order_indices[m]] = eigenvector
                for _ in range(1 if m == 0 else 2):
                    values.append(eigenvalue)
                    vectors.append(full)
        order = np.argsort(-np.real(values), kind="stable")[:count]
        return np.array(values)[order], np.array(vectors).T[:, order]


class _Unpreconditioned(LinearOperator):
    """The identity, with the ``update`` hook scipy's Newton-Krylov calls."""

    def __init__(self, size: int):
        super().__init__(float, (size, size))

    def update(self, unknowns: np.ndarray, _residual=None, value: float | None = None) -> None:
        return None

    def _matvec(self, values: np.ndarray) -> np.ndarray:
        return np.ravel(values)
