r"""The general path of every discretisation: the model's own reference through the grid's quadrature.

A model declares one reference, :meth:`~meanfield.SelfAttention.velocity_field`: the velocity
:math:`v[\mu](x)` of a measure :math:`\mu = \sum_j w_j\delta_{y_j}` at points ``x``. A grid
discretisation turns its density into such a measure with its own quadrature and evaluates
the field where its fluxes need it:

circle, finite volumes (:class:`ReferenceCircleOperators` in :class:`~solvers.CircleFV`)
    nodes at the cell centres :math:`\theta_j = (j + \tfrac12)h`, weights :math:`h\rho_j`; the
    face velocity is the field averaged over the dual cell :math:`[\theta_j, \theta_{j+1}]` by
    Gauss-Legendre (what the fast paths' potential differences are), with enough nodes for
    round-off at the grid's highest mode;
circle, Fourier (the same class in :class:`~solvers.CircleSpectral`)
    nodes at the flux grid's points :math:`2\pi j/M`, weights :math:`(2\pi/M)\rho(\theta_j)`,
    the field at the same points (the trapezoid rule is exact for the density's modes up to
    :math:`M - N/2` of the kernel);
sphere, harmonics (:class:`ReferenceSphereInteraction` in :class:`~solvers.SphereSpectral`)
    nodes at the Gauss grid's points, weights the grid's area weights times :math:`\rho`, the
    field at the same points (Gauss in colatitude and the trapezoid rule in longitude are exact
    to degree ``2 nlat - 1``).

Any model that provides the protocol (``meanfield.protocols.Model``), one written outside
the library included, so runs on every discretisation with ``interaction="reference"``
(``"auto"`` takes it for every model no fast path serves). The cost is that of the pairs:
:math:`O(GN\cdot N)` kernel values per right-hand side on ``N`` cells (``G`` Gauss nodes per
dual cell), :math:`O(M^2)` on ``M`` Fourier points and :math:`O(P^2)` on the ``P`` points of the
sphere's grid, against :math:`O(N\log N)` for the fast paths (``docs/performance.md``). The
velocity is computed from the density itself, not from its deviation from the uniform state: a
perturbation of relative size :math:`\varepsilon` gets its velocity to a relative
:math:`10^{-16}/\varepsilon`, where the zonal fast paths keep full precision.

The fast paths (FFT convolution, Funk-Hecke, head coefficients) serve the library's own models
(:func:`interaction_path`) and are compared with this path by :func:`check_pde_consistency`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np

from meanfield.models import SelfAttention, ZonalAggregation

from .circle.general import GeneralCircleOperators, dual_cell_quadrature
from .circle.operators import CircleOperators
from .sphere.grid import SphereGrid

#: The velocity computations a solver's ``interaction`` names ("auto" picks one).
INTERACTIONS = ("auto", "zonal", "general", "reference")


def interaction_path(model, interaction: str, solver: str) -> str:
    """The path (``"zonal"``, ``"general"`` or ``"reference"``) a solver's ``interaction`` selects for ``model``.

    The fast paths serve the library's own models, by exact type (a subclass may change the
    reference, so it takes the reference path): ``"zonal"`` a :class:`~meanfield.SelfAttention`
    with ``Q = K = I``, ``V = cI`` and one head or a :class:`~meanfield.ZonalAggregation`,
    ``"general"`` any :class:`~meanfield.SelfAttention`. ``"auto"`` takes the zonal path where
    it serves the model, then the general one, then the reference.

    Raises
    ------
    ValueError
        For an unknown ``interaction``, a fast path that does not serve the model, a causal model
        (naming the layered solver), or a model without a velocity of a measure.
    """
    if interaction not in INTERACTIONS:
        raise ValueError(f"interaction must be one of {', '.join(map(repr, INTERACTIONS))}, got {interaction!r}")
    name = type(model).__name__
    if model.causal:
        raise ValueError(f"{solver} evolves a measure, which has no token order: got {name} "
                         f"(causal attention: use Causal{solver})")
    zonal_served = type(model) in (SelfAttention, ZonalAggregation) and model.is_zonal
    general_served = type(model) is SelfAttention
    if interaction == "zonal" and not zonal_served:
        if general_served:
            raise ValueError("interaction='zonal' needs Q = K = I, V = cI and one head; this model has general "
                             "matrices (use interaction='general' or 'auto')")
        raise ValueError(f"interaction='zonal' serves SelfAttention and ZonalAggregation; got {name} "
                         f"(use interaction='reference' or 'auto')")
    if interaction == "general" and not general_served:
        raise ValueError(f"{solver}'s interaction='general' takes SelfAttention with any query, key and value "
                         f"matrices; got {name} (use interaction='reference' or 'auto')")
    path = interaction if interaction != "auto" else (
        "zonal" if zonal_served else "general" if general_served else "reference")
    if path == "reference":
        _check_has_field(model, solver)
    return path


def circle_operators(model, cells: int, interaction: str, solver: str) -> CircleOperators:
    """The finite-volume operators on ``cells`` cells of the path ``interaction`` selects (:func:`interaction_path`)."""
    path = interaction_path(model, interaction, solver)
    kind = {"zonal": CircleOperators, "general": GeneralCircleOperators, "reference": ReferenceCircleOperators}[path]
    return kind(model, cells)


def _check_has_field(model, solver: str) -> None:
    """Refuse, in one line, a model whose ``velocity_field`` is missing or fails on a tiny measure."""
    points = np.array([[1.0, 0.0], [0.0, 1.0]]) if model.dimension in (None, 2) else np.eye(model.dimension)[:2]
    try:
        model.velocity_field(points, points, np.array([0.5, 0.5]))
    except (AttributeError, NotImplementedError, TypeError) as error:
        raise ValueError(f"{solver} runs a model through its velocity_field(x, nodes, weights), the velocity a "
                         f"measure induces: {type(model).__name__} has none ({error})") from None


def unit_circle(angles: np.ndarray) -> np.ndarray:
    """Points :math:`(\\cos\\theta, \\sin\\theta)`, shape ``angles.shape + (2,)``."""
    return np.stack([np.cos(angles), np.sin(angles)], axis=-1)


def circle_field(model, node_angles: np.ndarray, weights: np.ndarray, at: np.ndarray) -> np.ndarray:
    r"""The angular velocity at the angles ``at`` of the measure :math:`\sum_j w_j\delta_{\theta_j}` on the circle."""
    velocity = model.velocity_field(unit_circle(at.ravel()), unit_circle(node_angles), weights)
    tangent = unit_circle(at.ravel() + 0.5 * np.pi)
    return np.sum(velocity * tangent, axis=-1).reshape(at.shape)


def _energy_of(model, nodes: np.ndarray, weights: np.ndarray) -> float:
    """The model's energy of the measure (NaN for a model without one)."""
    if not model.has_energy:
        return np.nan
    return float(np.asarray(model.energy(nodes[None], masses=weights[None])).reshape(()))


