"""Right-hand side of the PDE with general Q, K, V and heads against the zonal one, at the same resolution.

Circle, ``N = 1024`` cells: :class:`solvers.circle_general.GeneralCircleOperators` (one and
two heads; SA, whose face velocities need Gauss quadrature over the dual cells, and USA,
linear) against :class:`solvers.circle_operators.CircleOperators` for the zonal model of the
same ``beta``. Target: at most 10x.

    python benchmarks/bench_general.py
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))

import meanfield as mf  # noqa: E402
from common import compare  # noqa: E402
from solvers.circle_general import GeneralCircleOperators  # noqa: E402
from solvers.circle_operators import CircleOperators  # noqa: E402

CELLS = 1024


def _heads(count: int) -> dict:
    angle = np.array([[np.cos(0.4), -np.sin(0.4)], [np.sin(0.4), np.cos(0.4)]])
    query = [np.array([[1.0, 0.3], [0.0, 0.8]]), angle][:count]
    key = [np.array([[0.9, 0.0], [0.2, 1.0]]), np.eye(2)][:count]
    value = [np.array([[1.0, 0.2], [-0.1, 0.7]]), 0.5 * np.eye(2)][:count]
    return {"query": np.stack(query), "key": np.stack(key), "value": np.stack(value)}


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
    return rows


def main() -> None:
    for label, ours, base, ratio in run():
        print(f"{label:64} {ours:10.4g} {base:10.4g} {ratio:8.3g}")


if __name__ == "__main__":
    main()
