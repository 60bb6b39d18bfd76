"""Pure attention in R^d (issue 34) against the sphere model at the same n and d.

n = 1000 tokens in R^3, rescaled variables (V = I, so M(t) = e^{tI} through scipy.linalg.expm
at every stage), RK4 with fixed steps, against SelfAttention on S^2 with general Q = K (the
same pair sums, the ``"numpy"`` kernel, plus the tangent projection). Both take the same
steps; the ratio is time per system-step. Target: within 1.5x.
"""

from __future__ import annotations

import numpy as np

import meanfield as mf
from common import compare

N, D, STEPS, DT = 1000, 3, 20, 0.01


def run() -> list[tuple[str, float, float, float]]:
    rng = np.random.default_rng(0)
    tokens = rng.uniform(-1.0, 1.0, (N, D))
    unit = mf.sample_uniform(N, D, 0)
    times = [0.0, STEPS * DT]
    query = np.eye(D) + 0.1 * rng.standard_normal((D, D))
    euclidean = mf.PureAttention(query=query, rescaled=True)
    sphere = mf.SelfAttention(1.0, query=query)

    def ours():
        mf.simulate_particles(euclidean, tokens, times, method="rk4", dt=DT, progress=False)

    def baseline():
        mf.simulate_particles(sphere, unit, times, method="rk4", dt=DT, progress=False, kernel="numpy")

    seconds, base, ratio = compare(ours, baseline, rounds=3, repeats=1)
    return [(f"pure attention R^3 n={N} RK4, per step (vs S^2)", seconds / STEPS, base / STEPS, ratio)]


if __name__ == "__main__":
    for row in run():
        print(row)