@dataclass(frozen=True, eq=False)
class ReferenceCircleOperators(CircleOperators):
    """:class:`~solvers.circle.operators.CircleOperators` whose velocity is the model's ``velocity_field`` (module docstring)."""

    #: One density at a time: the model's field takes one measure.
    batched: ClassVar[bool] = False

    offsets: np.ndarray = field(init=False, repr=False)
    weights: np.ndarray = field(init=False, repr=False)

    def __post_init__(self) -> None:
        set_ = object.__setattr__
        set_(self, "width", 2 * np.pi / self.cells)
        set_(self, "uniform", 1.0 / (2 * np.pi))
        set_(self, "linear", False)
        # the field includes the model's external field, and its energy the field's potential
        set_(self, "external_velocity", None)
        set_(self, "external_potential", None)
        set_(self, "energy_scaled", bool(self.model.time_rescaled))
        offsets, weights = dual_cell_quadrature(self.cells // 2 + 1, self.width)
        set_(self, "offsets", offsets)
        set_(self, "weights", weights)

    def face_velocity(self, deviation: np.ndarray) -> np.ndarray:
        """The field of the cell-centre measure averaged over each dual cell, at the faces ``j + 1/2``."""
        rho = self.uniform + deviation
        at = self.offsets[:, None] - 0.5 * self.width + self.theta[None, :]
        return self.weights @ circle_field(self.model, self.theta, self.width * rho, at)

    def potential_jumps(self, deviation: np.ndarray) -> np.ndarray:
        """``h`` times the face velocity: what the Scharfetter-Gummel step takes."""
        return self.width * self.face_velocity(deviation)

    def point_velocity(self, spectrum: np.ndarray, first: int) -> np.ndarray:
        r"""The field at the points :math:`\theta_j = jh` of the measure of those points, from :math:`\hat\rho(q)`, ``q >= first``."""
        points = self.width * np.arange(self.cells)
        q = np.arange(spectrum.size) + first
        folded = np.zeros(self.cells, dtype=complex)
        np.add.at(folded, q % self.cells, spectrum)
        rho = np.fft.ifft(folded).real * self.cells / (2 * np.pi)
        return circle_field(self.model, points, self.width * rho, points)

    def energy(self, rho: np.ndarray) -> float:
        """The model's energy of the cell-centre measure (NaN without one)."""
        return _energy_of(self.model, unit_circle(self.theta), self.width * rho)

    def lyapunov(self, rho: np.ndarray) -> float:
        """NaN: no functional is known for a model given only by its field."""
        return np.nan


@dataclass(frozen=True, eq=False)
class ReferenceSphereInteraction:
    """The velocity on :math:`S^2` of the grid's measure, from the model's ``velocity_field`` (module docstring)."""

    model: object
    grid: SphereGrid
    points: np.ndarray = field(init=False, repr=False)
    frame: np.ndarray = field(init=False, repr=False)

    #: No functional is known for a model given only by its field.
    gradient_flow = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "points", self.grid.points().reshape(-1, 3))
        object.__setattr__(self, "frame", self.grid.tangent_frame().reshape(2, 3, -1))

    @property
    def energy_scaled(self) -> bool:
        return bool(self.model.time_rescaled)

    def _weights(self, coefficients: np.ndarray) -> np.ndarray:
        return (self.grid.area_weight * self.grid.synthesise(coefficients)).ravel()

    def velocity(self, coefficients: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Colatitude and longitude components of the field on the grid."""
        velocity = self.model.velocity_field(self.points, self.points, self._weights(coefficients))
        along = np.einsum("pc,kcp->kp", velocity, self.frame).reshape((2,) + self.grid.shape)
        return along[0], along[1]

    def energy(self, coefficients: np.ndarray) -> float:
        """The model's energy of the grid's measure (NaN without one)."""
        return _energy_of(self.model, self.points, self._weights(coefficients))
