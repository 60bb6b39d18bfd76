"""Validation of user input at the public boundary.

Every helper raises :class:`ValueError` (or :class:`TypeError`) whose message
names the offending argument and shows its value, so that a user can fix the
call without reading the source.
"""

from __future__ import annotations

import numbers
import os

import numpy as np

from .sphere import row_norms

#: Largest argument of ``exp`` that stays finite in double precision.
EXP_OVERFLOW = 709.0

#: Points whose norm differs from one by more than this are rejected as "off the sphere".
SPHERE_TOLERANCE = 1e-6


def _show(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def check_real(value: object, name: str, *, minimum: float | None = None,
               strictly: bool = False) -> float:
    """Return ``value`` as a finite float, optionally bounded below."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a real number, got {_show(value)}")
    number = float(value)
    if not np.isfinite(number):
        raise ValueError(f"{name} must be finite, got {number!r}")
    if minimum is not None:
        if strictly and number <= minimum:
            raise ValueError(f"{name} must be > {minimum}, got {number!r}")
        if not strictly and number < minimum:
            raise ValueError(f"{name} must be >= {minimum}, got {number!r}")
    return number


def check_int(value: object, name: str, *, minimum: int) -> int:
    """Return ``value`` as an int ``>= minimum``; floats such as ``3.0`` are refused (:class:`TypeError`)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an integer >= {minimum}, got {_show(value)}")
    if value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")
    return int(value)


def check_points(x: object, name: str = "x", *, tolerance: float = SPHERE_TOLERANCE) -> np.ndarray:
    """Return ``x`` as a float array of unit vectors with shape ``(..., n, d)``."""
    array = np.asarray(x, dtype=float)
    if array.ndim < 2:
        raise ValueError(f"{name} must have shape (..., n, d) with n >= 1 and d >= 2, "
                         f"got shape {array.shape}")
    if array.shape[-1] < 2 or array.shape[-2] < 1:
        raise ValueError(f"{name} must have shape (..., n, d) with n >= 1 and d >= 2, "
                         f"got shape {array.shape}")
    if not np.all(np.isfinite(array)):
        raise ValueError(f"{name} contains NaN or infinite values")
    deviation = np.abs(row_norms(array) - 1.0)
    worst = float(deviation.max())
    if worst > tolerance:
        raise ValueError(f"{name} must lie on the unit sphere (|x| = 1); the largest "
                         f"deviation | |x| - 1 | is {worst:.3g} > {tolerance:g} (tokens in R^d without layer "
                         "normalization are meanfield.PureAttention's)")
    return array


#: The smallest relative tolerance an adaptive integrator is given: below it the round-off of
#: a double dominates the local error (the steps shrink without making the result any better).
SMALLEST_RTOL = 1e-14


#: Fixed steps one run may take at most: a step far below the interval makes no progress.
MAX_FIXED_STEPS = 10**9


def check_rtol(rtol: object, name: str = "rtol", *, below: float | None = None) -> float:
    """Return ``rtol`` as a float ``>=`` :data:`SMALLEST_RTOL` (and ``< below`` when given).

    ``below`` bounds a tolerance that has nothing to control from there on (the particles'
    ``rtol``); the PDE solvers accept any larger one, which keeps every step the driver
    proposes (a way to measure a scheme's own order with fixed steps).
    """
    value = check_real(rtol, name, minimum=0.0, strictly=True)
    if value < SMALLEST_RTOL:
        raise ValueError(f"{name} must be >= {SMALLEST_RTOL:g} (double precision cannot meet a smaller local "
                         f"error relative to what moves), got {value!r}")
    if below is not None and value >= below:
        raise ValueError(f"{name} must be < {below:g} (a relative local error of {below:g} or more controls "
                         f"nothing), got {value!r}")
    return value


def check_step(dt: object, times: np.ndarray, name: str = "dt") -> float:
    """Return a fixed step ``dt`` > 0 that crosses ``times`` in at most :data:`MAX_FIXED_STEPS` steps."""
    value = check_real(dt, name, minimum=0.0, strictly=True)
    span = float(times[-1] - times[0])
    if span / value > MAX_FIXED_STEPS:
        raise ValueError(f"{name} = {value!r} would take {span / value:.3g} steps from t = {times[0]:g} to "
                         f"{times[-1]:g}, more than {MAX_FIXED_STEPS:.0e}: raise {name}")
    return value


def check_times(times: object, name: str = "times") -> np.ndarray:
    """Return output times as a 1-d float array, finite and strictly increasing.

    The run starts at ``times[0]``; a single time gives the initial state alone.
    """
    array = np.atleast_1d(np.asarray(times, dtype=float))
    if array.ndim != 1 or array.size < 1:
        raise ValueError(f"{name} must be a 1-d sequence of output times, got shape {array.shape}")
    if not np.all(np.isfinite(array)):
        raise ValueError(f"{name} contains NaN or infinite values: {_show(array.tolist())}")
    if np.any(np.diff(array) <= 0):
        raise ValueError(f"{name} must be strictly increasing, got {_show(array.tolist())}")
    return array


def check_density(values: object, shape: tuple[int, ...], name: str = "rho0", *,
                  evolved: bool = False, grid: str = "the grid") -> np.ndarray:
    """Return ``values`` as a finite, nonnegative float array of ``shape`` with positive total.

    ``grid`` says, in the message on a wrong shape, which grid the values must lie on.

    ``evolved=True``: the values are a solver's own output (the last density of a run being
    continued), checked for shape and finiteness only; an undershoot below zero there is that
    run's resolution diagnosis, which its diagnostics report, not an input error.
    """
    if np.iscomplexobj(values):
        raise TypeError(f"{name} must be real; got complex values (a density has no imaginary part)")
    values = np.asarray(values, dtype=float)
    if values.shape != shape:
        raise ValueError(f"{name} must be a callable or values on {grid}, shape {shape}, got shape {values.shape}")
    if not np.all(np.isfinite(values)):
        raise ValueError(f"{name} contains NaN or infinite values")
    if evolved:
        return values
    if np.any(values < 0):
        raise ValueError(f"{name} must be nonnegative; its minimum is {values.min():.3g}")
    if not np.any(values > 0):
        raise ValueError(f"{name} has zero mass: a density must have positive total mass")
    return values


#: A computation may use at most this fraction of the machine's memory.
MEMORY_FRACTION = 0.5


def physical_memory() -> int:
    """The machine's memory in bytes."""
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def check_memory(needed: float, what: str, advice: str) -> None:
    """Refuse, naming ``what`` (the arguments that decide it), a computation of ``needed`` bytes beyond
    :data:`MEMORY_FRACTION` of the machine's memory, before anything is allocated."""
    available = physical_memory()
    if needed > MEMORY_FRACTION * available:
        raise ValueError(f"{what} needs about {needed / 2**30:.3g} GiB, more than half of this machine's "
                         f"{available / 2**30:.3g} GiB: {advice}")
