"""Timing helpers: ratios against a baseline measured in the same run, interleaved."""

from __future__ import annotations

import time
from typing import Callable

import numpy as np


def best_time(function: Callable[[], object], repeats: int) -> float:
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        function()
        best = min(best, time.perf_counter() - start)
    return best


def compare(candidate: Callable[[], object], baseline: Callable[[], object], *, rounds: int = 5,
            repeats: int = 3) -> tuple[float, float, float]:
    """Best times of candidate and baseline, and the median ratio of runs taken side by side.

    ``rounds * repeats`` runs of each, alternated run by run: each candidate run is paired
    with the baseline run right after it, and the ratio is the median over the pairs. The
    machine's speed drifts over seconds, so two best times
    taken at different moments can differ by their moments as much as by their codes; the
    two runs of a pair share their moment, and the median drops the pairs an interruption hit.

    Returns ``(candidate_seconds, baseline_seconds, ratio)``: the best single run of each,
    and the median of the pairs' ratios.
    """
    candidate(), baseline()  # warm caches and lazy imports
    ours, base = np.empty(rounds * repeats), np.empty(rounds * repeats)
    for pair in range(ours.size):
        start = time.perf_counter()
        candidate()
        middle = time.perf_counter()
        baseline()
        ours[pair], base[pair] = middle - start, time.perf_counter() - middle
    return float(ours.min()), float(base.min()), float(np.median(ours / base))
