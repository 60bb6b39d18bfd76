"""Particle ensembles per system-step against the peer's step, and a sweep task in Dask vs a plain process.

Baselines, timed in the same run and interleaved with the candidate (``common.compare``):

- the peer's step (the paper's code, re-implemented in numpy): batched matmul, softmax,
  matmul, add, normalize; the candidate is ``meanfield.observe_particles`` with the paper's
  layer scheme (the kernel ``"auto"`` picks: the circle's series at d = 2, the fused kernel
  with span reduction where ``d > n``), on one thread like the peer, at d = 2, 32, 128 and
  256, 512, 2048 systems. Targets: ratio <= 1/3, and the cost per system-step the same at
  every batch size.
- scipy's ``DOP853`` loop with its dense output at the output times, on the library's
  velocity kernel (the default adaptive path before it ran on the library's controller and
  driver); the candidate is that run's integration on the library's driver
  (``embedded_pair_run`` with the ``"dop853"`` tableau, what ``meanfield.simulate_particles``
  runs by default) with the same tolerances: a small system (overhead), a larger one with
  many outputs, and a batch. Both take the same steps. Target: ratio <= 1 within noise.
- ``meanfield.observe_particles`` with an output every step (d = 2, 512 systems of 32 tokens,
  RK4 and the layer scheme); the candidate is ``meanfield.simulate_particles`` at its defaults on
  the same run, which records every frame and its drift off the sphere. Target: ratio <= 1.2.
- the same sweep task (256 systems of the phase diagram) in this process; the candidate is
  that task inside a one-worker Dask ``LocalCluster`` as ``meanfield sweep`` starts it,
  timed inside the worker. Target: ratio <= 1.2.

    python benchmarks/bench_particles.py [--systems 256,512] [--dimensions 32] [--steps-only] [--adaptive-only]
"""

from __future__ import annotations

import argparse
import sys
import time

import numba
import numpy as np

import meanfield as mf
from common import compare
from meanfield.engines.kernels import select_kernel
from meanfield.integration import TABLEAUX
from meanfield.integration.runs import embedded_pair_run, rms

SYSTEMS, TOKENS, STEPS, BETA, STEP = (256, 512, 2048), 32, 20, 4.0, 0.1
DIMENSIONS = (2, 32, 128)


def peer_step(x: np.ndarray, beta: float, h: float) -> np.ndarray:
    logits = beta * np.matmul(x, np.swapaxes(x, -1, -2))
    weights = np.exp(logits - logits.max(axis=-1, keepdims=True))
    weights /= weights.sum(axis=-1, keepdims=True)
    x = x + h * np.matmul(weights, x)
    return x / np.linalg.norm(x, axis=-1, keepdims=True)


def peer_run(x: np.ndarray) -> np.ndarray:
    for _ in range(STEPS):
        x = peer_step(x, BETA, STEP)
    return x


def library_run(x: np.ndarray, kernel: str = "auto") -> list:
    times = np.linspace(0.0, STEPS * STEP, STEPS + 1)  # one output per step, as in the phase diagram
    return mf.observe_particles(mf.SelfAttention(BETA), x, times, lambda y: None, method="layer", dt=STEP,
                                kernel=kernel, invariant=True)


def per_system_step(seconds: float, systems: int) -> float:
    return seconds / (systems * STEPS) * 1e6


def step_rows(systems: tuple[int, ...] = SYSTEMS, dimensions: tuple[int, ...] = DIMENSIONS,
              ) -> list[tuple[str, float, float, float]]:
    rows = []
    for d in dimensions:
        for count in systems:
            x = mf.sample_uniform(TOKENS, d, 0, batch=count)
            for kernel in ("auto", "numpy"):
                ours, base, ratio = compare(lambda: library_run(x, kernel), lambda: peer_run(x))
                name = select_kernel(mf.SelfAttention(BETA), x, kernel).name
                rows.append((f"us/system-step d={d} n={TOKENS} {count} systems {name} kernel vs peer",
                             per_system_step(ours, count), per_system_step(base, count), ratio))
    return rows


#: (label, tokens, d, systems, rtol, output times) of the adaptive runs.
ADAPTIVE_RUNS = (("n=16 d=3, rtol 1e-8, 11 outputs", 16, 3, 1, 1e-8, np.linspace(0.0, 5.0, 11)),
                 ("n=256 d=3, rtol 1e-10, 101 outputs", 256, 3, 1, 1e-10, np.linspace(0.0, 5.0, 101)),
                 ("64 systems n=32 d=8, rtol 1e-6, 2 outputs", 32, 8, 64, 1e-6, np.array([0.0, 10.0])))


def scipy_dop853_run(velocity, x0: np.ndarray, times: np.ndarray, rtol: float) -> list[np.ndarray]:
    """Frames at ``times`` by scipy's DOP853 steps and dense output (``atol = rtol / 100``, the library's default)."""
    from scipy.integrate import DOP853

    solver = DOP853(lambda t, y: velocity(y.reshape(x0.shape)).ravel(), times[0], x0.ravel(), times[-1],
                    rtol=rtol, atol=rtol / 100)
    frames, next_out = [x0.copy()], 1
    while next_out < times.size:
        solver.step()
        if solver.t >= times[next_out]:
            dense = solver.dense_output()
            while next_out < times.size and times[next_out] <= solver.t:
                frames.append(dense(times[next_out]).reshape(x0.shape))
                next_out += 1
    return frames


