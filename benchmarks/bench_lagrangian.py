"""Through cluster formation (issue 36): the Lagrangian solver, the error estimate's cost, the sphere's atoms.

SA, beta = 9, D = 0, from 1 + 0.1 cos 4t + 0.05 sin(3t + 0.3):

- cost per unit time on the smooth part (t in [0, 3]): ``CircleLagrangian`` at 4096 mass labels
  against ``CircleFV`` at 1024 cells without its estimate (the baseline), timed in the same run;
- ``CircleFV`` with its error estimate (the shadow run on half the cells) against without;
- following the run to t = 1000 with ``CircleFVLagrangian`` (finite volumes, then mass
  coordinates), wall time and the cluster count at the end.

On S^2, SA beta = 4 from 1 + 0.2 x + 0.8 yz + 0.3 z^2 (two clusters):

- cost per unit time on the smooth part (t in [0, 1.5]): ``SphereWeightedParticles`` from the
  quadrature of lmax = 15 (2048 atoms) and of lmax = 31 (4608 atoms) against ``SphereSpectral``
  at lmax = 31 (the baseline), timed in the same run;
- following the run to t = 1000 with ``SphereSpectralParticles`` (lmax = 15; the atoms of each collapsed
  cluster merge), wall time.
"""

from __future__ import annotations

import time

import numpy as np

import meanfield as mf
from common import compare
from solvers import (CircleFV, CircleFVLagrangian, CircleLagrangian, SphereSpectral, SphereSpectralParticles,
                     SphereWeightedParticles)


def start(theta):
    return 1 + 0.1 * np.cos(4 * theta) + 0.05 * np.sin(3 * theta + 0.3)


def sphere_start(x):
    return 1 + 0.2 * x[..., 0] + 0.8 * x[..., 1] * x[..., 2] + 0.3 * x[..., 2] ** 2


def sphere_rows() -> list[tuple[str, float, float, float]]:
    model = mf.SelfAttention(4.0)
    smooth = np.array([0.0, 1.5])
    spectral = SphereSpectral(model, lmax=31)
    rows = []
    for quadrature in (15, 31):
        atoms = SphereWeightedParticles(model, lmax=15, quadrature_lmax=quadrature)
        count = atoms.quadrature.area_weight.size
        ours, base, ratio = compare(lambda: atoms.solve(sphere_start, smooth, progress=False),
                                    lambda: spectral.solve(sphere_start, smooth, progress=False), rounds=3, repeats=1)
        rows.append((f"SphereWeightedParticles {count} atoms vs SphereSpectral lmax = 31, SA beta = 4, t in [0, 1.5]",
                     ours / 1.5, base / 1.5, ratio))
    clock = time.perf_counter()
    ds = SphereSpectralParticles(model, lmax=15).solve(sphere_start, [0.0, 5.0, 10.0, 20.0, 100.0, 1000.0],
                                                       progress=False)
    wall = time.perf_counter() - clock
    rows.append((f"SphereSpectralParticles lmax = 15 to t = 1000 ({int(ds.cluster_count.values[-1])} clusters at the end)",
                 wall, float("nan"), float("nan")))
    return rows


def run() -> list[tuple[str, float, float, float]]:
    model = mf.SelfAttention(9.0)
    smooth = np.array([0.0, 3.0])
    lagrangian = CircleLagrangian(model, points=4096, cells=1024)
    plain = CircleFV(model, cells=1024, error_level=None)
    estimated = CircleFV(model, cells=1024)
    rows = []
    ours, base, ratio = compare(lambda: lagrangian.solve(start, smooth, progress=False),
                                lambda: plain.solve(start, smooth, progress=False), rounds=3, repeats=1)
    rows.append(("CircleLagrangian M = 4096 vs CircleFV N = 1024 (no estimate), SA beta = 9, t in [0, 3]",
                 ours / 3.0, base / 3.0, ratio))
    ours, base, ratio = compare(lambda: estimated.solve(start, smooth, progress=False),
                                lambda: plain.solve(start, smooth, progress=False), rounds=3, repeats=1)
    rows.append(("CircleFV N = 1024 with its error estimate vs without, same run", ours / 3.0, base / 3.0, ratio))
    clock = time.perf_counter()
    ds = CircleFVLagrangian(model).solve(start, [0.0, 5.0, 10.0, 100.0, 1000.0], progress=False)
    wall = time.perf_counter() - clock
    rows.append((f"CircleFVLagrangian to t = 1000 ({int(ds.cluster_count.values[-1])} clusters at the end)",
                 wall, float("nan"), float("nan")))
    return rows + sphere_rows()


if __name__ == "__main__":
    for name, seconds, baseline, ratio in run():
        print(f"{name}: {seconds:.4g} s (baseline {baseline:.4g} s, ratio {ratio:.3g})")
