r"""The stochastic transport equation of the homogenized limit, on any grid: the time loop all its solvers share.

The conditional law :math:`\rho` of a token given the common noise solves the Stratonovich
transport equation of ``meanfield.common_noise``,

.. math:: d\rho + \operatorname{div}\big(\rho\,\tilde b[\rho]\big)dt + \sum_k \operatorname{div}\big(\rho\,\sigma_k[\rho]\big)\circ dW_k = 0,

one density path per path of the noise. A grid solver gives point values at quadrature nodes
(the fields :math:`\tilde b`, :math:`\sigma_k` are attention averages over the nodes, weighted
by :math:`\rho_j w_j`, spectrally accurate for the smooth attention kernel) and a spectral
divergence of the flux, dealiased (the top third of the modes removed). The semi-discrete
equation is then a finite-dimensional Stratonovich SDE, linear in the noise; an upwind
(finite-volume) flux is not, because its numerical diffusion grows with the total variation
of the velocity, which is infinite for a Brownian one. Time: Heun's method on the
displacement :math:`U = \tilde b\,\Delta t + \sum_k\sigma_k\Delta W_k`, which converges to the
Stratonovich solution with strong order 1/2 (the noise is non-commutative). The divergence
conserves the mass exactly (its degree-0 part is zero).

Stability: for a transport of wavenumber :math:`k` moved by :math:`U`, a Heun step amplifies by
at most :math:`1 + (kU)^4/8`; a step of ``dt`` is split, before its increment is used, into as
many substeps as keep :math:`k_{\max}|U| \le 1` for a Brownian move of ``SIGMAS`` standard
deviations; the substeps' increments are the Brownian bridge of the step's increment (the same
path, finer), and a choice made from the current state does not bias the path. Resolution:
the share of the spectrum in the top modes kept, and negative values; a path that stops
resolving its density warns once (:class:`~solvers.UnderResolvedWarning`).
"""

from __future__ import annotations

import numpy as np
import xarray as xr

from meanfield.checks import check_density, check_int, check_real, check_times
from meanfield.common_noise import NoisePath, WeightedAttention
from meanfield.docstrings import inherit_docstrings
from meanfield.homogenized import HomogenizedLimit, output_steps
from meanfield.integration.runs import noise_grid_run
from meanfield.records import PDE, record_attrs
from meanfield.sampling import reproducible_seed

from ..resolution import ResolutionMonitor, UpFrontChecks

#: Standard deviations of the Brownian move that a substep must keep stable.
SIGMAS = 6.0

#: Negative values below this fraction of the maximum make a density path unresolved.
NEGATIVE_LEVEL = 1e-8


