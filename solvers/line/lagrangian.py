r"""The ``d = 1`` mean-field equation of pure attention in mass coordinates: through the collapse, without tails.

:class:`~solvers.LineFV`'s upwind tails steer its flow once :math:`s(t) = \beta qk\,e^{2vt}` is
large (its module docstring): the attention at a point goes to the furthest mass however
small. In mass coordinates there are no tails. A probability measure on the line is its
quantile function :math:`X(t, m)`, the position of the mass label :math:`m \in (0, 1)`, and the
continuity equation of :mod:`solvers.line.finite_volumes` becomes

.. math:: \partial_t X(t, m) = u\big(t, X(t, m)\big), \qquad
          u(t, z) = v\Big(\frac{\int_0^1 X(m')\,e^{s(t) z X(m')}\,dm'}{\int_0^1 e^{s(t) z X(m')}\,dm'} - z\Big):

each label moves with the mean-field velocity, and a measure that collapses onto points is a
quantile function with flat pieces, represented as exactly as a smooth one.

Discretisation: ``M`` labels at the midpoints :math:`m_i = (i + 1/2)/M`, each of mass
:math:`1/M`, started at the quantiles of the initial density. The integrals are the midpoint
rule over the labels, which is the velocity of the ``M`` labels as tokens of the particle
system (:meth:`meanfield.PureAttention.velocity_at`, the model's reference right-hand side):
second order in :math:`1/M` while :math:`X` is smooth, exact for a sum of Dirac masses whose
masses are multiples of :math:`1/M`. Time: the library's adaptive Dormand-Prince pair, the
local error per step below ``rtol`` times the interval's length; labels keep their order (a step
that would swap two by more than round-off is retried with half of it).

The measure of the labels: mass :math:`1/M` spread evenly between consecutive labels, and
:math:`1/(2M)` at each end label; its distribution function is the piecewise-linear
interpolation of :math:`(X_i, m_i)`, which ``validation.distances.line_w1`` reads exactly
(``position``). ``rho`` records the mass per cell of that measure on ``cells`` cells of
``interval``.
"""

from __future__ import annotations

import numpy as np

from meanfield.checks import check_int, check_rtol
from meanfield.integration import DORMAND_PRINCE, explicit_adaptive_step
from meanfield.records import euclidean_name

from ..circle.lagrangian import mass_labels
from ..grid_solver import Diagnosis, GridSolver, UnboundedTransport
from .finite_volumes import LINE_MAX_STEPS, line_problem

#: Fine cells per label of the table from which the initial quantiles are read (their error is
#: the square of a fine cell's width times the density's relative slope).
QUANTILE_TABLE = 16


