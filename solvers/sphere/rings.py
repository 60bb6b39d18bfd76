r"""Zonal measures on :math:`S^{d-1}` through cluster formation: rings of mass in :math:`u = \langle x, e\rangle`.

A zonal measure is a mixture of rings, the uniform measures on the parallels
:math:`\{x : \langle x, e\rangle = u_j\}` (a point at :math:`u_j = \pm 1`), with masses
:math:`m_j`. Without diffusion the mean-field equation keeps that form: every point of ring
:math:`j` moves with the same :math:`\dot u_j`, the component along ``e`` of the velocity the
measure induces there, and the masses are carried. This is the equation in mass coordinates
(:class:`~solvers.CircleLagrangian`'s idea in the one variable the symmetry leaves): a cluster
at a pole is rings that have come together, with no series to run out of degrees, in every
dimension.

The velocity is the model's own reference (``velocity_field``, the seam every discretisation
goes through): a zonal model's velocity depends on inner products only, so ring :math:`j`
seen from the point :math:`x_i = (\sqrt{1-u_i^2}, 0, u_i)` of ring :math:`i` is the law of
:math:`y = (r_j t, r_j\sqrt{1-t^2}, u_j)`, :math:`r_j = \sqrt{1-u_j^2}`, with :math:`t` the
inner product of two uniform points of :math:`S^{d-2}` (law :math:`\pi_{d-1}`: Chebyshev at
``d = 3``, uniform at ``d = 4``). A Gauss rule of ``fibre_nodes`` points in :math:`t` makes
each ring ``fibre_nodes`` atoms in :math:`\mathbb{R}^3` (in :math:`\mathbb{R}^d`, zero-padded,
for a model of fixed dimension), exact to the rule's error (spectral: :math:`e^{\beta t}`
needs about :math:`\beta/2 + 20` nodes), whatever ``d``; the cost is
:math:`O(n^2\,\mathrm{fibre\_nodes})` per right-hand side for ``n`` rings.

:class:`ZonalSpectralRings` runs :class:`~solvers.ZonalSphereSpectral` while it resolves the
density and hands over to rings (the Gauss rule of :math:`\pi_d` with ``rings`` nodes, each node
a ring of mass :math:`\tilde f(u_k)\,w_k`), as :class:`~solvers.SphereSpectralParticles` does
on :math:`S^2`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import xarray as xr

from meanfield.checks import check_int, check_real, check_rtol
from meanfield.docstrings import fill_docstrings, inherit_docstrings
from meanfield.integration import explicit_adaptive_step, tableau_named
from meanfield.integration.tableaux import ExplicitTableau
from meanfield.models import SelfAttention, ZonalAggregation
from meanfield.records import geometry_name

from ..grid_solver import DATASET_PARAMETERS, Diagnosis, GridSolver, UnboundedTransport
from ..chain import SolverPair
from ..tolerance import ROUNDOFF
from .gegenbauer import cell_masses, gauss_rule, law_cells, orthonormal_gegenbauer
from .zonal import ZonalSphereSpectral, with_angle

#: The Parameters section of the methods that read the state (``{rings_parameters}``).
RINGS_PARAMETERS = """
Parameters
----------
rings : numpy.ndarray, shape (n, 2)
    The rings' :math:`u_j` (ascending) and masses.
