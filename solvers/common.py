"""What every PDE solver shares: input checks on densities, diagnostics, the output record."""

from __future__ import annotations

import json
import os
import sys
import warnings

import numpy as np

from meanfield.particles import package_version


class UnderResolvedWarning(RuntimeWarning):
    """The discrete solution no longer resolves the clusters; later values are untrustworthy."""


def check_density(values: np.ndarray, shape: tuple[int, ...], name: str = "rho0") -> np.ndarray:
    """A finite, nonnegative array of the grid's shape with positive total."""
    values = np.asarray(values, dtype=float)
    if values.shape != shape:
        raise ValueError(f"{name} must be a callable or an array of the grid's shape {shape}, "
                         f"got shape {values.shape}")
    if not np.all(np.isfinite(values)):
        raise ValueError(f"{name} contains NaN or infinite values")
    if np.any(values < 0):
        raise ValueError(f"{name} must be nonnegative; its minimum is {values.min():.3g}")
    if not np.any(values > 0):
        raise ValueError(f"{name} has zero mass: a density must have positive total mass")
    return values


def is_gradient_flow(model) -> bool:
    """Whether the velocity is linear in rho, v = grad(Phi * rho): USA, zonal aggregation, beta = 0.

    These carry the free energy F = D int rho log rho - E (non-increasing); SA at beta > 0 has
    no such functional once D > 0.
    """
    return not (getattr(model, "normalized", False) and model.beta > 0)


def solver_attrs(model, settings: dict) -> dict:
    return {"model": json.dumps(model.to_dict()), "settings": json.dumps(settings),
            "version": package_version()}


def _caller_stacklevel() -> int:
    """Stack level of the first frame outside this library, so warnings point at the user's call."""
    import meanfield
    import solvers

    packages = tuple(os.path.dirname(module.__file__) + os.sep for module in (meanfield, solvers))
    frame, level = sys._getframe(1), 1
    while frame is not None and frame.f_code.co_filename.startswith(packages):
        frame, level = frame.f_back, level + 1
    return level


class ResolutionMonitor:
    """Warns once, and remembers when, a run stops resolving its solution."""

    def __init__(self, advice: str):
        self.advice = advice
        self.since: float | None = None

    def record(self, time: float, trustworthy: bool, reason: str) -> None:
        if trustworthy or self.since is not None:
            return
        self.since = time
        warnings.warn(f"under-resolved from t={time:.6g} on: {reason}. {self.advice}",
                      UnderResolvedWarning, stacklevel=_caller_stacklevel())
