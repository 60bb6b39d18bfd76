r"""What oscillators on the circle are measured by: order parameters of every mode, phase velocities, locking.

For tokens :math:`\theta_j` on the circle, the order parameter of mode ``k`` is
:math:`r_k e^{i\psi_k} = \frac1n\sum_j e^{ik\theta_j}` (``k = 1``: Kuramoto's; ``k = 2``: two
antipodal clusters). A token is *locked* when it turns, on average over a window, at the
population's rate :math:`\dot\psi_1`: with natural frequencies of mean zero the locked tokens
stand still on average, the drifting ones turn at :math:`\pm\sqrt{\omega^2 - (Kr)^2}`
(Kuramoto), so that for Lorentzian frequencies the locked fraction is
:math:`\frac2\pi\arctan(Kr/\Delta)`.
"""

from __future__ import annotations

import numpy as np
import xarray as xr

from meanfield.checks import check_real


def _angles(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, dtype=float)
    if x.shape[-1] != 2:
        raise ValueError(f"the tokens must lie on the circle (R^2), got R^{x.shape[-1]}")
    return np.arctan2(x[..., 1], x[..., 0])


def order_parameters(x, modes=(1, 2)) -> np.ndarray:
    r"""The order parameters :math:`r_k e^{i\psi_k} = \frac1n\sum_j e^{ik\theta_j}` of the tokens ``x``.

    Parameters
    ----------
    x : array_like, shape (..., n, 2)
        Tokens on the circle.
    modes : sequence of int
        The modes ``k``.

    Returns
    -------
    numpy.ndarray of complex, shape (..., len(modes))
        One order parameter per mode (``abs`` gives :math:`r_k`, ``angle`` :math:`\psi_k`).
    """
    theta = _angles(x)
    return np.stack([np.exp(1j * k * theta).mean(axis=-1) for k in modes], axis=-1)


def mean_phase_velocities(ds: xr.Dataset, start: float, stop: float) -> np.ndarray:
    r"""Each token's phase velocity averaged over ``[start, stop]``, relative to the mean phase's.

    The angles are unwrapped along the outputs in the window, so consecutive outputs must be
    less than half a turn apart for every token (record densely enough: a token of frequency
    :math:`\omega` needs outputs spaced below :math:`\pi/|\omega|`).

    Parameters
    ----------
    ds : xarray.Dataset
        A particle run on the circle (``x`` with a ``time`` axis).
    start, stop : float
        The window, ``start < stop``, with at least two outputs in it.

    Returns
    -------
    numpy.ndarray, shape (..., n)
        :math:`(\theta_j(\mathrm{stop}) - \theta_j(\mathrm{start}))/(\mathrm{stop} - \mathrm{start})` minus
        the same for the mean phase :math:`\psi_1`, per token (and batch axes).
    """
    start, stop = check_real(start, "start"), check_real(stop, "stop")
    window = ds.sel(time=slice(start, stop))
    if window.sizes["time"] < 2 or not stop > start:
        raise ValueError(f"the window [{start:g}, {stop:g}] must hold at least two outputs of ds")
    axis = window["x"].dims.index("time")
    theta = np.unwrap(_angles(window["x"].values), axis=axis)
    psi = np.unwrap(np.angle(np.exp(1j * theta).mean(axis=-1)), axis=axis)
    span = float(window.time.values[-1] - window.time.values[0])
    first, last = np.take(theta, 0, axis=axis), np.take(theta, -1, axis=axis)
    mean_first, mean_last = np.take(psi, 0, axis=axis), np.take(psi, -1, axis=axis)
    return (last - first) / span - ((mean_last - mean_first) / span)[..., None]


def locked_oscillators(ds: xr.Dataset, start: float, stop: float, *, tolerance: float | None = None) -> np.ndarray:
    r"""Which tokens are phase-locked to the population over ``[start, stop]``.

    Parameters
    ----------
    ds : xarray.Dataset
        A particle run on the circle, recorded densely (:func:`mean_phase_velocities`).
    start, stop : float
        The window.
    tolerance : float, optional
        The largest mean phase velocity, relative to the population's, of a locked token;
        default one turn over the window, :math:`2\pi/(\mathrm{stop} - \mathrm{start})`: a
        drifting token slips by at least a turn, a locked one by less.

    Returns
    -------
    numpy.ndarray of bool, shape (..., n)
        ``True`` for the locked tokens (``mean()`` is the locked fraction).
    """
    velocities = mean_phase_velocities(ds, start, stop)
    tolerance = 2 * np.pi / (stop - start) if tolerance is None else check_real(tolerance, "tolerance", minimum=0.0)
    return np.abs(velocities) < tolerance
