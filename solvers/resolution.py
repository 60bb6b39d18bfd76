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
