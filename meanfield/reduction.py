r"""Metastable clusters at their own time scale: tight groups of weighted atoms made one.

Without diffusion the mean-field equation transports a weighted sum of Diracs
:math:`\mu = \sum_j m_j\delta_{x_j}` exactly: each atom follows :math:`\dot x_j = v[\mu](x_j)`
(the model's reference :meth:`~meanfield.SelfAttention.velocity_field`) with its mass fixed;
tokens are the case :math:`m_j = 1/n`. Once tokens gather, a cluster of width :math:`w`
contracts at a rate of order one (SA: a token in a cluster attends to its cluster's mean),
which caps an explicit method's step near one time unit, while the clusters themselves move
on the time scale :math:`e^{\beta(1 - \cos\Delta)}` of their separation :math:`\Delta`
("A mathematical perspective on Transformers", sec. 6.3): a run to :math:`t = 10^6` would
take about :math:`10^6` steps. The reduction removes that stiffness.

**Reduction.** After each accepted step, atoms linked by chord distances at most ``width``
form groups; a group whose diameter (largest chord between two members) is at most
``width`` becomes one atom of the group's mass at its normalized mass-weighted mean. The
reduced measure :math:`\mu'` is then advanced; its atoms feel no stiffness from their own
clusters (:math:`P_x x = 0`), so the steps are set by the slow motion between clusters and
grow with it.

**Its error.** The reduction moves the measure by at most :math:`\sum_c m_c w_c` in
Wasserstein-1, and what matters to the rest of the run is the velocity it induces. Each
reduction evaluates the change of the velocity field at the reduced measure's atoms,

.. math:: \varepsilon_v = \max_k \big|v[\mu](y_k) - v[\mu'](y_k)\big|,

(of order :math:`\beta w^2` for SA: the first-order term cancels about the mean); a reduced
cluster of the unreduced flow would have contracted in a time of order one, so the positions'
error the reduction causes is of order :math:`\varepsilon_v` times that time. A reduction
whose :math:`\varepsilon_v` passes ``tolerance`` is refused, and the run ends with
:class:`~meanfield.ReductionRefused` (its outputs so far attached) instead of continuing.

**Merges.** Each reduction is recorded: the time at which the group's diameter fell to
``width`` (within the step, by log-linear interpolation of the diameter between the step's
ends: the approach is exponential), the group's mass and number of atoms,
:math:`\varepsilon_v`, the Wasserstein-1 distance moved and the change of the energy. A
merge time's error is estimated as the earlier reductions' :math:`\sum\varepsilon_v` (the
positions' error, a reduced group relaxing in a time of order one) over the approach speed
at the merge, ``width`` times the rate at which the group's diameter was falling: near a
merge the gap closes exponentially, so a position error :math:`\delta` shifts the time at
which it reaches ``width`` by :math:`\delta / (\mathrm{width}\cdot\mathrm{rate})`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import NoReturn

import numpy as np

from .checks import check_int, check_real, check_rtol
from .engines import WeightedVelocity, select_kernel
from .errors import ReductionRefused, StepSizeCollapse
from .integration import AdaptiveStep, ExplicitRungeKutta, StepCounts, integrate, tableau_named
from .integration.tableaux import ExplicitTableau
from .progress import time_progress
from .records import PARTICLES, geometry_name, record_attrs
from .sphere import normalize

#: The floor of the step's error tolerance: positions are unit vectors in double precision.
ROUNDOFF = 1e-14


def linked_groups(x: np.ndarray, distance: float) -> tuple[int, np.ndarray]:
    """The groups of points linked by chord distances at most ``distance`` (chains), labelled by their first member.

    Parameters
    ----------
    x : numpy.ndarray, shape (k, d)
        Points.
    distance : float
        The linking distance.

    Returns
    -------
    count : int
        The number of groups.
    labels : numpy.ndarray, shape (k,)
        Each point's group, numbered in the order of the groups' first members.

    Notes
    -----
    On the circle (``d = 2``) a group is a run of points in angular order whose consecutive
    chords are at most ``distance`` (a point between two linked ones is linked to both), found
    in ``O(k log k)``. In ``d = 3`` points crowded into few cells of side
    ``distance / sqrt(3)`` (tight clusters) are grouped by cells (:func:`_cell_groups`).
    Otherwise every linked pair is listed (a k-d tree): few where the points are spread.
    """
    if x.shape[1] == 2:
        return _circle_groups(x, distance)
    from scipy.sparse import coo_matrix
    from scipy.sparse.csgraph import connected_components
    from scipy.spatial import cKDTree

    if x.shape[1] == 3 and distance > 0:
        cells, members = np.unique(np.floor(x / (distance / np.sqrt(3))).astype(np.int64), axis=0,
                                   return_inverse=True)
        if len(cells) * CROWDED_CELLS <= len(x):
            return _cell_groups(x, distance, cells, members.ravel())
    pairs = cKDTree(x).query_pairs(distance, output_type="ndarray")
    links = coo_matrix((np.ones(len(pairs)), (pairs[:, 0], pairs[:, 1])), shape=(len(x), len(x)))
    return connected_components(links, directed=False)


#: Points per occupied cell above which :func:`linked_groups` groups by cells in d = 3.
CROWDED_CELLS = 16

#: The offsets between cells of side ``distance / sqrt(3)`` that can hold points within ``distance`` (each
#: unordered pair of cells once: the first nonzero coordinate positive).
_NEAR_CELLS = np.array([o for o in np.ndindex(5, 5, 5) if tuple(np.subtract(o, 2)) > (0, 0, 0)]) - 2


def _cell_groups(x: np.ndarray, distance: float, cells: np.ndarray, members: np.ndarray) -> tuple[int, np.ndarray]:
    """:func:`linked_groups` in d = 3 by cells of side ``distance / sqrt(3)``: the points of a cell are within
    ``distance`` of each other (one group), and two cells up to two apart are linked when their nearest
    points are (a k-d tree query of one cell's points against the other's)."""
    from scipy.sparse import coo_matrix
    from scipy.sparse.csgraph import connected_components
    from scipy.spatial import cKDTree

    index = {tuple(cell): i for i, cell in enumerate(cells.tolist())}
    order = np.argsort(members, kind="stable")
    points = np.split(order, np.cumsum(np.bincount(members, minlength=len(cells)))[:-1])  # each cell's points
    trees: dict[int, cKDTree] = {}
    links = []
    for i, cell in enumerate(cells):
        for offset in _NEAR_CELLS:
            j = index.get(tuple((cell + offset).tolist()))
            if j is None:
                continue
            few, many = (i, j) if len(points[i]) <= len(points[j]) else (j, i)
            if many not in trees:
                trees[many] = cKDTree(x[points[many]])
            nearest, _ = trees[many].query(x[points[few]], k=1)
            if nearest.min() <= distance:
                links.append((i, j))
    pairs = np.array(links, dtype=np.int64).reshape(-1, 2)
    count, cell_group = connected_components(
        coo_matrix((np.ones(len(pairs)), (pairs[:, 0], pairs[:, 1])), shape=(len(cells), len(cells))), directed=False)
    return _numbered_by_first_member(cell_group[members])


def _numbered_by_first_member(groups: np.ndarray) -> tuple[int, np.ndarray]:
    """Group labels renumbered ``0, 1, ...`` in the order of each group's first member (as connected_components)."""
    _, first, labels = np.unique(groups, return_index=True, return_inverse=True)
    numbering = np.empty(first.size, dtype=np.int32)
    numbering[np.argsort(first)] = np.arange(first.size)
    return int(first.size), numbering[labels.ravel()]


