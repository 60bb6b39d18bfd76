r"""External velocity fields added to attention: the perceptron block and user fields.

docs/theory/causal.md (Alvarez-Lopez, Geshkovski, Ruiz-Balet): the perceptron block moves every
token by the same density-independent field

.. math:: u(x) = P_x \sum_j w_j\, \sigma(a_j\cdot x)\, a_j = \tfrac12 \nabla_S v(x), \qquad
          v(x) = \sum_j w_j\, \phi(a_j \cdot x), \quad \phi(s) = \max(s, 0)^2 \ (\phi' = 2\sigma),

``sigma`` the ReLU. With USA and no diffusion the flow is then the gradient ascent of
:math:`E[\rho] + \frac12\int v\,\rho`, which the models and solvers report as the energy.

:class:`QuadraticField` is the linear field :math:`P_x A x` of a symmetric matrix, the gradient
of :math:`v(x) = \langle x, A x\rangle`: the continuous-time limit of a post-LN layer's diagonal
gain (:meth:`meanfield.PureAttention.post_ln_limit`).

A field is an object with ``field(x)`` (the vector :math:`\sum_j w_j\sigma(a_j\cdot x)a_j`
before the tangent projection, shape of ``x``), ``potential(x)`` (``v``, or ``None`` when the
field has none) and ``to_dict()``; :class:`UserField` wraps any callable.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from .docstrings import fill_docstrings


#: The Parameters section of the methods that read points (``{points_parameters}``).
POINTS_PARAMETERS = """
Parameters
----------
x : numpy.ndarray, shape (..., d)
    Points.
