r"""Families of densities on the circle moved together: one density per label, velocities of mixed densities.

The layered equation of causal attention (a label per position, :mod:`solvers.causal`), the
family of natural frequencies (a label per frequency, :mod:`solvers.circle.frequencies`) and the
graphon's (a label per vertex, :mod:`solvers.circle.graphon`) are each a
:class:`~solvers.layering.Layering`: layer ``l`` moves with :math:`\sum_g v_g[(W_g\rho)_l] + \omega_l`,
each group ``g`` of the interaction at its mixed density, plus a constant angular drift of its
own. Their finite volumes are one solver, :class:`LayeredCircleFV`, given the family.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from meanfield.checks import check_density

from ..grid_solver import Diagnosis
from ..layering import Layering
from ..reference import circle_operators
from ..resolution import sharpest_cluster_width
from .finite_volumes import CircleFV
from .operators import GAUSS_4


class LayeredCircleOperators:
    """The circle's operators of a family's groups, applied to ``(layers, cells)`` arrays with mixed velocities.

    A layer moves with the sum over the family's groups of the group's velocity at its mixed
    density ``W_g rho`` (a ``W_g`` of one row: the same mixed density for every layer; causal
    attention: one group per ALiBi slope and ``beta``,
    :attr:`~meanfield.CausalAttention.mixed_groups`), plus the family's constant angular
    ``drift`` of its own (natural frequencies). Each group's velocity is its model's circle
    operators' (``solvers.reference.circle_operators``: fast path or reference, by ``interaction``).
    """

    def __init__(self, layering: Layering, cells: int, interaction: str, solver: str) -> None:
        self.layering = layering
        self.groups = [(weights, circle_operators(model, cells, interaction, solver))
                       for weights, model in layering.groups]
        drift = layering.drift
        self.drift = None if drift is None else np.asarray(drift, dtype=float)[:, None]
        self.base = self.groups[0][1]  # the grid, fluxes and implicit step are every group's
        self.width, self.uniform, self.theta = self.base.width, self.base.uniform, self.base.theta
        self.uniform_norm = self.base.uniform_norm * np.sqrt(layering.count)
        self.flux_divergence = self.base.flux_divergence

    def face_velocity(self, deviation: np.ndarray) -> np.ndarray:
        """Face velocities of every layer: each group's at its mixed deviation ``W_g deviation``, added up."""
        velocity = self._summed("face_velocity", deviation)
        return velocity if self.drift is None else velocity + self.drift

    def _summed(self, operator: str, deviation: np.ndarray) -> np.ndarray:
        """``operator`` of each group's operators at its mixed deviations, added up over the groups."""
        total = None
        for weights, base in self.groups:
            mixed = weights @ deviation
            if base.batched:  # every layer in one call
                value = getattr(base, operator)(mixed)
            else:
                value = np.stack([getattr(base, operator)(layer) for layer in mixed])
            total = value if total is None else total + value
        return total

    def rhs(self, deviation: np.ndarray) -> np.ndarray:
        return -self.flux_divergence(deviation, self.face_velocity(deviation))

    def linearly_implicit_step(self, deviation: np.ndarray, dt: float) -> np.ndarray:
        jumps = self._summed("potential_jumps", deviation)
        if self.drift is not None:
            jumps = jumps + self.drift * self.width  # a constant velocity's potential rises by v h per cell
        jumps = np.broadcast_to(jumps, deviation.shape)  # a one-row mixing serves every layer
        return np.stack([self.base.linearly_implicit_step(own, dt, jump) for own, jump in zip(deviation, jumps)])

    def deviation_norm(self, deviation: np.ndarray) -> float:
        r""":math:`(\sum_l \|\delta_l\|_{L^2}^2)^{1/2}` over all layers."""
        return float(np.sqrt(self.width * np.sum(deviation * deviation)))

    def layer_masses(self, rho: np.ndarray) -> np.ndarray:
        """Mass of each layer, shape ``(layers,)``."""
        return self.width * rho.sum(axis=-1)

    @staticmethod
    def lyapunov(rho: np.ndarray) -> float:
        """NaN: the layered flows have no known Lyapunov functional (not gradient flows)."""
        return np.nan