def group_diameter(x: np.ndarray) -> float:
    """The largest chord between the points ``(m, d)``, ``m >= 2``.

    On the circle, points within a quarter circle span an arc whose chord between its ends is the
    largest (the chord grows with the angle up to a half circle): ``O(m log m)``. Otherwise every
    pair is measured.
    """
    if x.shape[1] == 2:
        angles = np.arctan2(x[:, 1], x[:, 0])
        order = np.argsort(angles)
        gaps = np.diff(np.append(angles[order], angles[order[0]] + 2 * np.pi))
        widest = int(np.argmax(gaps))
        if 2 * np.pi - gaps[widest] < 0.5 * np.pi:  # the arc from the point after the widest gap to the one before
            first, last = order[(widest + 1) % len(order)], order[widest]
            return float(np.linalg.norm(x[first] - x[last]))
    from scipy.spatial.distance import pdist

    return float(pdist(x).max())


def _circle_groups(x: np.ndarray, distance: float) -> tuple[int, np.ndarray]:
    """:func:`linked_groups` of points on the circle: runs of consecutive chords at most ``distance``, in angular order."""
    order = np.argsort(np.arctan2(x[:, 1], x[:, 0]), kind="stable")
    ordered = x[order]
    chords = np.linalg.norm(ordered - np.roll(ordered, -1, axis=0), axis=1)  # from each point to the next one
    breaks = chords > distance
    if not breaks.any():
        return 1, np.zeros(len(x), dtype=np.int32)
    run = np.concatenate([[0], np.cumsum(breaks[:-1])])  # each ordered point's run
    if not breaks[-1]:  # the last run goes on across the wrap into the first one
        run[run == run[-1]] = 0
    groups = np.empty(len(x), dtype=np.int64)
    groups[order] = run
    return _numbered_by_first_member(groups)


