r"""The mean-field equation of pure self-attention on the line (``d = 1``), in rescaled variables.

As the number of tokens of :class:`meanfield.PureAttention` with ``d = 1`` (one head, scalars
``q``, ``k``, ``v``) grows, the empirical measure of the rescaled tokens :math:`z = e^{-tv}x`
follows the continuity equation

.. math::
    \partial_t\rho + \partial_z(\rho\,u) = 0, \qquad
    u(t, z) = v\Big(\frac{\int w\, e^{s(t) z w}\rho(t, w)\,dw}{\int e^{s(t) z w}\rho(t, w)\,dw} - z\Big),
    \qquad s(t) = \beta q k\, e^{2vt},

the particle system's velocity (eq. (4) of "The emergence of clusters in self-attention
dynamics") with the sums over tokens replaced by integrals against :math:`\rho`. For
``v > 0`` the velocity is ``v`` times a convex combination minus the point, so it points
inward at the ends of the support: an interval that holds the support at the start holds it
forever (the paper's Prop. C.2); the support shrinks and the measure collapses toward at most
two points, the ends of its limiting support (Thm 2.1 in mean field). :class:`LineFV` solves it by finite volumes on such an
interval: cell masses, first-order upwind fluxes with the face velocities from the midpoint
rule over the cells (``O(N^2)`` per evaluation, the exponent with the log of the masses shifted by
its row maximum, so that the weights stay finite however large :math:`s(t)` grows),
zero flux through the ends, and the library's adaptive Bogacki-Shampine pair within the CFL
bound, a step that would make a mass negative retried with half of it. Mass is conserved to
round-off; the error is first order in the cell width; the time ``t`` enters through :math:`s(t)` and is the state's first
coordinate.

The velocity at large :math:`s(t)` is set by the extreme points of the support: any mass,
however small, captures the attention of the faces beyond it once :math:`s\,\Delta z` passes
:math:`-\log(\text{mass})`. The upwind scheme's numerical diffusion leaves exponentially small
tails ahead of every front, so at late times those tails, not the solution, would steer the
flow. Each output therefore records ``ghost_attention``: the largest share of attention weight
held by cells of mass below :data:`GHOST_MASS`, over the faces next to a cell with more and the
steps since the previous output; past :data:`GHOST_SHARE` the
run warns (:class:`~solvers.resolution.UnderResolvedWarning`) and its later outputs are not
the mean-field solution (:class:`~solvers.LineLagrangian`, in mass coordinates, has no such tails).
"""

from __future__ import annotations

import math

import numpy as np

from meanfield.checks import check_int, check_real, check_rtol
from meanfield.euclidean import PureAttention
from meanfield.integration import BOGACKI_SHAMPINE, explicit_adaptive_step
from meanfield.records import euclidean_name

from ..grid_solver import Diagnosis, GridSolver

#: Cells of smaller mass (the total is one) hold no mass the solution put there.
GHOST_MASS = 1e-12
#: Largest share of a face's attention weight such cells may carry before the run warns: it moves the
#: velocity by at most this fraction of the support's width, below the first-order error of the grid.
GHOST_SHARE = 1e-3


#: How long a line solver may step before its run counts as collapsed.
LINE_MAX_STEPS = 10_000_000


def line_problem(model, interval, solver: str) -> tuple[float, float, tuple[float, float]]:
    """``(v, beta q k, (lo, hi))`` of a model and interval the ``d = 1`` equation takes; errors name ``solver``."""
    if not isinstance(model, PureAttention) or not model.rescaled or model.hardmax or model.heads != 1 \
            or model.dimension not in (None, 1):
        raise ValueError(f"model: {solver} solves PureAttention with d = 1, one head, rescaled=True and finite "
                         f"beta, got {model!r}")
    (q, k, v), = model.head_matrices(1)
    value = float(v[0, 0])
    if value <= 0:
        raise ValueError(f"model: {solver} needs v > 0 (the support then stays in its interval), got v = {value}")
    lo, hi = (check_real(end, "interval") for end in interval)
    if not hi > lo:
        raise ValueError(f"interval must be (lo, hi) with hi > lo, got {interval!r}")
    return value, model.beta * float(q[0, 0] * k[0, 0]), (lo, hi)


