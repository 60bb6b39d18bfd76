r"""The sphere through cluster formation: harmonics while they resolve the density, then weighted particles.

Without diffusion the mean-field equation transports a measure along the velocity it
generates, so a weighted sum of Diracs :math:`\mu = \sum_j m_j\delta_{x_j}` is an exact
solution when each atom follows :math:`\dot x_j = v[\mu](x_j)` with its mass fixed
(the model's ``velocity_field`` of the measure at its atoms; for zonal attention the kernel's
harmonic series once the atoms are many, :class:`meanfield.engines.WeightedVelocity`).
:class:`SphereWeightedParticles` evolves such a measure; started from the Gauss-grid
quadrature of a density (an atom at each grid point, of mass :math:`\rho(x_j)\,w_j`,
:math:`w_j` the grid's area weight) it matches every moment of degree up to about
:math:`2 l_{max}` of the density it starts from, and the velocity of the atoms is that of the
density up to the kernel's own truncation.
Clusters are then what they are, atoms coming together, with no grid to run out of.

:class:`SphereSpectralParticles` runs :class:`~solvers.SphereSpectral` while it resolves the
density (its estimated error, and its negative values, below ``error_level`` times
:math:`\max\rho`) and, after the first accepted step at
which it no longer does, continues from there with the quadrature atoms of that density
(negative values set to zero and the mass they removed restored): one call follows a run
from smooth data to merged clusters, as :class:`~solvers.CircleFVLagrangian` does on the
circle. The hand-over time and each output's solver are recorded.

After the hand-over ``rho`` is the measure's mass in each cell of the Gauss grid over the
cell's area (cells: latitude bands whose areas are the Gauss weights, longitude sectors
centred on the grid's longitudes), which at the hand-over equals the density at the grid
points; the atoms' positions and masses and the clusters are recorded at every output.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import xarray as xr

from meanfield.checks import EXP_OVERFLOW, check_density, check_int, check_real, check_rtol
from meanfield.engines import WeightedVelocity
from meanfield.integration import explicit_adaptive_step, tableau_named
from meanfield.integration.tableaux import ExplicitTableau
from meanfield.models import SelfAttention
from meanfield.reduction import ClusterReduction, cluster_masses
from meanfield.records import SPHERE, geometry_name
from meanfield.sphere import log_sphere_area, normalize
from meanfield.docstrings import fill_docstrings

from ..grid_solver import DATASET_PARAMETERS, Diagnosis, GridSolver, UnboundedTransport, check_measure_model
from ..chain import SolverPair
from .spectral import SphereSpectral, energy_is_scaled
from .gegenbauer import cell_masses, gauss_rule, law_cells, sphere_product_rule
from .grid import SphereGrid
from ..tolerance import ROUNDOFF

#: The Parameters section of the methods that read the state, the atoms (``{atoms_parameters}``).
ATOMS_PARAMETERS = """
Parameters
----------
atoms : numpy.ndarray, shape (atoms, d + 1)
    Unit vectors and masses (the last column).