def group_atoms(x: np.ndarray, masses: np.ndarray, labels: np.ndarray, count: int) -> tuple[np.ndarray, np.ndarray]:
    """Each group's total mass and normalized mass-weighted mean position.

    Parameters
    ----------
    x : numpy.ndarray, shape (k, d)
        Unit vectors.
    masses : numpy.ndarray, shape (k,)
        Their masses.
    labels : numpy.ndarray, shape (k,)
        Their groups, ``0 .. count - 1``.
    count : int
        The number of groups.

    Returns
    -------
    totals : numpy.ndarray, shape (count,)
    positions : numpy.ndarray, shape (count, d)
    """
    totals = np.bincount(labels, weights=masses, minlength=count)
    sums = np.stack([np.bincount(labels, weights=masses * x[:, k], minlength=count) for k in range(x.shape[1])],
                    axis=1)
    return totals, normalize(sums)


def cluster_masses(x: np.ndarray, masses: np.ndarray, separation: float, min_mass: float) -> tuple[np.ndarray, np.ndarray]:
    """The clusters of weighted atoms (linked by chord distances below ``separation``, of mass at least ``min_mass``), heaviest first.

    Returns
    -------
    masses : numpy.ndarray, shape (clusters,)
    positions : numpy.ndarray, shape (clusters, d)
    """
    count, labels = linked_groups(x, separation)
    totals, positions = group_atoms(x, masses, labels, count)
    order = np.argsort(-totals, kind="stable")
    order = order[totals[order] >= min_mass]
    return totals[order], positions[order]


@dataclass(frozen=True)
class ReducedGroup:
    """One group of atoms reduced to one (what :class:`ClusterReduction` records).

    Its diameters (chord) at the step's two ends, its mass and number of atoms.
    """

    diameter_before: float
    diameter_after: float
    mass: float
    atoms: int
    #: :math:`\varepsilon_v` of the reduction the merge was part of (all groups reduced after one step).
    velocity_error: float
    #: The Wasserstein-1 distance the merge moved the measure by.
    moved: float
    #: The change of the energy by the reduction the merge was part of.
    energy_change: float


