r"""The stochastic mean-field equation of the homogenized limit on the circle: Fourier collocation driven by common noise.

The conditional law :math:`\rho` of a token given the common noise solves the Stratonovich
transport equation of ``meanfield.common_noise``,

.. math:: d\rho + \partial_\theta\big(\rho\,\tilde b[\rho]\big)dt + \sum_k \partial_\theta\big(\rho\,\sigma_k[\rho]\big)\circ dW_k = 0,

one density path per path of the noise. Space: point values on :math:`N` equispaced angles, the
fields by the trapezoidal rule over them (spectrally accurate), the flux's derivative by FFT
with the top third of the modes removed (the 2/3 rule, against aliasing of the product). The
semi-discrete equation is then a finite-dimensional Stratonovich SDE, linear in the noise;
an upwind (finite-volume) flux is not, because its numerical diffusion grows with the total
variation of the velocity, which is infinite for a Brownian one. Time: Heun's method on the
displacement :math:`U = \tilde b\,\Delta t + \sum_k\sigma_k\Delta W_k`, which converges to
the Stratonovich solution with strong order 1/2 (the noise is non-commutative). The derivative
conserves the mass exactly (its mode 0 is zero).

Stability: a Heun step amplifies mode :math:`k` moved by :math:`U` by at most
:math:`1 + (kU)^4/8`; a step of ``dt`` is split, before its increment is used, into as many
substeps as keep :math:`k_{\max}|U| \le 1` for a Brownian move of ``SIGMAS`` standard
deviations; the substeps' increments are the Brownian bridge of the step's increment (the same
path, finer), and a choice made from the current state does not bias the path. Resolution:
the share of the spectrum in the top modes kept, and negative values, as for
:class:`~solvers.CircleSpectral`; a path that stops resolving its density warns once
(:class:`~solvers.UnderResolvedWarning`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from meanfield.checks import check_density, check_int, check_real, check_times
from meanfield.common_noise import NoisePath, WeightedAttention
from meanfield.homogenized import HomogenizedLimit, output_steps
from meanfield.progress import time_progress
from meanfield.records import CIRCLE, PDE, record_attrs
from meanfield.sampling import reproducible_seed
from meanfield.sphere import circle_points

from .circle_spectral import tail_fraction
from .resolution import ResolutionMonitor

#: Standard deviations of the Brownian move that a substep must keep stable.
SIGMAS = 6.0


@dataclass(frozen=True)
class CommonNoiseCircle:
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
    """

    limit: HomogenizedLimit
    points: int = 64
    tail_threshold: float = 1e-10

    def __post_init__(self) -> None:
        if not isinstance(self.limit, HomogenizedLimit):
            raise TypeError(f"limit must be a HomogenizedLimit, got {type(self.limit).__name__}")
        check_int(self.points, "points", minimum=8)
        if self.points % 2:
            raise ValueError(f"points must be even, got {self.points}")
        check_real(self.tail_threshold, "tail_threshold", minimum=0.0, strictly=True)

    @property
    def theta(self) -> np.ndarray:
        return np.arange(self.points) * (2 * np.pi / self.points)

    @property
    def highest_mode(self) -> int:
        """The highest mode kept by the 2/3 rule."""
        return self.points // 3

    def initial_density(self, rho0) -> np.ndarray:
        """Values of an initial density at the grid, normalised to mass 1.

        Parameters
        ----------
        rho0 : callable or numpy.ndarray
            A vectorized callable of the angle, or values at ``theta``.

        Returns
        -------
        numpy.ndarray, shape (points,)
            The values.

        Raises
        ------
        ValueError
            If the density is negative, not finite, of zero mass or of the wrong shape.
        """
        values = rho0(self.theta) if callable(rho0) else rho0
        rho = check_density(np.asarray(values, dtype=float), (self.points,), "rho0")
        mass = 2 * np.pi / self.points * rho.sum()
        if mass <= 0:
            raise ValueError(f"rho0 must have positive mass, got {mass!r}")
        return rho / mass

    def solve(self, rho0, times, *, dt: float, systems: int = 1, seed: int | np.random.Generator | None = None,
              increments: np.ndarray | None = None, progress: bool | None = None):
        r"""Density paths from ``rho0`` over ``times``, one per system, each driven by its own path of the noise.

        ``dt`` is the noise's step (``times`` on its grid). The path of system ``s`` is that of
        :func:`~meanfield.simulate_homogenized` with the same ``seed`` and ``dt``
        (``meanfield.common_noise.NoisePath``), so particles and densities can be compared
        on one path; ``increments`` replaces its Brownian draws. Returns an
        :class:`xarray.Dataset` with the density ``rho`` ``(system, time, theta)``, its ``mass``,
        the collapse observable ``mean_inner_product`` :math:`|\int x\rho|^2`, ``resolved``
        (per system and time), and in the settings ``substeps``, the most one step of ``dt`` took.

        Parameters
        ----------
        rho0 : callable or numpy.ndarray
            The initial density (see :meth:`initial_density`), the same for every system.
        times : array_like
            Increasing output times, on the grid of ``dt`` from ``times[0]``.
        dt : float
            The noise's step, ``> 0`` (each step is split into substeps along the Brownian
            bridge where the transport needs it).
        systems : int
            Number of independent noise paths.
        seed : int or numpy.random.Generator, optional
            Seed of the paths (drawn and recorded when omitted).
        increments : numpy.ndarray, optional
            Brownian increments to use instead of drawing them.
        progress : bool, optional
            Progress bar (default: when stderr is a terminal).

        Returns
        -------
        xarray.Dataset
            As described above.

        Raises
        ------
        ValueError
            If ``dt <= 0``, ``times`` is off its grid, or ``rho0`` is not a density.
        """
        times = check_times(times)
        steps_at, dt = output_steps(times, dt)
        systems = check_int(systems, "systems", minimum=1)
        seed = reproducible_seed(seed)
        path = NoisePath(self.limit, systems, 2, seed, dt, steps_at[-1], increments)
        rho = np.broadcast_to(self.initial_density(rho0), (systems, self.points)).copy()
        monitor = ResolutionMonitor(f"increase points (now {self.points}) or shorten the run: the common noise "
                                    "has concentrated the density beyond the grid")
        frames, resolved, recorded, most_substeps = [rho], [self._resolved(rho)], set(steps_at[1:].tolist()), 1
        with time_progress(float(times[0]), float(times[-1]), progress, "diffusive time") as bar:
            for step in range(1, steps_at[-1] + 1):
                increment = path.increment(step)
                fields = self._fields(rho, path)  # sizes the substeps, then starts the first one
                parts = self._substeps(fields, dt)
                most_substeps = max(most_substeps, parts)
                for part in path.bridge(increment, parts):
                    rho = self._heun(rho, fields, path, dt / parts, part)
                    fields = None
                if step in recorded:
                    frames.append(rho)
                    resolved.append(self._resolved(rho))
                    monitor.record(float(times[len(frames) - 1]), bool(resolved[-1].all()),
                                   "the spectrum's tail or negative values")
                bar.update(dt)
        return self._dataset(frames, resolved, times, path, seed, dt, most_substeps)

    def _resolved(self, rho: np.ndarray) -> np.ndarray:
        coefficients = np.fft.rfft(rho, axis=-1)[:, :self.highest_mode + 1]
        tails = np.array([tail_fraction(c, self.highest_mode) for c in coefficients])
        return (tails < self.tail_threshold) & (rho.min(axis=-1) >= -1e-8 * rho.max(axis=-1))

    def _fields(self, rho: np.ndarray, path: NoisePath) -> tuple[WeightedAttention, np.ndarray]:
        """The attention over the density ``rho`` at the grid, and the Stratonovich drift and noise spread there."""
        points = np.broadcast_to(circle_points(self.theta), (rho.shape[0], self.points, 2))
        weights = np.maximum(rho, 0.0) * (2 * np.pi / self.points)
        attention = WeightedAttention(points, weights, slice(None), path, self.limit.beta)
        return attention, *attention.stratonovich_drift()

    def _along_circle(self, vectors: np.ndarray) -> np.ndarray:
        """The tangential components of ``vectors`` ``(systems, points, 2)``."""
        return vectors[..., 1] * np.cos(self.theta) - vectors[..., 0] * np.sin(self.theta)

    def _substeps(self, fields: tuple, dt: float) -> int:
        """Substeps of ``dt`` for which a drift move plus ``SIGMAS`` noise deviations keeps ``highest_mode |U| <= 1``."""
        _, drift, spread = fields
        b = np.abs(self._along_circle(drift)).max() * dt
        s = SIGMAS * np.sqrt(spread.max() * dt)
        bound = 1.0 / self.highest_mode
        y = 2 * bound / (s + np.sqrt(s * s + 4 * b * bound))  # the largest 1/sqrt(parts) with b y^2 + s y <= bound
        return max(1, int(np.ceil(1.0 / y ** 2 - 1e-9)))

    def _stage(self, rho: np.ndarray, fields: tuple, dt: float, increment: np.ndarray) -> np.ndarray:
        attention, drift, _ = fields
        move = self._along_circle(drift * dt + attention.noise(increment))
        flux = np.fft.rfft(rho * move, axis=-1)
        flux *= -1j * np.arange(flux.shape[-1])
        flux[..., self.highest_mode + 1:] = 0.0
        return np.fft.irfft(flux, self.points, axis=-1)

    def _heun(self, rho: np.ndarray, fields: tuple | None, path: NoisePath, dt: float, increment: np.ndarray) -> np.ndarray:
        """One Heun step; ``fields`` are those of ``rho`` when already computed."""
        first = self._stage(rho, fields if fields is not None else self._fields(rho, path), dt, increment)
        predicted = rho + first
        return rho + 0.5 * (first + self._stage(predicted, self._fields(predicted, path), dt, increment))

    def _dataset(self, frames, resolved, times, path: NoisePath, seed: int, dt: float, most_substeps: int):
        import xarray as xr

        rho = np.stack(frames, axis=1)  # (system, time, theta)
        width = 2 * np.pi / self.points
        mean = width * rho @ circle_points(self.theta)
        ds = xr.Dataset({
            "rho": (("system", "time", "theta"), rho),
            "mass": (("system", "time"), width * rho.sum(axis=-1)),
            "mean_inner_product": (("system", "time"), np.sum(mean ** 2, axis=-1),
                                   {"long_name": "|int x rho|^2, the density's mean pairwise inner product"}),
            "resolved": (("system", "time"), np.stack(resolved, axis=1)),
        }, coords={"time": times, "theta": self.theta})
        settings = {"seed": seed, "dt": dt, "points": self.points, "nodes": self.limit.node_count,
                    "given_increments": path.given is not None, "substeps": most_substeps}
        ds.attrs.update(record_attrs(PDE, CIRCLE, self.limit, settings))
        return ds
