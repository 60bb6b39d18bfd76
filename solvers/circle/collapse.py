r"""The circle through cluster formation: finite volumes while the grid resolves the density, then mass coordinates.

:class:`CircleFVLagrangian` runs :class:`~solvers.CircleFV` with its error estimate (a shadow
run on half the cells) and, after the first accepted step at which the estimate exceeds
``error_level`` times ``max rho``, continues from there with
:class:`~solvers.CircleLagrangian` (the measure in mass coordinates, exact through the
clusters with ``D = 0``): one call follows a run from smooth data to merged clusters. The
finite volumes' cell averages are a piecewise constant density, whose quantile is taken
exactly; the Lagrangian run records the averages on the same cells, so the outputs join on
one grid. The mass labels' positions and the clusters are recorded at every output (before
the hand-over from the finite volumes' density, by the same rule), and so are the hand-over
time and each output's solver.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from meanfield.records import CIRCLE

from .finite_volumes import CircleFV, StartsWithFiniteVolumes
from .lagrangian import CircleLagrangian
from ..chain import SolverPair


@dataclass(frozen=True, eq=False)
class CircleFVLagrangian(StartsWithFiniteVolumes, SolverPair):
    r"""Finite volumes until their estimated error passes ``error_level``, then :class:`CircleLagrangian`.

    Parameters
    ----------
    model : SelfAttention or ZonalAggregation
        Any model both solvers take (not causal).
    cells : int
        Cells of the finite volumes and of the recorded averages.
    points : int
        Mass labels of the Lagrangian solver.
    rtol : float
        Both solvers' ``rtol``.
    error_level : float
        The hand-over: the finite volumes' estimated max-norm error over ``max rho``.
    interaction : {"auto", "zonal", "general"}
        The finite volumes' velocity path.
    cluster_separation : float
        The Lagrangian solver's cluster rule, applied to every output.
    width : float
        The Lagrangian solver's reduction of tight clusters to atoms (:class:`CircleLagrangian`;
        ``0``, the default, never reduces; ``rtol`` or more makes long runs cheap).

    Notes
    -----
    :meth:`solve` records what :class:`~solvers.CircleFV` records, with ``position`` (the
    labels), the clusters' masses and positions, and ``lagrangian`` (bool per time: which
    solver); ``attrs["settings"]`` holds ``handover_time`` (NaN: the finite volumes covered
    every output) and both solvers' settings and step counts.
    """

    model: object
    cells: int = 1024
    points: int = 4096
    rtol: float = 1e-6
    error_level: float = 1e-3
    interaction: str = "auto"
    cluster_separation: float = 0.2
    width: float = 0.0
    finite_volumes: CircleFV = field(init=False, repr=False)
    lagrangian: CircleLagrangian = field(init=False, repr=False)

    name = "CircleFVLagrangian"
    geometry = CIRCLE
    _pair = ("CircleFV", "CircleLagrangian")
    _flag = ("lagrangian", 1)
    _recorded = ("cells", "points", "rtol", "error_level")

    def __post_init__(self) -> None:
        if self.error_level is None:
            raise ValueError("CircleFVLagrangian hands over on the error estimate: error_level must be a number")
        object.__setattr__(self, "finite_volumes", CircleFV(self.model, cells=self.cells, rtol=self.rtol,
                                                            interaction=self.interaction,
                                                            error_level=self.error_level))
        object.__setattr__(self, "lagrangian", CircleLagrangian(self.model, points=self.points, cells=self.cells,
                                                                rtol=self.rtol,
                                                                cluster_separation=self.cluster_separation,
                                                                width=self.width))
        self._chained(self.finite_volumes, self.lagrangian)

    def _placeholders(self) -> tuple[dict[str, tuple[str, ...]], dict]:
        # the finite volumes' diagnostics in every dataset (NaN where the labels ran): segments concatenate
        dims = {"error_estimate": ("time",), "cluster_width": ("time",), "shadow_rho": ("time", "shadow_theta")}
        return dims, self.finite_volumes._recorded_coordinates()