class LineFV(GridSolver):
    """Finite volumes for the ``d = 1`` mean-field equation of :class:`meanfield.PureAttention` (module docstring).

    Parameters
    ----------
    model : PureAttention
        ``d = 1`` (scalars or ``1 x 1`` matrices), one head, ``rescaled=True``, finite ``beta``, ``v > 0``.
    interval : (float, float)
        The interval ``[lo, hi]`` of the grid; it must hold the initial support.
    cells : int
        Number of cells.
    rtol : float
        Local error per step relative to the RMS cell mass.

    Notes
    -----
    :meth:`solve` returns ``rho`` (time, z), ``mass`` and ``ghost_attention`` (the largest share
    of a face's attention on nearly empty cells since the previous output: the resolution
    diagnostic), ``resolved``, the settings and step counts in ``attrs``.
    """

    name = "LineFV"
    geometry = euclidean_name(1)
    default_max_steps = LINE_MAX_STEPS
    _resolution_advice = ("Later outputs follow the scheme's numerical tails, not the mean-field solution; "
                          "LineLagrangian (mass coordinates) has none")

    def __init__(self, model, interval, *, cells: int = 1000, rtol: float = 1e-6):
        self.model = model
        self.value, self.logit_scale, (lo, hi) = line_problem(model, interval, self.name)
        self.cells = check_int(cells, "cells", minimum=2)
        self.rtol = check_rtol(rtol)
        self.faces = np.linspace(lo, hi, self.cells + 1)
        self.width = (hi - lo) / self.cells
        self.centres = 0.5 * (self.faces[1:] + self.faces[:-1])
        self._last: tuple | None = None  # see _evaluated
        self._worst_share = 0.0  # the largest ghost share of the steps since the last output

    def face_velocity(self, t: float, masses: np.ndarray) -> np.ndarray:
        """The velocity :math:`u(t, z)` at the interior faces, by the midpoint rule over the cells.

        Parameters
        ----------
        t : float
            Time (the logits of the original variables grow like :math:`e^{2Vt}`).
        masses : numpy.ndarray, shape (cells,)
            The cells' masses.

        Returns
        -------
        numpy.ndarray, shape (cells - 1,)
            :math:`u` at the faces between cells.
        """
        return self._face_velocity_and_ghost_share(t, masses)[0]

    def _face_velocity_and_ghost_share(self, t: float, masses: np.ndarray) -> tuple[np.ndarray, float]:
        """The face velocity, and the largest share of attention weight on cells of mass below
        :data:`GHOST_MASS` over the faces that carry mass (next to a cell with more)."""
        scale = self.logit_scale * math.exp(2.0 * self.value * t)
        inner = self.faces[1:-1]
        with np.errstate(divide="ignore"):  # empty cells: log 0 = -inf, weight 0
            # a stage of a step may dip below zero where the kept solution does not: empty there
            exponent = scale * np.outer(inner, self.centres) + np.log(np.maximum(masses, 0.0))
        # Shifted by the row maximum among cells that hold mass: the largest weight is one.
        exponent -= exponent.max(axis=1, keepdims=True)
        weights = np.exp(exponent)
        totals = weights.sum(axis=1)
        ghost = masses < GHOST_MASS
        carrying = ~(ghost[:-1] & ghost[1:])
        share = weights[:, ghost].sum(axis=1) / totals
        return self.value * (weights @ self.centres / totals - inner), float(share[carrying].max(initial=0.0))

    def _evaluated(self, state: np.ndarray) -> tuple:
        """``(state, face velocity, ghost share)`` of ``state``: the right-hand side, the CFL bound and the
        resolution diagnostic share it."""
        if self._last is None or self._last[0] is not state:
            self._last = (state, *self._face_velocity_and_ghost_share(float(state[0]), state[1:]))
        return self._last

    def rhs(self, state: np.ndarray) -> np.ndarray:
        """``[dt/dt, dm/dt]`` of the state ``[t, m]``: each cell's balance of its upwind fluxes.

        Parameters
        ----------
        state : numpy.ndarray, shape (cells + 1,)
            The time followed by the cells' masses.

        Returns
        -------
        numpy.ndarray, shape (cells + 1,)
            Its derivative.
        """
        masses = state[1:]
        u = self._evaluated(state)[1]
        density = masses / self.width
        flux = np.zeros(self.cells + 1)
        flux[1:-1] = np.maximum(u, 0.0) * density[:-1] + np.minimum(u, 0.0) * density[1:]
        out = np.empty_like(state)
        out[0] = 1.0
        out[1:] = flux[:-1] - flux[1:]
        return out

    def check_logits(self, times) -> None:
        r"""Refuse a run whose logits :math:`\beta e^{2vt}\,z z'` overflow by the last output time.

        Parameters
        ----------
        times : numpy.ndarray
            The output times.

        Raises
        ------
        ValueError
            Naming ``times`` and the time before which the run must end.
        """
        reach = max(abs(self.faces[0]), abs(self.faces[-1])) ** 2 * self.logit_scale
        exponent = 2.0 * self.value * float(times[-1])
        if reach > 0 and exponent + math.log(reach) >= math.log(np.finfo(float).max):
            raise ValueError(f"times: the logits beta e^(2 v t) z z' reach e^{exponent + math.log(reach):.4g} at "
                             f"t = {times[-1]:g} (v = {self.value:g}), beyond double precision; end the run before "
                             f"t = {(math.log(np.finfo(float).max) - math.log(reach)) / (2.0 * self.value):.4g}")

    def initial_masses(self, rho0) -> np.ndarray:
        """The cells' masses of an initial density, total one.

        Parameters
        ----------
        rho0 : callable or numpy.ndarray
            A vectorized density of ``z`` (integrated by 8-point Gauss-Legendre per cell), or
            ``cells`` cell averages.

        Returns
        -------
        numpy.ndarray, shape (cells,)
            The masses.

        Raises
        ------
        ValueError
            If the density is negative, not finite, of zero mass or of the wrong shape.
        """
        if callable(rho0):
            nodes, weights = np.polynomial.legendre.leggauss(8)
            points = self.centres[:, None] + 0.5 * self.width * nodes[None, :]
            values = np.asarray(rho0(points), dtype=float)
            masses = 0.5 * self.width * values @ weights
        else:
            masses = self._cell_masses(rho0, "rho0")
        if not np.all(np.isfinite(masses)) or np.any(masses < 0) or not masses.sum() > 0:
            raise ValueError("rho0 must be finite, nonnegative and of positive mass on the interval")
        return masses / masses.sum()

    def _cell_masses(self, averages, name: str) -> np.ndarray:
        masses = np.asarray(averages, dtype=float) * self.width
        if masses.shape != (self.cells,):
            raise ValueError(f"{name} must be a callable or {self.cells} cell averages, got shape {masses.shape}")
        return masses

    # ------------------------------------------------------------------ the GridSolver hooks
    def _initial_state(self, rho0, continued: bool) -> np.ndarray:
        if not continued:
            return self.initial_masses(rho0)
        masses = self._cell_masses(rho0, "a continued run's rho0 (ds.rho[-1])")
        if not np.all(np.isfinite(masses)):
            raise ValueError("a continued run's rho0 (ds.rho[-1]) must be finite")
        return masses

    def _started(self, masses: np.ndarray, start: float) -> np.ndarray:
        return np.concatenate([[start], masses])

    def _stepper(self, state: np.ndarray, times: np.ndarray):
        self.check_logits(times)
        self._worst_share = 0.0
        transport = _CellTransport(self)
        first = min(times[-1] - times[0] if times.size > 1 else 1.0, 0.5 * transport.stable_step(state))
        return explicit_adaptive_step(transport, BOGACKI_SHAMPINE), first, dict

    def density(self, state: np.ndarray) -> np.ndarray:
        return state[1:] / self.width

    def _diagnose(self, state: np.ndarray, rho: np.ndarray) -> Diagnosis:
        """Mass, and the largest ghost share of the steps since the previous output (reset here)."""
        share = max(self._worst_share, self._evaluated(state)[2])
        self._worst_share = 0.0
        return Diagnosis({"mass": float(rho.sum() * self.width), "ghost_attention": share}, share <= GHOST_SHARE,
                         f"cells of mass below {GHOST_MASS:g} carry {share:.3g} of a face's attention")

    def _grid_coordinates(self) -> dict[str, np.ndarray]:
        return {"z": self.centres}

    def _recorded_settings(self) -> dict:
        return {"cells": self.cells, "interval": [self.faces[0], self.faces[-1]], "rtol": self.rtol,
                "scheme": "upwind finite volumes, Bogacki-Shampine 3(2)"}


