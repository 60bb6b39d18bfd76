"""The interfaces the rest of the library reads a model, an external field and a particle engine through.

They are structural (:class:`typing.Protocol`): a class provides one by having its members,
without inheriting. Every model of :mod:`meanfield` provides :class:`Model` completely (a
member that does not apply has its neutral value: ``causal = False``, ``external = None``,
``dimension = None``), so that integrators, engines, solvers and records ask a model what it
is instead of probing it with ``hasattr``. The time-stepping protocols (stepper,
discretisation, observer) are in :mod:`meanfield.integration.protocols`.
"""

from __future__ import annotations

from types import MappingProxyType
from typing import Any, Mapping, Protocol

import numpy as np


class ExternalField(Protocol):
    r"""A density-independent velocity field added to attention (``meanfield.external``)."""

    #: The ambient dimension the field is defined in, or ``None`` (any).
    dimension: int | None
    #: Whether :meth:`potential` returns a ``v`` with :math:`P_x\,\mathrm{field} = \frac12\nabla_S v`.
    has_potential: bool

    def field(self, x: np.ndarray) -> np.ndarray:
        """The vector before the tangent projection, shape of ``x``."""

    def potential(self, x: np.ndarray) -> np.ndarray | None:
        """``v(x)``, shape ``x.shape[:-1]``, or ``None`` when the field has no potential."""

    def to_dict(self) -> dict: ...


class Model(Protocol):
    r"""A particle model on :math:`S^{d-1}`: its reference right-hand side and what describes it.

    :meth:`velocity_field` is the model's one reference in plain numpy: the velocity a
    measure :math:`\sum_j w_j\delta_{y_j}` induces (the equation's math is in the class
    docstring). The particle right-hand side :math:`\dot x_i = v_i(x)` (:meth:`velocity`) is
    it at the empirical measure of the tokens, and every PDE discretisation has a general
    path (``interaction="reference"``) that evaluates it through its own quadrature, so a
    model written outside the library runs there without a line in :mod:`solvers`. Every
    engine of :mod:`meanfield.engines` implements :meth:`velocity_unchecked` and
    :meth:`attention_output` and is compared with them by
    :func:`meanfield.engines.check_consistency`; every fast path of a solver is compared with
    the general path by :func:`solvers.check_pde_consistency`. A causal model has no velocity
    of a measure (its mean-field equation is layered: ``solvers.CausalCircleFV``).
    """

    #: Diffusion coefficient ``D >= 0`` (the noise :math:`\sqrt{2D}\,dB` on the sphere).
    diffusion: float
    #: ``True``: tokens on :math:`S^{d-1}`. ``False`` is a :class:`EuclideanModel` (tokens in :math:`\mathbb{R}^d`).
    on_sphere: bool
    #: Number of attention heads.
    heads: int
    #: Ambient dimension fixed by the model's matrices or field, ``None`` for any ``d``.
    dimension: int | None
    #: Whether the velocity depends on :math:`\langle x_i, x_j\rangle` only (spectra defined).
    is_zonal: bool
    #: Whether token ``i`` attends to earlier tokens only (the order of ``x`` matters).
    causal: bool
    #: The field added to attention, or ``None``.
    external: ExternalField | None
    #: Whether the velocity is multiplied by :math:`e^{-\beta B}` (``B`` = :attr:`logit_bound`).
    time_rescaled: bool
    #: An upper bound ``B`` of the logits :math:`\langle Qx, Ky\rangle` over unit vectors.
    logit_bound: float
    #: Whether :meth:`energy` is defined.
    has_energy: bool
    #: Whether the mean-field velocity is linear in the density (a gradient flow of the energy).
    velocity_is_linear: bool

    def velocity_field(self, x: np.ndarray, nodes: np.ndarray, weights: np.ndarray) -> np.ndarray:
        """The velocity at points ``x`` ``(..., m, d)`` of the measure ``sum_j weights_j delta_{nodes_j}``, tangent at ``x / |x|``."""

    def velocity(self, x: np.ndarray) -> np.ndarray:
        """Tangent velocities, shape ``(..., n, d)``, of checked unit vectors ``x`` of that shape."""

    def velocity_unchecked(self, x: np.ndarray) -> np.ndarray:
        """:meth:`velocity` without input checks, extended off the sphere as ``v(x / |x|)``."""

    def attention_output(self, x: np.ndarray) -> np.ndarray:
        """The vector :math:`a_i` whose tangent projection is the velocity, at ``x / |x|``."""

    def energy(self, x: np.ndarray) -> np.ndarray:
        """Interaction energy of the empirical measures, shape ``x.shape[:-2]`` (when :attr:`has_energy`)."""

    def to_dict(self) -> dict:
        """A JSON-serializable description (:func:`meanfield.model_from_dict` rebuilds it)."""