def library_dop853_run(velocity, x0: np.ndarray, times: np.ndarray, rtol: float) -> list[np.ndarray]:
    """The same frames on the library's controller and driver."""
    frames: list[np.ndarray] = []
    embedded_pair_run(velocity, x0, times, TABLEAUX["dop853"], rtol, rtol / 100, False,
                      norm=rms, record=lambda t, x: frames.append(x.copy()),
                      fail=None, settings={})
    return frames


def adaptive_rows() -> list[tuple[str, float, float, float]]:
    rows = []
    model = mf.SelfAttention(BETA)
    for label, tokens, d, systems, rtol, times in ADAPTIVE_RUNS:
        x = mf.sample_uniform(tokens, d, 0, batch=systems)
        velocity = select_kernel(model, x, "auto").velocity_unchecked
        ours, base, ratio = compare(lambda: library_dop853_run(velocity, x, times, rtol),
                                    lambda: scipy_dop853_run(velocity, x, times, rtol))
        rows.append((f"dop853 run {label}: library vs scipy's loop [s]", ours, base, ratio))
    return rows


def output_rows() -> list[tuple[str, float, float, float]]:
    rows = []
    x = mf.sample_uniform(TOKENS, 2, 0, batch=512)
    times = np.linspace(0.0, STEPS * STEP, STEPS + 1)
    for method in ("rk4", "layer"):
        ours, base, ratio = compare(
            lambda: mf.simulate_particles(mf.SelfAttention(BETA), x, times, method=method, dt=STEP, progress=False),
            lambda: mf.observe_particles(mf.SelfAttention(BETA), x, times, lambda y: None, method=method, dt=STEP))
        rows.append((f"output every step, d=2, 512 systems, {method}: simulate vs observe [s]", ours, base, ratio))
    return rows


def _timed_task(task):
    from validation.app.sweep import run_task
    start = time.perf_counter()
    run_task(task)
    return time.perf_counter() - start


def sweep_task_rows() -> list[tuple[str, float, float, float]]:
    from pathlib import Path

    import dask
    from dask.distributed import Client, LocalCluster

    from validation.app.config import tomllib
    from validation.app.sweep import PRESPAWN, plan_tasks, worker_environment
    from validation.app.sweep_config import check_sweep_config

    raw = tomllib.loads((Path(__file__).parents[1] / "examples" / "phase_diagram.toml").read_text())
    raw["sweep"].update(realisations=256, grid={"beta": [4.0]})
    raw["times"] = {"stop": 10.0, "count": 101}
    raw["output"] = "/tmp/unused"
    task = plan_tasks(check_sweep_config(raw))[0]
    rows = []
    for label, environment in (("sweep task in a Dask worker / plain process", worker_environment()),
                               ("same, Dask's MALLOC_TRIM_THRESHOLD_ kept", dask.config.get(PRESPAWN))):
        with dask.config.set({PRESPAWN: environment}), \
                LocalCluster(n_workers=1, threads_per_worker=1, processes=True, dashboard_address=":0") as cluster, \
                Client(cluster) as client:
            in_worker = lambda: client.submit(_timed_task, task, pure=False).result()  # noqa: E731
            in_worker()
            worker = plain = float("inf")
            for _ in range(5):  # interleaved: the machine's noise hits both alike
                worker = min(worker, in_worker())
                plain = min(plain, _timed_task(task))
        rows.append((label, worker, plain, worker / plain))
    return rows


def run(systems: tuple[int, ...] = SYSTEMS, dimensions: tuple[int, ...] = DIMENSIONS,
        steps_only: bool = False, adaptive_only: bool = False) -> list[tuple[str, float, float, float]]:
    # Per core, as the peer's step and the sweep's workers: the circle's series would otherwise
    # run its parallel loops on every core of this process.
    numba.set_num_threads(1)
    if adaptive_only:
        return adaptive_rows()
    return (step_rows(systems, dimensions) + adaptive_rows() + output_rows()
            + ([] if steps_only else sweep_task_rows()))


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--systems", type=_sizes, default=SYSTEMS, help="batch sizes, comma-separated")
    parser.add_argument("--dimensions", type=_sizes, default=DIMENSIONS, help="d, comma-separated")
    parser.add_argument("--steps-only", action="store_true", help="leave out the Dask sweep-task rows")
    parser.add_argument("--adaptive-only", action="store_true", help="only the adaptive (dop853) runs")
    args = parser.parse_args(argv)
    print(f"{'benchmark':66} {'ours':>12} {'baseline':>14} {'ratio':>9}")
    for label, ours, base, ratio in run(args.systems, args.dimensions, args.steps_only, args.adaptive_only):
        print(f"{label:66} {ours:12.4g} {base:14.4g} {ratio:9.3g}")


def _sizes(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in text.split(","))


if __name__ == "__main__":
    main(sys.argv[1:])
