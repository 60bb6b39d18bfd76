r"""Stationary states on :math:`S^2` of models without rotation symmetry: every spherical harmonic an unknown.

:class:`~solvers.stationary.sphere.SphereStationary` seeks the states of zonal models among
axisymmetric densities. A model with general query, key and value matrices (or an external
field) has no such symmetry: its stationary states are densities of both angles, and the
uniform density is in general not one of them (for SA the uniform measure's velocity is
:math:`P_x\,c(|K^TQx|)\,VK^TQx`, which vanishes only when :math:`VK^TQ` is a multiple of the
identity). :class:`SphereStationaryGeneral` solves the same equation on the same
discretisation, :math:`T(q) - D\,l(l+1)\,q = 0` with :math:`T` the dealiased transport of
:class:`~solvers.SphereSpectral` (its general path where the matrices need it), with every
coefficient :math:`q_{lm}`, :math:`1 \le l \le l_{max}`, as an unknown: the real parts of the
:math:`m = 0` coefficients, then the real and imaginary parts of those with :math:`m > 0`
(:math:`(l_{max} + 1)^2 - 1` real numbers; the mass fixes :math:`q_{00}`). Newton-Krylov solves
the residual :math:`R(q) = q - T(q)/(D\,l(l+1))`, the identity plus a compact operator, as on
the axisymmetric problem; a state is found from a guess (:func:`solvers.stationary.continuation.stationary_state`,
for instance the end of a run of the dynamics) and followed in the parameter by
:func:`solvers.stationary.continuation.continue_branch`.

Stability: the leading eigenvalues of the linearised right-hand side on the same unknowns
(mass-free, since :math:`q_{00}` is fixed and the transport keeps the mass), by ARPACK
(:func:`scipy.sparse.linalg.eigs`) on central-difference Jacobian-vector products.

A model invariant under a group of rotations has a family of rotated copies of each state and
a singular Jacobian there: zonal models are refused (use ``SphereStationary``).
"""

from __future__ import annotations

import numpy as np
from scipy.sparse.linalg import LinearOperator

from meanfield.docstrings import fill_docstrings

from .problem import arpack_leading, state_sections
from .sphere import JACOBIAN_STEP, TAIL_THRESHOLD, SphereFamily


#: The state's entry in a Parameters section (:func:`~solvers.stationary.problem.state_sections`).
UNKNOWNS = """
unknowns : numpy.ndarray, shape (size,)
    The state's unknowns (:meth:`coefficients`).
"""