class LayeredCircleFV(CircleFV):
    """:class:`CircleFV` for a family of densities on the circle, one per label, moved together.

    A subclass builds its family (a :class:`~solvers.layering.Layering`) and passes it to
    :meth:`_layered`, which builds the operators; the labels and their coordinate are the family's.
    """

    def _layered(self, layering: Layering) -> None:
        """Move the family ``layering`` (the operators of its groups, on this solver's cells)."""
        self._check_time_settings()
        object.__setattr__(self, "operators", LayeredCircleOperators(layering, self.cells, self.interaction, self.name))

    @property
    def layering(self) -> Layering:
        """The family the solver moves."""
        return self.operators.layering

    @property
    def label(self) -> str:
        """The labels' coordinate name."""
        return self.layering.label

    @property
    def labels(self) -> np.ndarray:
        """The layers' labels, shape ``(layers,)``."""
        return self.layering.labels

    @property
    def layer_count(self) -> int:
        return self.layering.count

    def initial_density(self, rho0, *, name: str = "rho0") -> np.ndarray:
        """Cell averages per layer, shape ``(layers, cells)``, each of mass one.

        Parameters
        ----------
        rho0 : callable or numpy.ndarray
            A callable ``rho0(label, theta)`` (averaged over each cell by 4-point Gauss in
            ``theta``, taken at the layer's label), an array ``(layers, cells)``, or an array
            ``(cells,)`` used in every layer.
        name : str
            The argument's name in error messages.

        Returns
        -------
        numpy.ndarray, shape (layers, cells)
            The cell averages per layer.

        Raises
        ------
        ValueError
            If a layer's density is negative, not finite, of zero mass or of the wrong shape.
        """
        nodes, weights = GAUSS_4
        h = self.operators.width
        left = np.arange(self.cells) * h

        def cell_averages(f, s):
            samples = np.asarray(f(s[..., None], left[:, None] + 0.5 * h * (nodes + 1)), dtype=float)
            return 0.5 * samples @ weights

        values = self.layering.values(rho0, cell_averages, (self.cells,), name)
        return values / self.operators.layer_masses(values)[:, None]

    def _initial_state(self, rho0, continued: bool):
        shape = (self.layer_count, self.cells)
        rho = check_density(rho0, shape, "rho0", evolved=True) if continued else self.initial_density(rho0)
        return rho - self.operators.uniform

    def _diagnose(self, state, rho: np.ndarray):
        width = min(sharpest_cluster_width(layer) for layer in rho)
        resolved = bool(width >= self.min_cluster_cells and rho.min() >= 0)
        values = {**Layering.mass_values(self.operators.layer_masses(rho)), "min_density": rho.min(),
                  "cluster_width": width}
        return Diagnosis(values, resolved, f"the sharpest cluster spans {width:.3g} cells (< {self.min_cluster_cells:g})")

    def _grid_coordinates(self) -> dict[str, np.ndarray]:
        return {**self.layering.coordinates(), "theta": self.theta}


@dataclass(frozen=True, eq=False)
class FamilyCircleFV(LayeredCircleFV):
    r"""The circle's finite volumes of any family of densities: a :class:`~solvers.layering.Layering` given.

    The family written as data runs without a class of its own: its labels, one mixing
    :math:`W_g` and model per group, a drift per label (guide: :doc:`/guide/own_model`).

    Parameters
    ----------
    model : object
        The model whose diffusion the layers share (its interaction enters through the
        family's groups, which may hold it).
    family : Layering
        The family.
    cells, rtol, cfl, min_cluster_cells, error_level, tableau, implicit_substeps, interaction
        As for :class:`~solvers.CircleFV` (the error is measured over all layers together).

    Raises
    ------
    TypeError
        If ``family`` is not a :class:`~solvers.layering.Layering`.
    """

    family: Layering | None = None

    name = "FamilyCircleFV"

    def __post_init__(self) -> None:
        if not isinstance(self.family, Layering):
            raise TypeError(f"family must be a solvers.layering.Layering, got {self.family!r}")
        self._layered(self.family)

    def _recorded_settings(self) -> dict:
        return {**super()._recorded_settings(), "family": self.family.label, "layers": self.family.count}


class WeightedFamilyFV(LayeredCircleFV):
    """A family whose labels carry weights (a subclass's ``weights``, summing to one): its marginal and order parameters."""

    def _diagnose(self, state, rho: np.ndarray):
        """The layers' diagnostics, and the marginal's order parameter ``r`` (Kuramoto's observable).

        Parameters
        ----------
        state : numpy.ndarray
            The solver's state.
        rho : numpy.ndarray, shape (labels, cells)
            The densities per label.

        Returns
        -------
        Diagnosis
            The layers' values with ``order_parameter`` added, and whether they are resolved.
        """
        diagnosis = super()._diagnose(state, rho)
        diagnosis.values["order_parameter"] = float(np.abs(self.order_parameter(rho)))
        return diagnosis

    def marginal(self, rho: np.ndarray) -> np.ndarray:
        r"""The marginal density :math:`\sum_m w_m\rho_m` of the family ``rho`` ``(..., M, cells)``.

        Parameters
        ----------
        rho : numpy.ndarray, shape (..., M, cells)
            Densities per node (``ds.rho`` values).

        Returns
        -------
        numpy.ndarray, shape (..., cells)
            The tokens' density whatever their frequency.
        """
        return np.einsum("m,...mc->...c", self.weights, rho)

    def order_parameter(self, rho: np.ndarray, mode: int = 1) -> np.ndarray:
        r"""The order parameter :math:`\int e^{ik\theta}\bar\rho(\theta)\,d\theta` of the marginal.

        Parameters
        ----------
        rho : numpy.ndarray, shape (..., M, cells)
            Densities per node.
        mode : int
            ``k``.

        Returns
        -------
        numpy.ndarray of complex, shape (...)
            :math:`r_k e^{i\psi_k}` (cell averages times the cell integrals of :math:`e^{ik\theta}`,
            exact for a piecewise constant density).
        """
        h = self.operators.width
        left = np.arange(self.cells) * h
        cell_integrals = (np.exp(1j * mode * (left + h)) - np.exp(1j * mode * left)) / (1j * mode)
        return self.marginal(rho) @ cell_integrals