class _CellTransport:
    """:class:`LineFV` as the integrator's :class:`~meanfield.integration.protocols.Discretisation`:
    the CFL bound, the RMS mass as the error's scale, and positivity; every accepted step's ghost
    share is kept for the next output's diagnosis."""

    decay = None  # no linear part integrated exactly

    def __init__(self, solver: LineFV):
        self.solver = solver

    def rhs(self, state: np.ndarray) -> np.ndarray:
        return self.solver.rhs(state)

    def stable_step(self, state: np.ndarray) -> float:
        """The upwind CFL bound ``h / max|u|`` (infinite where nothing moves)."""
        speed = float(np.abs(self.solver._evaluated(state)[1]).max(initial=0.0))
        return self.solver.width / speed if speed > 0 else np.inf

    @staticmethod
    def norm(state: np.ndarray) -> float:
        return float(np.sqrt(np.mean(state[1:] ** 2)))

    def tolerance(self, state: np.ndarray) -> float:
        return self.solver.rtol * self.norm(state) + 1e-300

    def admit(self, old: np.ndarray, new: np.ndarray):
        if np.min(new[1:]) < 0.0:
            return None, "negative mass"
        solver = self.solver
        solver._worst_share = max(solver._worst_share, solver._evaluated(new)[2])
        return new, None
