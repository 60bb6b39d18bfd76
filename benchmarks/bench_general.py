"""Right-hand side of the PDE with general Q, K, V and heads against the zonal one, at the same resolution.

Circle, ``N = 1024`` cells: :class:`solvers.circle.general.GeneralCircleOperators` (one and
two heads; SA, whose face velocities need Gauss quadrature over the dual cells, and USA,
linear) against :class:`solvers.circle.operators.CircleOperators` for the zonal model of the
same ``beta``. Sphere, ``lmax = 63``: :class:`solvers.sphere.general.GeneralSphereInteraction`
inside :class:`solvers.SphereSpectral` (the whole transport, divergence included) against the
zonal path, both timed as a solve runs them (BLAS on the calling thread:
:mod:`solvers.threads`). Target: at most 10x.

    python benchmarks/bench_general.py
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))

import meanfield as mf  # noqa: E402
from common import compare  # noqa: E402
from solvers.circle.general import GeneralCircleOperators  # noqa: E402
from solvers.circle.operators import CircleOperators  # noqa: E402
from solvers.sphere.spectral import SphereSpectral  # noqa: E402
from solvers.threads import single_threaded_blas  # noqa: E402

CELLS = 1024
LMAX = 63


def _heads(count: int) -> dict:
    angle = np.array([[np.cos(0.4), -np.sin(0.4)], [np.sin(0.4), np.cos(0.4)]])
    query = [np.array([[1.0, 0.3], [0.0, 0.8]]), angle][:count]
    key = [np.array([[0.9, 0.0], [0.2, 1.0]]), np.eye(2)][:count]
    value = [np.array([[1.0, 0.2], [-0.1, 0.7]]), 0.5 * np.eye(2)][:count]
    return {"query": np.stack(query), "key": np.stack(key), "value": np.stack(value)}


def _sphere_heads(count: int) -> dict:
    tilt = np.array([[1.0, 0.0, 0.0], [0.0, np.cos(0.4), -np.sin(0.4)], [0.0, np.sin(0.4), np.cos(0.4)]])
    query = [np.array([[1.0, 0.3, 0.0], [0.0, 0.8, 0.2], [0.1, 0.0, 1.1]]), tilt][:count]
    key = [np.array([[0.9, 0.0, 0.1], [0.2, 1.0, 0.0], [0.0, -0.2, 0.8]]), np.eye(3)][:count]
    value = [np.array([[1.0, 0.2, 0.0], [-0.1, 0.7, 0.1], [0.0, 0.1, 0.9]]), 0.5 * np.eye(3)][:count]
    return {"query": np.stack(query), "key": np.stack(key), "value": np.stack(value)}


def sphere_rows() -> list[tuple[str, float, float, float]]:
    def rho0(p):
        return np.exp(1.5 * p[..., 2] + 0.8 * p[..., 0] * p[..., 1] + 0.5 * p[..., 0])

    rows = []
    for normalized in (True, False):
        zonal = SphereSpectral(mf.SelfAttention(1.5, normalized=normalized), lmax=LMAX)
        q = zonal.initial_coefficients(rho0)
        for count in (1, 2):
            general = SphereSpectral(mf.SelfAttention(1.5, normalized=normalized, **_sphere_heads(count)), lmax=LMAX)
            with single_threaded_blas():
                ours, base, ratio = compare(lambda: general.transport(q), lambda: zonal.transport(q))
            name = "SA" if normalized else "USA"
            rows.append((f"sphere rhs lmax={LMAX} {name}, {count} general head(s) vs zonal (<= 10x)", ours, base, ratio))
    return rows


def run() -> list[tuple[str, float, float, float]]:
    theta = (np.arange(CELLS) + 0.5) * 2 * np.pi / CELLS
    rho = np.exp(1.2 * np.cos(theta) + 0.5 * np.sin(2 * theta))
    rho /= rho.sum() * 2 * np.pi / CELLS
    deviation = rho - 1 / (2 * np.pi)
    rows = []
    for normalized in (True, False):
        zonal = CircleOperators(mf.SelfAttention(1.5, normalized=normalized), CELLS)
        for count in (1, 2):
            general = GeneralCircleOperators(mf.SelfAttention(1.5, normalized=normalized, **_heads(count)), CELLS)
            ours, base, ratio = compare(lambda: general.rhs(deviation), lambda: zonal.rhs(deviation))
            name = "SA" if normalized else "USA"
            rows.append((f"circle rhs N={CELLS} {name}, {count} general head(s) vs zonal (<= 10x)", ours, base, ratio))
    return rows + sphere_rows()


def main() -> None:
    for label, ours, base, ratio in run():
        print(f"{label:64} {ours:10.4g} {base:10.4g} {ratio:8.3g}")


if __name__ == "__main__":
    main()
