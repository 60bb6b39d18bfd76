r"""The mean-field equation on the circle in mass coordinates: measures through and after clustering.

A probability measure :math:`\mu` on the circle is described by its quantile function
:math:`X(t, m)`, the position of the mass label :math:`m \in [0, 1)` (lifted to the line, so
:math:`X(t, m + 1) = X(t, m) + 2\pi` and a rotation of the whole measure is a shift of
:math:`X`). The continuity equation :math:`\partial_t\rho + \partial_\theta(\rho\,v[\rho]) =
D\,\partial_\theta^2\rho` becomes, with :math:`\rho(X(m)) = 1/\partial_m X`,

.. math:: \partial_t X(t, m) = v[\mu_t](X(t, m)) - D\,\partial_m \frac{1}{\partial_m X(t, m)},
          \qquad v[\mu](x) = \int_0^1 V\big(x, X(m')\big)\,dm',

(the first term is transport by the attention velocity, the second the diffusion as the
Wasserstein gradient flow of :math:`D\int\rho\log\rho`: Gosse and Toscani, Carrillo and Moll).
Clusters are flat pieces of :math:`X`, not spikes of :math:`\rho`: with ``D = 0`` the
representation stays exact however concentrated the measure becomes, and a Dirac mass is a
set of labels at one position.

Discretisation: ``M`` labels at the midpoints :math:`m_i = (i + 1/2)/M`, each carrying mass
:math:`1/M`.

- The velocity integral is the midpoint rule over the labels, which is the attention velocity
  of the ``M`` points as tokens (the model's particle engine, ``meanfield.engines.select_kernel``,
  self term included). The integrand is periodic in :math:`m'`, so while :math:`X` is smooth the
  rule converges faster than any power of ``M``; for a measure made of Dirac masses whose masses
  are multiples of :math:`1/M` it is exact, and the solver is the weighted particle system.
- The diffusion: :math:`-D\,(1/(X_{i+1} - X_i) - 1/(X_i - X_{i-1}))`, second order in
  :math:`1/M`, the gradient of the discrete entropy :math:`\sum_i \frac1M \log\frac{1/M}{X_{i+1}-X_i}`.

Time: ``D = 0``, an embedded explicit Runge-Kutta pair (the transport is not stiff; its
steps grow as the clusters settle); ``D > 0``, the extrapolated linearly implicit Euler
step with the diffusion's exact (cyclic tridiagonal) Jacobian, whose stiffness grows like
:math:`D M^2 \max\rho^2`. Labels keep their order (a step that would swap two is retried).

Outputs: the dataset of every PDE solver (``rho`` as cell averages of the measure on
``cells`` cells: the mass of each cell over its width, defined for any measure, from the
piecewise-linear distribution function through the labels) and, per time, the quantile
function ``position(time, label)`` (``label``: the labels :math:`m_i`) and the clusters:
``cluster_mass``, ``cluster_position``, ``cluster_count`` (maximal runs of labels whose gaps
are below ``cluster_separation``, the rule :func:`validation.cluster_statistics` applies to
particles, of mass at least ``min_cluster_mass``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import numba
import numpy as np
import xarray as xr
from scipy.special import roots_legendre

from meanfield.checks import check_density, check_int, check_real, check_rtol
from meanfield.docstrings import fill_docstrings
from meanfield.engines import energy_pair_sum, select_kernel
from meanfield.reduction import ClusterReduction, atoms_velocity, tokens_engine_pays
from meanfield.integration import AdaptiveStep, ExtrapolatedImplicitEuler, explicit_adaptive_step, tableau_named
from meanfield.integration.tableaux import ExplicitTableau
from meanfield.models import SelfAttention
from meanfield.records import CIRCLE
from meanfield.sphere import circle_points

from .operators import gauss_cell_averages, solve_cyclic_tridiagonal
from ..grid_solver import DATASET_PARAMETERS, Diagnosis, GridSolver, UnboundedTransport, check_measure_model
from ..tolerance import ROUNDOFF

TWO_PI = 2.0 * np.pi

#: Newton steps that polish the quantile of a density given as a callable (from linear inversion).
QUANTILE_NEWTON_STEPS = 2


#: The Parameters section of the methods that read the labels' positions (``{positions_parameters}``).
POSITIONS_PARAMETERS = """
Parameters
----------
positions : numpy.ndarray, shape (points,)
    The labels' positions :math:`X_i = X(m_i)` (angles, nondecreasing, over one turn).
