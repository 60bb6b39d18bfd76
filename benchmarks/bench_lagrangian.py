"""The circle through cluster formation (issue 36): the Lagrangian solver and the error estimate's cost.

SA, beta = 9, D = 0, from 1 + 0.1 cos 4t + 0.05 sin(3t + 0.3):

- cost per unit time on the smooth part (t in [0, 3]): ``CircleLagrangian`` at 4096 mass labels
  against ``CircleFV`` at 1024 cells without its estimate (the baseline), timed in the same run;
- ``CircleFV`` with its error estimate (the shadow run on half the cells) against without;
- following the run to t = 1000 with ``CircleFVLagrangian`` (finite volumes, then mass
  coordinates), wall time and the cluster count at the end.
"""

from __future__ import annotations

import time

import numpy as np

import meanfield as mf
from common import compare
from solvers import CircleFV, CircleFVLagrangian, CircleLagrangian


def start(theta):
    return 1 + 0.1 * np.cos(4 * theta) + 0.05 * np.sin(3 * theta + 0.3)


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
    return rows


if __name__ == "__main__":
    for name, seconds, baseline, ratio in run():
        print(f"{name}: {seconds:.4g} s (baseline {baseline:.4g} s, ratio {ratio:.3g})")
