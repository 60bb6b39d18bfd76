r"""The layering policy: a family of densities, one per label, each moved by the velocity of mixed densities.

.. math:: \partial_t\rho_l + \mathrm{div}\Big(\rho_l\,\big(\textstyle\sum_g v_g[(W_g\rho)_l] + \omega_l\big)\Big)
          = D\,\Delta\rho_l, \qquad l = 1, \dots, L.

A :class:`Layering` says what the family is: its labels (causal attention's relative positions
``s``, the natural frequencies, the graphon's vertex labels), one mixing matrix ``W_g`` per
group of the interaction with the model ``g`` whose velocity the mixed density induces, and a
constant angular drift per label. The discretisations take it as it is: the circle's finite
volumes move every group (:class:`~solvers.circle.layered.LayeredCircleOperators`), the Fourier
and spherical-harmonic solvers one group (a product with the coefficients). So a family is
data, built once (:meth:`Layering.causal` from a :class:`~meanfield.CausalAttention`), and the
layered solvers are its discretisations, not one class per family and geometry.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from meanfield.causal import CausalAttention, positional_cell_weights
from meanfield.checks import check_density, check_int


@dataclass(frozen=True, eq=False)
class Layering:
    r"""One density per label, layer ``l`` moved by :math:`\sum_g v_g[(W_g\rho)_l] + \omega_l`.

    The family solves, for :math:`l = 1, \dots, L`,
    :math:`\partial_t\rho_l + \mathrm{div}\big(\rho_l\,(\sum_g v_g[(W_g\rho)_l] + \omega_l)\big) = D\,\Delta\rho_l`,
    with :math:`v_g[\mu]` the velocity that model ``g`` induces from the measure :math:`\mu`
    (its ``velocity_field``). The layered solvers take it as it is
    (:class:`~solvers.circle.layered.FamilyCircleFV` runs any family on the circle).

    Parameters
    ----------
    label : str
        The labels' coordinate in a dataset (``"position"``, ``"frequency"``, ``"vertex"``).
    labels : numpy.ndarray, shape (L,)
        The labels.
    groups : tuple of (numpy.ndarray, model)
        Per group, the mixing ``W_g`` (shape ``(L, L)``, or ``(1, L)``: one mixed density for
        every layer) and the model whose velocity the mixed density induces.
    drift : numpy.ndarray, shape (L,), optional
        Each layer's constant angular velocity (natural frequencies); ``None``: none.

    Raises
    ------
    ValueError
        If a mixing matrix is not ``(L, L)`` or ``(1, L)`` of finite values, or the drift not ``(L,)``.
    """

    label: str
    labels: np.ndarray
    groups: tuple
    drift: np.ndarray | None = None

    def __post_init__(self) -> None:
        labels = np.asarray(self.labels, dtype=float)
        count = labels.size
        for weights, _ in self.groups:
            if np.shape(weights) not in ((count, count), (1, count)) or not np.all(np.isfinite(weights)):
                raise ValueError(f"groups: a mixing matrix must be ({count}, {count}) or (1, {count}) of finite "
                                 f"values, got shape {np.shape(weights)}")
        if self.drift is not None and np.shape(self.drift) != (count,):
            raise ValueError(f"drift must give one angular velocity per label, shape ({count},), got shape "
                             f"{np.shape(self.drift)}")
        object.__setattr__(self, "labels", labels)
        object.__setattr__(self, "groups", tuple(self.groups))

    @classmethod
    def causal(cls, model, layers: int, solver: str) -> "Layering":
        r"""Causal attention's layers: ``L`` cells of relative position, mixed by the positional weights.

        The layers sit at the centres :math:`s_l = (l - 1/2)/L` of the cells
        :math:`((l-1)/L, l/L]`, and each group of heads (one ALiBi slope and ``beta``,
        :attr:`~meanfield.CausalAttention.mixed_groups`) mixes them by the cell integrals of
        :math:`k_\lambda` (``meanfield.causal.positional_cell_weights``).

        Parameters
        ----------
        model : CausalAttention
            The causal model.
        layers : int
            ``L``.
        solver : str
            The solver's name, for the error message.

        Returns
        -------
        Layering
            Labelled ``"position"``.

        Raises
        ------
        TypeError
            If ``model`` is not a :class:`~meanfield.CausalAttention`.
        """
        if not isinstance(model, CausalAttention):
            raise TypeError(f"{solver} solves the layered equation of a CausalAttention model, got {model!r}")
        check_int(layers, "layers", minimum=1)
        positions = (np.arange(layers) + 0.5) / layers
        return cls("position", positions, tuple((positional_cell_weights(alibi, layers), mixed)
                                                for alibi, mixed in model.mixed_groups))

    @property
    def count(self) -> int:
        """The number ``L`` of layers."""
        return self.labels.size

    def one_group(self, solver: str, finite_volumes: str) -> tuple[np.ndarray, object]:
        """The mixing and model of a family of one group without drift, as a spectral solver moves it.

        Parameters
        ----------
        solver : str
            The solver's name, for the error message.
        finite_volumes : str
            The solver that moves the family whatever its groups, which the message proposes.

        Returns
        -------
        tuple
            ``(W, model)``.

        Raises
        ------
        ValueError
            If the family has several groups (a mixture of slopes) or a drift.
        """
        if len(self.groups) > 1 or self.drift is not None:
            models = [model for _, model in self.groups]
            raise ValueError(f"{solver} moves every layer with one mixed model: this family has {len(models)} "
                             f"groups ({models}){' and a drift' if self.drift is not None else ''}; use "
                             f"{finite_volumes}, which adds the groups' velocities")
        return self.groups[0]

    def values(self, rho0, evaluate, shape: tuple[int, ...], name: str) -> np.ndarray:
        """Initial values per layer, shape ``(L, *shape)``.

        Parameters
        ----------
        rho0 : callable or numpy.ndarray
            A callable, evaluated as ``evaluate(rho0, labels)`` with the labels broadcast as
            ``(L, 1, ...)``; an array ``(L, *shape)``; or an array ``shape`` used in every layer.
        evaluate : callable
            How the geometry samples a callable.
        shape : tuple of int
            One layer's values.
        name : str
            The argument's name in error messages.

        Returns
        -------
        numpy.ndarray
            The values, checked to be densities.

        Raises
        ------
        ValueError
            If a layer's values are negative, not finite, of zero mass or of the wrong shape.
        """
        count = self.count
        if callable(rho0):
            labels = self.labels.reshape((count,) + (1,) * len(shape))
            values = np.broadcast_to(np.asarray(evaluate(rho0, labels), dtype=float), (count,) + shape)
        else:
            values = np.asarray(rho0, dtype=float)
            if values.shape == shape:
                values = np.broadcast_to(values, (count,) + shape)
        return check_density(values, (count,) + shape, name)

    @staticmethod
    def mass_values(masses: np.ndarray) -> dict[str, float]:
        """What a layered run records of its layers' masses: the smallest (``mass``) and ``mass_error``,
        the largest ``|mass - 1|``.

        Parameters
        ----------
        masses : numpy.ndarray, shape (L,)
            Each layer's mass.

        Returns
        -------
        dict
            ``mass`` and ``mass_error``.
        """
        return {"mass": float(masses.min()), "mass_error": float(np.abs(masses - 1.0).max())}

    def coordinates(self) -> dict[str, np.ndarray]:
        """The labels as a dataset's coordinate.

        Returns
        -------
        dict
            ``{label: labels}``.
        """
        return {self.label: self.labels}
