r"""The mean field of tokens with natural frequencies on the circle: one density per frequency node.

For :class:`meanfield.NaturalFrequencies` with frequencies drawn from a law :math:`g`, the limit
is a family :math:`\rho_t(\omega, \cdot)`, each moved by :math:`\omega + v[\bar\rho_t]`, with the
marginal :math:`\bar\rho_t = \int g(\omega)\rho_t(\omega, \cdot)\,d\omega`:

.. math:: \partial_t\rho_t(\omega, \theta) + \partial_\theta\big(\rho_t(\omega, \theta)\,
          (\omega + v[\bar\rho_t](\theta))\big) = D\,\partial_\theta^2\rho_t(\omega, \theta).

On ``M`` nodes :math:`\omega_m` with weights :math:`w_m` of a quadrature of ``g``
(:func:`meanfield.lorentzian_nodes`, :func:`meanfield.gaussian_nodes`; a finite law is its own
quadrature) each node carries a density on :class:`~solvers.CircleFV`'s cells, and every node
moves with the interaction's velocity at the marginal :math:`\sum_m w_m\rho_m` (the model's
own operators: its convolution, general-head or reference path) plus its frequency, the
angular velocity of :meth:`meanfield.NaturalFrequencies.rotation` at the node's frequency (the
particles' own rotation term). The interaction is any circle model; ``SelfAttention(0,
value=K)`` is Kuramoto's.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

import meanfield as mf

from ..layering import Layering
from .layered import WeightedFamilyFV


@dataclass(frozen=True, eq=False)
class FrequencyCircleFV(WeightedFamilyFV):
    r"""The family of densities of tokens with natural frequencies, finite volumes per frequency node.

    Parameters
    ----------
    model
        The interaction (a circle model with a velocity of a measure), without the frequencies.
    frequencies : array_like, shape (M,)
        The nodes :math:`\omega_m` of the frequency law.
    weights : array_like, shape (M,), optional
        Their positive weights (normalised to sum one; default equal).
    cells, rtol, cfl, min_cluster_cells, error_level, tableau, implicit_substeps, interaction
        As for :class:`~solvers.CircleFV` (the error is measured over all nodes together).
    """

    frequencies: np.ndarray = None
    weights: np.ndarray = None

    name = "FrequencyCircleFV"

    def __post_init__(self) -> None:
        frequencies, weights = _law(self.frequencies, self.weights)
        object.__setattr__(self, "frequencies", frequencies)
        object.__setattr__(self, "weights", weights)
        if getattr(self.model, "frequencies", None) is not None:
            raise TypeError("model is the interaction alone: pass its frequency law as frequencies and weights "
                            "(a NaturalFrequencies model holds the frequencies of particular tokens)")
        mixing = weights[None, :]  # one marginal for every node: its velocity is computed once and broadcast
        self._layered(Layering("frequency", frequencies, ((mixing, self.model),),
                               drift=_node_drift(self.model, frequencies)))

    def _recorded_settings(self) -> dict:
        return {**super()._recorded_settings(), "nodes": int(self.frequencies.size), "weights": self.weights.tolist()}


def _node_drift(model, frequencies: np.ndarray) -> np.ndarray:
    r"""The angular velocity each node's rotation gives, from :meth:`meanfield.NaturalFrequencies.rotation`.

    The rotation :math:`\omega J x` is rigid: its component along :math:`e_\theta` at any point
    (here at angle 0, where :math:`e_\theta = (0, 1)`) is the node's constant angular velocity.
    """
    at_zero = np.broadcast_to(np.array([1.0, 0.0]), (frequencies.size, 2))
    return mf.NaturalFrequencies(model, frequencies).rotation(at_zero)[:, 1]


def _law(frequencies, weights) -> tuple[np.ndarray, np.ndarray]:
    """The nodes and normalised weights of a frequency law, checked."""
    if frequencies is None:
        raise TypeError("FrequencyCircleFV needs frequencies: the nodes of the frequency law")
    nodes = np.array(frequencies, dtype=float).ravel()
    if nodes.size == 0 or not np.all(np.isfinite(nodes)):
        raise ValueError(f"frequencies must be a non-empty array of finite numbers, got {frequencies!r}")
    masses = np.full(nodes.size, 1.0) if weights is None else np.array(weights, dtype=float).ravel()
    if masses.shape != nodes.shape or not np.all(np.isfinite(masses)) or np.any(masses <= 0):
        raise ValueError(f"weights must be {nodes.size} positive numbers (one per frequency), got {weights!r}")
    masses = masses / masses.sum()
    for array in (nodes, masses):
        array.setflags(write=False)
    return nodes, masses
