r"""The stochastic mean-field equation of the homogenized limit on the circle: Fourier collocation driven by common noise.

The conditional law :math:`\rho` of a token given the common noise solves the Stratonovich
transport equation of ``meanfield.common_noise``,

.. math:: d\rho + \partial_\theta\big(\rho\,\tilde b[\rho]\big)dt + \sum_k \partial_\theta\big(\rho\,\sigma_k[\rho]\big)\circ dW_k = 0,

one density path per path of the noise. Space: point values on :math:`N` equispaced angles, the
fields by the trapezoidal rule over them (spectrally accurate), the flux's derivative by FFT
with the top third of the modes removed (the 2/3 rule, against aliasing of the product). Time,
stability and resolution: ``solvers.noise.transport``, shared with the sphere
(:class:`~solvers.CommonNoiseSphere`).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np

from meanfield.checks import check_int
from meanfield.homogenized import HomogenizedLimit
from meanfield.records import CIRCLE
from meanfield.sphere import circle_points, periodic_angles

from ..circle.spectral import tail_fraction
from .transport import CommonNoiseTransport, checked_grid_values


@dataclass(frozen=True)
class CommonNoiseCircle(CommonNoiseTransport):
    r"""Fourier collocation for the homogenized limit's stochastic transport equation on the circle.

    Parameters
    ----------
    limit : HomogenizedLimit
        The limit whose common noise (and deterministic drift, if any) moves the density.
    points : int
        Equispaced angles :math:`\theta_j = 2\pi j/N` (even); modes up to :math:`N/3` are kept.
    tail_threshold : float
        Share of the spectrum in the top 10 % of the kept modes above which the density counts as
        under-resolved.

    Notes
    -----
    ``rho0`` is a vectorized callable of the angle, or values at the angles ``theta``.
    """

    limit: HomogenizedLimit
    points: int = 64
    tail_threshold: float = 1e-10
    dimension = 2
    geometry = CIRCLE

    def __post_init__(self) -> None:
        self._check_common()
        check_int(self.points, "points", minimum=8)
        if self.points % 2:
            raise ValueError(f"points must be even, got {self.points}")

    @property
    def theta(self) -> np.ndarray:
        r"""The grid's angles :math:`2\pi j/N`."""
        return periodic_angles(self.points)

    @property
    def _highest_mode(self) -> int:
        """The highest mode kept by the 2/3 rule."""
        return self.points // 3

    @property
    def _largest_wavenumber(self) -> float:
        """The highest mode kept, which bounds the stable move."""
        return float(self._highest_mode)

    @cached_property
    def _points(self) -> np.ndarray:
        """The grid's points (cos, sin), kept: every evaluation of the fields and the divergence reads them."""
        return circle_points(self.theta)

    def nodes(self) -> np.ndarray:
        r"""The grid's points on the circle.

        Returns
        -------
        numpy.ndarray, shape (points, 2)
            :math:`(\cos\theta_j, \sin\theta_j)`.
        """
        return self._points

    @property
    def quadrature(self) -> np.ndarray:
        r"""The trapezoidal rule's weights :math:`2\pi/N`, exact for the modes below :math:`N`."""
        return np.full(self.points, 2 * np.pi / self.points)

    def _grid_values(self, rho0) -> np.ndarray:
        """Values of an initial density at the grid, checked (not normalised).

        Parameters
        ----------
        rho0 : callable or numpy.ndarray
            A vectorized callable of the angle, or values at ``theta``.

        Returns
        -------
        numpy.ndarray, shape (points,)
            The values.
        """
        return checked_grid_values(rho0, self.theta, (self.points,))

    def _divergence(self, flux: np.ndarray) -> np.ndarray:
        r"""The derivative along the circle of tangent vectors, by FFT with the 2/3 rule.

        Parameters
        ----------
        flux : numpy.ndarray, shape (systems, points, 2)
            Tangent vectors at the grid (ambient coordinates).

        Returns
        -------
        numpy.ndarray, shape (systems, points)
            :math:`\partial_\theta` of their tangential component, modes above the highest kept removed.
        """
        cos, sin = self._points.T
        along = flux[..., 1] * cos - flux[..., 0] * sin
        coefficients = np.fft.rfft(along, axis=-1)
        coefficients *= 1j * np.arange(coefficients.shape[-1])
        coefficients[..., self._highest_mode + 1:] = 0.0
        return np.fft.irfft(coefficients, self.points, axis=-1)

    def _tail_fraction(self, rho: np.ndarray) -> float:
        """The share of the spectral energy of the deviation in the top 10 % of the kept modes.

        Parameters
        ----------
        rho : numpy.ndarray, shape (points,)
            One density's values.

        Returns
        -------
        float
            In ``[0, 1]``; compared with ``tail_threshold``.
        """
        return tail_fraction(np.fft.rfft(rho)[:self._highest_mode + 1], self._highest_mode)

    def _coordinates(self, rho: np.ndarray):
        return {"theta": self.theta}, ("theta",), rho

    def _grid_settings(self) -> dict:
        return {"points": self.points}
