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
import xarray as xr

from meanfield.checks import check_int, check_rtol, check_times
from meanfield.docstrings import fill_docstrings
from meanfield.integration import DORMAND_PRINCE
from meanfield.records import PDE, euclidean_name, record_attrs

from ..circle.lagrangian import mass_labels
from .finite_volumes import SOLVE_RAISES, TIMES_AND_PROGRESS, line_problem, run_on_line

#: Fine cells per label of the table from which the initial quantiles are read (their error is
#: the square of a fine cell's width times the density's relative slope).
QUANTILE_TABLE = 16

#: The Parameters section of the discretisation's methods that take the state and do not read it.
UNUSED_STATE_PARAMETERS = """
Parameters
----------
state : numpy.ndarray
    The state (unused).
"""


@fill_docstrings(times_and_progress=TIMES_AND_PROGRESS, solve_raises=SOLVE_RAISES,
                 unused_state_parameters=UNUSED_STATE_PARAMETERS)
class LineLagrangian:
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
    """

    name = "LineLagrangian"

    #: No linear part integrated exactly (the Discretisation protocol's ``decay``).
    decay = None

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

    # ------------------------------------------------------------------ the discretisation
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

    @staticmethod
    def stable_step(state: np.ndarray) -> float:
        """No stability bound: the transport of labels is not stiff (the error control sets the steps).

        {unused_state_parameters}

        Returns
        -------
        float
            ``inf``.
        """
        return np.inf

    @staticmethod
    def norm(state: np.ndarray) -> float:
        """The largest change of a label (the error's norm; the time is not an error).

        Parameters
        ----------
        state : numpy.ndarray
            A state or a change of state.

        Returns
        -------
        float
            :math:`\\max_i |X_i|`.
        """
        return float(np.abs(state[1:]).max())

    def tolerance(self, state: np.ndarray) -> float:
        """``rtol`` times the interval's length.

        {unused_state_parameters}

        Returns
        -------
        float
            The local error allowed per step.
        """
        return self.rtol * self.length

    def admit(self, old: np.ndarray, new: np.ndarray):
        """Keep the labels' order: a swap beyond round-off is refused, round-off is repaired.

        Parameters
        ----------
        old, new : numpy.ndarray
            The states before and after the step.

        Returns
        -------
        tuple
            ``(state, None)``, or ``(None, reason)`` to retry with half the step.
        """
        positions = new[1:]
        if np.diff(positions).min(initial=0.0) < -1e-12 * self.length:
            return None, "labels crossed"
        repaired = new.copy()
        repaired[1:] = np.maximum.accumulate(positions)
        return repaired, None

    # ------------------------------------------------------------------ the run
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

    def solve(self, rho0, times, *, progress: bool | None = None):
        """Evolve ``rho0`` and record it at ``times``.

        Parameters
        ----------
        rho0 : callable
            The initial density (see :meth:`initial_positions`).
        {times_and_progress}

        Returns
        -------
        xarray.Dataset
            ``position`` (time, label): the quantile function at the labels :math:`m_i`;
            ``rho`` (time, z): the labels' measure per cell; ``mass`` (time); the settings and
            step counts in ``attrs``.

        {solve_raises}
        """
        times = check_times(times)
        frames: list[np.ndarray] = []
        settings = {"solver": self.name, "labels": self.labels, "cells": self.cells,
                    "interval": [self.faces[0], self.faces[-1]], "rtol": self.rtol,
                    "scheme": "mass coordinates, midpoint rule over the labels, Dormand-Prince 5(4)"}
        state = np.concatenate([[times[0]], self.initial_positions(rho0)])
        first = 0.01 * (times[-1] - times[0] if times.size > 1 else 1.0)
        return run_on_line(self, state, times, DORMAND_PRINCE, first, lambda t, q: frames.append(q[1:].copy()),
                           None, progress, settings, lambda: self._dataset(frames, times, settings))

    def _dataset(self, frames, times, settings):
        positions = np.stack(frames)
        width = self.faces[1] - self.faces[0]
        rho = np.diff(label_cdf(positions, self.faces), axis=-1) / width
        ds = xr.Dataset({"position": (("time", "label"), positions, {"long_name": "quantile function X(t, m)"}),
                         "rho": (("time", "z"), rho, {"long_name": "mass per cell of the labels' measure over its width"}),
                         "mass": (("time",), rho.sum(axis=1) * width)},
                        coords={"time": times[: len(frames)], "z": self.centres, "label": self.mass_labels})
        ds.attrs.update(record_attrs(PDE, euclidean_name(1), self.model, settings))
        return ds


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