@dataclass(frozen=True, eq=False)
class ClusterReduction:
    r"""The reduction of tight groups of weighted atoms to one atom each (module docstring).

    Parameters
    ----------
    model : Model
        Any model with a velocity of a measure (``velocity_field``).
    width : float
        Groups of diameter (chord) at most this become one atom.
    tolerance : float
        The largest velocity error :math:`\varepsilon_v` a reduction may make; a larger one
        raises :class:`~meanfield.ReductionRefused`.
    energy_changes : bool
        Whether each reduction measures the change of the energy (two pair sums over the atoms;
        NaN when not).
    """

    model: object
    width: float
    tolerance: float
    energy_changes: bool = True
    #: The velocity engines of the check, by dimension (built at the first reduction).
    _velocities: dict = field(default_factory=dict, init=False, repr=False)

    def __post_init__(self) -> None:
        check_real(self.width, "width", minimum=0.0)
        check_real(self.tolerance, "tolerance", minimum=0.0, strictly=True)

    def __call__(self, old: np.ndarray, new: np.ndarray) -> tuple[np.ndarray, np.ndarray | None, list[ReducedGroup]]:
        """Reduce the atoms ``new`` (a step's end; ``old`` its start, for the diameters before).

        Parameters
        ----------
        old, new : numpy.ndarray, shape (k, d + 1)
            Unit vectors and masses (last column) at the step's two ends.

        Returns
        -------
        atoms : numpy.ndarray, shape (k', d + 1)
            ``new`` itself when nothing is reduced.
        labels : numpy.ndarray, shape (k,) or None
            Each old atom's new index (``None``: nothing reduced).
        merges : list of ReducedGroup
        """
        if self.width == 0 or len(new) < 2:
            return new, None, []
        x, masses = new[:, :-1], new[:, -1]
        count, labels = linked_groups(x, self.width)
        if count == len(new):
            return new, None, []
        split = np.zeros(len(new), dtype=bool)  # members of chains longer than the width: not tight yet
        diameters = {}  # a reduced group's members (as a tuple of indices): its diameter
        for group in np.flatnonzero(np.bincount(labels, minlength=count) > 1):
            members = np.flatnonzero(labels == group)
            diameter = group_diameter(x[members])
            split[members] = diameter > self.width
            diameters[tuple(members)] = diameter
        labels = _relabelled(labels, split)
        count = int(labels.max()) + 1
        if count == len(new):
            return new, None, []
        totals, positions = group_atoms(x, masses, labels, count)
        atoms = np.column_stack([positions, totals])
        velocity_error = self._velocity_error(new, atoms)
        energy_change = (atoms_energy(self.model, atoms) - atoms_energy(self.model, new) if self.energy_changes
                         else np.nan)
        merges = []
        for group in np.flatnonzero(np.bincount(labels, minlength=count) > 1):
            members = np.flatnonzero(labels == group)
            moved = float(np.sum(masses[members] * np.linalg.norm(x[members] - positions[group], axis=1)))
            before = group_diameter(old[members, :-1]) if len(old) == len(new) else np.nan
            merges.append(ReducedGroup(diameter_before=before, diameter_after=diameters[tuple(members)],
                                       mass=float(totals[group]), atoms=len(members), velocity_error=velocity_error,
                                       moved=moved, energy_change=energy_change))
        if not velocity_error <= self.tolerance:  # a NaN error (a field that is not finite) is refused too
            change = (f"change the velocity by {velocity_error:.3g}, above tolerance={self.tolerance:.3g}"
                      if np.isfinite(velocity_error) else "leave a velocity field that is not finite")
            raise ReductionRefused(f"a reduction would {change} (groups of mass up to "
                                   f"{max(merge.mass for merge in merges):.3g}, width={self.width:.3g}): give a "
                                   "smaller width", time=np.nan)
        return atoms, labels, merges

    def _velocity_error(self, before: np.ndarray, after: np.ndarray) -> float:
        """:math:`\\max_k |v[\\mu](y_k) - v[\\mu'](y_k)|` at the reduced atoms ``y_k``: the model's
        ``velocity_field``, through the kernel's series where that costs less (each ``y_k`` lies within
        ``width`` of the atoms it replaces: :meth:`WeightedVelocity.field_near_atoms`)."""
        at = after[:, :-1]
        velocity = self._velocities.get(at.shape[-1])
        if velocity is None:
            velocity = self._velocities[at.shape[-1]] = WeightedVelocity(self.model, at.shape[-1])
        field_before = velocity.field_near_atoms(at, before[:, :-1], before[:, -1])
        field_after = velocity(at, after[:, -1])
        return float(np.max(np.linalg.norm(field_before - field_after, axis=1)))