"""


@fill_docstrings(dataset_parameters=DATASET_PARAMETERS, atoms_parameters=ATOMS_PARAMETERS)
@dataclass(frozen=True, eq=False)
class SphereWeightedParticles(GridSolver):
    r"""The mean-field equation on :math:`S^2` (or :math:`S^{d-1}`) without diffusion, for a weighted sum of Diracs (module docstring).

    Parameters
    ----------
    model : SelfAttention or ZonalAggregation
        Any model of tokens on :math:`S^{d-1}` with ``diffusion = 0`` that is not causal
        (matrices, heads and external fields included).
    lmax : int
        The recording grid: that of :class:`~solvers.SphereSpectral` at this ``lmax`` (the cells
        of the recorded ``rho``).
    quadrature_lmax : int, optional
        The Gauss grid whose points and weights turn a density into atoms (default ``lmax``):
        the particle method's resolution. The atoms' moments are exact at the start; as the
        flow compresses the measure into clusters, the quadrature of the transported density
        loses accuracy, and more atoms (a larger ``quadrature_lmax``, cost growing as the square
        of the atom count) reduce that error.
    rtol : float
        Local error per step: the largest change of an atom's position (a unit vector) the
        error estimate lets through.
    tableau : str or ExplicitTableau
        The embedded Runge-Kutta pair (``meanfield.integration.TABLEAUX``).
    cluster_separation : float
        Atoms closer than this (chord length) are in one cluster (linked in chains).
    min_cluster_mass : float
        Lighter groups are stray mass between clusters, in no cluster.
    dropped_mass : float
        When a density is turned into atoms, the lightest atoms are dropped while their total
        mass stays below this (the empty parts of the sphere cost no pair sums); recorded.
    merge_distance : float, optional
        Atoms closer than this (chord length) after a step become one, of their total mass at
        their mass-weighted mean (normalized): a cluster of atoms then costs the pair sums of
        one. Default ``rtol``: the steps' error lets through changes of that size in every
        atom, so closer atoms are not told apart (their distances stall near it instead of
        shrinking as the exact flow's do). A merge moves each merged atom by less than this
        distance (its mass times it, in Wasserstein-1); ``0`` never merges (tokens of mass
        ``1/n`` then follow the particle system). Groups linked by such distances merge when
        their diameter is at most it (``meanfield.reduction.ClusterReduction``), and each
        merge measures how much it changes the velocity field at the atoms.
    tolerance : float, optional
        The largest change of the velocity field a merge may make (default ``rtol``); a larger
        one ends the run (:class:`~meanfield.ReductionRefused`, with the outputs so far).
    interaction : {"auto", "zonal", "general"}
        The path of the :class:`~solvers.SphereSpectral` whose energy convention the recorded
        energy follows (:math:`E`, or :math:`e^{-\beta B}E` where it would overflow), so that a
        run it continues joins.
    d : int
        The dimension: 3 (the sphere, as above), or more: the atoms of a density are those of a
        product Gauss rule of :math:`S^{d-1}` (``ProductQuadrature``, ``quadrature_nodes``
        points per angle, :math:`2\,\mathrm{nodes}^{d-1}` atoms: 1024 at ``d = 4`` and 8 nodes,
        65 536 at ``d = 6``; the pair sums cost their square per right-hand side), and the
        recorded ``rho`` is the measure's law of :math:`u = \langle x, e\rangle` relative to the
        uniform one on the nodes of :class:`~solvers.ZonalSphereSpectral` at ``lmax``
        (``LawOfU``).
    quadrature_nodes : int
        ``d > 3``: the product rule's nodes per angle (exact to degree ``2 nodes - 1``).
    """

    model: object
    lmax: int = 31
    quadrature_lmax: int | None = None
    rtol: float = 1e-6
    tableau: str | ExplicitTableau = "dormand_prince"
    cluster_separation: float = 0.2
    min_cluster_mass: float = 0.01
    dropped_mass: float = 1e-12
    merge_distance: float | None = None
    tolerance: float | None = None
    interaction: str = "auto"
    d: int = 3
    quadrature_nodes: int = 8
    grid: SphereGrid | LawOfU = field(init=False, repr=False)
    quadrature: SphereGrid | ProductQuadrature = field(init=False, repr=False)
    energy_scaled: bool = field(init=False, repr=False)
    reduction: ClusterReduction = field(init=False, repr=False)
    _weighted_velocity: WeightedVelocity = field(init=False, repr=False)

    name = "SphereWeightedParticles"
    default_max_steps = 1_000_000
    _resolution_advice = ""

    def __post_init__(self) -> None:
        check_int(self.lmax, "lmax", minimum=2)
        if self.quadrature_lmax is not None:
            check_int(self.quadrature_lmax, "quadrature_lmax", minimum=2)
        check_rtol(self.rtol)
        check_real(self.cluster_separation, "cluster_separation", minimum=0.0, strictly=True)
        check_real(self.min_cluster_mass, "min_cluster_mass", minimum=0.0)
        check_real(self.dropped_mass, "dropped_mass", minimum=0.0)
        if self.merge_distance is None:
            object.__setattr__(self, "merge_distance", self.rtol)
        check_real(self.merge_distance, "merge_distance", minimum=0.0)
        object.__setattr__(self, "tableau", tableau_named(self.tableau))
        model = self.model
        object.__setattr__(self, "reduction", ClusterReduction(model, self.merge_distance,
                                                               self.rtol if self.tolerance is None else self.tolerance,
                                                               energy_changes=False))
        check_int(self.d, "d", minimum=3)
        check_measure_model(model, self.name, self.d, "CausalSphereSpectral")
        object.__setattr__(self, "_weighted_velocity", WeightedVelocity(model, self.d))
        if model.diffusion > 0:
            raise ValueError(f"weighted particles carry no diffusion (got diffusion={model.diffusion}): a density "
                             "with D > 0 stays smooth; solve it with SphereSpectral")
        if self.d > 3:  # S^{d-1}: a product rule, and the law of u = <x, e> recorded
            check_int(self.quadrature_nodes, "quadrature_nodes", minimum=1)
            object.__setattr__(self, "grid", LawOfU(self.d, self.lmax))
            object.__setattr__(self, "quadrature", ProductQuadrature(self.d, self.quadrature_nodes))
            # E itself, times e^{-beta B} where it would overflow (SA at large beta), as ZonalSphereSpectral records it
            object.__setattr__(self, "energy_scaled", bool(model.has_energy and not model.time_rescaled and
                                                           model.beta * model.logit_bound > EXP_OVERFLOW))
            return
        object.__setattr__(self, "grid", SphereGrid(self.lmax))
        same = self.quadrature_lmax in (None, self.lmax)
        object.__setattr__(self, "quadrature", self.grid if same else SphereGrid(self.quadrature_lmax))
        object.__setattr__(self, "energy_scaled", energy_is_scaled(model, self.lmax, self.interaction))

    # ------------------------------------------------------------------ atoms
    def quadrature_atoms(self, values: np.ndarray, *, name: str = "rho0") -> np.ndarray:
        r"""The atoms of a density's Gauss-grid quadrature: grid points with masses :math:`\rho(x_j)\,w_j`.

        Parameters
        ----------
        values : numpy.ndarray, shape ``quadrature.shape``
            The density at the quadrature grid's points (nonnegative).
        name : str
            The argument's name in error messages.

        Returns
        -------
        numpy.ndarray, shape (atoms, d + 1)
            Unit vectors and masses; the lightest atoms, of total mass below ``dropped_mass``,
            are left out.
        """
        values = check_density(values, self.quadrature.shape, name, grid=self.quadrature.description)
        masses = (values * self.quadrature.area_weight).ravel()
        order = np.argsort(masses, kind="stable")
        kept = order[np.cumsum(masses[order]) > self.dropped_mass]
        kept.sort()
        return np.column_stack([self.quadrature.points().reshape(-1, self.d)[kept], masses[kept]])

    def band_limited_atoms(self, coefficients: np.ndarray, grid: SphereGrid, *,
                           name: str = "the density") -> tuple[np.ndarray, float]:
        """The quadrature atoms of a density given by its harmonic coefficients, and the negative mass removed.

        The density is evaluated on the quadrature grid (exactly, when ``quadrature_lmax`` is at
        least the coefficients' degree); negative values are set to zero and the mass they
        removed is taken back from the rest, proportionally.

        Parameters
        ----------
        coefficients : numpy.ndarray
            Its coefficients in ``grid``'s (shtns) layout.
        grid : SphereGrid
            The grid (degree) they belong to.
        name : str
            The density's name in error messages.

        Returns
        -------
        atoms : numpy.ndarray, shape (atoms, d + 1)
        clipped : float
            The negative mass set to zero.
        """
        values = grid.values_on(coefficients, self.quadrature)
        weight = self.quadrature.area_weight
        positive = np.maximum(values, 0.0)
        clipped = float(np.sum(weight * (positive - values)))
        if clipped > 0:
            positive *= np.sum(weight * values) / np.sum(weight * positive)
        return self.quadrature_atoms(positive, name=name), clipped

    def cell_edges(self) -> tuple[np.ndarray, float]:
        r"""The recording cells: :math:`\cos\theta` at the latitude bands' edges (north to south), and the sector width.

        Each band holds one Gauss latitude and has the area of its weight, so a cell's area is
        the grid's area weight.

        Returns
        -------
        z_edges : numpy.ndarray, shape (nlat + 1,)
            From 1 down to -1.
        width : float
            The longitude sectors' width, centred on the grid's longitudes.
        """
        weights = self.grid.area_weight[:, 0] / (2 * np.pi / self.grid.shape[1])
        return 1.0 - np.concatenate([[0.0], np.cumsum(weights)]), 2 * np.pi / self.grid.shape[1]

    @property
    def geometry(self) -> str:
        return geometry_name(self.d)

    def density(self, atoms: np.ndarray) -> np.ndarray:
        """The measure's mass per recording cell over the cell's area (``d > 3``: the law of :math:`u`'s, relative to uniform).

        {atoms_parameters}

        Returns
        -------
        numpy.ndarray, shape ``grid.shape``
            Cell averages of the measure (at the quadrature atoms of a density: that density
            at the grid points).
        """
        if self.d > 3:
            return self.grid.relative_density(atoms[:, -2], atoms[:, -1])
        z_edges, width = self.cell_edges()
        x = atoms[:, :-1]
        band = np.clip(np.searchsorted(-z_edges, -np.clip(x[:, 2], -1.0, 1.0), side="right") - 1,
                       0, self.grid.shape[0] - 1)
        sector = np.floor((np.arctan2(x[:, 1], x[:, 0]) + 0.5 * width) / width).astype(int) % self.grid.shape[1]
        mass = np.bincount(band * self.grid.shape[1] + sector, weights=atoms[:, -1],
                           minlength=self.grid.area_weight.size)
        return mass.reshape(self.grid.shape) / self.grid.area_weight

    def merged(self, atoms: np.ndarray) -> tuple[np.ndarray, list]:
        """The atoms with each tight group (linked by distances at most ``merge_distance``, of that diameter at most) made one.

        {atoms_parameters}

        Returns
        -------
        atoms : numpy.ndarray, shape (fewer, d + 1)
            Each group's total mass at its normalized mass-weighted mean, in the order of the
            groups' first atoms (``atoms`` itself when no two are that close).
        merges : list of meanfield.reduction.ReducedGroup
            What each merge did (its velocity error).

        Raises
        ------
        ReductionRefused
            If the merges change the velocity field by more than ``tolerance``.
        """
        reduced, _, merges = self.reduction(atoms, atoms)
        return reduced, merges

    def clusters(self, atoms: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Masses and positions (unit vectors) of the clusters, heaviest first.

        A cluster is a connected group of atoms linked by distances below
        ``cluster_separation``, of mass at least ``min_cluster_mass``; its position is the
        normalized mass-weighted mean of its atoms.

        {atoms_parameters}

        Returns
        -------
        masses : numpy.ndarray, shape (clusters,)
        positions : numpy.ndarray, shape (clusters, 3)
        """
        return cluster_masses(atoms[:, :-1], atoms[:, -1], self.cluster_separation, self.min_cluster_mass)

    # ------------------------------------------------------------------ the right-hand side
    def rhs(self, atoms: np.ndarray) -> np.ndarray:
        """The right-hand side of the atoms' motion.

        {atoms_parameters}

        Returns
        -------
        numpy.ndarray, shape (atoms, d + 1)
            The velocities (the model's ``velocity_field`` of the atoms at themselves, through
            :class:`meanfield.engines.WeightedVelocity`), and zero for the masses.
        """
        change = np.zeros_like(atoms)
        change[:, :-1] = self._weighted_velocity(atoms[:, :-1], atoms[:, -1])
        return change

    # ------------------------------------------------------------------ GridSolver
    def _initial_state(self, rho0, continued: bool) -> np.ndarray:
        if not continued:
            values = rho0(self.quadrature.points()) if callable(rho0) else rho0
            atoms = self.quadrature_atoms(values)
            atoms[:, -1] /= atoms[:, -1].sum()
            return atoms
        atoms = np.array(rho0, dtype=float)
        if atoms.ndim != 2 or atoms.shape[1] != self.d + 1 or not np.all(np.isfinite(atoms)) or np.any(atoms[:, -1] < 0):
            raise ValueError(f"a continued run takes atoms of shape (n, {self.d + 1}): finite unit vectors and nonnegative "
                             f"masses (continuation_state of an earlier run), got shape {atoms.shape}")
        atoms[:, :-1] = normalize(atoms[:, :-1])
        return atoms

    def _stepper(self, atoms: np.ndarray, times: np.ndarray):
        transport = _AtomTransport(self)
        attempt = explicit_adaptive_step(transport, self.tableau)
        span = times[-1] - times[0]
        speed = float(np.abs(self.rhs(atoms)).max())
        first = min(span, 1e-2 / max(speed, 1e-12)) if span > 0 else 1.0
        return attempt, first, lambda: {"rhs_evaluations": attempt.stepper.evaluations, "initial_atoms": len(atoms),
                                        "merges": transport.merges,
                                        "largest_velocity_error": transport.largest_velocity_error}

    def _diagnose(self, atoms: np.ndarray, rho: np.ndarray) -> Diagnosis:
        energy = self.energy(atoms)
        return Diagnosis({"mass": float(atoms[:, -1].sum()), "energy": energy,
                          "lyapunov": self.lyapunov(energy), "min_density": float(rho.min())}, True, "")

    def energy(self, atoms: np.ndarray) -> float:
        r"""The model's interaction energy of the measure, as :class:`~solvers.SphereSpectral` records it.

        {atoms_parameters}

        Returns
        -------
        float
            :math:`E`, or :math:`e^{-\beta B}E` where the spectral solver at this ``lmax`` scales
            it (large-``beta`` SA), so that the two parts of a run join; NaN where the model has none.
        """
        model = self.model
        if not model.has_energy:
            return np.nan
        x, masses = atoms[None, :, :-1], atoms[None, :, -1]
        if self.energy_scaled and not model.time_rescaled:  # only SA at large beta overflows
            if model.external is not None:
                return np.nan
            return float(np.exp(model.log_energy(x, masses=masses)[0] - model.beta * model.logit_bound))
        return float(model.energy(x, masses=masses)[0])

    def lyapunov(self, energy: float) -> float:
        """The functional the flow decreases, as :class:`~solvers.SphereSpectral` records it.

        Parameters
        ----------
        energy : float
            :meth:`energy` of the measure.

        Returns
        -------
        float
            ``-cE`` for a zonal model (``V = cI``; ``-E`` for zonal aggregation); NaN otherwise.
        """
        if not self.model.is_zonal or self.model.external is not None:
            return np.nan
        return -(self.model.value_scale if isinstance(self.model, SelfAttention) else 1.0) * energy

    def _recorded_fields(self, atoms: np.ndarray) -> dict:
        masses, where = self.clusters(atoms)
        return {"atom_position": (("atom", "xyz"), atoms[:, :-1].copy()),
                "atom_mass": (("atom",), atoms[:, -1].copy()),
                "cluster_mass": (("cluster",), masses), "cluster_position": (("cluster", "xyz"), where),
                "cluster_count": ((), float(masses.size))}

    def _grid_coordinates(self) -> dict[str, np.ndarray]:
        if self.d > 3:
            return {"u": self.grid.nodes}
        return {"colatitude": self.grid.colatitude, "longitude": self.grid.longitude}

    def _recorded_settings(self) -> dict:
        resolution = ({"d": self.d, "quadrature_nodes": self.quadrature_nodes} if self.d > 3 else
                      {"quadrature_lmax": self.quadrature.lmax})
        return {"lmax": self.lmax, **resolution, "rtol": self.rtol,
                "tableau": self.tableau.name,
                "cluster_separation": self.cluster_separation, "min_cluster_mass": self.min_cluster_mass,
                "dropped_mass": self.dropped_mass, "merge_distance": self.merge_distance,
                "velocity": ("the kernel's series where it costs less than the pair sums, else the model's reference"
                             if self._weighted_velocity.series is not None else "the model's reference sums")}

    def continuation_state(self, ds: xr.Dataset) -> np.ndarray:
        """What ``solve(..., continued=True)`` takes to go on from the end of ``ds``.

        {dataset_parameters}

        Returns
        -------
        numpy.ndarray, shape (atoms, d + 1)
            The atoms at its last output.
        """
        return atoms_of(ds)


@dataclass(frozen=True, eq=False)
class ProductQuadrature:
    r"""The atoms' quadrature on :math:`S^{d-1}`, ``d > 3``: the product Gauss rule of ``nodes`` points per angle
    (``solvers.sphere.gegenbauer.sphere_product_rule``; :math:`2\,\mathrm{nodes}^{d-1}` atoms, exact to degree
    ``2 nodes - 1``), weights of total :math:`|S^{d-1}|` as a density's quadrature with respect to the surface measure."""

    d: int
    nodes: int
    _points: np.ndarray = field(init=False, repr=False)
    area_weight: np.ndarray = field(init=False, repr=False)

    def __post_init__(self) -> None:
        points, weights = sphere_product_rule(self.d, self.nodes)
        object.__setattr__(self, "_points", points)
        object.__setattr__(self, "area_weight", weights * np.exp(log_sphere_area(self.d)))

    @property
    def shape(self) -> tuple[int]:
        return self.area_weight.shape

    @property
    def description(self) -> str:
        """The rule in words, for messages."""
        return f"the product Gauss rule of {self.nodes} nodes per angle on S^{self.d - 1} ({self.shape[0]} atoms)"

    def points(self) -> np.ndarray:
        return self._points


@dataclass(frozen=True, eq=False)
class LawOfU:
    r"""The recording of a measure on :math:`S^{d-1}`, ``d > 3``: its law of :math:`u = \langle x, e\rangle`
    on the cells around :class:`~solvers.ZonalSphereSpectral`'s nodes at ``lmax``, relative to the uniform law."""

    d: int
    lmax: int
    nodes: np.ndarray = field(init=False, repr=False)
    weights: np.ndarray = field(init=False, repr=False)
    edges: np.ndarray = field(init=False, repr=False)

    def __post_init__(self) -> None:
        nodes, weights = gauss_rule(self.d, -(-3 * (self.lmax + 1) // 2))
        object.__setattr__(self, "nodes", nodes)
        object.__setattr__(self, "weights", weights)
        object.__setattr__(self, "edges", law_cells(self.d, nodes, weights))

    def relative_density(self, u: np.ndarray, masses: np.ndarray) -> np.ndarray:
        """The atoms' mass per cell over the uniform law's there."""
        return cell_masses(self.edges, u, masses) / self.weights


def atoms_of(ds: xr.Dataset, index: int = -1) -> np.ndarray:
    """The ``(n, d + 1)`` atoms recorded at output ``index`` (padding dropped)."""
    position, mass = ds.atom_position.values[index], ds.atom_mass.values[index]
    kept = np.isfinite(mass)
    return np.column_stack([position[kept], mass[kept]])


class _AtomTransport(UnboundedTransport):
    """The atoms' motion as a :class:`~meanfield.integration.protocols.Discretisation`, the merges counted."""

    def __init__(self, solver) -> None:
        super().__init__(solver)
        self.merges = 0
        self.largest_velocity_error = 0.0

    def norm(self, change: np.ndarray) -> float:
        return float(np.sqrt(np.max(np.sum(change[:, :-1] ** 2, axis=1))))

    def tolerance(self, atoms: np.ndarray) -> float:
        return self.solver.rtol + ROUNDOFF

    def admit(self, old: np.ndarray, new: np.ndarray) -> tuple[np.ndarray, None]:
        new[:, :-1] = normalize(new[:, :-1])
        reduced, merges = self.solver.merged(new)
        self.merges += len(merges)
        self.largest_velocity_error = max([self.largest_velocity_error] + [merge.velocity_error for merge in merges])
        return reduced, None


@dataclass(frozen=True, eq=False)
class SphereSpectralParticles(SolverPair):
    r""":class:`~solvers.SphereSpectral` while it resolves the density, then :class:`SphereWeightedParticles` (module docstring).

    Parameters
    ----------
    model : SelfAttention or ZonalAggregation
        Any model both solvers take; the hand-over needs ``diffusion = 0`` (with diffusion the
        run stays spectral, and warns where it stops resolving the density).
    lmax, rtol, error_level, tail_threshold, interaction, tableau, outputs, threads
        The spectral solver's (:class:`~solvers.SphereSpectral`): it hands over after the first
        step at which it no longer resolves the density (by default: its estimated error passes
        ``error_level`` times :math:`\max\rho`); ``lmax`` and ``rtol`` are also the particles'.
    quadrature_lmax, cluster_separation, min_cluster_mass, dropped_mass, merge_distance
        The particles' (:class:`SphereWeightedParticles`; the cluster rule is applied to every
        output, before the hand-over to the density's quadrature atoms).

    Notes
    -----
    :meth:`solve` records what :class:`~solvers.SphereSpectral` records, with
    ``atom_position``, ``atom_mass`` (NaN before the hand-over), the clusters' masses and
    positions (of the density's quadrature atoms before it), and ``particles`` (bool per time:
    which solver); ``attrs["settings"]`` holds ``handover_time`` (NaN: the harmonics covered
    every output), ``handover_clipped`` (the negative mass set to zero there) and both
    solvers' settings and step counts.
    """

    model: object
    lmax: int = 31
    rtol: float = 1e-6
    error_level: float | None = 1e-3
    tail_threshold: float = 1e-10
    interaction: str = "auto"
    tableau: str | ExplicitTableau = "dormand_prince"
    outputs: str = "stepped"
    cluster_separation: float = 0.2
    min_cluster_mass: float = 0.01
    dropped_mass: float = 1e-12
    quadrature_lmax: int | None = None
    merge_distance: float | None = None
    threads: int = 1
    spectral: SphereSpectral = field(init=False, repr=False)
    particles: SphereWeightedParticles | None = field(init=False, repr=False)

    name = "SphereSpectralParticles"
    geometry = SPHERE
    _pair = ("SphereSpectral", "SphereWeightedParticles")
    _flag = ("particles", 1)
    _recorded = ("lmax", "rtol")

    def __post_init__(self) -> None:
        object.__setattr__(self, "spectral", SphereSpectral(self.model, lmax=self.lmax, rtol=self.rtol,
                                                            tail_threshold=self.tail_threshold,
                                                            error_level=self.error_level,
                                                            interaction=self.interaction, tableau=self.tableau,
                                                            outputs=self.outputs, threads=self.threads))
        particles = None
        if self.model.diffusion == 0:
            particles = SphereWeightedParticles(self.model, lmax=self.lmax, quadrature_lmax=self.quadrature_lmax,
                                                rtol=self.rtol,
                                                cluster_separation=self.cluster_separation,
                                                min_cluster_mass=self.min_cluster_mass,
                                                dropped_mass=self.dropped_mass,
                                                merge_distance=self.merge_distance, interaction=self.interaction)
        object.__setattr__(self, "particles", particles)
        self._chained(self.spectral, particles)

    def _placeholders(self) -> tuple[dict[str, tuple[str, ...]], None]:
        return {"spectral_tail": ("time",)}, None
