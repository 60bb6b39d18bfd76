"""Cluster detection on gridded densities (how sharp is the sharpest cluster?)."""

from __future__ import annotations

import numpy as np


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
