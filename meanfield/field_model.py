r"""A model written as its velocity field alone: the base a user's own model may start from.

A model runs everywhere through one method, ``velocity_field(x, nodes, weights)``: the
velocity at points ``x`` of the measure :math:`\sum_j w_j\delta_{y_j}`
(``meanfield.protocols.Model``). :class:`FieldModel` derives the particle members from it and
gives the protocol's other members their neutral values, so that a subclass that defines
``velocity_field`` (and overrides what does not hold: ``diffusion``, ``dimension``, an energy)
runs as particles (:func:`meanfield.simulate_particles`) and on every PDE discretisation
(their ``interaction="reference"`` path, which ``"auto"`` takes). Inheriting is a
convenience: a class that has the protocol's members runs the same.
"""

from __future__ import annotations

import numpy as np

from .checks import check_points
from .docstrings import fill_docstrings

#: The Parameters section of the particle members (``{tokens}``).
TOKENS = """
Parameters
----------
x : numpy.ndarray, shape (..., n, d)
    Nonzero points, the tokens (used through ``x / |x|`` by the field).
"""

#: The Returns section of a ``velocity_field`` (``{field_returns}``): every model's reference returns this.
FIELD_RETURNS = """
Returns
-------
numpy.ndarray, shape (..., m, d)
    The velocities, tangent at ``x / |x|``.
"""

#: The Returns section of the particle members (``{velocities}``).
VELOCITIES = """
Returns
-------
numpy.ndarray, shape (..., n, d)
    The velocities, tangent at the tokens.
"""


@fill_docstrings(tokens=TOKENS, velocities=VELOCITIES, field_returns=FIELD_RETURNS)
class FieldModel:
    r"""Base of a model given by its velocity field :math:`v[\mu](x)` (module docstring).

    The particle velocity is the field of the tokens' empirical measure,
    :math:`\dot x_i = v[\frac1n\sum_j\delta_{x_j}](x_i)`; the layer step
    :math:`x \leftarrow (x + h a)/|x + h a|` takes the tangent velocity itself as :math:`a`.
    """

    #: The protocol's neutral values (a subclass overrides what differs).
    diffusion = 0.0
    on_sphere = True
    heads = 1
    dimension: int | None = None
    is_zonal = False
    causal = False
    external = None
    time_rescaled = False
    logit_bound = 1.0
    has_energy = False
    velocity_is_linear = False

    def velocity_field(self, x: np.ndarray, nodes: np.ndarray, weights: np.ndarray) -> np.ndarray:
        r"""The velocity at points ``x`` of :math:`\sum_j w_j\delta_{y_j}`: the subclass's to define.

        Parameters
        ----------
        x : numpy.ndarray, shape (..., m, d)
            Points where the field is wanted.
        nodes : numpy.ndarray, shape (..., k, d)
            The atoms :math:`y_j` of the measure.
        weights : numpy.ndarray, shape (..., k)
            Their weights :math:`w_j` (a quadrature of a density may hold small negative ones).

        {field_returns}

        Raises
        ------
        NotImplementedError
            Always, here.
        """
        raise NotImplementedError(f"{type(self).__name__} must define velocity_field(x, nodes, weights)")

    def velocity_unchecked(self, x: np.ndarray) -> np.ndarray:
        """The field of the empirical measure of ``x`` at its own atoms (``1/n`` each).

        {tokens}

        {velocities}
        """
        x = np.asarray(x, dtype=float)
        return self.velocity_field(x, x, np.full(x.shape[:-1], 1.0 / x.shape[-2]))

    def velocity(self, x: np.ndarray) -> np.ndarray:
        """:meth:`velocity_unchecked` of checked unit vectors.

        {tokens}

        {velocities}
        """
        return self.velocity_unchecked(check_points(x, "x"))

    def attention_output(self, x: np.ndarray) -> np.ndarray:
        """The tangent velocity: a model given by its field has no normal part to add.

        {tokens}

        {velocities}
        """
        return self.velocity_unchecked(x)

    def weighted_velocity(self, x: np.ndarray, masses: np.ndarray) -> np.ndarray:
        """The field of the weighted measure of the atoms ``x`` at the atoms themselves.

        {tokens}
        masses : numpy.ndarray, shape (..., n)
            The atoms' masses.

        {velocities}
        """
        return self.velocity_field(x, x, masses)

    def energy(self, x: np.ndarray, *, masses: np.ndarray | None = None) -> np.ndarray:
        """Refused unless a subclass defines it (then it sets ``has_energy = True``).

        {tokens}
        masses : numpy.ndarray, shape (..., n), optional
            The atoms' masses (``1/n`` each by default).

        Returns
        -------
        numpy.ndarray, shape (...,)
            The energy per system, in a subclass that has one.

        Raises
        ------
        ValueError
            Always, here.
        """
        raise ValueError(f"{type(self).__name__} defines no energy (has_energy is False)")

    def to_dict(self) -> dict:
        """The class's name and diffusion (a field given by code cannot be serialized).

        Returns
        -------
        dict
            ``{{"model": name, "diffusion": D}}``.
        """
        return {"model": type(self).__name__, "diffusion": float(self.diffusion)}
