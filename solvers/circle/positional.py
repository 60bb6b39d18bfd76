r"""The position-indexed mean-field equation on the circle, by quantile particles per position.

For a model whose tokens carry positions (:class:`meanfield.RotaryAttention`: the logits turn
with the positions of query and key), the relative position ``s = i/n`` becomes a label as
``n`` grows, and the limit is one density :math:`\rho_t(s, \cdot)` per position, with no
transport in ``s``:

.. math:: \partial_t\rho_t(s,\theta) + \partial_\theta\big(\rho_t(s,\theta)\,v[\rho_t](s,\theta)\big) = 0,

the velocity of a token at position ``s`` being the model's, with every other position
present at its density. Discretisation: ``L`` positions at the centres :math:`s_l =
(l - 1/2)/L` (midpoint rule in ``s``), each density carried by ``M`` quantile particles at
the mass labels :math:`(i + 1/2)/M` (:func:`~solvers.circle.lagrangian.density_quantiles`),
all moved together by the model's own particle velocity with the positions :math:`s_l`
repeated ``M`` times (the model's reference: no solver-specific velocity). The rule in ``s``
is second order in :math:`1/L`; over the labels the velocity is a midpoint rule of a smooth
periodic integrand (:math:`X(m + 1) = X(m) + 2\pi`), which converges geometrically in ``M``
while the densities are smooth, and the quantiles stay a measure through cluster formation.
Each output records the particles' angles and, per position, the measure of the labels (mass
:math:`1/M` spread linearly between neighbours, :func:`~solvers.circle.lagrangian.labels_distribution`)
averaged over ``cells`` equal cells, as the other solvers record a density.
The particles of the model at ``n`` tokens approach the solution like :math:`n^{-1/2}` (the
tests measure the three rates).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np
import xarray as xr

import meanfield as mf
from meanfield.checks import check_int, check_times
from meanfield.docstrings import inherit_docstrings
from meanfield.records import CIRCLE, PDE, dataset_settings, record_attrs

from ..grid_solver import DIAGNOSTIC_ATTRS
from ..resolution import UpFrontChecks
from .lagrangian import density_quantiles, labels_distribution


@dataclass(frozen=True, eq=False)
@inherit_docstrings
class PositionalQuantiles(UpFrontChecks):
    r"""The position-indexed mean-field equation on the circle (module docstring).

    Parameters
    ----------
    model : meanfield.RotaryAttention
        A model on the circle (``d = 2``) whose tokens carry ``positions``.
    layers : int
        Number ``L`` of positions ``s``.
    points : int
        Quantile particles ``M`` per position.
    cells : int
        Cells of the circle on which each position's density ``rho`` is recorded.
    """

    model: object
    layers: int = 16
    points: int = 128
    cells: int = 128

    name = "PositionalQuantiles"
    geometry = CIRCLE

    def __post_init__(self) -> None:
        check_int(self.layers, "layers", minimum=1)
        check_int(self.points, "points", minimum=2)
        check_int(self.cells, "cells", minimum=2)
        if not getattr(self.model, "positional", False):
            raise TypeError(f"PositionalQuantiles solves models whose tokens carry positions (RotaryAttention), got "
                            f"{type(self.model).__name__}")
        if self.model.dimension not in (None, 2) or self.model.diffusion > 0:
            raise ValueError("PositionalQuantiles solves on the circle (d = 2) without diffusion (quantiles are "
                             f"transported, not diffused), got {self.model!r}")

    @property
    def positions(self) -> np.ndarray:
        """The positions :math:`s_l = (l - 1/2)/L`, shape ``(layers,)``."""
        return (np.arange(self.layers) + 0.5) / self.layers

    @property
    def labels(self) -> np.ndarray:
        """The mass labels :math:`(i + 1/2)/M`, shape ``(points,)``."""
        return (np.arange(self.points) + 0.5) / self.points

    def resolved_start(self, rho0, *, name: str = "rho0") -> np.ndarray:
        return self.initial_angles(rho0)

    def initial_angles(self, rho0) -> np.ndarray:
        r"""The quantile particles of ``rho0(s, theta)`` per position, shape ``(layers, points)``.

        Parameters
        ----------
        rho0 : callable
            ``rho0(s, theta)``: a density of :math:`\theta` for each position ``s`` (any positive mass).

        Returns
        -------
        numpy.ndarray, shape (layers, points)
            The angles :math:`X_l(m_i)`.
        """
        if not callable(rho0):
            raise TypeError(f"rho0 must be a callable rho0(s, theta), got {type(rho0).__name__}")
        cells = 16 * self.points
        return np.stack([density_quantiles(lambda theta, s=s: rho0(s, theta), self.labels, cells=cells,
                                           name=f"rho0(s={s:.4g}, .)") for s in self.positions])

    def solve(self, rho0, times, *, method: str = "dop853", dt: float | None = None, rtol: float = 1e-10,
              progress: bool | None = None) -> xr.Dataset:
        r"""Evolve the quantile particles of ``rho0`` and record them at ``times``.

        Parameters
        ----------
        rho0 : callable
            ``rho0(s, theta)`` (:meth:`initial_angles`).
        times : array_like
            Strictly increasing output times.
        method, dt, rtol, progress
            As for :func:`meanfield.simulate_particles` (the particles of all positions form one system).

        Returns
        -------
        xarray.Dataset
            ``angle`` (time, position, label): the quantile particles' angles in
            :math:`(-\pi, \pi]`; ``rho`` (time, position, theta): each position's density on the
            ``cells`` recording cells; ``order_parameter`` (time): :math:`|\int e^{i\theta}\rho|` of all
            positions' tokens; ``attrs`` make it a PDE record (the model; the settings:
            ``layers``, ``points``, ``cells`` and the particle run's).
        """
        times = check_times(times)
        angles = self.initial_angles(rho0).ravel()
        placed = dataclasses.replace(self.model, positions=np.repeat(self.positions, self.points))
        x0 = np.stack([np.cos(angles), np.sin(angles)], axis=-1)
        run = mf.simulate_particles(placed, x0, times, method=method, dt=dt, rtol=rtol, progress=progress)
        x = run.x.values.reshape(len(times), self.layers, self.points, 2)
        angle = np.arctan2(x[..., 1], x[..., 0])
        width = 2 * np.pi / self.cells
        edges = np.arange(self.cells + 1) * width
        # the labels' measure needs no label order: sorted angles carry the same equal masses
        rho = np.diff(np.apply_along_axis(lambda a: labels_distribution(np.sort(np.mod(a, 2 * np.pi)), self.labels,
                                                                        edges), -1, angle), axis=-1) / width
        order = np.abs(np.exp(1j * angle).mean(axis=(1, 2)))  # all positions: the midpoint rule in s
        ds = xr.Dataset({"angle": (("time", "position", "label"), angle, {"long_name": "quantile particles' angle"}),
                         "rho": (("time", "position", "theta"), rho,
                                 {"long_name": "density of each position (the labels' measure per cell)"}),
                         "order_parameter": ("time", order, DIAGNOSTIC_ATTRS["order_parameter"])},
                        coords={"time": times, "position": self.positions, "label": self.labels,
                                "theta": edges[:-1] + 0.5 * width})
        settings = {"solver": self.name, "layers": self.layers, "points": self.points, "cells": self.cells,
                    **dataset_settings(run)}
        ds.attrs.update(record_attrs(PDE, CIRCLE, self.model, settings))
        return ds


def layer_moments(ds: xr.Dataset, modes=(1, 2)) -> xr.DataArray:
    r"""The Fourier moments :math:`\int e^{ik\theta}\rho_t(s, \theta)\,d\theta` of every position (time, mode, position).

    Parameters
    ----------
    ds : xarray.Dataset
        A run of :class:`PositionalQuantiles`.
    modes : sequence of int
        The modes ``k``.

    Returns
    -------
    xarray.DataArray
        Complex moments, the mean of :math:`e^{ik\theta}` over each position's quantile particles.
    """
    angle = ds.angle.values
    values = np.stack([np.exp(1j * k * angle).mean(axis=-1) for k in modes], axis=1)
    return xr.DataArray(values, coords={"time": ds.time, "mode": list(modes), "position": ds.position},
                        dims=("time", "mode", "position"), name="moments")
