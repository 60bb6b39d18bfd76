r"""Mean-field convergence: particles against the PDE, with the rate in ``n`` fitted per time.

For each particle count ``n`` and seed, ``n`` iid particles are drawn from :math:`\rho_0`
and evolved; the PDE is solved once; their distance is measured at every output time.
docs/theory/references.md predicts :math:`E\,\mathrm{dist}(\mu^n_t, \rho_t) \le C e^{Lt} n^{-1/2}`:
the fitted slope of :math:`\log E\,\mathrm{dist}` against :math:`\log n` should be
:math:`-1/2` until the PDE's own error floor. Confidence intervals come from a bootstrap
over seeds.

The bound is asymptotic: at small ``n`` the mean distance can flatten (near cluster
formation the fluctuations are amplified nonlinearly). The rate is therefore fitted on the
largest counts (the upper half of ``sizes``), and the same fit on the smallest counts (the
lower half) is reported next to it with the difference of the two slopes, the *saturation
test*: a difference whose interval excludes 0 says that the small counts are still
pre-asymptotic. Both slopes and the difference come from the same bootstrap resamples.

On the line (``geometry = "R^1"``: pure attention with ``d = 1``, :class:`~solvers.LineLagrangian`
as the reference, which follows the measure through its collapse) the distance is :math:`W_1`
too and the model has no energy.

Particles use ``meanfield.engines.kernels``' automatic choice: from a few hundred tokens on
the kernel's series (:mod:`meanfield.engines.series`, ``O(n K)``), which lets a default study
reach ``n = 16384`` on the circle and ``8192`` on :math:`S^2` in minutes.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Callable

import numpy as np
import xarray as xr

import meanfield as mf
from meanfield.checks import check_int, check_memory, check_real, check_times
from meanfield.records import CIRCLE, SPHERE, STUDY, geometry_dimension, record_attrs
from meanfield.sampling import reproducible_seed
from solvers import CircleAuto, LineLagrangian, SphereSpectral, ZonalSphereSpectral

from .distances import distance, distance_description
from .measures import GEOMETRIES, LINE, is_high_sphere


class PDEErrorWarning(RuntimeWarning):
    """The PDE reference is not accurate enough compared with the particle distances."""


@dataclass(frozen=True)
class StudySettings:
    """Numerical settings of a study (defaults suit the default ``meanfield validate`` run).

    Parameters
    ----------
    cells : int
        Cells of the circle's reference, :class:`~solvers.CircleAuto` (Fourier while the
        density is smooth, finite volumes after; its recorded cell averages): its error
        estimate is the distance to a run at half the cells.
    lmax : int
        Largest degree of the :class:`~solvers.SphereSpectral` reference (on :math:`S^{d-1}`,
        ``d >= 4``: of the :class:`~solvers.ZonalSphereSpectral` one).
    line_labels : int
        Mass labels of the line's reference, :class:`~solvers.LineLagrangian` (second order):
        its error estimate is the distance to a run at half the labels.
    particle_dt : float
        Step of the fixed-step particle scheme (RK4 without noise, Euler-Maruyama with).
    bootstrap : int
        Bootstrap resamples of the seeds for the rate's interval.
    confidence : float
        Confidence level of that interval.
    """

    cells: int = 2048
    lmax: int = 47
    line_labels: int = 512
    particle_dt: float = 0.01
    bootstrap: int = 2000
    confidence: float = 0.95


def mean_field_convergence(model, rho0: Callable, *, geometry: str = "circle", sizes=(64, 128, 256, 512, 1024),
                           seeds: int = 8, times=(0.0, 1.0, 2.0), settings: StudySettings | None = None,
                           rng: int | np.random.Generator | None = 0, progress: bool | None = None,
                           interval=None) -> xr.Dataset:
    r"""Measure how fast the particle system approaches its mean-field limit.

    Parameters
    ----------
    model : SelfAttention, ZonalAggregation or PureAttention
        The model run by both the particles and the PDE (on the line: ``PureAttention`` with
        ``d = 1`` as :class:`~solvers.LineLagrangian` takes it).
    rho0 : callable
        Initial density: of the angle on the circle, of points ``(..., d)`` on the sphere, of
        ``z`` on the line (need not be normalized). Particles are drawn from it exactly, the PDE
        starts from it.
    geometry : {"circle", "sphere", "R^1"} or "S^k", k >= 3
        Where: :class:`~solvers.CircleAuto`, :class:`~solvers.SphereSpectral` or
        :class:`~solvers.LineLagrangian` as the reference; on :math:`S^{d-1}` with ``d >= 4``
        (``"S^15"``: ``d = 16``) a zonal model and a density of :math:`u = \langle x, e\rangle`
        (``e`` the last axis), :class:`~solvers.ZonalSphereSpectral` at ``settings.lmax`` as the
        reference and the :math:`W_1` of the laws of :math:`u` as the distance.
    sizes : sequence of int
        Particle counts ``n`` (at least two distinct values, each ``>= 2``).
    seeds : int
        Independent samples per size (``>= 2``, for the bootstrap).
    times : sequence of float
        Output times, starting at the initial time.
    settings : StudySettings, optional
        Resolutions, particle step and bootstrap (default ``StudySettings()``).
    rng : int, numpy.random.Generator or None
        Base seed (or a generator to draw it from, or None for fresh entropy); seed ``s`` of
        size ``n`` uses a generator derived from ``(seed, n, s)``. The base seed is recorded
        in ``attrs["settings"]["rng"]``: passing it as ``rng`` repeats the study.
    progress : bool, optional
        Progress bars of the PDE and particle runs (default: when stderr is a terminal).
    interval : (float, float), optional
        The line only, and required there: an interval holding the support of ``rho0``.

    Returns
    -------
    xarray.Dataset
        ``distance`` (size, seed, time); ``mean_distance`` (size, time); ``rate``,
        ``rate_low``, ``rate_high`` (time): the slope fitted on the largest counts
        (``attrs["fitted_sizes"]``) and its bootstrap interval; ``small_rate`` (with
        ``_low``, ``_high``): the slope on the smallest counts (``attrs["small_sizes"]``);
        ``saturation`` (with ``_low``, ``_high``): ``small_rate - rate``, the saturation test;
        ``pde_error`` (time): distance between the PDE at its resolution and at a coarser
        one, an estimate of the reference's own error; ``energy_pde`` (time) and
        ``energy_particles`` (size, time, mean over seeds), for models with an energy; for
        figures, ``pde_rho`` (the PDE density) and ``particles_x`` (seed 0 of the largest size).

    Raises
    ------
    ValueError
        For a bad argument, named, or ``interval`` missing on the line (or given elsewhere).
    """
    if geometry not in GEOMETRIES and not (isinstance(geometry, str) and is_high_sphere(geometry)):
        raise ValueError(f"geometry must be one of {GEOMETRIES} or 'S^k' (k >= 3: zonal densities on S^k), "
                         f"got {geometry!r}")
    if (geometry == LINE) != (interval is not None):
        raise ValueError(f"interval: the line's study needs the interval holding rho0's support, and only it "
                         f"takes one; got interval={interval!r} with geometry={geometry!r}")
    sizes = sorted({check_int(n, "sizes", minimum=2) for n in np.atleast_1d(sizes).tolist()})
    if len(sizes) < 2:
        raise ValueError(f"sizes must hold at least two distinct particle counts >= 2, got {sizes}")
    seeds = check_int(seeds, "seeds", minimum=2)
    times = check_times(times)
    settings = settings or StudySettings()
    check_real(settings.particle_dt, "particle_dt", minimum=0.0, strictly=True)
    # the distances, and the bootstrap's resampled seeds (resamples x sizes x seeds indices)
    check_memory(8.0 * len(sizes) * seeds * (times.size + settings.bootstrap),
                 f"seeds = {seeds} over {len(sizes)} sizes with {settings.bootstrap} bootstrap resamples",
                 "fewer seeds (the interval narrows like seeds^-1/2)")

    seed = reproducible_seed(rng)
    scheme = "euler" if model.diffusion > 0 else "rk4"
    pde, pde_coarse = _solve_pde(model, rho0, geometry, times, settings, progress, interval)
    pde_error = distance(pde, pde_coarse).values

    distances = np.empty((len(sizes), seeds, times.size))
    particle_energy = np.empty((len(sizes), times.size))
    for i, n in enumerate(sizes):
        x0 = np.stack([_sample(rho0, geometry, n, np.random.default_rng([seed, n, s]), interval)
                       for s in range(seeds)])
        run = mf.simulate_particles(model, x0, times, method=scheme, dt=settings.particle_dt,
                                    rng=np.random.default_rng([seed, n, seeds]), progress=progress,
                                    observables=("energy",) if model.has_energy else ())
        if model.has_energy:
            particle_energy[i] = run.energy.values.mean(axis=0)
        for s in range(seeds):
            distances[i, s] = distance(run.isel(system=s), pde).values
        sample_run = run.x.values[0]

    fits = fit_ranges(np.array(sizes), distances, settings.bootstrap, settings.confidence,
                      np.random.default_rng([seed, 7]))
    smallest = distances[-1].mean(axis=0)
    floor_reached = pde_error > 0.1 * smallest
    if np.any(floor_reached[1:]):
        warnings.warn(f"the PDE reference error ({pde_error.max():.2g}) is not below a tenth of the smallest "
                      f"particle distance ({smallest.min():.2g}) at t={times[floor_reached].tolist()}: "
                      "refine the PDE (cells / lmax) or use fewer particles there", PDEErrorWarning, stacklevel=2)
    ds = xr.Dataset(
        {"distance": (("size", "seed", "time"), distances),
         "mean_distance": (("size", "time"), distances.mean(axis=1)),
         **fits,
         "pde_error": ("time", pde_error, {"long_name": "distance between the PDE and a coarser PDE run"}),
         "pde_floor_reached": ("time", floor_reached),
         **({"energy_pde": ("time", pde.energy.values), "energy_particles": (("size", "time"), particle_energy)}
            if model.has_energy else {}),
         # For figures: the PDE density and one particle run of the largest size (seed 0).
         "pde_rho": (("time",) + pde.rho.dims[1:], pde.rho.values),
         "particles_x": (("time", "particle", "component"), sample_run)},
        coords={"size": sizes, "seed": np.arange(seeds), "time": times,
                **{name: pde[name].values for name in pde.rho.dims[1:]}})
    ds.attrs.update(record_attrs(STUDY, geometry, model, {**settings.__dict__, "seeds": seeds, "rng": seed}))
    ds.attrs.update(distance=distance_description(geometry)[1], confidence=settings.confidence, expected_rate=-0.5,
                    fitted_sizes=large_sizes(sizes), small_sizes=small_sizes(sizes))
    return ds


def _solve_pde(model, rho0, geometry, times, settings, progress, interval):
    """The reference and a coarser run. The study measures the reference's error itself (pde_error,
    in its distance; PDEErrorWarning when it is not small): the runs go on past the solvers' own
    resolution criteria, whose warnings still reach the user."""
    if geometry == LINE:
        fine = LineLagrangian(model, interval, labels=settings.line_labels).solve(rho0, times, progress=progress)
        coarse = LineLagrangian(model, interval, labels=settings.line_labels // 2).solve(rho0, times, progress=False)
    elif geometry == CIRCLE:
        # Fourier while the density is smooth, finite volumes after (CircleAuto); no shadow runs
        fine, coarse = (CircleAuto(model, cells=cells, error_level=None).solve(
            rho0, times, progress=shown, underresolved="continue")
            for cells, shown in ((settings.cells, progress), (settings.cells // 2, False)))
    elif geometry == SPHERE:
        fine, coarse = (SphereSpectral(model, lmax=lmax).solve(rho0, times, progress=shown, underresolved="continue")
                        for lmax, shown in ((settings.lmax, progress), ((3 * settings.lmax) // 4, False)))
    else:
        d = geometry_dimension(geometry)
        fine, coarse = (ZonalSphereSpectral(model, d=d, lmax=lmax).solve(rho0, times, progress=shown,
                                                                         underresolved="continue")
                        for lmax, shown in ((settings.lmax, progress), ((3 * settings.lmax) // 4, False)))
    return fine, coarse


def _sample(rho0, geometry: str, n: int, generator: np.random.Generator, interval) -> np.ndarray:
    if geometry == LINE:
        return mf.sample_interval(n, rho0, interval, generator)
    if geometry == CIRCLE:
        return mf.sample_circle(n, rho0, generator)
    return mf.sample_sphere(n, rho0, geometry_dimension(geometry), generator)


def large_sizes(sizes) -> list[int]:
    """The counts the rate is fitted on: the upper half of ``sizes`` (at least two)."""
    sizes = sorted(sizes)
    return sizes[min(len(sizes) // 2, len(sizes) - 2):]


def small_sizes(sizes) -> list[int]:
    """The counts of the saturation test's other slope: the lower half of ``sizes`` (at least two)."""
    sizes = sorted(sizes)
    return sizes[:max(2, len(sizes) // 2)]


def fit_rates(sizes: np.ndarray, distances: np.ndarray, resamples: int, confidence: float,
              generator: np.random.Generator) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Least-squares slope of ``log mean_seed(distance)`` against ``log n`` per time, with a
    percentile bootstrap interval over seeds (seeds resampled with replacement, per size)."""
    estimate, boot = _slopes_and_bootstrap(sizes, distances, resamples, generator)
    return (estimate,) + _interval(boot, confidence)


def fit_ranges(sizes: np.ndarray, distances: np.ndarray, resamples: int, confidence: float,
               generator: np.random.Generator) -> dict:
    """The rate on the largest counts, the slope on the smallest and their difference, with intervals.

    Returns the study's variables (``rate``, ``small_rate``, ``saturation``, each with
    ``_low`` and ``_high``) as ``{name: ("time", values, attrs)}``; one bootstrap serves all
    three, so the difference's interval accounts for their correlation.
    """
    sizes = np.asarray(sizes)
    large, small = np.isin(sizes, large_sizes(sizes)), np.isin(sizes, small_sizes(sizes))
    picks = _seed_picks(distances, resamples, generator)
    rate, rate_boot = _slopes_and_bootstrap(sizes[large], distances[large], picks=picks[:, large])
    small_rate, small_boot = _slopes_and_bootstrap(sizes[small], distances[small], picks=picks[:, small])
    out = {}
    for name, estimate, boot, meaning in (
            ("rate", rate, rate_boot, f"slope of log mean distance vs log n, n in {sizes[large].tolist()}"),
            ("small_rate", small_rate, small_boot, f"the same slope for n in {sizes[small].tolist()}"),
            ("saturation", small_rate - rate, small_boot - rate_boot,
             "small_rate - rate: outside 0 when the small counts are pre-asymptotic")):
        low, high = _interval(boot, confidence)
        out[name] = ("time", estimate, {"long_name": meaning})
        out[f"{name}_low"], out[f"{name}_high"] = ("time", low), ("time", high)
    return out


def _seed_picks(distances: np.ndarray, resamples: int, generator: np.random.Generator) -> np.ndarray:
    sizes, seeds = distances.shape[:2]
    return generator.integers(0, seeds, size=(resamples, sizes, seeds))


def _slopes_and_bootstrap(sizes, distances, resamples: int = 0, generator=None, *, picks=None):
    """The slope per time and its bootstrap replicates (seeds resampled per size by ``picks``)."""
    log_n = np.log(sizes)
    centred = log_n - log_n.mean()

    def slopes(mean_distance: np.ndarray) -> np.ndarray:  # (..., size, time) -> (..., time)
        log_d = np.log(mean_distance)
        return np.einsum("s,...st->...t", centred, log_d - log_d.mean(axis=-2, keepdims=True)) / (centred @ centred)

    if picks is None:
        picks = _seed_picks(distances, resamples, generator)
    resampled = np.take_along_axis(distances[None], picks[..., None], axis=2).mean(axis=2)
    return slopes(distances.mean(axis=1)), slopes(resampled)


def _interval(boot: np.ndarray, confidence: float) -> tuple[np.ndarray, np.ndarray]:
    tail = 0.5 * (1 - confidence)
    return np.quantile(boot, tail, axis=0), np.quantile(boot, 1 - tail, axis=0)