"""


def fibre_rule(d: int, nodes: int) -> tuple[np.ndarray, np.ndarray]:
    r"""Gauss nodes and weights (summing to one) of :math:`\pi_{d-1}`, the law of :math:`\langle\xi, \eta\rangle` on :math:`S^{d-2}`."""
    if d == 3:  # S^1: t = cos(phi), phi uniform: Gauss-Chebyshev
        return np.cos(np.pi * (np.arange(nodes) + 0.5) / nodes)[::-1], np.full(nodes, 1.0 / nodes)
    return gauss_rule(d - 1, nodes)


@fill_docstrings(rings_parameters=RINGS_PARAMETERS, dataset_parameters=DATASET_PARAMETERS)
@inherit_docstrings
@dataclass(frozen=True, eq=False)
class ZonalRings(GridSolver):
    r"""The mean-field equation on :math:`S^{d-1}` without diffusion for a zonal measure made of rings (module docstring).

    Parameters
    ----------
    model : SelfAttention or ZonalAggregation or any zonal model
        Zonal (its velocity depends on inner products only), without diffusion; its
        ``velocity_field`` moves the rings.
    d : int, optional
        The ambient dimension, ``>= 3`` (the model's own when it fixes one).
    lmax : int
        The recording grid: the nodes of :class:`~solvers.ZonalSphereSpectral` at this ``lmax``
        (``rho``, ``law`` and ``mass_profile`` of the rings on the cells around them).
    rings : int, optional
        How many rings a density is turned into (the Gauss rule of :math:`\pi_d`; default
        twice the recording nodes).
    fibre_nodes : int, optional
        The Gauss rule in :math:`t` (default :math:`\lceil\beta B/2\rceil + 24` for
        self-attention, 48 otherwise).
    rtol : float
        Local error per step: the largest change of a ring's :math:`u`.
    tableau : str or ExplicitTableau
        The embedded Runge-Kutta pair.
    cluster_separation : float
        Rings closer than this in :math:`u` are in one cluster (linked in chains).
    min_cluster_mass : float
        Lighter groups are stray mass, in no cluster.
    merge_distance : float, optional
        Rings closer than this in :math:`u` after a step become one (total mass, mass-weighted
        :math:`u`). Default ``rtol``; ``0`` never merges.
    """

    model: object
    d: int | None = None
    lmax: int = 64
    rings: int | None = None
    fibre_nodes: int | None = None
    rtol: float = 1e-6
    tableau: str | ExplicitTableau = "dormand_prince"
    cluster_separation: float = 1e-2
    min_cluster_mass: float = 0.01
    merge_distance: float | None = None
    recording: ZonalSphereSpectral = field(init=False, repr=False)
    _edges: np.ndarray = field(init=False, repr=False)
    _fibre: tuple = field(init=False, repr=False)

    name = "ZonalRings"
    default_max_steps = 1_000_000
    _resolution_advice = ""

    def __post_init__(self) -> None:
        set_ = object.__setattr__
        check_rtol(self.rtol)
        check_real(self.cluster_separation, "cluster_separation", minimum=0.0, strictly=True)
        check_real(self.min_cluster_mass, "min_cluster_mass", minimum=0.0)
        set_(self, "merge_distance", self.rtol if self.merge_distance is None else self.merge_distance)
        check_real(self.merge_distance, "merge_distance", minimum=0.0)
        set_(self, "tableau", tableau_named(self.tableau))
        if self.model.diffusion > 0:
            raise ValueError(f"rings carry no diffusion (got diffusion={self.model.diffusion}): a density with D > 0 "
                             "stays smooth; solve it with ZonalSphereSpectral")
        recording = ZonalSphereSpectral(self.model, d=self.d, lmax=self.lmax)
        set_(self, "recording", recording)
        set_(self, "d", recording.d)
        nodes = recording.nodes.size
        set_(self, "rings", 2 * nodes if self.rings is None else check_int(self.rings, "rings", minimum=1))
        if self.fibre_nodes is None:
            reach = self.model.beta * self.model.logit_bound if isinstance(self.model, SelfAttention) else 48.0
            set_(self, "fibre_nodes", int(np.ceil(0.5 * reach)) + 24 if isinstance(self.model, SelfAttention) else 48)
        check_int(self.fibre_nodes, "fibre_nodes", minimum=1)
        set_(self, "_fibre", fibre_rule(self.d, self.fibre_nodes))
        # the recording cells: the uniform law's mass of cell k is the Gauss weight of node k
        set_(self, "_edges", law_cells(self.d, recording.nodes, recording._weights))

    @property
    def geometry(self) -> str:
        return geometry_name(self.d)

    @property
    def energy_scaled(self) -> bool:
        r"""Whether the recorded energy carries :math:`e^{-\beta}` (as the spectral solver's at this ``lmax``)."""
        return self.recording.energy_scaled

    # ------------------------------------------------------------------ rings
    def density_rings(self, coefficients: np.ndarray) -> tuple[np.ndarray, float]:
        r"""Rings at the Gauss nodes of :math:`\pi_d` with masses :math:`\tilde f(u_k)w_k`, and the negative mass removed.

        Parameters
        ----------
        coefficients : numpy.ndarray
            A density's Gegenbauer coefficients (:class:`~solvers.ZonalSphereSpectral`'s).

        Returns
        -------
        rings : numpy.ndarray, shape (n, 2)
        clipped : float
            The negative mass set to zero (the rest scaled to keep the total).
        """
        u, w = gauss_rule(self.d, self.rings)
        values = orthonormal_gegenbauer(self.d, coefficients.size - 1, u) @ coefficients
        masses = w * values
        positive = np.maximum(masses, 0.0)
        clipped = float(positive.sum() - masses.sum())
        positive *= masses.sum() / positive.sum()
        return np.column_stack([u, positive]), clipped

    def _embedded(self, u: np.ndarray) -> np.ndarray:
        """Points ``(sqrt(1 - u^2), 0, .., u)`` in the model's dimension (3 where it takes any)."""
        size = 3 if self.model.dimension is None else self.d
        points = np.zeros((u.size, size))
        points[:, 0], points[:, -1] = np.sqrt(np.clip(1.0 - u * u, 0.0, None)), u
        return points

    def rhs(self, rings: np.ndarray) -> np.ndarray:
        """The rings' motion: :math:`\\dot u_j`, and zero for the masses.

        {rings_parameters}

        Returns
        -------
        numpy.ndarray, shape (n, 2)
        """
        u, masses = rings[:, 0], rings[:, 1]
        t, weights = self._fibre
        radius = np.sqrt(np.clip(1.0 - u * u, 0.0, None))
        size = 3 if self.model.dimension is None else self.d
        nodes = np.zeros((u.size, t.size, size))
        nodes[..., 0] = radius[:, None] * t
        nodes[..., 1] = radius[:, None] * np.sqrt(1.0 - t * t)
        nodes[..., -1] = u[:, None]
        field_ = self.model.velocity_field(self._embedded(u), nodes.reshape(-1, size),
                                           (masses[:, None] * weights).ravel())
        change = np.zeros_like(rings)
        change[:, 0] = field_[:, -1]
        return change

    def merged(self, rings: np.ndarray) -> np.ndarray:
        """The rings with neighbours closer than ``merge_distance`` made one (mass-weighted :math:`u`).

        {rings_parameters}

        Returns
        -------
        numpy.ndarray, shape (fewer, 2)
        """
        if self.merge_distance == 0 or len(rings) < 2:
            return rings
        return _groups(rings, self.merge_distance)

    def clusters(self, rings: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Masses and :math:`u` of the clusters (runs of rings with gaps below ``cluster_separation``), heaviest first.

        {rings_parameters}

        Returns
        -------
        masses, positions : numpy.ndarray
        """
        groups = _groups(rings, self.cluster_separation)
        order = np.argsort(-groups[:, 1], kind="stable")
        order = order[groups[order, 1] >= self.min_cluster_mass]
        return groups[order, 1], groups[order, 0]

    # ------------------------------------------------------------------ GridSolver
    def _initial_state(self, rho0, continued: bool) -> np.ndarray:
        if not continued:
            rings, _ = self.density_rings(self.recording.initial_coefficients(rho0))
            return rings
        rings = np.array(rho0, dtype=float)
        if rings.ndim != 2 or rings.shape[1] != 2 or not np.all(np.isfinite(rings)) or np.any(rings[:, 1] < 0) \
                or np.any(np.abs(rings[:, 0]) > 1):
            raise ValueError("a continued run takes rings of shape (n, 2): u in [-1, 1] and nonnegative masses "
                             f"(continuation_state of an earlier run), got shape {rings.shape}")
        return rings[np.argsort(rings[:, 0], kind="stable")]

    def _stepper(self, rings: np.ndarray, times: np.ndarray):
        attempt = explicit_adaptive_step(_RingTransport(self), self.tableau)
        span = times[-1] - times[0]
        speed = float(np.abs(self.rhs(rings)).max())
        first = min(span, 1e-2 / max(speed, 1e-12)) if span > 0 else 1.0
        return attempt, first, lambda: {"rhs_evaluations": attempt.stepper.evaluations, "initial_rings": len(rings)}

    def density(self, rings: np.ndarray) -> np.ndarray:
        r"""The rings' mass in each recording cell over the uniform law's mass there: the density relative to uniform.

        {rings_parameters}

        Returns
        -------
        numpy.ndarray, shape (nodes,)
        """
        return self._cell_masses(rings) / self.recording._weights

    def _law(self, rings: np.ndarray) -> np.ndarray:
        """The rings' mass per cell over the cell's width in u (0 in the outer cells that round to zero width)."""
        widths = np.diff(self._edges)
        masses = self._cell_masses(rings)
        return np.divide(masses, widths, out=np.zeros_like(masses), where=widths > 0)

    def _cell_masses(self, rings: np.ndarray) -> np.ndarray:
        return cell_masses(self._edges, rings[:, 0], rings[:, 1])

    def energy(self, rings: np.ndarray) -> float:
        r"""The interaction energy :math:`\frac12\sum_{i,j} m_i m_j \int W(u_iu_j + r_ir_jt)\,d\pi_{d-1}(t)`, as the spectral solver records it.

        :math:`W(s) = e^{\beta s}/\beta` (times :math:`e^{-\beta}` where the spectral solver scales
        it; :math:`s` at ``beta = 0``) for self-attention, the potential for zonal aggregation;
        NaN for other models.

        {rings_parameters}

        Returns
        -------
        float
        """
        u, masses = rings[:, 0], rings[:, 1]
        radius = np.sqrt(np.clip(1.0 - u * u, 0.0, None))
        t, weights = self._fibre
        s = np.clip(u[:, None, None] * u[None, :, None] + (radius[:, None] * radius[None, :])[..., None] * t,
                    -1.0, 1.0)
        pair = np.einsum("ijk,k->ij", self._pair_potential(s), weights)
        return float(0.5 * masses @ pair @ masses)

    def _pair_potential(self, s: np.ndarray) -> np.ndarray:
        model = self.model
        if isinstance(model, ZonalAggregation):
            return model.potential(s)
        if not isinstance(model, SelfAttention):
            return np.full_like(s, np.nan)
        if model.beta == 0:
            return s
        shift = model.beta if self.recording.energy_scaled else 0.0
        return np.exp(model.beta * s - shift) / model.beta

    def lyapunov(self, energy: float) -> float:
        """``-cE`` (self-attention, ``V = cI``) or ``-E`` (zonal aggregation), as the spectral solver records it; NaN otherwise.

        Parameters
        ----------
        energy : float

        Returns
        -------
        float
        """
        if isinstance(self.model, SelfAttention):
            return -self.model.value_scale * energy
        return -energy

    def _diagnose(self, rings: np.ndarray, rho: np.ndarray) -> Diagnosis:
        energy = self.energy(rings)
        law = self._law(rings)
        return Diagnosis({"mass": float(rings[:, 1].sum()), "energy": energy, "lyapunov": self.lyapunov(energy),
                          "min_density": float(law.min())}, True, "")

    def _grid_coordinates(self) -> dict[str, np.ndarray]:
        return {"u": self.recording.nodes}

    def _recorded_fields(self, rings: np.ndarray) -> dict:
        masses, where = self.clusters(rings)
        nodes = self.recording.nodes
        # the rings are sorted in u: the mass at or below each node
        profile = np.concatenate([[0.0], np.cumsum(rings[:, 1])])[np.searchsorted(rings[:, 0], nodes, side="right")]
        return {"law": (("u",), self._law(rings)), "mass_profile": (("u",), profile),
                "ring_u": (("ring",), rings[:, 0].copy()), "ring_mass": (("ring",), rings[:, 1].copy()),
                "cluster_mass": (("cluster",), masses), "cluster_u": (("cluster",), where),
                "cluster_count": ((), float(masses.size))}

    def _recorded_settings(self) -> dict:
        return {"lmax": self.lmax, "d": self.d, "rings": self.rings, "fibre_nodes": self.fibre_nodes,
                "rtol": self.rtol, "tableau": self.tableau.name, "cluster_separation": self.cluster_separation,
                "min_cluster_mass": self.min_cluster_mass, "merge_distance": self.merge_distance,
                "velocity": "velocity_field (the model's reference) on the rings' fibre rule"}

    def continuation_state(self, ds: xr.Dataset) -> np.ndarray:
        """What ``solve(..., continued=True)`` takes to go on from the end of ``ds``.

        {dataset_parameters}

        Returns
        -------
        numpy.ndarray, shape (n, 2)
            The rings at its last output.
        """
        return rings_of(ds)

    def solve(self, rho0, times, *, progress=None, observer=None, max_steps=None, first_step=None, continued=False,
              pace=None, underresolved="stop"):
        return with_angle(super().solve(rho0, times, progress=progress, observer=observer, max_steps=max_steps,
                                        first_step=first_step, continued=continued, pace=pace,
                                        underresolved=underresolved), self.recording.nodes)


def _groups(rings: np.ndarray, gap: float) -> np.ndarray:
    """Runs of consecutive rings with gaps below ``gap``: each run's mass-weighted ``u`` and total mass."""
    label = np.concatenate([[0], np.cumsum(np.diff(rings[:, 0]) > gap)])
    masses = np.bincount(label, weights=rings[:, 1])
    moments = np.bincount(label, weights=rings[:, 1] * rings[:, 0])
    u = np.where(masses > 0, moments / np.where(masses > 0, masses, 1.0),
                 np.bincount(label, weights=rings[:, 0]) / np.bincount(label))
    return np.column_stack([np.clip(u, -1.0, 1.0), masses])


def rings_of(ds: xr.Dataset, index: int = -1) -> np.ndarray:
    """The ``(n, 2)`` rings recorded at output ``index`` (padding dropped)."""
    u, mass = ds.ring_u.values[index], ds.ring_mass.values[index]
    kept = np.isfinite(mass)
    return np.column_stack([u[kept], mass[kept]])


class _RingTransport(UnboundedTransport):
    """The rings' motion as a :class:`~meanfield.integration.protocols.Discretisation`."""

    @staticmethod
    def norm(change: np.ndarray) -> float:
        return float(np.max(np.abs(change[:, 0])))

    def tolerance(self, rings: np.ndarray) -> float:
        return self.solver.rtol + ROUNDOFF

    def admit(self, old: np.ndarray, new: np.ndarray) -> tuple[np.ndarray, None]:
        new[:, 0] = np.clip(new[:, 0], -1.0, 1.0)
        # the flow keeps the rings' order: a step that swaps two by more than its error is too long
        if np.any(np.diff(new[:, 0]) < -self.solver.rtol):
            return None, "order"
        return self.solver.merged(new[np.argsort(new[:, 0], kind="stable")]), None


@dataclass(frozen=True, eq=False)
class ZonalSpectralRings(SolverPair):
    r""":class:`~solvers.ZonalSphereSpectral` while it resolves the density, then :class:`ZonalRings` (module docstring).

    Parameters
    ----------
    model : SelfAttention or ZonalAggregation
        A zonal model; the hand-over needs ``diffusion = 0`` (with diffusion the run stays
        spectral, and warns where it stops resolving the density).
    d, lmax, rtol, error_level, tableau
        The spectral solver's (:class:`~solvers.ZonalSphereSpectral`): it hands over after the
        first step at which it no longer resolves the density; ``lmax`` (the recording grid),
        ``rtol`` and ``tableau`` are also the rings'.
    outputs : {"stepped", "interpolated"}
        The spectral solver's; the rings step to every output.
    rings, fibre_nodes, cluster_separation, min_cluster_mass, merge_distance
        The rings' (:class:`ZonalRings`).

    Notes
    -----
    :meth:`solve` records what :class:`~solvers.ZonalSphereSpectral` records, with the rings'
    ``ring_u``, ``ring_mass`` and clusters (NaN before the hand-over) and ``rings`` (bool per
    time: which solver); ``attrs["settings"]`` holds ``handover_time`` (NaN: the series covered
    every output), ``handover_clipped`` and both solvers' settings and step counts.
    """

    model: object
    d: int | None = None
    lmax: int = 64
    rtol: float = 1e-6
    error_level: float | None = 1e-3
    tableau: str | ExplicitTableau = "dormand_prince"
    outputs: str = "stepped"
    rings: int | None = None
    fibre_nodes: int | None = None
    cluster_separation: float = 1e-2
    min_cluster_mass: float = 0.01
    merge_distance: float | None = None
    spectral: ZonalSphereSpectral = field(init=False, repr=False)
    measure: ZonalRings | None = field(init=False, repr=False)

    name = "ZonalSpectralRings"
    _pair = ("ZonalSphereSpectral", "ZonalRings")
    _flag = ("rings", 1)
    _recorded = ("lmax", "d", "rtol")

    def __post_init__(self) -> None:
        spectral = ZonalSphereSpectral(self.model, d=self.d, lmax=self.lmax, rtol=self.rtol,
                                       error_level=self.error_level, tableau=self.tableau, outputs=self.outputs)
        object.__setattr__(self, "spectral", spectral)
        object.__setattr__(self, "d", spectral.d)
        measure = None
        if self.model.diffusion == 0:
            measure = ZonalRings(self.model, d=self.d, lmax=self.lmax, rings=self.rings,
                                 fibre_nodes=self.fibre_nodes, rtol=self.rtol, tableau=self.tableau,
                                 cluster_separation=self.cluster_separation, min_cluster_mass=self.min_cluster_mass,
                                 merge_distance=self.merge_distance)
        object.__setattr__(self, "measure", measure)
        self._chained(spectral, measure)

    @property
    def geometry(self) -> str:
        """Where the density lives: the sphere of dimension ``d - 1``."""
        return geometry_name(self.d)

    def _placeholders(self) -> tuple[dict[str, tuple[str, ...]], None]:
        return {"spectral_tail": ("time",)}, None

    def _annotated(self, series: xr.Dataset | None, rings: xr.Dataset | None, handover: float,
                   clipped: float) -> xr.Dataset:
        return with_angle(super()._annotated(series, rings, handover, clipped), self.spectral.nodes)
