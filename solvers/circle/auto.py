r"""The circle's automatic choice: Fourier while the density is smooth, finite volumes after.

:class:`CircleAuto` runs :class:`~solvers.CircleSpectral` (spectral accuracy at a fraction of
the cost on smooth solutions) and, after the first accepted step at which its spectral tail
passes ``tail_threshold`` with an estimated error beyond what ``rtol`` allows, or its density
turns negative (clusters too sharp for its modes), continues from there with
:class:`~solvers.CircleFV` (positive, exact mass and energy balance on sharp clusters): one
call, one dataset on the finite volumes' grid. Both solvers record
the same object (cell averages of the ``cells`` cells), so the outputs join without
interpolation. The hand-over time and each output's solver are recorded.

At the hand-over the spectral density's cell averages are taken as the finite volumes'
initial state; cell averages below zero (at most the spectral error, which the criterion bounds)
are set to zero and the mass restored, and the mass so moved is recorded
(``handover_clipped``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from meanfield.checks import check_density, check_int
from meanfield.integration import ExplicitTableau
from meanfield.records import CIRCLE

from .finite_volumes import CircleFV, StartsWithFiniteVolumes
from .spectral import CircleSpectral, tail_fraction
from ..chain import ChainState, SolverPair


@dataclass(frozen=True, eq=False)
class CircleAuto(StartsWithFiniteVolumes, SolverPair):
    r"""Fourier pseudo-spectral on the circle while it resolves the density, then finite volumes.

    Parameters
    ----------
    model : SelfAttention or ZonalAggregation
        Any model both :class:`~solvers.CircleSpectral` and :class:`~solvers.CircleFV` take.
    cells : int
        Cells of the finite volumes and of the recorded averages.
    spectral_cells : int, optional
        ``N`` of the spectral solver (modes :math:`|k| < N/2`), a divisor of ``cells``; by
        default the smallest of ``cells/4``, ``cells/2``, ``cells`` that resolves the kernel
        (none: the finite volumes from the start).
    rtol : float
        Both solvers' ``rtol`` (``solvers.tolerance``).
    tail_threshold : float
        The spectral solver's resolution threshold (:class:`~solvers.CircleSpectral`): the
        hand-over, once its error estimate also exceeds ``rtol`` times the deviation's maximum.
    interaction : {"auto", "zonal", "general"}
        As for :class:`~solvers.CircleFV`.
    error_level : float or None
        The finite volumes' error level (:class:`~solvers.CircleFV`; ``None``: no error estimate).
    tableau : str or ExplicitTableau
        The spectral solver's pair (:class:`~solvers.CircleSpectral`); the finite volumes keep
        theirs. ``"auto"``: Dormand-Prince 8(5,3) without diffusion (its stability region
        reaches 6x further along the imaginary axis, where the transport's spectrum lies, and
        the hand-over ends the spectral part before the density is rough enough for its
        error estimates to reject step after step), Dormand-Prince 5(4) with diffusion (the
        integrating-factor form needs its nondecreasing abscissas).
    outputs : {"stepped", "interpolated"}
        The spectral solver's (:class:`~solvers.CircleSpectral`); the finite volumes step to
        every output.

    Notes
    -----
    :meth:`solve` records what :class:`~solvers.CircleFV` records, with ``spectral`` (bool per
    time: which solver) and both solvers' diagnostics (NaN where the other ran);
    ``attrs["settings"]`` holds ``handover_time`` (NaN: the spectral solver covered every
    output; ``times[0]``: the finite volumes from the start), ``handover_clipped`` and both
    solvers' settings and step counts.
    """

    model: object
    cells: int = 1024
    spectral_cells: int | None = None
    rtol: float = 1e-6
    tail_threshold: float = 1e-10
    interaction: str = "auto"
    error_level: float | None = 1e-3
    tableau: str | ExplicitTableau = "auto"
    outputs: str = "stepped"
    spectral: CircleSpectral | None = field(init=False, repr=False)
    finite_volumes: CircleFV = field(init=False, repr=False)

    name = "CircleAuto"
    geometry = CIRCLE
    _pair = ("CircleSpectral", "CircleFV")
    _flag = ("spectral", 0)
    _recorded = ("cells", "rtol")

    def __post_init__(self) -> None:
        check_int(self.cells, "cells", minimum=8)
        finite = CircleFV(self.model, cells=self.cells, rtol=self.rtol, interaction=self.interaction,
                          error_level=self.error_level)
        object.__setattr__(self, "finite_volumes", finite)
        object.__setattr__(self, "spectral", self._spectral_solver())
        self._chained(self.spectral, finite)

    def _spectral_solver(self) -> CircleSpectral | None:
        # The tail criterion (error_level=None): the finite volumes carry on whatever error the
        # handed density has, so it is handed while its error is within rtol's, not error_level's.
        settings = dict(rtol=self.rtol, tail_threshold=self.tail_threshold, interaction=self.interaction,
                        record_cells=self.cells, tableau=self._spectral_tableau(), outputs=self.outputs,
                        error_level=None)
        if self.spectral_cells is not None:
            check_int(self.spectral_cells, "spectral_cells", minimum=8)
            if self.cells % self.spectral_cells:
                raise ValueError(f"spectral_cells must divide cells={self.cells}, got {self.spectral_cells}")
            return CircleSpectral(self.model, cells=self.spectral_cells, **settings)
        for divisor in (4, 2, 1):
            size = self.cells // divisor
            if self.cells % divisor or size % 2 or size < 8:
                continue
            try:
                return CircleSpectral(self.model, cells=size, **settings)
            except ValueError as error:
                if "does not resolve the kernel" not in str(error):
                    raise
        return None

    def resolved_start(self, rho0, *, name: str = "rho0") -> np.ndarray:
        """The finite volumes' initial state, refused where their grid does not resolve it.

        A density the Fourier modes do not resolve starts on the finite volumes, so theirs is
        the rule; their state is what :meth:`cost_estimate` reads.

        Parameters
        ----------
        rho0 : callable or numpy.ndarray
            The initial density.
        name : str
            The argument's name in error messages.

        Returns
        -------
        numpy.ndarray, shape (cells,)
            The cell averages.

        Raises
        ------
        UnresolvedStart
            As :meth:`CircleFV.resolved_start <solvers.CircleFV.resolved_start>`.
        """
        return self.finite_volumes.resolved_start(rho0, name=name)

    def cost_estimate(self, state: np.ndarray, span: float):
        r"""The finite volumes' estimate (``UpFrontChecks.cost_estimate``), the larger of the two.

        Their stable step, :math:`2\pi\,\mathrm{cfl}/N` over the speed, is the shorter with the
        default pair: the Fourier part's is :math:`y_I / (N_s/2)` for its :math:`N_s \le N`
        cells, with Dormand-Prince 8(5,3)'s :math:`y_I = 5.96`; and a run that hands over
        early spends its span on them.

        Parameters
        ----------
        state : numpy.ndarray
            The cell averages (:meth:`resolved_start`).
        span : float
            The run's duration.

        Returns
        -------
        CostEstimate or None
            The finite volumes'.
        """
        return self.finite_volumes.cost_estimate(state, span)

    def _spectral_tableau(self) -> str | ExplicitTableau:
        if self.tableau != "auto":
            return self.tableau
        return "dormand_prince" if self.model.diffusion > 0 else "dormand_prince_853"

    def _spectrally_smooth(self, averages: np.ndarray) -> bool:
        """Whether the spectral solver resolves these cell averages: its tail criterion over all ``cells`` modes."""
        spectral = self.spectral
        if spectral is None:
            return False
        coefficients = spectral.coefficients_of_averages(averages, self.cells // 2)
        return tail_fraction(coefficients, spectral.cells // 2 - 1) < spectral.tail_threshold

    # ------------------------------------------------------------------ where it starts (solvers.Chain)
    def _first_state(self, rho0, continued: bool) -> tuple[np.ndarray, bool]:
        # the cell averages (the spectral solver's continued state), which say whether the Fourier modes resolve it
        if continued:
            state = rho0.state if isinstance(rho0, ChainState) else rho0
            if self.spectral is None:  # the finite volumes' own state, their shadow included
                return state, True
            return check_density(state, (self.cells,), "rho0", evolved=True), True
        return self.initial_density(rho0), True

    def _starts_on_second(self, averages: np.ndarray, continued: bool) -> bool:
        return self.spectral is not None and not self._spectrally_smooth(averages)

    def _placeholders(self) -> tuple[dict[str, tuple[str, ...]], dict[str, np.ndarray]]:
        # both solvers' diagnostics in every dataset (NaN where the other ran): segments of one run concatenate
        dims = {"spectral_tail": ("time",), "cluster_width": ("time",)}
        if self.finite_volumes.shadow is not None:
            dims["shadow_rho"] = ("time", "shadow_theta")
        return dims, self.finite_volumes._recorded_coordinates()