def atoms_energy(model, atoms: np.ndarray) -> float:
    """The model's energy of the weighted atoms ``(k, d + 1)`` (NaN where it has none)."""
    if not model.has_energy:
        return np.nan
    try:
        return float(model.energy(atoms[None, :, :-1], masses=atoms[None, :, -1])[0])
    except OverflowError:  # SA at beta beyond ~700: the energy is not a double
        return np.nan


def _relabelled(labels: np.ndarray, split: np.ndarray) -> np.ndarray:
    """``labels`` with the points flagged ``split`` given groups of their own, numbered by first member."""
    keys = np.where(split, -1 - np.arange(len(labels)), labels)  # a unique key per split point
    _, first = np.unique(keys, return_index=True)
    order = np.argsort(first, kind="stable")
    rank = np.empty(len(order), dtype=int)
    rank[order] = np.arange(len(order))
    _, inverse = np.unique(keys, return_inverse=True)
    return rank[inverse]


def simulate_clusters(model, x0: np.ndarray, times, *, masses: np.ndarray | None = None, rtol: float = 1e-8,
                      width: float | None = None, tolerance: float | None = None,
                      tableau: str | ExplicitTableau = "dormand_prince", cluster_separation: float = 0.2,
                      min_cluster_mass: float = 0.01, max_steps: int = 1_000_000, kernel: str = "auto",
                      progress: bool | None = None):
    r"""Tokens (or weighted atoms) on :math:`S^{d-1}` with their tight clusters reduced, to any time.

    The reduction, its error estimate and the merge records are derived in the module
    ``meanfield.reduction`` and shown in use in :doc:`/guide/collapse` (section "Metastability
    at its own time scale").

    The run is the particle system (or the mean-field equation of a weighted measure) until
    groups of atoms tighten below ``width``; each such group is then one atom, and the
    reduced system advances with steps its own slow dynamics allow, so that a run to
    :math:`t = 10^6` costs little more than one to the first merge.

    Parameters
    ----------
    model : Model
        A model without diffusion, not causal, with a velocity of a measure
        (``velocity_field``): every model of :mod:`meanfield` on the sphere, and a user's
        :class:`~meanfield.FieldModel`.
    x0 : numpy.ndarray, shape (n, d)
        The initial atoms (nonzero; used through ``x / |x|``).
    times : array_like
        Increasing output times.
    masses : numpy.ndarray, shape (n,), optional
        Positive masses (default ``1/n``: the particle system).
    rtol : float
        Local error per step: the largest change of an atom's position the error estimate
        lets through.
    width : float, optional
        Groups of diameter (chord) at most this become one atom (default ``rtol``: the steps'
        error lets through changes of that size, so closer atoms are not told apart);
        ``0`` never reduces.
    tolerance : float, optional
        The largest velocity error :math:`\varepsilon_v` a reduction may make (default
        ``rtol``); one that passes it ends the run with :class:`~meanfield.ReductionRefused`.
    tableau : str or ExplicitTableau
        The embedded Runge-Kutta pair.
    cluster_separation, min_cluster_mass : float
        The cluster rule of the recorded ``cluster_count`` (atoms linked by chords below the
        separation, groups of at least that mass), as :func:`validation.cluster_statistics`.
    max_steps : int
        Steps (accepted and rejected) after which the run stops with
        :class:`~meanfield.StepSizeCollapse`.
    kernel : str
        Tokens of equal mass only: the particle engine (``meanfield.engines.select_kernel``)
        that gives the atoms' velocities. Every atom's mass is then a multiple of ``1/n``, so
        the velocity of the atoms is the particle velocity of the ``n`` tokens placed at
        their atoms. The series engine (zonal SA on the circle and :math:`S^2`) sums the
        kernel's series over the ``k`` atoms weighted by their masses, :math:`O(kK)`, where it
        costs less than the reference's :math:`O(k^2)` (and over the tokens while the circle's
        tabled sums cost less still); the fused one sums over the tokens while :math:`k > n/2`.
        ``"numpy"``: the model's reference sums over the atoms throughout. Atoms of unequal
        masses take the series over the atoms where it costs less than the reference
        (:class:`meanfield.engines.WeightedVelocity`), whatever ``kernel`` says.
    progress : bool, optional
        A progress bar over simulated time (default: when stderr is a terminal).

    Returns
    -------
    xarray.Dataset
        ``x(time, particle, component)``: each token's position (that of the atom holding
        it); ``atoms(time)``: the reduced measure's atom count; ``cluster_count(time)``;
        ``mass(time)``; ``energy(time)`` (models with one); per merge (dimension ``merge``):
        ``merge_time``, ``merge_time_error`` (its estimate), ``merge_mass``, ``merge_atoms``,
        ``merge_velocity_error``, ``merge_moved``, ``merge_energy_change``,
        ``merge_diameter_before``; ``attrs``: the
        record (``settings`` with the step counts and ``largest_velocity_error``).

    Raises
    ------
    ValueError
        If the model has diffusion or is causal, or an argument is out of range.
    ReductionRefused
        If a reduction's velocity error passes ``tolerance`` (outputs so far attached).
    StepSizeCollapse
        If the steps collapse or ``max_steps`` is spent.
    """
    atoms, times = _initial_atoms(model, x0, masses, times)
    check_rtol(rtol)
    width = rtol if width is None else width
    tolerance = rtol if tolerance is None else tolerance
    check_real(cluster_separation, "cluster_separation", minimum=0.0, strictly=True)
    check_real(min_cluster_mass, "min_cluster_mass", minimum=0.0)
    check_int(max_steps, "max_steps", minimum=1)
    equal = np.all(atoms[:, -1] == atoms[0, -1])
    engine = select_kernel(model, atoms[None, :, :-1], kernel) if equal else None
    run = _ReducedRun(model, atoms, ClusterReduction(model, width, tolerance), tableau_named(tableau), rtol,
                      cluster_separation, min_cluster_mass, engine)
    return run.solve(times, max_steps, progress)


