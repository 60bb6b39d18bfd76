r"""The pair correlation of particle ensembles against the closures of the BBGKY hierarchy (``solvers.circle.bbgky``).

For ``E`` independent systems of ``n`` tokens on the circle, the cosine coefficients of the pair
correlation, :math:`\hat g_k = E[\cos k(\theta_i - \theta_j)]` over pairs :math:`i \ne j`, are
estimated per system without bias from the empirical Fourier coefficient
:math:`c_k = \frac1n\sum_i e^{ik\theta_i}`: :math:`\sum_{i \ne j}\cos k(\theta_i-\theta_j) = n^2|c_k|^2 - n`,
so :math:`\hat g_k = (n|c_k|^2 - 1)/(n - 1)`; the systems are independent, so the mean over them
has the standard error of its sample standard deviation over :math:`\sqrt E`.
"""

from __future__ import annotations

import numpy as np
import xarray as xr

from meanfield.checks import check_int
from meanfield.sphere import circle_angles


def pair_correlation(x: np.ndarray | xr.Dataset, modes: int = 8) -> xr.Dataset:
    r"""The ensemble's pair-correlation coefficients :math:`\hat g_k`, ``k`` from 1 to ``modes``, with their standard errors.

    Parameters
    ----------
    x : numpy.ndarray or xarray.Dataset
        Tokens on the circle, shape ``(systems, time, n, 2)``, or a particle dataset of a batch
        of systems (``x`` with a ``system`` axis).
    modes : int
        The largest wavenumber.

    Returns
    -------
    xarray.Dataset
        ``coefficient`` and ``standard_error`` (time, mode) (``time`` when ``x`` is a dataset).

    Raises
    ------
    ValueError
        With fewer than two systems or tokens, or points that are not on the circle.
    """
    modes = check_int(modes, "modes", minimum=1)
    times = None
    if isinstance(x, xr.Dataset):
        if "system" not in x["x"].dims:
            raise ValueError("x must hold a batch of systems (simulate_particles from x0 of shape (systems, n, 2))")
        times, x = x["time"].values, x["x"].values
    x = np.asarray(x, dtype=float)
    if x.ndim != 4 or x.shape[-1] != 2 or x.shape[0] < 2 or x.shape[2] < 2:
        raise ValueError(f"x must have shape (systems >= 2, time, n >= 2, 2), got {x.shape}")
    n = x.shape[2]
    theta = circle_angles(x)
    k = np.arange(1, modes + 1)
    c = np.exp(1j * theta[..., None] * k).mean(axis=2)  # (systems, time, mode)
    per_system = (n * np.abs(c) ** 2 - 1) / (n - 1)
    coords = {"time": np.arange(x.shape[1]) if times is None else times, "mode": k}
    return xr.Dataset({"coefficient": (("time", "mode"), per_system.mean(axis=0)),
                       "standard_error": (("time", "mode"), per_system.std(axis=0, ddof=1) / np.sqrt(x.shape[0]))},
                      coords=coords, attrs={"systems": x.shape[0], "n": n})


def closure_deviation(closure: xr.Dataset, estimate: xr.Dataset) -> xr.Dataset:
    r"""How far a closure's :math:`\hat g_k(t)` is from the ensemble's, in absolute terms and in standard errors.

    Parameters
    ----------
    closure : xarray.Dataset
        The dataset of :meth:`solvers.PairCorrelation.solve`.
    estimate : xarray.Dataset
        :func:`pair_correlation` of the particles at the same times.

    Returns
    -------
    xarray.Dataset
        ``deviation`` (time, mode) and ``z`` (time, mode): the deviation over the standard error.
    """
    modes = estimate["mode"].values
    predicted = closure["coefficient"].sel(mode=modes).values
    deviation = predicted - estimate["coefficient"].values
    return xr.Dataset({"deviation": (("time", "mode"), deviation),
                       "z": (("time", "mode"), deviation / estimate["standard_error"].values)},
                      coords={"time": estimate["time"].values, "mode": modes})
