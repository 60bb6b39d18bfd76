r"""How many clusters: the modes of a kernel density estimate at the attention's bandwidth.

The seeds' question (``../shared/seeds``, "how many clusters are Transformers drawn to in a
metastable state"): the Gaussian kernel density estimate with bandwidth :math:`\beta^{-1/2}`
of ``n`` iid Gaussian samples has :math:`\Theta(\sqrt{\beta\log\beta})` modes in expectation as
:math:`\beta, n \to \infty` with :math:`n^c \lesssim \beta \lesssim n^{2-c}` (Kac-Rice and an
Edgeworth expansion). On the circle the natural estimate has the attention kernel itself,
:math:`\hat f(\theta) \propto \sum_j e^{\beta\cos(\theta - \theta_j)}` (a von Mises kernel of
concentration :math:`\beta`, i.e. bandwidth :math:`\beta^{-1/2}` at small angles), whose maxima
are where SA's first clusters grow.

Counting: the estimate and its derivative on a grid of spacing ``bandwidth / resolution`` (samples
linearly binned onto the grid, the derivative of the kernel applied by FFT: ``O(n + G log G)``),
and a mode per sign change from positive to negative where the estimate is above round-off. Binning moves each sample by less than
a grid spacing, so a mode whose derivative's zero crossing is not resolved at that scale (two
samples within a small fraction of the bandwidth of the bimodality threshold) may count
either way.
"""

from __future__ import annotations

import numpy as np

from meanfield.checks import check_int, check_real

#: Grid points per bandwidth.
RESOLUTION = 20

#: Sign changes where the estimate is below this fraction of its maximum are the FFT's round-off,
#: not modes (a lone sample's own mode stands at about ``1/n`` of the maximum).
ROUNDOFF_FLOOR = 1e-9


def kde_mode_count(samples, bandwidth: float, *, circle: bool = False, resolution: int = RESOLUTION) -> int:
    r"""Number of modes of the kernel density estimate of ``samples`` at ``bandwidth``.

    Parameters
    ----------
    samples : array_like, shape (n,)
        Points of the line, or angles (radians) when ``circle``.
    bandwidth : float
        The Gaussian kernel's standard deviation :math:`h`; on the circle the von Mises kernel
        :math:`e^{\cos(\theta)/h^2}` (so :math:`h = \beta^{-1/2}` gives the attention kernel).
    circle : bool
        Periodic estimate on the circle.
    resolution : int
        Grid points per bandwidth.

    Returns
    -------
    int
        The number of local maxima of the estimate above the round-off floor.

    Raises
    ------
    ValueError
        If ``samples`` is empty or not finite, or ``bandwidth`` is not positive.
    """
    samples = np.asarray(samples, dtype=float).ravel()
    if samples.size == 0 or not np.all(np.isfinite(samples)):
        raise ValueError(f"samples must be a non-empty array of finite numbers, got {samples.size} values")
    h = check_real(bandwidth, "bandwidth", minimum=0.0, strictly=True)
    check_int(resolution, "resolution", minimum=4)
    if circle:
        cells = int(2 ** np.ceil(np.log2(max(64, resolution * 2 * np.pi / h))))
        start, spacing = 0.0, 2 * np.pi / cells
        counts = _binned(np.mod(samples, 2 * np.pi), start, spacing, cells, periodic=True)
        offsets = np.fft.fftfreq(cells, 1.0 / cells) * spacing  # signed distances on the periodic grid
        kernel = -np.sin(offsets) * np.exp((np.cos(offsets) - 1.0) / h ** 2)  # d/dtheta of the von Mises kernel
        spectrum = np.fft.rfft(counts)
        derivative = np.fft.irfft(spectrum * np.fft.rfft(kernel), cells)
        density = np.fft.irfft(spectrum * np.fft.rfft(np.exp((np.cos(offsets) - 1.0) / h ** 2)), cells)
        return _maxima(derivative, np.roll(derivative, -1), density)
    margin = 6.0 * h
    start, spacing = samples.min() - margin, h / resolution
    cells = int(np.ceil((samples.max() + margin - start) / spacing)) + 1
    counts = _binned(samples, start, spacing, cells, periodic=False)
    reach = int(np.ceil(margin / spacing))
    offsets = np.arange(-reach, reach + 1) * spacing
    kernel = -offsets * np.exp(-0.5 * (offsets / h) ** 2)  # the Gaussian's derivative, up to a constant
    size = int(2 ** np.ceil(np.log2(cells + kernel.size)))
    spectrum = np.fft.rfft(counts, size)
    derivative = np.fft.irfft(spectrum * np.fft.rfft(kernel, size), size)[reach:reach + cells]
    density = np.fft.irfft(spectrum * np.fft.rfft(np.exp(-0.5 * (offsets / h) ** 2), size), size)[reach:reach + cells]
    return _maxima(derivative[:-1], derivative[1:], density[:-1])


def _maxima(derivative: np.ndarray, following: np.ndarray, density: np.ndarray) -> int:
    """Grid points where the derivative falls from positive to not, with the estimate above round-off."""
    falling = (derivative > 0) & ~(following > 0)
    return int(np.count_nonzero(falling & (density > ROUNDOFF_FLOOR * density.max())))


def _binned(values: np.ndarray, start: float, spacing: float, cells: int, *, periodic: bool) -> np.ndarray:
    """Linear binning: each value split between its two nearest grid points."""
    position = (values - start) / spacing
    left = np.floor(position).astype(int)
    weight = position - left
    counts = np.zeros(cells)
    right = left + 1
    if periodic:
        left, right = left % cells, right % cells
    np.add.at(counts, left, 1.0 - weight)
    np.add.at(counts, right, weight)
    return counts