"""


@dataclass(frozen=True)
class PointMasses:
    r"""A discrete measure on the circle: Dirac masses ``masses`` at ``angles``.

    An initial measure for :class:`CircleLagrangian` (clusters from the start).

    Parameters
    ----------
    angles : array_like, shape (J,)
        Positions of the masses (radians, any real; stored modulo :math:`2\pi`, sorted).
    masses : array_like, shape (J,)
        Positive masses (normalized to total one).

    Raises
    ------
    ValueError
        If the arrays are empty, of different lengths, not finite, or a mass is not positive.
    """

    angles: np.ndarray
    masses: np.ndarray

    def __post_init__(self) -> None:
        angles = np.asarray(self.angles, dtype=float).ravel()
        masses = np.asarray(self.masses, dtype=float).ravel()
        if angles.size == 0 or angles.shape != masses.shape:
            raise ValueError(f"angles and masses must be non-empty and of one length, got {angles.size} "
                             f"and {masses.size}")
        if not (np.all(np.isfinite(angles)) and np.all(np.isfinite(masses))):
            raise ValueError("angles and masses must be finite")
        if np.any(masses <= 0):
            raise ValueError(f"masses must be positive, got minimum {masses.min():.3g}")
        order = np.argsort(np.mod(angles, TWO_PI))
        object.__setattr__(self, "angles", np.mod(angles, TWO_PI)[order])
        object.__setattr__(self, "masses", masses[order] / masses.sum())


def mass_labels(points: int) -> np.ndarray:
    """The labels :math:`m_i = (i + 1/2)/M` of ``M = points`` equal masses."""
    return (np.arange(points) + 0.5) / points


@fill_docstrings(positions_parameters=POSITIONS_PARAMETERS, dataset_parameters=DATASET_PARAMETERS)
@dataclass(frozen=True, eq=False)
class CircleLagrangian(GridSolver):
    r"""The mean-field equation on the circle for measures, in mass coordinates (module docstring).

    Parameters
    ----------
    model : SelfAttention or ZonalAggregation
        Any model whose particle system lives on the circle (2 x 2 matrices or zonal, heads,
        external fields), not causal; any diffusion.
    points : int
        ``M``: the number of mass labels, each of mass ``1/M``.
    cells : int
        Cells of the recorded averages ``rho``.
    rtol : float
        Local error per step in the root-mean-square position of the labels (the Wasserstein-2
        distance of the two measures), relative to the labels' root-mean-square distance from
        the uniform measure's quantile (the meaning of ``solvers.tolerance``).
    tableau : str or ExplicitTableau
        The embedded pair of ``D = 0``.
    implicit_substeps : int
        ``D > 0``: the extrapolation depth of the linearly implicit Euler step (as :class:`CircleFV`).
    cluster_separation : float
        Gap (radians) between consecutive labels that separates two clusters.
    min_cluster_mass : float
        Lighter runs of labels are stray mass between clusters (the depleted regions keep a
        few labels), not clusters; their mass is in no cluster.
    kernel : str
        The particle engine of the velocity (``meanfield.engines.select_kernel``).
    width : float
        ``D = 0``: labels whose positions lie within this distance (chord) of one another
        become one atom after each step (``meanfield.reduction``): their positions are set
        to the group's mean, and the velocity is then that of the measure's distinct atoms
        (the labels' engine with each label at its atom while the atoms are nearly as many,
        the kernel's series over the atoms weighted by their label counts where it costs
        less, else the model's ``velocity_field``), so a tight cluster costs one atom and no stiffness:
        a run to :math:`t = 10^6` costs about what one to the first merge does. ``0`` (the
        default) never reduces.
    tolerance : float, optional
        The largest change of the velocity field at the atoms a reduction may make (default
        ``rtol``); a larger one ends the run (:class:`~meanfield.StepSizeCollapse`, with the
        outputs so far) instead of continuing.
    """

    model: object
    points: int = 4096
    cells: int = 1024
    rtol: float = 1e-6
    tableau: str | ExplicitTableau = "dormand_prince"
    implicit_substeps: int = 3
    cluster_separation: float = 0.2
    min_cluster_mass: float = 0.01
    kernel: str = "auto"
    width: float = 0.0
    tolerance: float | None = None
    labels: np.ndarray = field(init=False, repr=False)
    engine: object = field(init=False, repr=False)
    _atoms_velocity: object = field(init=False, repr=False)
    reduction: ClusterReduction | None = field(init=False, repr=False)

    name = "CircleLagrangian"
    geometry = CIRCLE
    default_max_steps = 1_000_000
    energy_scaled = False

    def __post_init__(self) -> None:
        check_int(self.points, "points", minimum=8)
        check_int(self.cells, "cells", minimum=8)
        check_rtol(self.rtol)
        check_int(self.implicit_substeps, "implicit_substeps", minimum=2)
        check_real(self.cluster_separation, "cluster_separation", minimum=0.0, strictly=True)
        check_real(self.min_cluster_mass, "min_cluster_mass", minimum=0.0)
        object.__setattr__(self, "tableau", tableau_named(self.tableau))
        model = self.model
        check_measure_model(model, self.name, 2, "CausalCircleFV")
        object.__setattr__(self, "labels", mass_labels(self.points))
        object.__setattr__(self, "engine", select_kernel(model, np.zeros((1, self.points, 2)), self.kernel))
        object.__setattr__(self, "_atoms_velocity", atoms_velocity(model, self.engine, 2))
        check_real(self.width, "width", minimum=0.0)
        if self.width > 0 and model.diffusion > 0:
            raise ValueError(f"width={self.width} reduces clusters to atoms, which diffusion (D = {model.diffusion}) "
                             "would spread at once: give width=0")
        object.__setattr__(self, "reduction", None if self.width == 0 else
                           ClusterReduction(model, self.width, self.rtol if self.tolerance is None else self.tolerance,
                                            energy_changes=False))

    @property
    def theta(self) -> np.ndarray:
        """Centres of the recording cells, shape ``(cells,)``."""
        return (np.arange(self.cells) + 0.5) * (TWO_PI / self.cells)

    @property
    def _resolution_advice(self) -> str:
        return f"increase points (now {self.points})"

    # ------------------------------------------------------------------ the measure and its quantile
    def initial_quantile(self, rho0, *, name: str = "rho0") -> np.ndarray:
        r"""The labels' positions :math:`X(m_i)` of an initial measure, nondecreasing, in :math:`[0, 2\pi)` first.

        Parameters
        ----------
        rho0 : callable, numpy.ndarray or PointMasses
            A density of :math:`\theta` (a callable: its distribution function by 4-point
            Gauss on ``16 M`` cells, inverted there and polished by Newton steps), an array of
            ``cells`` cell values (a piecewise constant density, inverted exactly), or a
            :class:`PointMasses` (each label at the Dirac mass its mass falls in: exact when
            the masses are multiples of ``1/M``).
        name : str
            The argument's name in error messages.

        Returns
        -------
        numpy.ndarray, shape (points,)
            The positions :math:`X(m_i)` of the labels :math:`m_i = (i + 1/2)/M`.

        Raises
        ------
        ValueError
            If the density is negative, not finite, of zero mass or of the wrong shape.
        """
        if isinstance(rho0, PointMasses):
            edges = np.concatenate([[0.0], np.cumsum(rho0.masses)])
            index = np.minimum(np.searchsorted(edges, self.labels, side="right") - 1, rho0.angles.size - 1)
            return rho0.angles[index]
        if callable(rho0):
            return density_quantiles(rho0, self.labels, cells=max(self.cells, 16 * self.points), name=name)
        values = check_density(rho0, (self.cells,), name, grid=f"{self.cells} equal cells")
        return _invert_piecewise_constant(values, self.labels)

    def distribution(self, positions: np.ndarray, theta: np.ndarray) -> np.ndarray:
        r"""The lifted distribution function :math:`G(\theta)` (:math:`G(\theta + 2\pi) = G(\theta) + 1`).

        Piecewise linear through the labels :math:`(X_i, m_i)` and their shifts by whole turns.

        {positions_parameters}
        theta : numpy.ndarray
            Angles (any real).

        Returns
        -------
        numpy.ndarray
            :math:`G(\theta)`, of the shape of ``theta``.
        """
        return labels_distribution(positions, self.labels, theta)

    def density(self, positions: np.ndarray) -> np.ndarray:
        """Cell averages of the measure on the ``cells`` recording cells: mass in each over its width.

        {positions_parameters}

        Returns
        -------
        numpy.ndarray, shape (cells,)
            The cell averages (a cluster's mass shows as one tall cell).
        """
        edges = np.arange(self.cells + 1) * (TWO_PI / self.cells)
        return np.diff(self.distribution(positions, edges)) / (TWO_PI / self.cells)

    def clusters(self, positions: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Masses and positions (in ``[0, 2 pi)``) of the clusters, heaviest first.

        A cluster is a maximal run of consecutive labels with gaps below ``cluster_separation``
        and mass at least ``min_cluster_mass``; a measure with no such gap is one cluster.

        {positions_parameters}

        Returns
        -------
        masses : numpy.ndarray
            The clusters' masses, heaviest first.
        positions : numpy.ndarray
            Their mean positions, in ``[0, 2 pi)``.
        """
        gaps = np.diff(np.concatenate([positions, [positions[0] + TWO_PI]]))
        breaks = np.flatnonzero(gaps > self.cluster_separation)
        if breaks.size == 0:
            angle = np.angle(np.mean(np.exp(1j * positions)))
            return np.ones(1), np.array([np.mod(angle, TWO_PI)])
        start = (breaks[-1] + 1) % self.points  # number the runs from just after a gap: none wraps
        order = (start + np.arange(self.points)) % self.points
        lifted = positions[order] + TWO_PI * (order < start)
        bounds = np.concatenate([[0], np.sort((breaks - start) % self.points) + 1])
        sizes = np.diff(bounds)
        means = np.add.reduceat(lifted, bounds[:-1]) / sizes
        order = np.argsort(-sizes, kind="stable")
        order = order[sizes[order] >= self.min_cluster_mass * self.points]
        return sizes[order] / self.points, np.mod(means[order], TWO_PI)

    # ------------------------------------------------------------------ the right-hand side
    def velocity(self, positions: np.ndarray) -> np.ndarray:
        r"""The attention velocity :math:`d X_i/dt` (angular) of the labels, ``D`` aside.

        {positions_parameters}

        Returns
        -------
        numpy.ndarray, shape (points,)
            The angular velocities.
        """
        if self.reduction is not None:
            atom, angles, counts = tied_atoms(positions)
            if angles.size < positions.size:  # labels reduced to atoms: the velocity of the distinct atoms
                unit = circle_points(angles)
                if tokens_engine_pays(self.engine, angles.size, self.points):  # the labels' engine, each at its atom
                    first = np.unique(atom, return_index=True)[1]
                    return _angular(unit, self.engine.velocity_unchecked(unit[atom][None])[0][first])[atom]
                masses = counts / self.points
                moved = (self.model.velocity_field(unit, unit, masses) if self._atoms_velocity is None
                         else self._atoms_velocity(unit, masses))
                return _angular(unit, moved)[atom]
        unit = circle_points(positions)
        return _angular(unit, self.engine.velocity_unchecked(unit[None])[0])

    def reduced(self, positions: np.ndarray) -> tuple[np.ndarray, list]:
        """The labels with each tight group of atoms (``reduction``) made one, and the merges.

        {positions_parameters}

        Returns
        -------
        positions : numpy.ndarray, shape (points,)
            Each label of a reduced group moved to the group's atom (on its own branch of the lift).
        merges : list of meanfield.reduction.ReducedGroup
        """
        atom, angles, counts = tied_atoms(positions)
        atoms = np.column_stack([circle_points(angles), counts / self.points])
        reduced, groups, merges = self.reduction(atoms, atoms)
        if groups is None:
            return positions, []
        target = np.arctan2(reduced[:, 1], reduced[:, 0])[groups[atom]]
        return positions + np.angle(np.exp(1j * (target - positions))), merges

    def _diffusion_velocity(self, positions: np.ndarray) -> np.ndarray:
        r"""The diffusion's velocity in mass coordinates, :math:`-D\,(1/(X_{i+1} - X_i) - 1/(X_i - X_{i-1}))`.

        {positions_parameters}

        Returns
        -------
        numpy.ndarray, shape (points,)
            The velocities (zero at ``D = 0``).
        """
        inverse = 1.0 / _gaps(positions)
        return -self.model.diffusion * (inverse - np.roll(inverse, 1))

    def rhs(self, positions: np.ndarray) -> np.ndarray:
        r"""The semi-discrete right-hand side :math:`dX_i/dt`.

        {positions_parameters}

        Returns
        -------
        numpy.ndarray, shape (points,)
            Attention and diffusion velocities.
        """
        return self.velocity(positions) + (self._diffusion_velocity(positions) if self.model.diffusion else 0.0)

    def _linearly_implicit_step(self, positions: np.ndarray, dt: float) -> np.ndarray:
        r"""One linearly implicit Euler step: :math:`(I - dt\,J)\,\Delta X = dt\,(v + f_D)`, ``J`` the diffusion's Jacobian.

        {positions_parameters}
        dt : float
            The step.

        Returns
        -------
        numpy.ndarray, shape (points,)
            The positions after the step.
        """
        spread = self.model.diffusion / _gaps(positions) ** 2  # D / (X_{i+1} - X_i)^2
        before = np.roll(spread, 1)
        change = solve_cyclic_tridiagonal(-dt * before, 1.0 + dt * (spread + before), -dt * spread,
                                          dt * self.rhs(positions))
        return positions + change

    # ------------------------------------------------------------------ GridSolver
    def _initial_state(self, rho0, continued: bool) -> np.ndarray:
        if not continued:
            positions = self.initial_quantile(rho0)
        else:
            positions = np.asarray(rho0, dtype=float)
            if positions.shape != (self.points,) or not np.all(np.isfinite(positions)):
                raise ValueError(f"a continued run takes the quantile of an earlier one (ds.position[-1], "
                                 f"{self.points} finite positions), got shape {positions.shape}")
        if self.model.diffusion > 0 and np.any(_gaps(positions) <= 0):
            raise ValueError("with diffusion the initial measure must have a density: labels at one position "
                             "(Dirac masses, or cells of zero density) have no finite entropy")
        return positions

    def continuation_state(self, ds: xr.Dataset) -> np.ndarray:
        """What :meth:`solve` takes with ``continued=True`` to go on from the end of ``ds``.

        {dataset_parameters}

        Returns
        -------
        numpy.ndarray
            The labels' last positions (the state; the density alone does not fix them where it
            has atoms).
        """
        return ds.position.values[-1]

    def _stepper(self, positions: np.ndarray, times: np.ndarray):
        discretisation = _MassTransport(self)
        if self.model.diffusion > 0:
            stepper = ExtrapolatedImplicitEuler(self._linearly_implicit_step, self.implicit_substeps,
                                                norm=discretisation.norm, tolerance=discretisation.tolerance)
            attempt = AdaptiveStep(stepper, admit=discretisation.admit)
        else:
            attempt = explicit_adaptive_step(discretisation, self.tableau)
        span = times[-1] - times[0]
        speed = np.abs(self.velocity(positions)).max()
        first = min(span, 1e-2 / max(speed, 1e-12)) if span > 0 else 1.0
        return attempt, first, discretisation.reductions

    def _diagnose(self, positions: np.ndarray, rho: np.ndarray) -> Diagnosis:
        energy = self.energy(positions)
        return Diagnosis({"mass": 1.0, "energy": energy, "lyapunov": self.lyapunov(positions, energy),
                          "min_density": float(rho.min())}, True, "")

    def _recorded_fields(self, positions: np.ndarray) -> dict:
        masses, where = self.clusters(positions)
        return {"position": (("label",), positions.copy()), "cluster_mass": (("cluster",), masses),
                "cluster_position": (("cluster",), where), "cluster_count": ((), float(masses.size))}

    def _recorded_coordinates(self) -> dict:
        return {"label": self.labels}

    def _grid_coordinates(self) -> dict[str, np.ndarray]:
        return {"theta": self.theta}

    def _recorded_settings(self) -> dict:
        scheme = ({"implicit_substeps": self.implicit_substeps} if self.model.diffusion > 0
                  else {"tableau": self.tableau.name})
        return {"points": self.points, "cells": self.cells, "rtol": self.rtol,
                "cluster_separation": self.cluster_separation, "min_cluster_mass": self.min_cluster_mass,
                "engine": self.engine.name, **scheme}

    # ------------------------------------------------------------------ functionals
    def energy(self, positions: np.ndarray) -> float:
        """The model's interaction energy of the labels' measure.

        {positions_parameters}

        Returns
        -------
        float
            NaN where the model has none (or it overflows).
        """
        model = self.model
        if not model.has_energy:
            return np.nan
        unit = circle_points(positions)[None]
        try:
            if isinstance(model, SelfAttention):
                return float(model.energy(unit, log_pair_sum=energy_pair_sum(model, unit))[0])
            return float(model.energy(unit)[0])
        except (ValueError, OverflowError):  # a field without potential; an energy beyond double precision
            return np.nan

    def entropy(self, positions: np.ndarray) -> float:
        r"""The discrete entropy :math:`\int\rho\log\rho = \sum_i \frac1M \log\frac{1/M}{X_{i+1} - X_i}`.

        {positions_parameters}

        Returns
        -------
        float
            The entropy (infinite for coinciding labels).
        """
        return float(-np.mean(np.log(self.points * _gaps(positions))))

    def lyapunov(self, positions: np.ndarray, energy: float) -> float:
        r"""A functional the flow does not increase (as ``CircleOperators.lyapunov``), or NaN.

        Gradient flows of the energy (USA, zonal aggregation): :math:`D\int\rho\log\rho - cE`;
        zonal SA without diffusion: :math:`-cE`; otherwise none is known.

        {positions_parameters}
        energy : float
            :meth:`energy` of the same positions.

        Returns
        -------
        float
            The functional, or NaN.
        """
        model = self.model
        if model.external is not None or not model.is_zonal:
            return np.nan
        scale = model.value_scale if isinstance(model, SelfAttention) else 1.0
        if model.velocity_is_linear:
            return (model.diffusion * self.entropy(positions) if model.diffusion else 0.0) - scale * energy
        return -scale * energy if model.diffusion == 0 else np.nan

    def _deviation_norm(self, positions: np.ndarray) -> float:
        """Root-mean-square distance of the labels from the uniform measure's quantile nearest to them.

        {positions_parameters}

        Returns
        -------
        float
            Zero exactly for the uniform measure (up to a rotation).
        """
        offset = positions - TWO_PI * self.labels
        return float(np.sqrt(np.mean((offset - offset.mean()) ** 2)))


def labels_distribution(positions: np.ndarray, labels: np.ndarray, theta: np.ndarray) -> np.ndarray:
    r"""The lifted distribution function :math:`G(\theta)` of mass labels on the circle (:math:`G(\theta + 2\pi) =
    G(\theta) + 1`): piecewise linear through :math:`(X_i, m_i)` and their shifts by whole turns.

    ``positions`` are the labels' lifted positions :math:`X_i` in label order (within one turn of
    the first), ``labels`` their masses :math:`m_i` in :math:`(0, 1)`.
    """
    lifted = np.concatenate([positions - TWO_PI, positions, positions + TWO_PI])
    lifted = np.maximum.accumulate(lifted)  # labels that crossed by round-off keep a monotone G
    mass = np.concatenate([labels - 1.0, labels, labels + 1.0])
    turns = np.floor((theta - positions[0]) / TWO_PI)
    return np.interp(theta - TWO_PI * turns, lifted, mass) + turns


def _gaps(positions: np.ndarray) -> np.ndarray:
    """``X_{i+1} - X_i`` with the last label followed by the first one a turn later."""
    return np.diff(np.concatenate([positions, [positions[0] + TWO_PI]]))


def density_quantiles(rho0, labels: np.ndarray, *, cells: int, name: str = "rho0") -> np.ndarray:
    r"""The quantiles :math:`X(m)` of a density ``rho0(theta)`` on the circle at the mass labels ``m``.

    Its distribution function by 4-point Gauss on ``cells`` cells, inverted there and polished
    by Newton steps on the density itself.

    Parameters
    ----------
    rho0 : callable
        The density of :math:`\theta` (any positive mass; normalised here).
    labels : numpy.ndarray, shape (points,)
        Increasing mass labels in ``(0, 1)``.
    cells : int
        Cells of the distribution function's quadrature.
    name : str
        The argument's name in error messages.

    Returns
    -------
    numpy.ndarray, shape (points,)
        :math:`X(m_i)`, nondecreasing, in :math:`[0, 2\pi)` first.
    """
    values = gauss_cell_averages(rho0, cells, name)
    quantile = _invert_piecewise_constant(values, labels)
    return _polish_quantile(rho0, values, quantile, labels)


def _invert_piecewise_constant(values: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """Quantile of the piecewise constant density ``values`` (cells of one grid) at ``labels``."""
    cells = values.size
    width = TWO_PI / cells
    cumulative = np.concatenate([[0.0], np.cumsum(values)])
    cumulative /= cumulative[-1]
    # the cell whose mass interval holds the label: it has positive mass
    cell = np.clip(np.searchsorted(cumulative, labels, side="right") - 1, 0, cells - 1)
    inside = (labels - cumulative[cell]) / (cumulative[cell + 1] - cumulative[cell])
    return (cell + inside) * width


def _polish_quantile(rho0: Callable, values: np.ndarray, quantile: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """Newton steps on :math:`F(X) = m`, ``F`` the distribution of the callable ``rho0`` (Gauss on each cell)."""
    cells = values.size
    width = TWO_PI / cells
    total = values.sum() * width
    cumulative = np.concatenate([[0.0], np.cumsum(values) * width / total])
    nodes, weights = roots_legendre(8)
    for _ in range(QUANTILE_NEWTON_STEPS):
        cell = np.clip(np.floor(quantile / width).astype(int), 0, cells - 1)
        left = cell * width
        span = quantile - left
        inner = np.asarray(rho0(left[:, None] + 0.5 * span[:, None] * (nodes + 1)), dtype=float)
        mass = cumulative[cell] + 0.5 * span * (inner @ weights) / total
        slope = np.asarray(rho0(quantile), dtype=float) / total
        moving = slope > 0
        quantile = np.where(moving, quantile - (mass - labels) / np.where(moving, slope, 1.0), quantile)
    return quantile


class _MassTransport(UnboundedTransport):
    """The solver as a :class:`~meanfield.integration.protocols.Discretisation` of the labels' motion."""

    def __init__(self, solver) -> None:
        super().__init__(solver)
        self.merges = 0
        self.largest_velocity_error = 0.0

    def norm(self, change: np.ndarray) -> float:
        return float(np.sqrt(np.mean(change ** 2)))

    def tolerance(self, positions: np.ndarray) -> float:
        scale = TWO_PI + float(np.abs(positions).max())
        return self.solver.rtol * self.solver._deviation_norm(positions) + ROUNDOFF * scale

    def reductions(self) -> dict:
        """What the reductions did (the run's settings), with ``width > 0``."""
        if self.solver.reduction is None:
            return {}
        return {"width": self.solver.width, "tolerance": self.solver.reduction.tolerance, "merges": self.merges,
                "largest_velocity_error": self.largest_velocity_error}

    def admit(self, old: np.ndarray, new: np.ndarray) -> tuple[np.ndarray | None, str | None]:
        """With diffusion the labels must keep their order (a density between any two); with ``width``, the reduction."""
        if self.solver.model.diffusion > 0 and np.any(_gaps(new) <= 0):
            return None, "order"
        if self.solver.reduction is not None:
            new, merges = self.solver.reduced(new)  # ReductionRefused past the tolerance: the driver ends the run
            self.merges += len(merges)
            self.largest_velocity_error = max([self.largest_velocity_error] + [m.velocity_error for m in merges])
        return new, None


#: Labels closer than this (radians) are one atom: a reduced group's labels, equal up to the round-off of
#: their branches of the lift.
TIED = 1e-12


def tied_atoms(positions: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The distinct atoms of the labels: each label's atom, the atoms' angles in ``[0, 2 pi)`` and label counts.

    Labels within :data:`TIED` of one another on the circle (across the turn too) are one atom.
    Atoms are numbered by angle (a stable sort, so ties keep the labels' order), the one that
    wraps across the turn first.
    """
    angles = _turn_angles(positions)
    return _tied_atoms(angles, np.argsort(angles, kind="stable"), TIED)


@numba.njit(cache=True, error_model="numpy")
def _turn_angles(positions: np.ndarray) -> np.ndarray:
    """``np.mod(positions, 2 pi)`` bit for bit, without its ``fmod`` within a turn of ``[0, 2 pi)`` (every label).

    NumPy's (and Python's) float modulo is ``fmod``, plus ``2 pi`` where that is negative, and
    ``+0.0`` for a zero. Within ``(0, 2 pi)`` it is the position; on ``[2 pi, 4 pi)`` ``fmod`` is
    the exact ``x - 2 pi``, which the subtraction gives exactly (Sterbenz); on ``(-2 pi, 0)``
    ``fmod`` is ``x`` itself and the modulo adds ``2 pi`` as done here.
    """
    angles = np.empty(positions.size)
    for i in range(positions.size):
        x = positions[i]
        if 0.0 < x < TWO_PI:
            angles[i] = x
        elif TWO_PI <= x < 2.0 * TWO_PI:
            angles[i] = x - TWO_PI
        elif -TWO_PI < x < 0.0:
            angles[i] = x + TWO_PI
        else:  # zeros of either sign (to +0.0), and beyond
            angles[i] = x % TWO_PI
    return angles


@numba.njit(cache=True, error_model="numpy")
def _tied_atoms(angles: np.ndarray, order: np.ndarray, tied: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`tied_atoms` of angles in ``[0, 2 pi)`` and their stable sort, in two passes (it runs at every stage;
    NumPy sorts the labels' nearly sorted angles faster than a compiled merge sort)."""
    n = angles.size
    ordered = angles[order]
    sorted_atom = np.zeros(n, dtype=np.int64)
    for i in range(1, n):
        sorted_atom[i] = sorted_atom[i - 1] + (ordered[i] - ordered[i - 1] > tied)
    last = sorted_atom[n - 1]
    wraps = last > 0 and ordered[0] + TWO_PI - ordered[n - 1] <= tied  # the last atom is the first one's
    count = last if wraps else last + 1
    atom = np.empty(n, dtype=np.int64)
    counts = np.zeros(count, dtype=np.int64)
    first_angles = np.empty(count)
    for i in range(n):
        number = 0 if wraps and sorted_atom[i] == last else sorted_atom[i]
        atom[order[i]] = number
        counts[number] += 1
        if i == 0 or (sorted_atom[i] != sorted_atom[i - 1] and number == sorted_atom[i]):
            first_angles[number] = ordered[i]
    return atom, first_angles, counts


def _angular(unit: np.ndarray, tangent: np.ndarray) -> np.ndarray:
    """The angular speeds of tangent vectors at points of the circle."""
    return unit[:, 0] * tangent[:, 1] - unit[:, 1] * tangent[:, 0]
