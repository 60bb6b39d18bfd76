"""Is the discrete solution still resolved? The warning, its single report per run, cluster widths."""

from __future__ import annotations

import os
import sys
import warnings

from typing import Callable

import numpy as np
from scipy.integrate import solve_ivp

import meanfield
from meanfield.docstrings import fill_docstrings
from meanfield.progress import time_progress

#: Frames in these folders are the library's own (the warning points past them).
LIBRARY_FOLDERS = tuple(os.path.dirname(path) + os.sep for path in (meanfield.__file__, __file__))


class UnresolvedStart(ValueError):
    """The solver's grid does not resolve a run's initial density: the run would be under-resolved from its start.

    Parameters
    ----------
    reason : str
        What the solver's rule found (the sharpest peak's width, the spectral tail).
    resolution : str
        The setting that sets the grid (``"cells"``, ``"lmax"``): what a user raises.
    value : int
        Its value.
    """

    def __init__(self, reason: str, resolution: str, value: int):
        super().__init__(f"the initial density is not resolved by {resolution} = {value}: {reason}")
        self.reason, self.resolution, self.value = reason, resolution, value


class UpFrontChecks:
    """What ``meanfield run`` asks every solver before anything runs: its start, and its cost.

    A solver refuses an initial density its grid does not resolve (:meth:`resolved_start`) and
    estimates its steps where a stability limit bounds them (:meth:`cost_estimate`), so that a
    config is refused up front with the setting to change instead of failing or grinding later.
    """

    def resolved_start(self, rho0, *, name: str = "rho0"):
        """The run's initial state from ``rho0``, refused where the solver's grid does not resolve it.

        By default the state a grid solver's ``solve`` starts from (its ``_initial_state``), with
        no rule of resolution: labels and atoms take any density. Finite volumes and series
        override it with their rule; a solver without ``_initial_state`` gives its own.

        Parameters
        ----------
        rho0 : callable or numpy.ndarray
            The initial density, as the solver's ``solve`` takes it.
        name : str
            The argument's name in error messages.

        Returns
        -------
        numpy.ndarray
            The state the run starts from: what :meth:`cost_estimate` takes.

        Raises
        ------
        UnresolvedStart
            Where the solver has a rule of resolution and its grid breaks it at the start.
        ValueError
            If the solver cannot take ``rho0`` (negative, not finite, of the wrong shape).
        """
        return self._initial_state(rho0, continued=False)

    def cost_estimate(self, state, span: float):
        r"""The steps a run of ``span`` from ``state`` takes by its stability limit, and one step's time (timed here).

        The steps are those its stability limit allows at the larger of the speed at the start
        and the model's bound (SA: :math:`|v| \le \sum_h \|V_h\|`, which clustering reaches): an
        estimate that needs no run, not a bound (a run that never clusters takes fewer, one whose
        steps the error controls more). ``meanfield run`` refuses a config whose estimate exceeds
        ``max_hours``.

        Parameters
        ----------
        state : numpy.ndarray
            The run's initial state (:meth:`resolved_start`'s result).
        span : float
            The run's duration.

        Returns
        -------
        solvers.grid_solver.CostEstimate or None
            ``None`` (the default) where no stability limit bounds the steps (implicit steps,
            measures moved as labels or atoms, adaptive ODEs of moments or quantiles): the solver
            has no estimate.
        """
        return None


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


def outputs_while_resolved(rhs, state: np.ndarray, times: np.ndarray, rtol: float,
                           trouble: Callable[[np.ndarray], str | None], advice: str, *, progress, name: str):
    """Integrate ``dy/dt = rhs(y)`` from ``state`` with DOP853 output by output, while ``trouble`` finds nothing.

    Parameters
    ----------
    rhs : callable
        ``rhs(y)``, autonomous.
    state : numpy.ndarray
        The state at ``times[0]``.
    times : numpy.ndarray
        The output times.
    rtol : float
        DOP853's relative tolerance (its absolute one ``rtol`` times 1e-3).
    trouble : callable
        ``trouble(y)`` at each new output: why it is under-resolved, or ``None``.
    advice : str
        What a user can change, for the warning.
    progress : bool, tqdm.tqdm or None
        As for :func:`meanfield.progress.time_progress`.
    name : str
        The bar's label.

    Returns
    -------
    frames : list of numpy.ndarray
        The states at the outputs reached (``times[0]`` first).
    since : float
        The first under-resolved output time (the run ends before it), NaN where none is.
    """
    frames, since = [state], np.nan
    with time_progress(times[0], times[-1], progress, name) as bar:
        for start, end in zip(times[:-1], times[1:]):
            solution = solve_ivp(lambda t, y: rhs(y), (start, end), frames[-1], method="DOP853", rtol=rtol,
                                 atol=1e-3 * rtol)
            reached = solution.y[:, -1]
            reason = (f"the integrator stopped ({solution.message})" if not solution.success else
                      "its values are not finite" if not np.all(np.isfinite(reached)) else trouble(reached))
            if reason is not None:
                since = float(end)
                warnings.warn(f"under-resolved from t={end:.6g} on: {reason}; the run ends at the last resolved "
                              f"output. {advice}", UnderResolvedWarning, stacklevel=_caller_stacklevel())
                break
            frames.append(reached)
            bar.update(end - start)
    return frames, since


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

