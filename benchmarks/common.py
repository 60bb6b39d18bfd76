"""Timing helpers: ratios against a baseline measured in the same run, interleaved."""

from __future__ import annotations

import time
from typing import Callable


def best_time(function: Callable[[], object], repeats: int) -> float:
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        function()
        best = min(best, time.perf_counter() - start)
    return best


def compare(candidate: Callable[[], object], baseline: Callable[[], object], *, rounds: int = 5,
            repeats: int = 3) -> tuple[float, float, float]:
    """Best times of candidate and baseline, alternated so that machine noise hits both alike.

    Returns ``(candidate_seconds, baseline_seconds, ratio)``.
    """
    candidate(), baseline()  # warm caches and lazy imports
    ours = base = float("inf")
    for _ in range(rounds):
        ours = min(ours, best_time(candidate, repeats))
        base = min(base, best_time(baseline, repeats))
    return ours, base, ours / base