def tokens_engine_pays(engine, atoms: int, tokens: int) -> bool:
    r"""Whether a particle engine on the ``tokens`` (each at its atom) is cheaper than what sums over the atoms.

    The series over the tokens costs :math:`O(nK)` and the same series over the ``k`` atoms,
    weighted by their masses (:func:`atoms_velocity`), :math:`O(kK)`: the tokens pay only where
    their sums keep the powers in a table (the circle's, several times cheaper per term) and
    the atoms are nearly as many. The fused engine's pair sums, a few times faster than the
    reference's, pay while :math:`k > n/2`; the numpy engine never (it is the reference).
    """
    if engine is None:
        return False
    if engine.name == "series":
        return engine.tokens_cheaper(tokens, atoms)
    return engine.name == "fused" and 2 * atoms > tokens


def atoms_velocity(model, engine, d: int) -> WeightedVelocity | None:
    """What moves the atoms when no tokens' engine does: the kernel's series over them, weighted by their masses, where
    it costs less than the reference (:class:`~meanfield.engines.WeightedVelocity`), unless ``engine`` names the reference
    (``"numpy"``) or the fused sums (their reference sums over the atoms); ``None``: the reference throughout."""
    if engine is not None and engine.name != "series":
        return None
    return WeightedVelocity(model, d)


