"""Every fast path of every discretisation against the general path through the model's reference.

The PDE counterpart of :func:`meanfield.engines.check_consistency`: a fast path (the FFT
convolution of the zonal kernel, Funk-Hecke on the sphere, the head coefficient machinery)
must give the velocity the model's :meth:`~meanfield.SelfAttention.velocity_field` gives
through the same discretisation's quadrature (``interaction="reference"``,
:mod:`solvers.reference`), on a density that is far from uniform.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from .circle.finite_volumes import CircleFV
from .circle.spectral import CircleSpectral
from .reference import interaction_path
from .sphere.spectral import SphereSpectral

#: The fast paths a discretisation may have.
FAST_PATHS = ("zonal", "general")


def _circle_density(theta: np.ndarray) -> np.ndarray:
    """A smooth density with every low mode present (no symmetry a wrong term could hide behind)."""
    return np.exp(1.5 * np.cos(theta - 0.4)) + 0.4 * np.cos(3 * theta + 1.0) + 0.6


def _sphere_density(points: np.ndarray) -> np.ndarray:
    x, y, z = np.moveaxis(points, -1, 0)
    return np.exp(1.5 * (0.6 * x - 0.3 * y + 0.74 * z)) + 0.3 * x * y + 0.5


@dataclass(frozen=True)
class PdeConsistency:
    """How far one fast path of one discretisation is from the reference path (relative to the largest speed)."""

    discretisation: str
    path: str
    velocity: float
    energy: float | None


def _circle_fv(model, path: str, cells: int, lmax: int):
    solver = CircleFV(model, cells=cells, interaction=path, error_level=None)
    deviation = solver.initial_density(_circle_density) - solver.operators.uniform
    return solver.operators.face_velocity(deviation), solver.operators.energy(solver.operators.uniform + deviation)


def _circle_spectral(model, path: str, cells: int, lmax: int):
    solver = CircleSpectral(model, cells=cells, interaction=path)
    coefficients = solver.initial_coefficients(_circle_density)
    return solver.velocity(coefficients), solver.energy(coefficients)


def _sphere_spectral(model, path: str, cells: int, lmax: int):
    solver = SphereSpectral(model, lmax=lmax, interaction=path)
    coefficients = solver.initial_coefficients(_sphere_density)
    return np.stack(solver.velocity(coefficients)), solver.energy(coefficients)


#: Each discretisation: the ambient dimension it solves in and ``(model, path, cells, lmax) -> (velocity, energy)``.
DISCRETISATIONS: dict[str, tuple[int, Callable]] = {
    "CircleFV": (2, _circle_fv),
    "CircleSpectral": (2, _circle_spectral),
    "SphereSpectral": (3, _sphere_spectral),
}


def check_pde_consistency(model, *, cells: int = 128, lmax: int = 23, rtol: float = 1e-11) -> list[PdeConsistency]:
    r"""Compare every fast path that serves ``model`` on every discretisation with its reference path.

    On each discretisation of the model's dimension (the circle's finite volumes and Fourier
    series, the sphere's harmonics), the velocity the fast path computes from a smooth density
    far from uniform must equal the one the model's ``velocity_field`` gives through the same
    quadrature to ``rtol`` of the largest speed (both are exact for the discrete density up to
    the kernel's modes beyond the grid, which a resolved kernel puts below round-off), and so
    must the energy where the model has one.

    Parameters
    ----------
    model
        Any model a solver accepts (one no fast path serves gives no record).
    cells : int
        Cells of the circle's discretisations.
    lmax : int
        Largest degree on the sphere (it must resolve the model's kernel).
    rtol : float
        Allowed difference relative to the largest speed (the energy: to its size).

    Returns
    -------
    list of PdeConsistency
        One record per discretisation and fast path compared.

    Raises
    ------
    AssertionError
        Naming the discretisation, the path and the discrepancy, when one exceeds ``rtol``.
    """
    records = []
    for name, (dimension, evaluate) in DISCRETISATIONS.items():
        if model.dimension not in (None, dimension):
            continue
        if interaction_path(model, "auto", name) == "reference":
            continue
        velocity, energy = evaluate(model, "reference", cells, lmax)
        scale = float(np.abs(velocity).max()) or 1.0
        for path in FAST_PATHS:
            try:
                interaction_path(model, path, name)
            except ValueError:  # this fast path does not serve the model
                continue
            fast_velocity, fast_energy = evaluate(model, path, cells, lmax)
            error = float(np.abs(fast_velocity - velocity).max()) / scale
            energy_error = None
            if np.isfinite(energy) and np.isfinite(fast_energy):
                energy_error = abs(fast_energy - energy) / max(abs(energy), np.finfo(float).tiny)
            for what, value in (("velocity", error), ("energy", energy_error)):
                if value is not None and not value <= rtol:
                    raise AssertionError(f"{name}'s {path} path is {value:.3g} (relative) from the {what} of the "
                                         f"model's velocity_field through the same quadrature, for {model!r} "
                                         f"(rtol {rtol:g})")
            records.append(PdeConsistency(name, path, error, energy_error))
    return records
