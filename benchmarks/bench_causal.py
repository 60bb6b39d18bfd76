"""Causal attention: the O(nK) circle scan against the direct O(n^2) causal sum, and the example's wall time.

- Velocity of one prompt of ``n = 10^4`` tokens on the circle (causal USA, beta = 1,
  lambda = 2, the paper's prefactor): :class:`meanfield.engines.causal_series.CausalCircleSeries`
  against :meth:`meanfield.CausalAttention.velocity_unchecked` (row-blocked direct sum, the same
  numbers to 1e-12). Both timed whole, alternated.
- ``--example``: the wall time of ``examples/lost_in_the_middle.py`` with its config.

    python benchmarks/bench_causal.py [--example]
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))

import meanfield as mf  # noqa: E402
from common import compare  # noqa: E402
from meanfield.engines.causal_series import CausalCircleSeries  # noqa: E402

N = 10_000


def velocity_rows() -> list[tuple[str, float, float, float]]:
    model = mf.CausalAttention(1.0, normalized=False, alibi=2.0, prefactor=1.0)
    theta = np.random.default_rng(0).uniform(0, 2 * np.pi, (1, N))
    x = np.stack([np.cos(theta), np.sin(theta)], axis=-1)
    scan = CausalCircleSeries(model)
    ours, base, ratio = compare(lambda: scan.velocity_unchecked(x), lambda: model.velocity_unchecked(x), rounds=3, repeats=1)
    return [(f"causal velocity n=1e4 circle (M={scan.degree}): scan vs direct", ours, base, ratio)]


def example_rows() -> list[tuple[str, float, float, float]]:
    script = Path(__file__).parents[1] / "examples" / "lost_in_the_middle.py"
    start = time.perf_counter()
    subprocess.run([sys.executable, str(script)], check=True, stdout=subprocess.DEVNULL)
    seconds = time.perf_counter() - start
    return [("examples/lost_in_the_middle.py wall", seconds, float("nan"), float("nan"))]


def run() -> list[tuple[str, float, float, float]]:
    return velocity_rows()


def main(argv: list[str]) -> None:
    rows = run() + (example_rows() if "--example" in argv else [])
    for label, ours, base, ratio in rows:
        print(f"{label:64} {ours:10.4g} {base:10.4g} {ratio:8.3g}")


if __name__ == "__main__":
    main(sys.argv[1:])