def _initial_atoms(model, x0, masses, times) -> tuple[np.ndarray, np.ndarray]:
    if not getattr(model, "on_sphere", False) or model.causal or model.diffusion != 0:
        raise ValueError("simulate_clusters takes a model of tokens on the sphere without diffusion and not causal "
                         f"(weighted atoms are exact solutions only then), got {type(model).__name__} with "
                         f"diffusion={getattr(model, 'diffusion', None)}, causal={getattr(model, 'causal', None)}")
    x0 = np.asarray(x0, dtype=float)
    if x0.ndim != 2 or x0.shape[1] < 2 or not np.all(np.isfinite(x0)) or np.any(np.linalg.norm(x0, axis=1) == 0):
        raise ValueError(f"x0 must be finite nonzero points of shape (n, d), d >= 2, got shape {x0.shape}")
    if model.dimension is not None and model.dimension != x0.shape[1]:
        raise ValueError(f"x0 has d = {x0.shape[1]}, the model's matrices d = {model.dimension}")
    n = len(x0)
    masses = np.full(n, 1.0 / n) if masses is None else np.asarray(masses, dtype=float)
    if masses.shape != (n,) or not np.all(np.isfinite(masses)) or np.any(masses <= 0):
        raise ValueError(f"masses must be {n} positive finite numbers, got shape {masses.shape}"
                         + (f", minimum {masses.min():.3g}" if masses.size else ""))
    times = np.asarray(times, dtype=float)
    if times.ndim != 1 or times.size < 1 or not np.all(np.isfinite(times)) or np.any(np.diff(times) <= 0):
        raise ValueError(f"times must be a finite increasing 1-D array, got {times!r}")
    return np.column_stack([normalize(x0), masses]), times


