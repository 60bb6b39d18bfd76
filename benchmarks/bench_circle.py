"""CircleFV against its baselines (issue: circle finite volumes).

1. Right-hand side at N = 4096 against one rfft + irfft pair (target: ratio <= 10).
2. Whole solver against Lax-Friedrichs with direct O(N^2) convolution, the published
   approach for this equation, both at N = 4096 from the same data to the same time:
   target >= 100x faster, and a smaller L1 error against a converged reference.
3. With diffusion (noisy Kuramoto, D = 0.3, N = 1024): steps per unit time at the same
   measured error, the default implicit scheme against Richardson extrapolation (two
   columns; its estimate is the first-order member's): target at least 5x fewer.
4. The fixed cost of a step: a step at 64 cells against one at 1024 (SA beta = 5, without
   the estimate, the default tableau): target at most a third.
"""

from __future__ import annotations

import json
import time

import numpy as np

import meanfield as mf
from common import compare
from solvers import CircleFV

CELLS = 4096
T_END = 1.5
MODEL = mf.SelfAttention(5.0)


def initial(theta):
    return 1 + 0.2 * np.cos(3 * theta) + 0.1 * np.sin(5 * theta + 1.0)


def lax_friedrichs(model, cells: int, t_end: float, cfl: float = 0.9) -> np.ndarray:
    """First-order Lax-Friedrichs with the SA velocity by direct quadrature, O(N^2) per step."""
    h = 2 * np.pi / cells
    theta = (np.arange(cells) + 0.5) * h
    gap = theta[:, None] - theta[None, :]
    kernel = np.exp(model.beta * (np.cos(gap) - 1.0))
    kernel_derivative = -model.beta * np.sin(gap) * kernel
    rho = initial(theta)
    rho /= h * rho.sum()
    t = 0.0
    while t < t_end:
        velocity = (kernel_derivative @ rho) / (model.beta * (kernel @ rho))
        dt = min(cfl * h / np.abs(velocity).max(), t_end - t)
        flux = rho * velocity
        rho = 0.5 * (np.roll(rho, -1) + np.roll(rho, 1)) - dt / (2 * h) * (np.roll(flux, -1) - np.roll(flux, 1))
        t += dt
    return rho


def l1_error(rho: np.ndarray, reference: np.ndarray) -> float:
    coarse = reference.reshape(rho.size, -1).mean(axis=1)
    return float(np.abs(rho - coarse).sum() * 2 * np.pi / rho.size)


def run() -> list[tuple[str, float, float, float]]:
    solver = CircleFV(MODEL, cells=CELLS)
    rho = solver.initial_density(initial)
    ops = solver.operators
    ours, base, ratio = compare(lambda: ops.rhs(rho), lambda: np.fft.irfft(np.fft.rfft(rho), CELLS),
                                rounds=5, repeats=50)
    rows = [("CircleFV rhs N=4096 vs rfft+irfft pair", ours, base, ratio)]

    reference = CircleFV(MODEL, cells=4 * CELLS, rtol=1e-7).solve(initial, [0, T_END]).rho.values[-1]
    start = time.perf_counter()
    fv = solver.solve(initial, [0, T_END]).rho.values[-1]
    fv_time = time.perf_counter() - start
    start = time.perf_counter()
    lxf = lax_friedrichs(MODEL, CELLS, T_END)
    lxf_time = time.perf_counter() - start
    rows.append((f"CircleFV solve vs Lax-Friedrichs O(N^2), t={T_END}", fv_time, lxf_time, fv_time / lxf_time))
    lxf_error = l1_error(lxf, reference)
    rows.append(("  L1 error vs reference: CircleFV / Lax-Friedrichs", l1_error(fv, reference),
                 lxf_error, l1_error(fv, reference) / lxf_error))
    # Equal accuracy: the coarsest CircleFV grid that is at least as accurate as LxF at N = 4096.
    for cells in (32, 64, 128, 256, 512, 1024, 2048):
        coarse_solver = CircleFV(MODEL, cells=cells)
        start = time.perf_counter()
        coarse = coarse_solver.solve(initial, [0, T_END]).rho.values[-1]
        coarse_time = time.perf_counter() - start
        if l1_error(coarse, reference) <= lxf_error:
            rows.append((f"  same accuracy: CircleFV N={cells} vs LxF N={CELLS}", coarse_time, lxf_time,
                         coarse_time / lxf_time))
            break
    return rows + run_steps() + step_cost_rows()


def step_cost_rows() -> list[tuple[str, float, float, float]]:
    """Seconds per step at 64 and at 1024 cells, the runs alternated (``compare``)."""
    small, large = (CircleFV(MODEL, cells=cells, error_level=None) for cells in (64, 1024))
    steps = {}

    def solved(solver):
        ds = solver.solve(initial, [0.0, 1.0], progress=False)
        steps[solver.cells] = json.loads(ds.attrs["settings"])["steps"]

    ours, base, ratio = compare(lambda: solved(small), lambda: solved(large), rounds=5, repeats=2)
    return [("CircleFV seconds per step, 64 vs 1024 cells (no estimate)", ours / steps[64], base / steps[1024],
             ratio * steps[1024] / steps[64])]


KURAMOTO = mf.SelfAttention(0.0, diffusion=0.3)


def kuramoto_initial(theta):
    return 1 + 0.3 * np.cos(theta) + 0.2 * np.sin(2 * theta) + 0.1 * np.cos(3 * theta + 1)


def run_steps() -> list[tuple[str, float, float, float]]:
    """Steps of the implicit scheme (D > 0) at equal measured error: order-3 extrapolation
    (the default) against the order-2 one whose estimate is its first-order member's."""
    times = np.linspace(0.0, 2.0, 5)
    reference = CircleFV(KURAMOTO, cells=1024, rtol=1e-11).solve(kuramoto_initial, times).rho.values

    def measured(substeps: int, rtol: float) -> tuple[float, int, float]:
        start = time.perf_counter()
        ds = CircleFV(KURAMOTO, cells=1024, rtol=rtol, implicit_substeps=substeps).solve(kuramoto_initial, times)
        elapsed = time.perf_counter() - start
        return float(np.abs(ds.rho.values - reference).max()), json.loads(ds.attrs["settings"])["steps"], elapsed

    base_error, base_steps, base_time = measured(2, 1e-6)
    for rtol in (1e-4, 1e-5, 1e-6, 1e-7, 1e-8):
        error, steps, elapsed = measured(3, rtol)
        if error <= base_error:
            break
    per_time = float(times[-1] - times[0])
    return [(f"CircleFV D=0.3 Kuramoto steps/unit time, equal error ({error:.2g} <= {base_error:.2g})",
             steps / per_time, base_steps / per_time, steps / base_steps),
            ("  wall time of those runs [s]", elapsed, base_time, elapsed / base_time)]