@inherit_docstrings
class CommonNoiseTransport(UpFrontChecks):
    """Heun's method for the common-noise transport equation on a grid of quadrature nodes.

    A subclass is a frozen dataclass with fields ``limit`` and ``tail_threshold`` and gives its
    grid: the node positions and quadrature weights (:meth:`nodes`, :attr:`quadrature`), the
    divergence of a flux (``_divergence``), the spectral tail of a density
    (``_tail_fraction``), the largest wavenumber it keeps and its dataset coordinates.
    """

    limit: HomogenizedLimit
    tail_threshold: float

    #: Dimension of the ambient space of the grid's sphere, and the geometry's record name.
    dimension: int
    geometry: str

    def _check_common(self) -> None:
        if not isinstance(self.limit, HomogenizedLimit):
            raise TypeError(f"limit must be a HomogenizedLimit, got {type(self.limit).__name__}")
        check_real(self.tail_threshold, "tail_threshold", minimum=0.0, strictly=True)

    # ---------------------------------------------------------------- the grid, per subclass
    def nodes(self) -> np.ndarray:
        """The grid's points on the sphere, ``(P, dimension)``."""
        raise NotImplementedError

    @property
    def quadrature(self) -> np.ndarray:
        """The quadrature weights of the nodes, ``(P,)``: ``sum(w * f)`` integrates a band-limited ``f``."""
        raise NotImplementedError

    @property
    def _largest_wavenumber(self) -> float:
        """The largest wavenumber the divergence keeps, which bounds the stable move."""
        raise NotImplementedError

    def _divergence(self, flux: np.ndarray) -> np.ndarray:
        """The dealiased divergence of tangent vectors ``flux`` ``(systems, P, dimension)``, as values ``(systems, P)``."""
        raise NotImplementedError

    def _tail_fraction(self, rho: np.ndarray) -> float:
        """The share of the spectral energy of one density's deviation held by its top 10 % of modes."""
        raise NotImplementedError

    def _grid_values(self, rho0) -> np.ndarray:
        """Values of ``rho0`` (a callable or an array of the grid's shape) at the nodes, flattened."""
        raise NotImplementedError

    def _coordinates(self, rho: np.ndarray) -> tuple[dict, tuple[str, ...], np.ndarray]:
        """The dataset's coordinates, the density's dimensions and the density ``(system, time, P)`` reshaped to them."""
        raise NotImplementedError

    # ---------------------------------------------------------------- shared
    def resolved_start(self, rho0, *, name: str = "rho0") -> np.ndarray:
        return self.initial_density(rho0)

    def initial_density(self, rho0) -> np.ndarray:
        """Values of an initial density at the nodes, normalised to mass 1.

        Parameters
        ----------
        rho0 : callable or numpy.ndarray
            A vectorized callable (see the solver's class), or values at its grid.

        Returns
        -------
        numpy.ndarray
            The values, flattened over the grid.

        Raises
        ------
        ValueError
            If the density is negative, not finite, of zero mass or of the wrong shape.
        """
        rho = self._grid_values(rho0)
        mass = float(self.quadrature @ rho)
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
        :class:`xarray.Dataset` with the density ``rho`` (per system and time, on the grid), its
        ``mass``, the collapse observable ``mean_inner_product`` :math:`|\int x\rho|^2`,
        ``resolved`` (per system and time), and in the settings ``substeps``, the most one step
        of ``dt`` took.

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
            Brownian increments to use instead of drawing them, shape ``(steps,) +
            limit.increment_shape(systems, dimension)``.
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
        path = NoisePath(self.limit, systems, self.dimension, seed, dt, steps_at[-1], increments)
        rho = np.broadcast_to(self.initial_density(rho0), (systems, self.quadrature.size)).copy()
        grid = ", ".join(f"{key} = {value}" for key, value in self._grid_settings().items())
        monitor = ResolutionMonitor(f"refine the grid (now {grid}) or shorten the run: the common noise has "
                                    "concentrated the density beyond the grid")
        frames, resolved, most_substeps = [], [], 1

        def step(rho: np.ndarray, index: int) -> np.ndarray:  # the index-th step of dt on the noise path
            nonlocal most_substeps
            increment = path.increment(index)
            fields = self._fields(rho, path)  # sizes the substeps, then starts the first one
            parts = self._substeps(fields, dt)
            most_substeps = max(most_substeps, parts)
            for part in path.bridge(increment, parts):
                rho = self._heun(rho, fields, path, dt / parts, part)
                fields = None
            return rho

        def record(rho: np.ndarray) -> None:
            frames.append(rho)
            resolved.append(self._resolved(rho))
            if len(frames) > 1:
                monitor.record(float(times[len(frames) - 1]), bool(resolved[-1].all()),
                               "the spectrum's tail or negative values")

        noise_grid_run(step, rho, times, steps_at, dt, progress, record)
        return self._dataset(np.stack(frames, axis=1), np.stack(resolved, axis=1), times, path, seed, dt, most_substeps)

    def _resolved(self, rho: np.ndarray) -> np.ndarray:
        tails = np.array([self._tail_fraction(r) for r in rho])
        return (tails < self.tail_threshold) & (rho.min(axis=-1) >= -NEGATIVE_LEVEL * rho.max(axis=-1))

    def _fields(self, rho: np.ndarray, path: NoisePath) -> tuple[WeightedAttention, np.ndarray, np.ndarray]:
        """The attention over the density ``rho`` at the nodes, and the Stratonovich drift and noise spread there."""
        points = np.broadcast_to(self.nodes(), rho.shape + (self.dimension,))
        weights = np.maximum(rho, 0.0) * self.quadrature
        attention = WeightedAttention(points, weights, slice(None), path, self.limit.beta)
        return attention, *attention.stratonovich_drift()

    def _substeps(self, fields: tuple, dt: float) -> int:
        """Substeps of ``dt`` for which a drift move plus ``SIGMAS`` noise deviations keeps ``k_max |U| <= 1``."""
        _, drift, spread = fields
        b = np.linalg.norm(drift, axis=-1).max() * dt
        s = SIGMAS * np.sqrt(spread.max() * dt)
        bound = 1.0 / self._largest_wavenumber
        y = 2 * bound / (s + np.sqrt(s * s + 4 * b * bound))  # the largest 1/sqrt(parts) with b y^2 + s y <= bound
        return max(1, int(np.ceil(1.0 / y ** 2 - 1e-9)))

    def _stage(self, rho: np.ndarray, fields: tuple, dt: float, increment: np.ndarray) -> np.ndarray:
        attention, drift, _ = fields
        return -self._divergence(rho[..., None] * (drift * dt + attention.noise(increment)))

    def _heun(self, rho: np.ndarray, fields: tuple | None, path: NoisePath, dt: float, increment: np.ndarray) -> np.ndarray:
        """One Heun step; ``fields`` are those of ``rho`` when already computed."""
        first = self._stage(rho, fields if fields is not None else self._fields(rho, path), dt, increment)
        predicted = rho + first
        return rho + 0.5 * (first + self._stage(predicted, self._fields(predicted, path), dt, increment))

    def _dataset(self, rho: np.ndarray, resolved: np.ndarray, times, path: NoisePath, seed: int, dt: float,
                 most_substeps: int):
        mean = (rho * self.quadrature) @ self.nodes()
        coordinates, dims, values = self._coordinates(rho)
        ds = xr.Dataset({
            "rho": (("system", "time") + dims, values),
            "mass": (("system", "time"), rho @ self.quadrature),
            "mean_inner_product": (("system", "time"), np.sum(mean ** 2, axis=-1),
                                   {"long_name": "|int x rho|^2, the density's mean pairwise inner product"}),
            "resolved": (("system", "time"), resolved),
        }, coords={"time": times, **coordinates})
        settings = {"seed": seed, "dt": dt, **self._grid_settings(), "nodes": self.limit.node_count,
                    "given_increments": path.given is not None, "substeps": most_substeps}
        ds.attrs.update(record_attrs(PDE, self.geometry, self.limit, settings))
        return ds

    def _grid_settings(self) -> dict:
        """The grid's size, as recorded in the settings."""
        raise NotImplementedError


def checked_grid_values(rho0, argument: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """``rho0(argument)`` when callable, else ``rho0``; checked as a density of ``shape``."""
    values = rho0(argument) if callable(rho0) else rho0
    return check_density(np.asarray(values, dtype=float), shape, "rho0")
