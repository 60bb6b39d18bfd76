"""Doubly stochastic (Sinkhorn) attention against softmax attention: one velocity, and one PDE right-hand side.

One particle velocity of ``SinkhornAttention(1.0)`` (Q = K = V = I: symmetric scores, the
averaged iteration with ``iterations=None``) at n = 256 and 1024 tokens in d = 3 and 64, for
1, 3 and 10 normalisations and to the default tolerance, against one velocity of
``SelfAttention(1.0)`` on the same tokens (its numpy reference, the same pair count). Then one
right-hand side of ``CircleFV`` at 128 cells: Sinkhorn through the reference path against
softmax on the same reference path and on its FFT convolution.

    python benchmarks/bench_sinkhorn.py
"""

from __future__ import annotations

import numpy as np

import meanfield as mf
from common import compare
from solvers import CircleFV


def run() -> list[tuple[str, float, float, float]]:
    rows = []
    for n, d in ((256, 3), (1024, 3), (256, 64), (1024, 64)):
        x = mf.sample_uniform(n, d, rng=0)
        softmax = mf.SelfAttention(1.0)
        for iterations in (1, 3, 10, None):
            model = mf.SinkhornAttention(1.0, iterations=iterations)
            ours, base, ratio = compare(lambda: model.velocity(x), lambda: softmax.velocity(x), rounds=3, repeats=2)
            label = "to tolerance" if iterations is None else f"{iterations} normalisations"
            rows.append((f"Sinkhorn velocity, n = {n}, d = {d}, {label}, vs softmax", ours, base, ratio))
    deviation = 0.05 * np.cos(2 * 2 * np.pi * (np.arange(128) + 0.5) / 128)
    sinkhorn = CircleFV(mf.SinkhornAttention(3.0), cells=128).operators
    for path in ("reference", "zonal"):
        softmax = CircleFV(mf.SelfAttention(3.0), cells=128, interaction=path).operators
        ours, base, ratio = compare(lambda: sinkhorn.rhs(deviation), lambda: softmax.rhs(deviation), rounds=3, repeats=2)
        rows.append((f"CircleFV rhs, 128 cells: Sinkhorn vs softmax on its {path} path", ours, base, ratio))
    return rows


if __name__ == "__main__":
    for label, ours, base, ratio in run():
        print(f"{label:70} {ours:10.4g} {base:10.4g} {ratio:8.3g}")