class LineLagrangian(GridSolver):
    r"""The ``d = 1`` mean-field equation of :class:`meanfield.PureAttention` in mass coordinates (module docstring).

    Parameters
    ----------
    model : PureAttention
        ``d = 1`` (scalars or ``1 x 1`` matrices), one head, ``rescaled=True``, finite ``beta``, ``v > 0``.
    interval : (float, float)
        An interval holding the initial support (the labels then stay in it).
    labels : int
        Number ``M`` of mass labels.
    cells : int
        Cells of ``interval`` on which ``rho`` is recorded.
    rtol : float
        Local error per step relative to the interval's length.

    Notes
    -----
    :meth:`solve` returns ``position`` (time, label), the quantile function at the labels
    :math:`m_i`; ``rho`` (time, z), the labels' measure per cell; ``mass``; the settings and
    step counts in ``attrs``. ``rho0`` is a vectorized density of ``z`` (see
    :meth:`initial_positions`), or with ``continued=True`` the positions of an earlier run
    (``ds.position[-1]``).
    """

    name = "LineLagrangian"
    geometry = euclidean_name(1)
    default_max_steps = LINE_MAX_STEPS
    _resolution_advice = ""  # the labels' measure is exact for any measure: nothing to under-resolve

    def __init__(self, model, interval, *, labels: int = 512, cells: int = 200, rtol: float = 1e-8):
        self.model = model
        self.value, _, (lo, hi) = line_problem(model, interval, self.name)
        self.labels = check_int(labels, "labels", minimum=2)
        self.cells = check_int(cells, "cells", minimum=2)
        self.rtol = check_rtol(rtol)
        self.length = hi - lo
        self.faces = np.linspace(lo, hi, self.cells + 1)
        self.centres = 0.5 * (self.faces[1:] + self.faces[:-1])
        self.mass_labels = mass_labels(self.labels)

    def rhs(self, state: np.ndarray) -> np.ndarray:
        """``[dt/dt, dX/dt]`` of the state ``[t, X]``: the labels' velocity as tokens.

        Parameters
        ----------
        state : numpy.ndarray, shape (labels + 1,)
            The time followed by the labels' positions.

        Returns
        -------
        numpy.ndarray, shape (labels + 1,)
            Its derivative.
        """
        out = np.empty_like(state)
        out[0] = 1.0
        positions = state[1:].reshape(1, -1, 1)
        out[1:] = self.model.velocity_at(positions, self.model.rescaling(float(state[0]), 1)).ravel()
        return out

    def initial_positions(self, rho0) -> np.ndarray:
        """The labels' positions: the quantiles :math:`F_0^{-1}(m_i)` of an initial density on the interval.

        Parameters
        ----------
        rho0 : callable
            A vectorized density of ``z`` on the interval (need not be normalized).

        Returns
        -------
        numpy.ndarray, shape (labels,)
            Increasing positions.

        Raises
        ------
        ValueError
            If the density is negative, not finite or of zero mass on the interval.
        """
        fine = QUANTILE_TABLE * self.labels
        faces = np.linspace(self.faces[0], self.faces[-1], fine + 1)
        width = faces[1] - faces[0]
        nodes, weights = np.polynomial.legendre.leggauss(4)
        values = np.asarray(rho0(0.5 * (faces[1:] + faces[:-1])[:, None] + 0.5 * width * nodes), dtype=float)
        masses = 0.5 * width * values @ weights
        if not np.all(np.isfinite(masses)) or np.any(masses < 0) or not masses.sum() > 0:
            raise ValueError("rho0 must be finite, nonnegative and of positive mass on the interval")
        cumulative = np.concatenate([[0.0], np.cumsum(masses / masses.sum())])
        # The distribution function is piecewise linear in the table: invert it cell by cell.
        return np.interp(self.mass_labels, cumulative, faces)

    # ------------------------------------------------------------------ the GridSolver hooks
    def _initial_state(self, rho0, continued: bool) -> np.ndarray:
        if not continued:
            return self.initial_positions(rho0)
        positions = np.asarray(rho0, dtype=float)
        if positions.shape != (self.labels,) or not np.all(np.isfinite(positions)):
            raise ValueError(f"a continued run takes the positions of an earlier one (ds.position[-1], "
                             f"{self.labels} finite positions), got shape {positions.shape}")
        return positions

    def _started(self, positions: np.ndarray, start: float) -> np.ndarray:
        return np.concatenate([[start], positions])

    def _stepper(self, state: np.ndarray, times: np.ndarray):
        # A first step that moves the fastest label by 1 % of the interval: it does not depend on how
        # far the outputs reach, so a run continued from an output takes the steps of one run.
        speed = float(np.abs(self.rhs(state)[1:]).max())
        span = times[-1] - times[0] if times.size > 1 else 1.0
        first = min(span, 0.01 * self.length / speed) if speed > 0 else span
        return explicit_adaptive_step(_LabelTransport(self), DORMAND_PRINCE), first, dict

    def density(self, state: np.ndarray) -> np.ndarray:
        width = self.faces[1] - self.faces[0]
        return np.diff(label_cdf(state[1:], self.faces)) / width

    def _diagnose(self, state: np.ndarray, rho: np.ndarray) -> Diagnosis:
        return Diagnosis({"mass": float(rho.sum() * (self.faces[1] - self.faces[0]))}, True, "")

    def _grid_coordinates(self) -> dict[str, np.ndarray]:
        return {"z": self.centres}

    def _recorded_settings(self) -> dict:
        return {"labels": self.labels, "cells": self.cells, "interval": [self.faces[0], self.faces[-1]],
                "rtol": self.rtol, "scheme": "mass coordinates, midpoint rule over the labels, Dormand-Prince 5(4)"}

    def _recorded_fields(self, state: np.ndarray) -> dict:
        return {"position": (("label",), state[1:].copy())}

    def _recorded_coordinates(self) -> dict[str, np.ndarray]:
        return {"label": self.mass_labels}

    def continuation_state(self, ds) -> np.ndarray:
        """The labels' positions at the end of ``ds`` (what ``solve(..., continued=True)`` takes).

        Parameters
        ----------
        ds : xarray.Dataset
            A dataset this solver returned.

        Returns
        -------
        numpy.ndarray
            ``ds.position[-1]``.
        """
        return ds.position.values[-1]


class _LabelTransport(UnboundedTransport):
    """:class:`LineLagrangian` as the integrator's discretisation: the largest change of a label as
    the error's norm (the time is not an error), ``rtol`` times the interval's length as its
    tolerance, and the labels' order kept."""

    @staticmethod
    def norm(state: np.ndarray) -> float:
        return float(np.abs(state[1:]).max())

    def tolerance(self, state: np.ndarray) -> float:
        return self.solver.rtol * self.solver.length

    def admit(self, old: np.ndarray, new: np.ndarray):
        """A swap beyond round-off is refused (half the step), round-off is repaired."""
        positions = new[1:]
        if np.diff(positions).min(initial=0.0) < -1e-12 * self.solver.length:
            return None, "labels crossed"
        repaired = new.copy()
        repaired[1:] = np.maximum.accumulate(positions)
        return repaired, None


def label_cdf(positions: np.ndarray, points: np.ndarray, side: str = "right") -> np.ndarray:
    r"""The distribution function of the labels' measure (module docstring) at ``points``.

    Mass :math:`1/(2M)` at each end label and :math:`1/M` spread evenly between consecutive
    labels: :math:`F` interpolates :math:`(X_i, m_i)` linearly, is 0 below :math:`X_0` and 1 from
    :math:`X_{M-1}` on. Coincident labels make a jump.

    Parameters
    ----------
    positions : numpy.ndarray, shape (..., M)
        Sorted label positions (a leading axis: several times).
    points : numpy.ndarray, shape (P,)
        Where to evaluate.
    side : {"right", "left"}
        :math:`\mu((-\infty, z])`, or the left limit :math:`\mu((-\infty, z))` (they differ at atoms).

    Returns
    -------
    numpy.ndarray, shape (..., P)
        The values.
    """
    flat = positions.reshape(-1, positions.shape[-1])
    labels = flat.shape[-1]
    out = np.empty((flat.shape[0], points.size))
    for row, x in zip(out, flat):
        index = np.searchsorted(x, points, side=side) - 1  # the last label at or (left) below each point
        inner = np.clip(index, 0, labels - 2)
        gap = x[inner + 1] - x[inner]
        with np.errstate(divide="ignore", invalid="ignore"):
            fraction = np.where(gap > 0, (points - x[inner]) / gap, 0.0)
        row[:] = np.where(index < 0, 0.0, np.where(index >= labels - 1, 1.0,
                                                    (inner + 0.5 + np.clip(fraction, 0.0, 1.0)) / labels))
    return out.reshape(positions.shape[:-1] + (points.size,))