#: Fourier modes below this fraction of the largest are taken as zero by symmetry when the
#: period of the density is read (round-off grows to about 1e-10 in an unstable run).
SYMMETRY_FLOOR = 1e-7


#: The ``fit_fraction`` entry and the Returns section of the tail estimators (``{fit_and_estimate}``).
FIT_AND_ESTIMATE = """
fit_fraction : float
    The top fraction of the series' terms (degrees, or modes) fitted.

Returns
-------
float
    The estimate; ``inf`` where the top terms do not decay; their own size where fewer than
    three of them are above round-off (the series is resolved to round-off).
"""


@fill_docstrings(fit_and_estimate=FIT_AND_ESTIMATE)
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
    {fit_and_estimate}
    """
    fit = _geometric_fit(amplitudes, fit_fraction)
    if fit is None:
        return float(pointwise * amplitudes[_top_window(amplitudes, fit_fraction)].max())
    slope, intercept, share = fit
    if slope >= 0:
        return np.inf
    top_degree = amplitudes.size - 1
    missing = np.exp(intercept + slope * (top_degree + 1)) / np.sqrt(-np.expm1(2 * slope))
    return float(TAIL_CALIBRATION * pointwise * np.sqrt(share) * missing)


@fill_docstrings(fit_and_estimate=FIT_AND_ESTIMATE)
def fourier_tail_error(maxima: np.ndarray, *, fit_fraction: float = 0.3) -> float:
    r"""An estimate of the max-norm size of the modes a truncated Fourier series lacks.

    ``maxima[k]`` is the largest value of mode :math:`k`'s component, :math:`2|c_k|`. A density
    of period :math:`2\pi/p` has only the modes :math:`k = 0, p, 2p, \dots` (the others hold
    round-off that the dynamics amplifies): :math:`p` is the greatest common divisor of the modes
    above :data:`SYMMETRY_FLOOR` of the largest, and only its multiples are read. Two clusters
    make the spectrum beat (:math:`|c_k|` dips to zero periodically in :math:`k`), so a fit to
    single modes can read a dip as decay: the fit is made to the envelope
    :math:`E_j = \max(M_{(j-1)p}, M_{jp})` over the top ``fit_fraction`` of those modes (as in
    :func:`geometric_tail_error`), and the missing modes are summed in the max norm,
    :math:`E_{J+1}/(1 - r)` for the fitted ratio :math:`r` per :math:`p` modes, since at a
    cluster's peak they add up in phase. No calibration constant: its range against runs at
    four times the modes is in the PDE solvers guide, and ``tests/test_circle_error_estimate.py``
    checks it. An error made earlier and carried along is not in the spectrum's tail: near a
    steady state, whose spectrum no longer grows, the estimate can fall below the true error.

    Parameters
    ----------
    maxima : numpy.ndarray, shape (K + 1,)
        :math:`2|c_k|`, ``k = 0 .. K``.
    {fit_and_estimate}
    """
    significant = np.flatnonzero(maxima[1:] > SYMMETRY_FLOOR * maxima.max()) + 1
    period = int(np.gcd.reduce(significant)) if significant.size else 1
    active = maxima[::period]
    envelope = np.maximum(active, np.concatenate([active[:1], active[:-1]]))
    fit = _geometric_fit(envelope, fit_fraction)
    if fit is None:
        return float(envelope[_top_window(envelope, fit_fraction)].max())
    slope, intercept, _ = fit
    if slope >= 0:
        return np.inf
    return float(np.exp(intercept + slope * envelope.size) / -np.expm1(slope))


def _top_window(amplitudes: np.ndarray, fit_fraction: float) -> np.ndarray:
    top = amplitudes.size - 1
    return np.arange(int((1 - fit_fraction) * top), top + 1)


def _geometric_fit(amplitudes: np.ndarray, fit_fraction: float) -> tuple[float, float, float] | None:
    """``(slope, intercept, share)`` of the least-squares line through ``log amplitudes`` over the top
    window's entries above ``NEGLIGIBLE_AMPLITUDE`` of the largest (``share`` of the window), or
    ``None`` where fewer than three are."""
    window = _top_window(amplitudes, fit_fraction)
    fitted = window[amplitudes[window] > NEGLIGIBLE_AMPLITUDE * amplitudes.max()]
    if fitted.size < 3:
        return None
    # the least-squares line in closed form (np.polyfit's general machinery costs more than a small grid's step)
    logs = np.log(amplitudes[fitted])
    offsets = fitted - fitted.mean()
    slope = float(np.dot(offsets, logs) / np.dot(offsets, offsets))
    return slope, float(logs.mean() - slope * fitted.mean()), fitted.size / window.size
