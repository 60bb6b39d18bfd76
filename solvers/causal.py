r"""The layered mean-field equation of causal attention (docs/theory/causal.md), on the circle and on S^2.

.. math:: \partial_t\rho_t(s, x) + \mathrm{div}_x\big(\rho_t(s, x)\, V_t(s, x)\big) = D\,\Delta_x\rho_t(s, x),
          \qquad s \in (0, 1],

one density of mass one per relative position ``s``, no transport in ``s``. The velocity of
layer ``s`` is the velocity of the non-causal model
(:attr:`meanfield.causal.CausalAttention.mixed_model`) at the *mixed* density
:math:`\tilde\rho_t(s) = \int_0^s k_\lambda(s, s')\,\rho_t(s')\,ds'`: for USA the velocity is
linear in the density, and for SA the normalisation of the positional weights cancels in
:math:`\nabla\log(K*\tilde\rho)`.

Discretization in ``s``: ``L`` layers at the centres :math:`s_l = (l - 1/2)/L` of the cells
:math:`((l-1)/L, l/L]`, the density constant across a cell, the cell integrals of
:math:`k_\lambda` exact (:func:`meanfield.causal.positional_cell_weights`), so the mixed
densities are convex combinations :math:`\tilde\rho = W\rho` (rows of ``W`` sum to one), the
uniform density is stationary in every layer, and the first layer obeys the non-causal
equation. Each layer is then moved by the existing scheme of its geometry, with the mixed
density's velocity: :class:`CausalCircleFV` shares :class:`~solvers.circle.finite_volumes.CircleFV`'s
operators and steps (flux form: mass kept per layer to round-off, positivity, CFL),
:class:`CausalCircleSpectral` :class:`~solvers.CircleSpectral`'s Fourier transforms and
integrator (each layer's transport in Fourier space: spectral accuracy while the layers are
smooth), :class:`CausalSphereSpectral` :class:`~solvers.sphere.spectral.SphereSpectral`'s transforms and
integrator. All layers advance together with one step (the system is lower triangular in
``s``; marching layer by layer would need each layer's history at every step of the next).

Output ``rho`` has dimensions ``(time, position, theta)`` or
``(time, position, colatitude, longitude)``; per time ``mass`` (the smallest layer mass),
``mass_error`` (largest ``|mass - 1|`` over layers), ``min_density`` and the resolution
diagnostic of the geometry taken over all layers. There is no energy: the causal flow is not
a gradient flow.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from meanfield.checks import check_density
from meanfield.docstrings import fill_docstrings

from .circle.layered import LayeredCircleFV
from .circle.spectral import CircleSpectral
from .grid_solver import Diagnosis
from .layering import Layering
from .sphere.spectral import SphereSpectral
from .threads import single_threaded_blas


@dataclass(frozen=True, eq=False)
class CausalCircleFV(LayeredCircleFV):
    r"""The layered causal equation on the circle: :class:`CircleFV` per layer, mixed velocities.

    Parameters
    ----------
    model : CausalAttention
        Causal SA or USA, any ALiBi slope, prefactor and diffusion.
    cells : int
        Cells in :math:`\theta` per layer.
    layers : int
        Number ``L`` of layers in ``s`` (module docstring).
    rtol, cfl, min_cluster_cells, error_level, tableau, implicit_substeps, interaction
        As for :class:`CircleFV` (the error is measured over all layers together).
    """

    layers: int = 32

    def __post_init__(self) -> None:
        self._layered(Layering.causal(self.model, self.layers, self.name))

    name = "CausalCircleFV"

    @property
    def positions(self) -> np.ndarray:
        """Relative positions ``s`` of the layers, shape ``(layers,)``."""
        return self.layering.labels

    def _recorded_settings(self) -> dict:
        return {**super()._recorded_settings(), "layers": self.layers}


class _LayeredSpectral:
    """What a spectral solver of causal attention's layers adds to its geometry's: the family (its ``layering``).

    Mixed in before the solver's dataclass, whose ``layers`` and ``layering`` fields it fills.
    A spectral solver moves a family of one group (one mixing ``weights``, one model).
    """

    def __post_init__(self) -> None:
        layering = Layering.causal(self.model, self.layers, self.name)
        layering.one_group(self.name, "CausalCircleFV")
        object.__setattr__(self, "layering", layering)
        super().__post_init__()

    @property
    def weights(self) -> np.ndarray:
        """The mixing ``W`` of the layers, shape ``(layers, layers)``."""
        return self.layering.groups[0][0]

    @property
    def _kernel_model(self):
        """The non-causal model whose velocity at a layer's mixed density is that layer's velocity."""
        return self.layering.groups[0][1]

    @property
    def positions(self) -> np.ndarray:
        """Relative positions ``s`` of the layers, shape ``(layers,)``."""
        return self.layering.labels

    def _recorded_settings(self) -> dict:
        return {**super()._recorded_settings(), "layers": self.layers}


#: The Parameters section of the methods that read the layers' series (``{layer_series_parameters}``).
LAYER_SERIES_PARAMETERS = """
Parameters
----------
coefficients : numpy.ndarray, shape (layers, cells // 2)
    Fourier coefficients per layer.
"""


@fill_docstrings(layer_series_parameters=LAYER_SERIES_PARAMETERS)
@dataclass(frozen=True, eq=False)
class CausalCircleSpectral(_LayeredSpectral, CircleSpectral):
    r"""The layered causal equation on the circle: :class:`~solvers.CircleSpectral` per layer, mixed velocities.

    The state holds every layer's Fourier coefficients, shape ``(layers, cells // 2)``; the
    transforms act along the last axis, so the layers share each transform call, and the
    mixing :math:`\tilde\rho = W\rho` is a product with the coefficients.

    Parameters
    ----------
    model : CausalAttention
        Causal SA or USA, any ALiBi slope, prefactor and diffusion.
    cells, rtol, tail_threshold, interaction, tableau, outputs, record_cells, error_level
        As for :class:`~solvers.CircleSpectral` (the error is measured over all layers
        together; the spectral tail and the error estimate are the largest over layers).
    layers : int
        Number ``L`` of layers in ``s`` (module docstring).
    """

    layers: int = 32
    layering: Layering = field(init=False, repr=False)

    name = "CausalCircleSpectral"

    def velocity(self, coefficients: np.ndarray) -> np.ndarray:
        """Every layer's velocity at the flux grid's points, at its mixed density.

        {layer_series_parameters}

        Returns
        -------
        numpy.ndarray, shape (layers, points)
            The tangential velocity of each layer.
        """
        return super().velocity(self._velocity_density(coefficients))

    def _velocity_density(self, coefficients: np.ndarray) -> np.ndarray:
        r"""The mixed densities :math:`W\rho` whose velocities move the layers."""
        return self.weights @ coefficients

    def energy(self, coefficients: np.ndarray) -> float:
        """NaN: causal attention has no known interaction energy or Lyapunov functional (not a gradient flow).

        {layer_series_parameters}

        Returns
        -------
        float
            NaN.
        """
        return np.nan

    lyapunov = energy

    def initial_coefficients(self, rho0, *, name: str = "rho0") -> np.ndarray:
        r"""Coefficients per layer, shape ``(layers, cells // 2)``, each of mass one.

        Parameters
        ----------
        rho0 : callable or numpy.ndarray
            A callable ``rho0(s, theta)`` (sampled at ``4 cells`` points, ``s`` broadcast as
            ``(layers, 1)``), an array ``(layers, record_cells)`` of cell averages, or an array
            ``(record_cells,)`` used in every layer.
        name : str
            The argument's name in error messages.

        Returns
        -------
        numpy.ndarray, shape (layers, cells // 2)
            The coefficients per layer, :math:`2\pi c_{l,0} = 1`.

        Raises
        ------
        ValueError
            If a layer's density is negative, not finite, of zero mass or of the wrong shape.
        """
        if callable(rho0):
            theta = self._sample_angles
            values = self.layering.values(rho0, lambda f, s: f(s, theta), theta.shape, name)
            coefficients = np.fft.rfft(values)[:, : self.cells // 2] / theta.size
        else:
            coefficients = self.coefficients_of_averages(
                self.layering.values(rho0, None, (self.record_cells,), name))
        coefficients[:, 0] = coefficients[:, 0].real
        return coefficients / (2 * np.pi * coefficients[:, :1].real)

    def _initial_state(self, rho0, continued: bool) -> np.ndarray:
        if continued:
            shape = (self.layers, self.record_cells)
            return self.coefficients_of_averages(check_density(rho0, shape, "rho0", evolved=True))
        return self.initial_coefficients(rho0)

    def _diagnose(self, coefficients: np.ndarray, rho: np.ndarray) -> Diagnosis:
        resolution = self._resolution(coefficients)
        values = {**Layering.mass_values(2 * np.pi * coefficients[:, 0].real), **resolution.values}
        return Diagnosis(values, resolution.resolved, resolution.reason)

    def _grid_coordinates(self) -> dict[str, np.ndarray]:
        return {**self.layering.coordinates(), "theta": self.theta}


#: The Parameters section of the methods that read the layers' harmonics (``{layer_harmonics_parameters}``).
LAYER_HARMONICS_PARAMETERS = """
Parameters
----------
coefficients : numpy.ndarray, shape (layers, ...)
    Spherical-harmonic coefficients per layer.
"""


@fill_docstrings(layer_harmonics_parameters=LAYER_HARMONICS_PARAMETERS)
@dataclass(frozen=True, eq=False)
class CausalSphereSpectral(_LayeredSpectral, SphereSpectral):
    r"""The layered causal equation on :math:`S^2`: :class:`SphereSpectral` per layer, mixed velocities.

    Parameters
    ----------
    model : CausalAttention
        Causal SA or USA, any ALiBi slope, prefactor and diffusion.
    lmax, rtol, tail_threshold, tableau, outputs, interaction, error_level, threads
        As for :class:`SphereSpectral` (the steps' error is measured over all layers together;
        the spectral tail and the error estimate are the largest over layers).
    layers : int
        Number ``L`` of layers in ``s`` (module docstring).
    """

    layers: int = 16
    layering: Layering = field(init=False, repr=False)

    name = "CausalSphereSpectral"

    def velocity(self, coefficients: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Every layer's velocity, at its mixed density.

        {layer_harmonics_parameters}

        Returns
        -------
        tuple of numpy.ndarray
            The colatitude and longitude components on the grid, each ``(layers, nlat, nlon)``.
        """
        one_density = super().velocity
        along = [one_density(mixed) for mixed in self.weights @ coefficients]
        return np.stack([a[0] for a in along]), np.stack([a[1] for a in along])

    def _threads(self):
        return single_threaded_blas()  # the layers' mixing is a product between transforms

    def _transport_and_speed(self, coefficients: np.ndarray) -> tuple[np.ndarray, float]:
        r"""Every layer's transport term at its own density and mixed velocity, and the largest speed.

        {layer_harmonics_parameters}

        Returns
        -------
        transport : numpy.ndarray, shape (layers, ...)
            Coefficients of :math:`-\mathrm{div}_S(\rho_l v_l)` per layer.
        speed : float
            The largest speed over the layers.
        """
        grid, speed, result = self.grid, 0.0, []
        for own, mixed in zip(coefficients, self.weights @ coefficients):
            rho = grid.synthesise(own)
            along_t, along_p = super().velocity(mixed)
            speed = max(speed, float(np.sqrt(np.max(along_t * along_t + along_p * along_p))))
            result.append(grid.divergence(along_t * rho, along_p * rho, sign=-1.0))
        return np.stack(result), speed

    def _initial_state(self, rho0, continued: bool) -> np.ndarray:
        if continued:
            values = check_density(rho0, (self.layers,) + self.grid.shape, "rho0", evolved=True)
            return np.stack([self.grid.analyse(layer) for layer in values])
        return self.initial_coefficients(rho0)

    def initial_coefficients(self, rho0, *, name: str = "rho0") -> np.ndarray:
        """Coefficients per layer, shape ``(layers, coefficients)``, each of mass one.

        Parameters
        ----------
        rho0 : callable or numpy.ndarray
            A callable ``rho0(s, points)`` (points ``(..., 3)`` on the grid, ``s`` broadcast as
            ``(layers, 1, 1)``), an array ``(layers, *grid.shape)``, or grid values used in
            every layer.
        name : str
            The argument's name in error messages.

        Returns
        -------
        numpy.ndarray, shape (layers, coefficients)
            The coefficients per layer.

        Raises
        ------
        ValueError
            If a layer's density is negative, not finite, of zero mass or of the wrong shape.
        """
        points = self.grid.points()
        values = self.layering.values(rho0, lambda f, s: f(s, points), self.grid.shape, name)
        coefficients = np.stack([self.grid.analyse(layer) for layer in values])
        return coefficients / (np.sqrt(4 * np.pi) * coefficients[:, :1].real)

    def density(self, coefficients: np.ndarray) -> np.ndarray:
        """Every layer's density on the Gauss grid.

        {layer_harmonics_parameters}

        Returns
        -------
        numpy.ndarray, shape (layers, nlat, nlon)
            The values.
        """
        return np.stack([self.grid.synthesise(layer) for layer in coefficients])

    def _diagnose(self, coefficients: np.ndarray, rho: np.ndarray):
        resolution = self._resolution(coefficients, rho)  # over all layers: the largest tail and estimate
        values = {**Layering.mass_values(np.sqrt(4 * np.pi) * coefficients[:, 0].real), "min_density": rho.min(),
                  **resolution.values}
        return Diagnosis(values, resolution.resolved, resolution.reason)

    def _grid_coordinates(self) -> dict[str, np.ndarray]:
        return {**self.layering.coordinates(), **super()._grid_coordinates()}
