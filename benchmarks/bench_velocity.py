"""Particle velocity against a bare numpy evaluation (issue: foundation).

The baseline is the textbook evaluation with no stabilisation, no projection and
no blocking: pairwise products, exponential, weighted sum. Target: ratio <= 1.5.
"""

from __future__ import annotations

import numpy as np

import meanfield as mf
from common import compare


def bare_softmax_velocity(x: np.ndarray, beta: float) -> np.ndarray:
    weights = np.exp(beta * (x @ np.swapaxes(x, -1, -2)))
    return (weights @ x) / weights.sum(axis=-1, keepdims=True)


def run() -> list[tuple[str, float, float, float]]:
    rows = []
    beta = 4.0
    model = mf.SelfAttention(beta)
    cases = [("velocity SA n=4096 d=3", mf.sample_uniform(4096, 3, 0)),
             ("velocity SA 4096 systems n=32 d=2", mf.sample_uniform(32, 2, 0, batch=4096))]
    for name, x in cases:
        ours, base, ratio = compare(lambda: model.velocity(x), lambda: bare_softmax_velocity(x, beta))
        rows.append((name, ours, base, ratio))
    return rows