"""


@fill_docstrings(points_parameters=POINTS_PARAMETERS)
@dataclass(frozen=True, eq=False)
class Perceptron:
    r"""The perceptron block :math:`u(x) = P_x \sum_j w_j\,\mathrm{ReLU}(a_j\cdot x)\,a_j` (module docstring).

    Parameters
    ----------
    weights : array_like, shape (J,)
        The output weights :math:`w_j` (any sign).
    directions : array_like, shape (J, d)
        The input weights :math:`a_j` (rows; any length).
    """

    weights: np.ndarray
    directions: np.ndarray
    has_potential = True

    def __post_init__(self) -> None:
        weights = np.atleast_1d(np.asarray(self.weights, dtype=float))
        directions = np.atleast_2d(np.asarray(self.directions, dtype=float))
        if weights.ndim != 1 or directions.ndim != 2 or directions.shape[0] != weights.size or directions.shape[1] < 2:
            raise ValueError(f"perceptron weights must have shape (J,) and directions (J, d) with d >= 2, got "
                             f"{np.shape(self.weights)} and {np.shape(self.directions)}")
        if not (np.all(np.isfinite(weights)) and np.all(np.isfinite(directions))):
            raise ValueError("perceptron weights and directions must be finite")
        weights.setflags(write=False)
        directions.setflags(write=False)
        object.__setattr__(self, "weights", weights)
        object.__setattr__(self, "directions", directions)

    @property
    def dimension(self) -> int:
        return self.directions.shape[1]

    def field(self, x: np.ndarray) -> np.ndarray:
        r"""The perceptron's field :math:`\sum_j w_j\,\mathrm{ReLU}(a_j\cdot x)\,a_j` (before :math:`P_x`).

        {points_parameters}

        Returns
        -------
        numpy.ndarray, shape (..., d)
            The field at each point; the model projects it onto the tangent space.
        """
        return (np.maximum(x @ self.directions.T, 0.0) * self.weights) @ self.directions

    def potential(self, x: np.ndarray) -> np.ndarray:
        r"""Its potential :math:`v(x) = \sum_j w_j \max(a_j\cdot x, 0)^2` (the field is :math:`\frac12\nabla v`).

        {points_parameters}

        Returns
        -------
        numpy.ndarray, shape ``x.shape[:-1]``
            :math:`v` at each point.
        """
        return np.maximum(x @ self.directions.T, 0.0) ** 2 @ self.weights

    def to_dict(self) -> dict:
        return {"kind": "perceptron", "weights": self.weights.tolist(), "directions": self.directions.tolist()}


@fill_docstrings(points_parameters=POINTS_PARAMETERS)
@dataclass(frozen=True, eq=False)
class QuadraticField:
    r"""The linear field :math:`u(x) = P_x A x` of a symmetric matrix ``A``: :math:`\frac12\nabla_S v`, :math:`v(x) = \langle x, Ax\rangle`.

    Parameters
    ----------
    matrix : array_like, shape (d, d)
        The symmetric matrix ``A`` (``d >= 2``); a diagonal one pushes the tokens toward the
        axes of its largest entries.

    Raises
    ------
    ValueError
        If ``matrix`` is not a finite symmetric ``(d, d)`` array with ``d >= 2``.
    """

    matrix: np.ndarray
    has_potential = True

    def __post_init__(self) -> None:
        matrix = np.asarray(self.matrix, dtype=float)
        if matrix.ndim != 2 or matrix.shape[0] != matrix.shape[1] or matrix.shape[0] < 2:
            raise ValueError(f"matrix must be a (d, d) array with d >= 2, got shape {matrix.shape}")
        if not np.all(np.isfinite(matrix)):
            raise ValueError("matrix must be finite")
        if not np.allclose(matrix, matrix.T, rtol=1e-12, atol=0.0):
            raise ValueError("matrix must be symmetric (the field of a non-symmetric A is no gradient): got "
                             f"|A - A^T| up to {np.abs(matrix - matrix.T).max():.3g}")
        matrix.setflags(write=False)
        object.__setattr__(self, "matrix", matrix)

    @property
    def dimension(self) -> int:
        return self.matrix.shape[0]

    def field(self, x: np.ndarray) -> np.ndarray:
        r"""The field :math:`A x` (before :math:`P_x`).

        {points_parameters}

        Returns
        -------
        numpy.ndarray, shape (..., d)
            :math:`Ax` at each point; the model projects it onto the tangent space.
        """
        return x @ self.matrix

    def potential(self, x: np.ndarray) -> np.ndarray:
        r"""Its potential :math:`v(x) = \langle x, Ax\rangle` (the field is :math:`\frac12\nabla v`).

        {points_parameters}

        Returns
        -------
        numpy.ndarray, shape ``x.shape[:-1]``
            :math:`v` at each point.
        """
        return np.einsum("...i,...i->...", x @ self.matrix, x)

    def to_dict(self) -> dict:
        return {"kind": "quadratic", "matrix": self.matrix.tolist()}


@dataclass(frozen=True, eq=False)
class UserField:
    r"""Any external field given by callables (projected onto the tangent space by the model).

    Parameters
    ----------
    function : callable
        ``function(x)`` maps points ``(..., d)`` to vectors ``(..., d)``.
    potential_function : callable, optional
        A ``v`` with :math:`P_x\,\mathrm{function} = \frac12\nabla_S v`, mapping points
        ``(..., d)`` to ``(...)``; used for the energy :math:`E + \frac12\int v\rho`. Without it
        the model has no energy.
    name : str
        Labels the records (callables are not serialized, so such a model cannot be rebuilt
        from its record).

    Raises
    ------
    TypeError
        If ``function`` or ``potential_function`` is not callable.
    """

    function: Callable[[np.ndarray], np.ndarray]
    potential_function: Callable[[np.ndarray], np.ndarray] | None = None
    name: str = "user field"
    dimension = None

    def __post_init__(self) -> None:
        for name, value in (("function", self.function), ("potential_function", self.potential_function)):
            if value is not None and not callable(value):
                raise TypeError(f"{name} must be a callable of points (..., d), got {value!r}")

    @property
    def has_potential(self) -> bool:
        return self.potential_function is not None

    def field(self, x: np.ndarray) -> np.ndarray:
        values = np.asarray(self.function(x), dtype=float)
        if values.shape != x.shape:
            raise ValueError(f"the external field returned shape {values.shape} for points of shape {x.shape}")
        return values

    def potential(self, x: np.ndarray) -> np.ndarray | None:
        return None if self.potential_function is None else np.asarray(self.potential_function(x), dtype=float)

    def to_dict(self) -> dict:
        return {"kind": "user", "name": self.name}


#: The fields a description (``to_dict``) rebuilds, by ``kind``.
DESCRIBED_FIELDS = {"perceptron": Perceptron, "quadratic": QuadraticField}


def as_external(value) -> Perceptron | QuadraticField | UserField | None:
    """``None``, a field object (``field``, ``potential``, ``to_dict``), a callable, or a field's description."""
    if value is None or isinstance(value, (Perceptron, QuadraticField, UserField)):
        return value
    if isinstance(value, dict):
        fields = {k: v for k, v in value.items() if k != "kind"}
        kind = value.get("kind", "perceptron")
        if kind not in DESCRIBED_FIELDS:
            raise ValueError(f"only the descriptions of {', '.join(DESCRIBED_FIELDS)} fields can be rebuilt, got "
                             f"{value!r}")
        return DESCRIBED_FIELDS[kind](**fields)
    if callable(value):
        return UserField(value)
    raise TypeError(f"external must be None, a Perceptron, a QuadraticField, a UserField or a callable of points, "
                    f"got {value!r}")


def potential_energy(external, x: np.ndarray, masses: np.ndarray | None = None) -> np.ndarray | None:
    r""":math:`\frac12\int v\,d\mu` of the empirical measures of ``x`` (shape ``x.shape[:-2]``), or ``None``.

    With ``masses`` (shape ``x.shape[:-1]``), of :math:`\mu = \sum_j m_j\delta_{x_j}`.
    """
    if external is None:
        return 0.0
    v = external.potential(x)
    if v is None:
        return None
    return 0.5 * (v.mean(axis=-1) if masses is None else np.sum(v * np.reshape(masses, v.shape), axis=-1))