@fill_docstrings(**state_sections(UNKNOWNS), tail_threshold=TAIL_THRESHOLD)
class SphereStationaryGeneral(SphereFamily):
    r"""Stationary states on :math:`S^2` of a model without rotation symmetry, and their stability (module docstring).

    Parameters
    ----------
    model : SelfAttention
        A model :class:`~solvers.SphereSpectral` takes that is not zonal (general ``3 x 3``
        query, key or value matrices, or an external field), with ``diffusion > 0`` at every
        parameter value asked for.
    lmax : int
        Highest degree of the discretisation.
    {branch}
    {tail_threshold}

    Raises
    ------
    ValueError
        For a zonal model without external field, a bad parameter, or an ``lmax`` that does not
        resolve the kernel.
    """

    rotations = False

    def __init__(self, model, lmax: int = 15, *, parameter: str = "diffusion", tol: float = 1e-10,
                 tail_threshold: float = 1e-10):
        if model.is_zonal and model.external is None:
            raise ValueError("model: a zonal model is invariant under every rotation; its stationary states are "
                             "sought among axisymmetric densities by SphereStationary")
        super().__init__(model, lmax, parameter, tol, tail_threshold)
        l, m = self.grid.transform.l, self.grid.transform.m
        self._zonal = np.flatnonzero((m == 0) & (l > 0))
        self._other = np.flatnonzero(m > 0)
        self._degree = l.astype(float)
        self.size = self._zonal.size + 2 * self._other.size

    # ------------------------------------------------------------------ the unknowns
    def coefficients(self, unknowns: np.ndarray) -> np.ndarray:
        """The density's coefficients in the grid's layout from the unknowns (mass one).

        Parameters
        ----------
        unknowns : numpy.ndarray, shape (size,)
            Real parts of the ``m = 0`` coefficients of degree ``1 .. lmax``, then the real and
            the imaginary parts of those with ``m > 0``.

        Returns
        -------
        numpy.ndarray
            Complex coefficients in the grid's (shtns) layout.
        """
        zonal, other = self._zonal.size, self._other.size
        q = np.zeros(self.grid.transform.nlm, dtype=complex)
        q[0] = 1.0 / np.sqrt(4 * np.pi)
        q[self._zonal] = unknowns[:zonal]
        q[self._other] = unknowns[zonal:zonal + other] + 1j * unknowns[zonal + other:]
        return q

    def unknowns(self, coefficients: np.ndarray) -> np.ndarray:
        """The unknowns of coefficients in the grid's layout (their degrees ``1 .. lmax``).

        Parameters
        ----------
        coefficients : numpy.ndarray
            Coefficients of a real density in the grid's layout.

        Returns
        -------
        numpy.ndarray, shape (size,)
            The unknowns (:meth:`coefficients`' inverse on densities of mass one).
        """
        other = coefficients[self._other]
        return np.concatenate([coefficients[self._zonal].real, other.real, other.imag])

    def residual(self, unknowns: np.ndarray, value: float) -> np.ndarray:
        """Newton's residual (module docstring): zero exactly at stationary states of mass one.

        {state_parameters}

        Returns
        -------
        numpy.ndarray, shape (size,)
            The right-hand side with the diffusion inverted, as unknowns.
        """
        rhs = self.rhs(self.coefficients(unknowns), value)
        with np.errstate(divide="ignore", invalid="ignore"):
            scaled = -rhs / (self.diffusion_at(value) * self._degree * (self._degree + 1))
        return self.unknowns(scaled)

    # ------------------------------------------------------------------ the state
    def density(self, unknowns: np.ndarray) -> np.ndarray:
        """The density on the grid.

        {unknowns_parameters}

        Returns
        -------
        numpy.ndarray, shape (nlat, nlon)
            :math:`\\rho` at the grid's colatitudes and longitudes.
        """
        return self.grid.synthesise(self.coefficients(unknowns))

    def norm(self, unknowns: np.ndarray) -> float:
        """:math:`\\|\\rho - \\bar\\rho\\|_{L^2}` (orthonormal harmonics, each ``m > 0`` coefficient counted twice).

        {unknowns_parameters}

        Returns
        -------
        float
            The norm.
        """
        zonal = self._zonal.size
        return float(np.sqrt(np.sum(unknowns[:zonal] ** 2) + 2.0 * np.sum(unknowns[zonal:] ** 2)))

    def order_parameters(self, unknowns: np.ndarray, count: int) -> np.ndarray:
        r""":math:`\big(\sum_m |\int\rho\,\overline{Y_{km}}|^2\big)^{1/2}` for ``k = 1..count``: the rotation-invariant size of each degree.

        {unknowns_parameters}
        count : int
            How many degrees.

        {order_returns}
        """
        power = self.grid.parseval_weight * np.abs(self.coefficients(unknowns)) ** 2
        per_degree = np.bincount(self.grid.transform.l, weights=power, minlength=self.lmax + 1)
        return np.sqrt(per_degree[1:count + 1])

    # ------------------------------------------------------------------ stability
    def jacobian(self, unknowns: np.ndarray, value: float) -> LinearOperator:
        r"""The linearised right-hand side on the unknowns, ``(size, size)``.

        {state_parameters}

        {jacobian_returns}
        """
        coefficients = self.coefficients(unknowns)
        zero = self.coefficients(np.zeros(self.size))

        def product(direction):
            shift = JACOBIAN_STEP * (self.coefficients(np.ravel(direction)) - zero)
            change = self.rhs(coefficients + shift, value) - self.rhs(coefficients - shift, value)
            return self.unknowns(change / (2 * JACOBIAN_STEP))
        return LinearOperator((self.size, self.size), matvec=product, dtype=float)

    def leading_eigenvalues(self, unknowns: np.ndarray, value: float, count: int = 4) -> tuple[np.ndarray, np.ndarray]:
        """The ``count`` eigenvalues of largest real part and their eigenvectors (columns, as unknowns).

        {eigen_parameters}

        {eigen_returns}

        {arpack_raises}
        """
        start = np.random.default_rng(0).standard_normal(self.size)
        values, vectors = arpack_leading(self.jacobian(unknowns, value), count, start)
        order = np.argsort(-values.real)
        return values[order], vectors[:, order]
