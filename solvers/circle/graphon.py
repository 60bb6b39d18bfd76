r"""The graphon mean field on the circle: one density per vertex label, coupled through the graphon.

Kuramoto or attention on graphs drawn from a graphon :math:`W(x, y)` (:func:`meanfield.graphon_graph`:
vertex ``i`` at the label :math:`x_i = (i + \frac12)/n`, the pair an edge with probability
:math:`W(x_i, x_j)`) has a limit as ``n`` grows: a family :math:`\rho_t(x, \cdot)`, the law of the
tokens of label ``x``, each moved by the velocity of the graphon-weighted measure its vertices see,

.. math:: \partial_t\rho_t(x, \theta) + \partial_\theta\big(\rho_t(x, \theta)\, v[\mu^x_t](\theta)\big) = 0,
   \qquad \mu^x_t = \int_0^1 W(x, y)\,\rho_t(y, \cdot)\,dy,

with :math:`v` the interaction's velocity of a measure: USA and Kuramoto sum over the
neighbours with weight :math:`1/n`, so :math:`\mu^x` is used as it is; SA normalises over the
neighbours, so only :math:`\mu^x` up to its mass matters. On ``M`` labels (the midpoint rule of
``[0, 1]``) this is a family of :class:`~solvers.CircleFV` densities whose velocities are those of
the mixed densities :math:`\sum_{m'} W(x_m, x_{m'})\rho_{m'}/M` (:class:`LayeredCircleOperators`, as
the natural frequencies' family with a mixing per label). A constant graphon :math:`W = p` is the
all-to-all model with coupling :math:`cp` (USA) or unchanged (SA).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from meanfield.checks import check_int

from ..layering import Layering
from .layered import WeightedFamilyFV


@dataclass(frozen=True, eq=False)
class GraphonCircleFV(WeightedFamilyFV):
    r"""The graphon mean field of a circle model: finite volumes per vertex label (module docstring).

    Parameters
    ----------
    model
        The interaction on the graph's edges (a circle model with a velocity of a measure:
        ``SelfAttention``, Kuramoto as USA at ``beta = 0``, ...), without diffusion or with it.
    graphon : callable
        Vectorized :math:`W(x, y)` on :math:`[0, 1]^2`, symmetric, nonnegative.
    vertices : int
        ``M``, the labels of the midpoint rule of ``[0, 1]``.
    cells, rtol, cfl, min_cluster_cells, error_level, tableau, implicit_substeps, interaction
        As for :class:`~solvers.CircleFV` (the error is measured over all labels together).
    """

    graphon: Callable | None = None
    vertices: int = 32

    name = "GraphonCircleFV"

    def __post_init__(self) -> None:
        if not callable(self.graphon):
            raise TypeError(f"graphon must be a callable W(x, y) on [0, 1]^2, got {self.graphon!r}")
        count = check_int(self.vertices, "vertices", minimum=1)
        x = (np.arange(count) + 0.5) / count  # the vertex labels
        values = np.asarray(self.graphon(x[:, None], x[None, :]), dtype=float)
        if values.shape != (count, count) or not np.all(np.isfinite(values)) or np.any(values < 0):
            raise ValueError("graphon must map label arrays (x, y) to finite nonnegative values of their broadcast "
                             f"shape, got shape {values.shape}")
        if not np.allclose(values, values.T, rtol=1e-12, atol=0):
            raise ValueError("graphon must be symmetric, W(x, y) = W(y, x)")
        mixing = values / count
        if not self.model.velocity_is_linear:  # SA normalises over the neighbours: the mixed density's mass drops
            degree = mixing.sum(axis=1, keepdims=True)
            if np.any(degree <= 0):
                raise ValueError("graphon: a label with no neighbours (W(x, .) = 0) has no softmax")
            mixing = mixing / degree
        self._layered(Layering("vertex", x, ((mixing, self.model),)))

    @property
    def weights(self) -> np.ndarray:
        """The labels' weights, :math:`1/M` each."""
        return np.full(self.vertices, 1.0 / self.vertices)

    def _recorded_settings(self) -> dict:
        return {**super()._recorded_settings(), "vertices": self.vertices}