class _ReducedRun:
    """One run of :func:`simulate_clusters`: the stepper, the reduction after each step, the records."""

    def __init__(self, model, atoms: np.ndarray, reduction: ClusterReduction, tableau: ExplicitTableau,
                 rtol: float, separation: float, min_mass: float, engine) -> None:
        self.model, self.atoms, self.reduction, self.tableau, self.rtol = model, atoms, reduction, tableau, rtol
        self.separation, self.min_mass, self.engine = separation, min_mass, engine
        self.weighted = atoms_velocity(model, engine, atoms.shape[1] - 1)
        self.owner = np.arange(len(atoms))  # each token's atom
        self.representative = self.owner  # a token of each atom
        self.pending: tuple[np.ndarray, list[ReducedGroup]] | None = None
        self.merges: list[tuple[float, float, ReducedGroup]] = []  # (time, its error estimate, merge)
        self.accumulated_error = 0.0  # the reductions' velocity errors so far, summed
        self.frames: list[tuple[np.ndarray, int, int, float, float]] = []
        self.previous_time = 0.0

    # ------------------------------------------------------------------ the motion
    def rhs(self, atoms: np.ndarray) -> np.ndarray:
        change = np.zeros_like(atoms)
        x = atoms[:, :-1]
        if self._tokens_pay(len(atoms)):  # the tokens' particle velocity, each token at its atom (kernel's doc)
            change[:, :-1] = self.engine.velocity_unchecked(x[self.owner][None])[0][self.representative]
        elif self.weighted is not None:
            change[:, :-1] = self.weighted(x, atoms[:, -1])
        else:
            change[:, :-1] = self.model.velocity_field(x, x, atoms[:, -1])
        return change

    def _tokens_pay(self, atoms: int) -> bool:
        return tokens_engine_pays(self.engine, atoms, self.owner.size)

    @staticmethod
    def norm(change: np.ndarray) -> float:
        return float(np.sqrt(np.max(np.sum(change[:, :-1] ** 2, axis=1))))

    def admit(self, old: np.ndarray, new: np.ndarray) -> tuple[np.ndarray, None]:
        new[:, :-1] = normalize(new[:, :-1])
        reduced, labels, merges = self.reduction(old, new)
        if labels is not None:
            self.pending = (labels, merges)
        return reduced, None

    def observe(self, t: float, atoms: np.ndarray) -> None:
        if self.pending is not None:
            labels, merges = self.pending
            self.owner = labels[self.owner]
            self.representative = np.unique(self.owner, return_index=True)[1]
            for merge in merges:
                crossing, rate = _crossing(self.previous_time, t, merge, self.reduction.width)
                # the position error so far over the approach speed width * rate at the merge
                self.merges.append((crossing, self.accumulated_error / (self.reduction.width * rate), merge))
            self.accumulated_error += merges[0].velocity_error
            self.pending = None
        self.previous_time = t

    def record(self, t: float, atoms: np.ndarray) -> None:
        x, masses = atoms[:, :-1], atoms[:, -1]
        clusters, _ = cluster_masses(x, masses, self.separation, self.min_mass)
        self.frames.append((x[self.owner].copy(), len(atoms), clusters.size, float(masses.sum()),
                            atoms_energy(self.model, atoms)))

    # ------------------------------------------------------------------ the run
    def solve(self, times: np.ndarray, max_steps: int, progress):
        stepper = ExplicitRungeKutta(self.tableau, self.rhs, norm=self.norm, tolerance=lambda q: self.rtol + ROUNDOFF)
        attempt = AdaptiveStep(stepper, admit=self.admit)
        counts = StepCounts()
        self.previous_time = float(times[0])
        span = times[-1] - times[0]
        speed = self.norm(self.rhs(self.atoms))
        first = min(span, 1e-2 / max(speed, 1e-12)) if span > 0 else 1.0

        def settings() -> dict:
            errors = [merge.velocity_error for _, _, merge in self.merges]
            return {"method": "reduced clusters", "tableau": self.tableau.name, "rtol": self.rtol,
                    "kernel": (self.engine.name if self._tokens_pay(self.owner.size) else
                               self.weighted.engine(self.owner.size) if self.weighted is not None else "reference"),
                    "width": self.reduction.width, "tolerance": self.reduction.tolerance,
                    "cluster_separation": self.separation, "min_cluster_mass": self.min_mass,
                    "largest_velocity_error": max(errors, default=0.0),
                    "rhs_evaluations": stepper.evaluations, **counts.as_dict()}

        def collapse(t: float, reason: str) -> NoReturn:
            raise StepSizeCollapse(f"the reduced run stopped at t={t:.6g}: {reason}", time=t,
                                   partial=self.dataset(times, settings()))

        with time_progress(times[0], times[-1], progress, "reduced clusters") as bar:  # a refusal ends it with the outputs
            integrate(self.atoms, times, attempt, first_step=first, record=self.record, collapse=collapse,
                      observer=self.observe, progress=bar, name="reduced clusters", max_steps=max_steps, counts=counts)
        return self.dataset(times, settings())

    def dataset(self, times: np.ndarray, settings: dict):
        import xarray as xr

        x, atoms, clusters, mass, energy = (np.array(values) for values in zip(*self.frames))
        merge_times = np.array([t for t, _, _ in self.merges], dtype=float)
        time_errors = np.array([error for _, error, _ in self.merges], dtype=float)
        column = {name: np.array([getattr(merge, name) for _, _, merge in self.merges], dtype=float)
                  for name in ("mass", "atoms", "velocity_error", "moved", "energy_change", "diameter_before")}
        variables = {"x": (("time", "particle", "component"), x),
                     "atoms": (("time",), atoms, {"long_name": "atoms of the reduced measure"}),
                     "cluster_count": (("time",), clusters.astype(float)),
                     "mass": (("time",), mass, {"long_name": "total mass"}),
                     "merge_time": (("merge",), merge_times,
                                    {"long_name": "when the group's diameter fell to the width"}),
                     "merge_time_error": (("merge",), time_errors,
                                          {"long_name": "estimated error of merge_time from the earlier reductions"}),
                     **{f"merge_{name}": (("merge",), values) for name, values in column.items()}}
        if self.model.has_energy:
            variables["energy"] = (("time",), energy, {"long_name": "interaction energy"})
        ds = xr.Dataset(variables, coords={"time": times[: len(self.frames)]})
        ds.attrs.update(record_attrs(PARTICLES, geometry_name(x.shape[-1]), self.model, settings))
        return ds


def _crossing(start: float, end: float, merge: ReducedGroup, width: float) -> tuple[float, float]:
    """When the group's diameter fell to ``width`` within the step ``[start, end]``, and the rate of its fall.

    Log-linear in the diameter (its approach is exponential); where the diameters do not
    bracket the width, the step's end and the rate one (a group that was a longer chain before).
    """
    before, after = merge.diameter_before, merge.diameter_after
    if not (before > width >= after > 0 and end > start):
        return end, 1.0
    rate = math.log(before / after) / (end - start)
    return start + math.log(before / width) / rate, rate
