"""What every stationary problem shares: the family of models along one parameter, and the checks of its values.

:class:`~solvers.stationary.circle.CircleStationary`,
:class:`~solvers.stationary.sphere.SphereStationary` and
:class:`~solvers.stationary.sphere_general.SphereStationaryGeneral` are stationary problems of one model
whose ``diffusion`` or ``beta`` a branch varies (:mod:`solvers.stationary.continuation`).
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
from scipy.sparse.linalg import ArpackNoConvergence, LinearOperator, eigs

from meanfield.checks import check_real
from meanfield.docstrings import fill_docstrings, parameters
from meanfield.models import SelfAttention

#: The parameters a branch may follow.
PARAMETERS = ("diffusion", "beta")

#: The entries of the parameter a branch follows and of Newton's tolerance (``{branch}``).
BRANCH = """
parameter : {"diffusion", "beta"}
    The parameter a branch follows (``beta``: :class:`~meanfield.SelfAttention` only).
tol : float
    Newton's tolerance on the residual, relative to the uniform density.
"""

#: The parameter value's entry in a Parameters section (``{value}``).
VALUE = """
value : float
    The parameter's value.
"""

#: How many leading eigenvalues are asked for (an entry).
COUNT = """
count : int
    How many eigenvalues.
"""

#: The Raises section of the methods that call ARPACK (:func:`arpack_leading`).
ARPACK_RAISES = """
Raises
------
RuntimeError
    When ARPACK does not converge.
"""

#: The Returns section of ``order_parameters``.
ORDER_RETURNS = """
Returns
-------
numpy.ndarray, shape (count,)
    The order parameters.
"""


#: The Returns section of ``leading_eigenvalues`` (its summary says in which form the eigenvectors are).
EIGEN_RETURNS = """
Returns
-------
values : numpy.ndarray, shape (count,)
    The eigenvalues, largest real part first.
vectors : numpy.ndarray
    Their eigenvectors, one per column.
"""

#: The Returns section of ``jacobian`` (its summary says on which space it acts).
JACOBIAN_RETURNS = r"""
Returns
-------
scipy.sparse.linalg.LinearOperator
    Its product with a perturbation, by central differences (error :math:`O(\epsilon^2)` in
    the difference step :math:`\epsilon`).
"""

#: The Returns section of ``mode``.
MODE_RETURNS = """
Returns
-------
numpy.ndarray, shape (size,)
    The mode, as the state's unknowns.
"""


def state_sections(unknowns: str, mode: str | None = None) -> dict[str, str]:
    """The docstring sections (:func:`~meanfield.docstrings.fill_docstrings`) of a stationary
    problem whose state's entry is ``unknowns``: ``{state_parameters}`` (the state and the
    parameter's value), ``{unknowns_parameters}``, ``{value_parameters}``, ``{eigen_parameters}``
    (the state, the value and how many eigenvalues), ``{eigen_returns}``, ``{jacobian_returns}``,
    ``{arpack_raises}``, ``{order_returns}``, the entries ``{value}`` and ``{branch}``, and, where the problem's
    modes are indexed by the argument whose entry is ``mode``, ``{mode_sections}`` (the
    Parameters and Returns of ``mode``)."""
    sections = {"state_parameters": parameters(unknowns, VALUE), "unknowns_parameters": parameters(unknowns),
                "value_parameters": parameters(VALUE), "eigen_parameters": parameters(unknowns, VALUE, COUNT),
                "eigen_returns": EIGEN_RETURNS, "jacobian_returns": JACOBIAN_RETURNS, "arpack_raises": ARPACK_RAISES,
                "order_returns": ORDER_RETURNS, "value": VALUE, "branch": BRANCH}
    if mode is not None:
        sections["mode_sections"] = parameters(mode) + "\n" + MODE_RETURNS
    return sections


@fill_docstrings(value_parameters=parameters(VALUE), branch=BRANCH)
class ParameterFamily:
    """A model and the parameter a branch varies, with the values the stationary problem admits.

    Parameters
    ----------
    model : SelfAttention or ZonalAggregation
        The model at the family's starting value.
    {branch}
    """

    def __init__(self, model, parameter: str, tol: float):
        if parameter not in PARAMETERS:
            raise ValueError(f"parameter must be one of {PARAMETERS}, got {parameter!r}")
        if model.causal:
            raise ValueError(f"stationary states are states of a measure, which has no token order: "
                             f"{type(model).__name__} is causal (its layered equation runs in time: "
                             f"CausalCircleFV, CausalSphereSpectral)")
        if parameter == "beta" and not isinstance(model, SelfAttention):
            raise ValueError(f"parameter 'beta' needs a SelfAttention model, got {type(model).__name__}")
        self.model, self.parameter = model, parameter
        self.tol = check_real(tol, "tol", minimum=0.0, strictly=True)

    @property
    def value(self) -> float:
        """The parameter's value in the model given."""
        return float(getattr(self.model, self.parameter))

    def check_value(self, value: float) -> None:
        """Refuse a parameter value without stationary densities (no diffusion) or outside the model's range.

        {value_parameters}

        Raises
        ------
        ValueError
            Naming the parameter, when the diffusion there is not positive or ``beta < 0``.
        """
        diffusion = self.diffusion_at(value)
        if not diffusion > 0:
            raise ValueError(f"{self.parameter}={value:.6g} leaves diffusion={diffusion!r}: without diffusion "
                             "the stationary states are sums of Dirac masses, not densities")
        if self.parameter == "beta" and value < 0:
            raise ValueError(f"beta must be >= 0, got {value:.6g}")

    def model_at(self, value: float):
        """The model with the parameter set to ``value`` (checked by :meth:`check_value`).

        {value_parameters}

        Returns
        -------
        SelfAttention or ZonalAggregation
            A copy of the family's model.
        """
        self.check_value(value)
        return replace(self.model, **{self.parameter: float(value)})

    def diffusion_at(self, value: float) -> float:
        """The diffusion coefficient at this parameter value.

        {value_parameters}

        Returns
        -------
        float
            ``value`` when the family varies the diffusion, the model's otherwise.
        """
        return float(value) if self.parameter == "diffusion" else float(self.model.diffusion)


def dense_leading(matrix: np.ndarray, count: int) -> tuple[np.ndarray, np.ndarray]:
    """The ``count`` eigenvalues of largest real part of a dense ``matrix`` and their eigenvectors, by LAPACK."""
    values, vectors = np.linalg.eig(matrix)
    order = np.argsort(-values.real)[:count]
    return values[order], vectors[:, order]


def arpack_leading(operator: LinearOperator, count: int, start: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The ``count`` eigenvalues of largest real part of ``operator`` and their eigenvectors, by ARPACK.

    ``start`` fixes ARPACK's start vector (its default is random, and the same call must give
    the same vectors). Raises :class:`RuntimeError` when ARPACK does not converge.
    """
    size = operator.shape[0]
    try:
        return eigs(operator, k=count, which="LR", ncv=min(size - 1, max(40, 3 * count)), tol=1e-10,
                    maxiter=50 * size, v0=start)
    except ArpackNoConvergence as failure:
        raise RuntimeError(f"the leading eigenvalues did not converge ({len(failure.eigenvalues)} of "
                           f"{count}): ARPACK stopped") from None
