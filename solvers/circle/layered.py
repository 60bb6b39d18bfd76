r"""Families of densities on the circle moved together: one density per label, velocities of mixed densities.

The layered equation of causal attention (a label per position, :mod:`solvers.causal`) and the
family of natural frequencies (a label per frequency, :mod:`solvers.circle.frequencies`) share
this structure: layer ``l`` moves with :math:`\sum_g v_g[(W_g\rho)_l] + \omega_l`, each group ``g``
of the interaction at its mixed density, plus a constant angular drift of its own.
"""

from __future__ import annotations

import numpy as np

from meanfield.checks import check_density

from ..grid_solver import Diagnosis
from ..resolution import sharpest_cluster_width
from .finite_volumes import CircleFV
from .operators import GAUSS_4, CircleOperators


def layer_values(rho0, labels: np.ndarray, evaluate, shape: tuple[int, ...], name: str) -> np.ndarray:
    """Initial values per layer: ``rho0(label, points)`` (the labels broadcast as ``(L, 1, ...)``) or an array."""
    layers = labels.size
    if callable(rho0):
        s = labels.reshape((layers,) + (1,) * len(shape))
        values = np.broadcast_to(np.asarray(evaluate(rho0, s), dtype=float), (layers,) + shape)
    else:
        values = np.asarray(rho0, dtype=float)
        if values.shape == shape:
            values = np.broadcast_to(values, (layers,) + shape)
    return check_density(values, (layers,) + shape, name)


class LayeredCircleOperators:
    """:class:`CircleOperators` of mixed models, applied to ``(layers, cells)`` arrays with mixed velocities.

    One group per mixing: a layer moves with the sum over groups of the group's velocity at its
    mixed density ``W_g rho`` (a ``W_g`` of one row: the same mixed density for every layer) (causal attention: one group per ALiBi slope and ``beta``,
    :attr:`~meanfield.CausalAttention.mixed_groups`), plus a constant angular ``drift`` of its own
    (natural frequencies).
    """

    def __init__(self, groups: list, layers: int, drift: np.ndarray | None = None) -> None:
        self.groups = groups
        self.drift = None if drift is None else np.asarray(drift, dtype=float)[:, None]
        self.base = self.groups[0][1]  # the grid, fluxes and implicit step are every group's
        self.width, self.uniform, self.theta = self.base.width, self.base.uniform, self.base.theta
        self.uniform_norm = self.base.uniform_norm * np.sqrt(layers)
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

    A subclass builds ``operators`` (a :class:`LayeredCircleOperators`) and says what labels its
    layers: ``label`` (the coordinate's name) and :attr:`labels`.
    """

    label = "layer"

    @property
    def labels(self) -> np.ndarray:
        raise NotImplementedError

    @property
    def layer_count(self) -> int:
        return self.labels.size

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

        values = layer_values(rho0, self.labels, cell_averages, (self.cells,), name)
        return values / self.operators.layer_masses(values)[:, None]

    def _initial_state(self, rho0, continued: bool):
        shape = (self.layer_count, self.cells)
        rho = check_density(rho0, shape, "rho0", evolved=True) if continued else self.initial_density(rho0)
        return rho - self.operators.uniform

    def _diagnose(self, state, rho: np.ndarray):
        mass = self.operators.layer_masses(rho)
        width = min(sharpest_cluster_width(layer) for layer in rho)
        resolved = bool(width >= self.min_cluster_cells and rho.min() >= 0)
        values = {"mass": mass.min(), "mass_error": np.abs(mass - 1.0).max(), "min_density": rho.min(),
                  "cluster_width": width}
        return Diagnosis(values, resolved, f"the sharpest cluster spans {width:.3g} cells (< {self.min_cluster_cells:g})")

    def _grid_coordinates(self) -> dict[str, np.ndarray]:
        return {self.label: self.labels, "theta": self.theta}


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
