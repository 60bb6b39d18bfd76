r"""The stochastic mean-field equation of the homogenized limit on :math:`S^2`: spherical-harmonic collocation driven by common noise.

The conditional law :math:`\rho` of a token given the common noise solves the Stratonovich
transport equation of ``meanfield.common_noise``,

.. math:: d\rho + \operatorname{div}_S\big(\rho\,\tilde b[\rho]\big)dt + \sum_k \operatorname{div}_S\big(\rho\,\sigma_k[\rho]\big)\circ dW_k = 0,

one density path per path of the noise. Space: values of a density of degree at most
:math:`l_{\max}` on the dealiased Gauss grid of :class:`~solvers.SphereSpectral`; the fields by
the grid's quadrature (Gauss-Legendre in :math:`\cos\theta`, trapezoidal in :math:`\varphi`,
spectrally accurate for the analytic attention kernel); the divergence of the flux by the
vector transform (:math:`\operatorname{div}_S V = -l(l+1)S_{lm}` of its spheroidal part),
truncated at :math:`l_{\max}`, so the density stays of degree at most :math:`l_{\max}` and its
mean (degree 0) is never changed. Time, stability and resolution:
``solvers.noise.transport``, shared with the circle (:class:`~solvers.CommonNoiseCircle`).

Cost: every evaluation of the fields is an attention over all pairs of grid nodes, with the
measure derivative of each noise field (``meanfield.common_noise.WeightedAttention``): about
:math:`P^2(2d + d^2)` operations per field and node for :math:`P` grid nodes, against
:math:`O(l_{\max}^3)` for a transform. This general quadrature serves every weight law
(random :math:`Q`, :math:`K` included), at the price of a small grid.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property

import numpy as np

from meanfield.checks import check_int
from meanfield.homogenized import HomogenizedLimit
from meanfield.records import SPHERE

from .transport import CommonNoiseTransport, checked_grid_values
from ..sphere.grid import SphereGrid


@dataclass(frozen=True)
class CommonNoiseSphere(CommonNoiseTransport):
    r"""Spherical-harmonic collocation for the homogenized limit's stochastic transport equation on :math:`S^2`.

    Parameters
    ----------
    limit : HomogenizedLimit
        The limit whose common noise (and deterministic drift, if any) moves the density.
    lmax : int
        The largest degree of the density; its grid is that of ``SphereSpectral(lmax=lmax)``
        (at least 32 x 64 nodes).
    tail_threshold : float
        Share of the spectral energy in the top 10 % of the degrees above which the density
        counts as under-resolved.
    threads : int
        OpenMP threads of the shtns transforms (one by default; as for
        :class:`~solvers.SphereSpectral`).

    Notes
    -----
    ``rho0`` is a vectorized callable of points ``(..., 3)``, or values on the grid
    (``grid.shape``); it is projected onto the degrees up to ``lmax``.
    """

    limit: HomogenizedLimit
    lmax: int = 15
    tail_threshold: float = 1e-10
    threads: int = 1
    grid: SphereGrid = field(init=False, repr=False, compare=False)
    dimension = 3
    geometry = SPHERE

    def __post_init__(self) -> None:
        self._check_common()
        check_int(self.lmax, "lmax", minimum=2)
        object.__setattr__(self, "grid", SphereGrid(self.lmax, self.threads))

    @property
    def _largest_wavenumber(self) -> float:
        r""":math:`\sqrt{l_{\max}(l_{\max}+1)}`, the largest of the surface gradient's, which bounds the stable move."""
        return float(np.sqrt(self.lmax * (self.lmax + 1)))

    @cached_property
    def _points(self) -> np.ndarray:
        """The grid's points, kept: every evaluation of the fields and the divergence reads them."""
        return self.grid.points().reshape(-1, 3)

    @cached_property
    def _frame(self) -> np.ndarray:
        """The grid's tangent frame, kept: every divergence reads it."""
        return self.grid.tangent_frame()

    def nodes(self) -> np.ndarray:
        """The Gauss grid's points, flattened (latitude first).

        Returns
        -------
        numpy.ndarray, shape (nlat * nphi, 3)
            Unit vectors.
        """
        return self._points

    @property
    def quadrature(self) -> np.ndarray:
        """The grid's area weights (Gauss-Legendre times trapezoidal), flattened as :meth:`nodes`."""
        return self.grid.area_weight.ravel()

    def _grid_values(self, rho0) -> np.ndarray:
        """Values of an initial density at the grid, checked and projected onto the degrees up to ``lmax``.

        Parameters
        ----------
        rho0 : callable or numpy.ndarray
            A vectorized callable of points ``(..., 3)``, or values of ``grid.shape``.

        Returns
        -------
        numpy.ndarray, shape (nlat * nphi,)
            The projected values, flattened as :meth:`nodes`.
        """
        values = checked_grid_values(rho0, self.grid.points(), self.grid.shape)
        return self.grid.synthesise(self.grid.analyse(values)).ravel()

    def _divergence(self, flux: np.ndarray) -> np.ndarray:
        """The surface divergence of tangent vectors by the vector transform, truncated at ``lmax``.

        Parameters
        ----------
        flux : numpy.ndarray, shape (systems, nlat * nphi, 3)
            Tangent vectors at the grid (ambient coordinates), flattened as :meth:`nodes`.

        Returns
        -------
        numpy.ndarray, shape (systems, nlat * nphi)
            The divergence's values.
        """
        e_theta, e_phi = self._frame
        flux = flux.reshape(flux.shape[:-2] + self.grid.shape + (3,))
        result = np.empty(flux.shape[:-1])
        for system in np.ndindex(flux.shape[:-3]):
            vectors = np.moveaxis(flux[system], -1, 0)
            result[system] = self.grid.synthesise(self.grid.divergence(np.sum(vectors * e_theta, axis=0),
                                                                       np.sum(vectors * e_phi, axis=0)))
        return result.reshape(result.shape[:-2] + (-1,))

    def _tail_fraction(self, rho: np.ndarray) -> float:
        """The share of the spectral energy of the deviation in the top 10 % of the degrees.

        Parameters
        ----------
        rho : numpy.ndarray, shape (nlat * nphi,)
            One density's values.

        Returns
        -------
        float
            In ``[0, 1]``; compared with ``tail_threshold``.
        """
        return self.grid.tail_fraction(self.grid.analyse(rho.reshape(self.grid.shape)))

    def _coordinates(self, rho: np.ndarray):
        coordinates = {"colatitude": self.grid.colatitude, "longitude": self.grid.longitude}
        return coordinates, ("colatitude", "longitude"), rho.reshape(rho.shape[:2] + self.grid.shape)

    def _grid_settings(self) -> dict:
        return {"lmax": self.lmax, "grid": list(self.grid.shape)}