class EuclideanModel(Protocol):
    r"""A particle model in :math:`\mathbb{R}^d` (``on_sphere = False``, :class:`meanfield.PureAttention`).

    Its velocity may depend on time through a rescaling matrix :math:`M(t)` (the logits are
    taken at :math:`M(t)x`); :meth:`velocity_at` is the reference right-hand side every
    scheme of ``meanfield.euclidean_particles`` evaluates.
    """

    on_sphere: bool
    heads: int
    dimension: int | None
    rescaled: bool
    diffusion: float
    causal: bool
    external: None
    has_energy: bool

    def velocity_at(self, x: np.ndarray, rescaling: np.ndarray) -> np.ndarray:
        """The velocity of tokens ``(..., n, d)`` with the logits at ``rescaling @ x``."""

    def rescaling(self, t: float, d: int) -> np.ndarray:
        """:math:`M(t)`, shape ``(d, d)`` (the identity for original variables)."""

    def linear_part(self, d: int) -> np.ndarray:
        """The matrix whose exponential is :math:`M(t)`."""

    def attention_matrix(self, x: np.ndarray, rescaling: np.ndarray | None = None) -> np.ndarray:
        """:math:`P^h`, shape ``(..., heads, n, n)``."""

    def check_interval(self, x0: np.ndarray, start: float, end: float) -> None:
        """Refuse a run that overflows on ``[start, end]``."""

    def to_dict(self) -> dict: ...


class ZonalModel(Model, Protocol):
    r"""A model with ``is_zonal``: its kernel acts by Funk-Hecke eigenvalues on degrees ``0..L`` of :math:`S^{d-1}`."""

    def potential_spectrum(self, max_degree: int, d: int) -> np.ndarray:
        r"""Eigenvalues of the potential :math:`\Phi` whose gradient is the velocity (linear models)."""

    def energy_spectrum(self, max_degree: int, d: int, *, scaled: bool = False) -> np.ndarray:
        r"""Eigenvalues of the energy's kernel (:math:`E = \frac12\int\rho\,(W*\rho)`)."""


#: The ``settings`` of an engine that has none to record.
NO_SETTINGS: Mapping[str, Any] = MappingProxyType({})


class ParticleEngine(Protocol):
    """A particle engine: one implementation of a model's reference right-hand side on batches ``(systems, n, d)``.

    ``name`` and ``settings`` go into the run's records.
    """

    name: str
    settings: Mapping[str, Any]

    def normalize(self, x: Any) -> Any:
        """``x / |x|`` row by row."""

    def velocity_unchecked(self, x: Any) -> Any:
        """The model's :meth:`Model.velocity_unchecked`."""

    def attention_output(self, x: Any) -> Any:
        """The model's :meth:`Model.attention_output`."""

    def step(self, x: Any, h: float, *, project: bool, noise: Any = None, noise_scale: float = 0.0) -> Any:
        """One layer ``normalize(x + h (P_x a or a) + noise_scale P_x noise)`` of unit vectors ``x``."""
