"""Is the discrete solution still resolved? The warning, its single report per run, cluster widths."""

from __future__ import annotations

import os
import sys
import warnings

import numpy as np

import meanfield

#: Frames in these folders are the library's own (the warning points past them).
LIBRARY_FOLDERS = tuple(os.path.dirname(path) + os.sep for path in (meanfield.__file__, __file__))

class UnderResolvedWarning(RuntimeWarning):
    """The discrete solution no longer resolves the clusters; later values are untrustworthy."""


def _caller_stacklevel() -> int:
    """Stack level of the first frame outside this library, so warnings point at the user's call."""
    frame, level = sys._getframe(1), 1
    while frame is not None and frame.f_code.co_filename.startswith(LIBRARY_FOLDERS):
        frame, level = frame.f_back, level + 1
    return level


class ResolutionMonitor:
    """Warns once, and remembers when, a run stops resolving its solution."""

    def __init__(self, advice: str):
        self.advice = advice
        self.since: float | None = None

    def record(self, time: float, trustworthy: bool, reason: str) -> None:
        if trustworthy or self.since is not None:
            return
        self.since = time
        warnings.warn(f"under-resolved from t={time:.6g} on: {reason}. {self.advice}",
                      UnderResolvedWarning, stacklevel=_caller_stacklevel())


def sharpest_cluster_width(rho: np.ndarray, *, prominence: float = 2.0) -> float:
    """Full width at half maximum, in cells, of the narrowest cluster of a periodic 1-d density.

    A cluster is a local maximum higher than ``prominence`` times the mean; its width counts
    the contiguous cells around it above half its height. Returns ``inf`` when no cell
    qualifies (no cluster has formed).
    """
    n = rho.size
    threshold = prominence * rho.mean()
    peaks = np.flatnonzero((rho >= np.roll(rho, 1)) & (rho > np.roll(rho, -1)) & (rho > threshold))
    narrowest = np.inf
    for peak in peaks:
        above = rho >= 0.5 * rho[peak]
        # Walk outwards on the periodic grid until the density drops below half the peak.
        right = next((s for s in range(1, n) if not above[(peak + s) % n]), n)
        left = next((s for s in range(1, n) if not above[(peak - s) % n]), n)
        narrowest = min(narrowest, float(min(n, right + left - 1)))
    return narrowest


#: The factor between :func:`geometric_tail_error`'s tail norm and the error it estimates,
#: calibrated on the sphere (``SphereSpectral.error_estimate``'s docstring).
TAIL_CALIBRATION = 1.5

#: Degrees whose amplitude is below this fraction of the largest vanish (round-off, symmetry).
NEGLIGIBLE_AMPLITUDE = 1e-13


def geometric_tail_error(amplitudes: np.ndarray, pointwise: float, *, fit_fraction: float = 0.3) -> float:
    r"""An estimate of the max-norm size of the degrees a truncated series lacks, from the decay of its top ones.

    ``log A_l = a + l log r`` is fitted (least squares) over the top ``fit_fraction`` of the
    degrees ``0 .. L``, leaving out those below ``NEGLIGIBLE_AMPLITUDE`` of the largest (degrees
    that vanish by symmetry; their share of the window scales the result). The missing degrees'
    :math:`L^2` norm :math:`\big(\sum_{l>L} A^2 r^{2l}\big)^{1/2} = A r^{L+1}/\sqrt{1 - r^2}`,
    times ``pointwise`` (the largest value of a component of the first missing degree of unit
    :math:`L^2` norm) and :data:`TAIL_CALIBRATION`, is the estimate.

    Parameters
    ----------
    amplitudes : numpy.ndarray, shape (L + 1,)
        The :math:`L^2` norms of the series' components of degree (or wavenumber) ``0 .. L``.
    pointwise : float
        Max-norm over :math:`L^2` norm of a component of degree ``L + 1``.
    fit_fraction : float
        The top fraction of the degrees fitted.

    Returns
    -------
    float
        The estimate; ``inf`` where the top degrees do not decay; their own size where fewer
        than three of them are above round-off (the series is resolved to round-off).
    """
    top_degree = amplitudes.size - 1
    window = np.arange(int((1 - fit_fraction) * top_degree), top_degree + 1)
    fitted = window[amplitudes[window] > NEGLIGIBLE_AMPLITUDE * amplitudes.max()]
    if fitted.size < 3:
        return float(pointwise * amplitudes[window].max())
    slope, intercept = np.polyfit(fitted, np.log(amplitudes[fitted]), 1)
    if slope >= 0:
        return np.inf
    missing = np.exp(intercept + slope * (top_degree + 1)) / np.sqrt(-np.expm1(2 * slope))
    return float(TAIL_CALIBRATION * pointwise * np.sqrt(fitted.size / window.size) * missing)
