"""A branch of stationary states on the circle (issue 35) against time steps of the same discretisation.

SA, beta = 4, N = 256 cells: the mode-1 branch from its bifurcation point down to D = 0.02
(pseudo-arclength, at most 200 points, the leading eigenvalues of every state included),
per point, against one step of CircleFV's linearly implicit scheme (3 substeps, extrapolated)
at the branch's first state. Also the right-hand sides per Newton solve (tens, not thousands),
and a point's cost in right-hand sides (timed at the branch's first state) with and without
its eigenvalues (``stability=False``). Target without: at most 100.
"""

from __future__ import annotations

import time

import numpy as np

import meanfield as mf
from solvers import CircleFV
from solvers.stationary.continuation import branch_from_uniform, uniform_bifurcations
from solvers.stationary.circle import CircleStationary

CELLS, BETA, LOW = 256, 4.0, 0.02


def run() -> list[tuple[str, float, float, float]]:
    model = mf.SelfAttention(BETA, diffusion=0.1)
    problem = CircleStationary(model, CELLS)
    start = uniform_bifurcations(problem, (LOW, 0.4), [1])[0][1]
    clock = time.perf_counter()
    branch = branch_from_uniform(problem, 1, start, (LOW, 0.4), max_points=200, progress=False)
    per_point = (time.perf_counter() - clock) / len(branch.points)
    evaluations = np.mean([p.residual_evaluations for p in branch.points])
    solver = CircleFV(model, cells=CELLS)
    operators = solver.operators
    deviation = problem.expand(branch.points[0].unknowns)
    steps = 200
    clock = time.perf_counter()
    for _ in range(steps):
        for substeps in (1, 2, 3):  # one extrapolated step: 1 + 2 + 3 linearly implicit substeps
            state = deviation
            for _ in range(substeps):
                state = operators.linearly_implicit_step(state, 0.01 / substeps)
    per_step = (time.perf_counter() - clock) / steps
    clock = time.perf_counter()
    without = branch_from_uniform(problem, 1, start, (LOW, 0.4), max_points=200, progress=False, stability=False)
    per_point_alone = (time.perf_counter() - clock) / len(without.points)
    rhs = min(_timed(lambda: problem.rhs(deviation, branch.points[0].value)) for _ in range(5))
    return [(f"stationary branch N={CELLS}, per point ({len(branch.points)} points, "
             f"{evaluations:.0f} residuals per Newton solve) vs one implicit step", per_point, per_step,
             per_point / per_step),
            ("same, per point with its eigenvalues vs one right-hand side", per_point, rhs, per_point / rhs),
            (f"same, stability=False ({len(without.points)} points): per point vs one right-hand side",
             per_point_alone, rhs, per_point_alone / rhs)]


def _timed(function, repeats: int = 200) -> float:
    clock = time.perf_counter()
    for _ in range(repeats):
        function()
    return (time.perf_counter() - clock) / repeats


if __name__ == "__main__":
    for row in run():
        print(row)
