"""This checkout against an earlier commit, on the same workloads, alternating: did anything get slower?

    python benchmarks/against_commit.py REV [--rounds 5] [--only NAME ...] [--sweep]

Each workload is a few lines of the public API (the same code for both trees). It runs in a
fresh process per tree and round, the trees taking turns (this one first in even rounds, the
other first in odd ones), so load on the machine hits both alike; each process times only
its workload (imports and compilation done first), and the ratio reported is the median over
rounds of this tree's time over the other's. ``--sweep`` adds the paper-size phase diagram
(``examples/phase_diagram.toml``, 2048 realisations per beta, two Dask workers: minutes).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]

#: name: (set-up, the timed statement). Both trees run them verbatim.
WORKLOADS = {
    "particles SA d=2 n=512, rk4, 100 steps": (
        "x0 = mf.sample_uniform(512, 2, rng=0); model = mf.SelfAttention(4.0)",
        "mf.simulate_particles(model, x0, np.linspace(0, 1, 11), method='rk4', dt=0.01, rng=0, progress=False)"),
    "particles SA d=2 n=32 x 512 systems, an output every step, defaults": (
        "x0 = mf.sample_uniform(32, 2, rng=0, batch=512); model = mf.SelfAttention(4.0)",
        "mf.simulate_particles(model, x0, np.linspace(0, 2, 21), method='rk4', dt=0.1, progress=False)"),
    "particles SA d=32 n=256, rk4, 50 steps": (
        "x0 = mf.sample_uniform(256, 32, rng=0); model = mf.SelfAttention(1.0)",
        "mf.simulate_particles(model, x0, np.linspace(0, 0.5, 6), method='rk4', dt=0.01, rng=0, progress=False)"),
    "CircleFV 512 cells, SA beta=9, t=2": (
        "pde = solvers.CircleFV(mf.SelfAttention(9.0), cells=512)",
        "pde.solve(lambda t: 1 + 0.01 * np.cos(4 * t), np.linspace(0, 2, 5), progress=False)"),
    "CircleFV 128 cells with its estimate, SA beta=5, t=1.5": (
        "pde = solvers.CircleFV(mf.SelfAttention(5.0), cells=128)",
        "pde.solve(lambda t: 1 + 0.1 * np.cos(t) + 0.05 * np.cos(3 * t), np.linspace(0, 1.5, 4), progress=False)"),
    "CircleSpectral 512, SA beta=5, t=4": (
        "pde = solvers.CircleSpectral(mf.SelfAttention(5.0), cells=512, rtol=1e-9)",
        "pde.solve(lambda t: 1 + 0.1 * np.cos(3 * t), np.linspace(0, 4, 5), progress=False)"),
    "CircleAuto 1024, SA beta=9, t=12 (hand-over)": (
        "pde = solvers.CircleAuto(mf.SelfAttention(9.0), cells=1024)",
        "pde.solve(lambda t: 1 + 0.1 * np.cos(4 * t), np.linspace(0, 12, 7), progress=False)"),
    "CircleFV 256, general heads (Q, K)": (
        "q = np.array([[1.0, 0.3], [0.0, 1.0]]); "
        "pde = solvers.CircleFV(mf.SelfAttention(3.0, query=q, key=np.eye(2)), cells=256)",
        "pde.solve(lambda t: 1 + 0.05 * np.cos(2 * t), np.linspace(0, 1, 3), progress=False)"),
    "CausalCircleFV 128 cells x 8 layers, two heads with matrices and slopes, t=0.1": (
        "rng = np.random.default_rng(5); q = 0.8 * np.eye(2) + 0.3 * rng.normal(size=(2, 2, 2)); "
        "k = 0.8 * np.eye(2) + 0.3 * rng.normal(size=(2, 2, 2)); "
        "model = mf.CausalAttention([2.0, 1.0], False, alibi=[2.0, 0.3], query=q, key=k); "
        "pde = solvers.CausalCircleFV(model, cells=128, layers=8)",
        "pde.solve(lambda s, t: 1 + 0.3 * np.cos(t - s), [0.0, 0.1], progress=False)"),
    "CircleLagrangian 1024 labels, smooth start, t=30": (
        "pde = solvers.CircleLagrangian(mf.SelfAttention(6.0), points=1024)",
        "pde.solve(lambda t: 1 + 0.3 * np.cos(3 * t), [0.0, 10.0, 30.0], progress=False)"),
    "CircleFVLagrangian 256 cells, 1024 labels, SA beta=9, t=30 (hand-over)": (
        "pde = solvers.CircleFVLagrangian(mf.SelfAttention(9.0), cells=256, points=1024)",
        "pde.solve(lambda t: 1 + 0.1 * np.cos(2 * t) + 0.05 * np.sin(3 * t), [0.0, 5.0, 30.0], progress=False)"),
    "CausalCircleSpectral 128 cells x 8 layers, t=1": (
        "pde = solvers.CausalCircleSpectral(mf.CausalAttention(4.0, True, alibi=0.5), cells=128, layers=8)",
        "pde.solve(lambda s, t: 1 + 0.3 * np.cos(t - s), [0.0, 0.5, 1.0], progress=False)"),
    "FrequencyCircleFV 128 cells x 8 nodes, t=2": (
        "pde = solvers.FrequencyCircleFV(mf.SelfAttention(3.0), frequencies=np.linspace(-0.5, 0.5, 8), "
        "weights=np.full(8, 0.125), cells=128)",
        "pde.solve(lambda w, t: 1 + 0.3 * np.cos(t), [0.0, 1.0, 2.0], progress=False)"),
    "SphereSpectral lmax=63, SA beta=4, t=2": (
        "pde = solvers.SphereSpectral(mf.SelfAttention(4.0), lmax=63, rtol=1e-8)",
        "pde.solve(lambda p: 1 + 0.3 * p[..., 2] * p[..., 0], np.linspace(0, 2, 3), progress=False)"),
    "SphereSpectralParticles lmax=23, SA beta=9, t=8": (
        "pde = solvers.SphereSpectralParticles(mf.SelfAttention(9.0), lmax=23)",
        "pde.solve(lambda p: 1 + 0.5 * p[..., 2] + 0.3 * p[..., 0], np.linspace(0, 8, 5), progress=False)"),
    "LineFV pure attention, 1000 cells, t=1": (
        "pde = solvers.LineFV(mf.PureAttention(beta=1.0, rescaled=True), (-4.0, 4.0))",
        "pde.solve(lambda z: np.exp(-z ** 2), np.linspace(0, 1, 3), progress=False)"),
    "LineLagrangian 512 labels, through the collapse to t=8": (
        "pde = solvers.LineLagrangian(mf.PureAttention(rescaled=True), (-1.0, 1.0), labels=512)",
        "pde.solve(lambda z: 0.5 + 0.4 * z, [0.0, 1.5, 8.0], progress=False)"),
    "PositionalQuantiles 16 positions x 64 labels, rotary, t=1": (
        "pde = solvers.PositionalQuantiles(mf.RotaryAttention(3.0, 4.0), layers=16, points=64)",
        "pde.solve(lambda s, t: np.exp(1.5 * np.cos(t - np.pi * s)), np.linspace(0, 1, 11), method='rk4', dt=0.05, "
        "progress=False)"),
    "bifurcation diagram, circle, 128 cells": (
        "import importlib, pathlib; module = importlib.import_module('solvers.stationary.bifurcation' if "
        "(pathlib.Path(solvers.__file__).parent / 'stationary').is_dir() else 'solvers.bifurcation')",
        "module.bifurcation_diagram(mf.SelfAttention(4.0, diffusion=0.1), 'diffusion', (0.05, 0.4), geometry='circle', cells=128, "
        "modes=(1, 2), max_points=40, progress=False)"),
    "bifurcation diagram, sphere, lmax 15": (
        "import importlib, pathlib; module = importlib.import_module('solvers.stationary.bifurcation' if "
        "(pathlib.Path(solvers.__file__).parent / 'stationary').is_dir() else 'solvers.bifurcation')",
        "module.bifurcation_diagram(mf.SelfAttention(4.0, diffusion=0.1), 'diffusion', (0.05, 0.4), geometry='sphere', "
        "lmax=15, modes=(1,), max_points=20, progress=False)"),
}

RUNNER = """
import json, sys, time, warnings
warnings.simplefilter('ignore')
import numpy as np, meanfield as mf, solvers
assert mf.__file__.startswith({tree!r}), mf.__file__
{setup}
exec({statement!r})  # compile and warm
started = time.perf_counter()
exec({statement!r})
print(json.dumps(time.perf_counter() - started))
"""


def timed(tree: Path, setup: str, statement: str) -> float:
    code = RUNNER.format(tree=str(tree), setup=setup, statement=statement)
    environment = dict(os.environ, PYTHONPATH=str(tree))
    result = subprocess.run([sys.executable, "-c", code], cwd=tree, env=environment, capture_output=True, text=True)
    if result.returncode:
        raise RuntimeError(f"{tree}: {result.stderr.strip().splitlines()[-1]}")
    return float(result.stdout.strip().splitlines()[-1])


def timed_sweep(tree: Path, folder: Path) -> float:
    environment = dict(os.environ, PYTHONPATH=str(tree))
    script = tree / "benchmarks" / "bench_sweep.py"
    result = subprocess.run([sys.executable, str(script), "--size", "paper", "--workers", "2"], cwd=folder,
                            env=environment, capture_output=True, text=True)
    if result.returncode:
        raise RuntimeError(f"{tree}: {result.stderr.strip().splitlines()[-1]}")
    line = next(line for line in result.stdout.splitlines() if "worker(s):" in line)  # "...: 123.4 s"
    return float(line.rsplit(":", 1)[1].split()[0])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("revision", help="the earlier commit (any git revision)")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--only", nargs="*", default=None, help="workloads whose name contains one of these")
    parser.add_argument("--sweep", action="store_true", help="add the paper-size phase diagram (minutes)")
    arguments = parser.parse_args()
    chosen = {name: work for name, work in WORKLOADS.items()
              if not arguments.only or any(part in name for part in arguments.only)}
    with tempfile.TemporaryDirectory() as scratch:
        other = Path(scratch) / "other"
        subprocess.run(["git", "worktree", "add", "--detach", "-q", str(other), arguments.revision], cwd=ROOT,
                       check=True)
        try:
            commit = subprocess.run(["git", "rev-parse", "--short", arguments.revision], cwd=ROOT,
                                    capture_output=True, text=True, check=True).stdout.strip()
            print(f"{'workload (best seconds)':52} {'this tree':>10} {commit:>10} {'median ratio':>13}")
            for name, (setup, statement) in chosen.items():
                ours, theirs = [], []
                try:
                    for round_ in range(arguments.rounds):
                        order = [(ROOT, ours), (other, theirs)][:: 1 if round_ % 2 == 0 else -1]
                        for tree, times in order:
                            times.append(timed(tree, setup, statement))
                except RuntimeError as error:  # a workload the earlier tree cannot run (a solver it lacks)
                    print(f"{name:52} not comparable: {error}", flush=True)
                    continue
                ratio = float(np.median(np.array(ours) / np.array(theirs)))
                print(f"{name:52} {min(ours):10.4g} {min(theirs):10.4g} {ratio:13.3g}", flush=True)
            if arguments.sweep:
                ours, theirs = [], []
                for round_ in range(max(1, arguments.rounds // 2)):
                    for tree, times in [(ROOT, ours), (other, theirs)][:: 1 if round_ % 2 == 0 else -1]:
                        times.append(timed_sweep(tree, Path(scratch)))
                ratio = float(np.median(np.array(ours) / np.array(theirs)))
                print(f"{'phase diagram sweep, paper size, 2 workers':52} {min(ours):10.4g} {min(theirs):10.4g} "
                      f"{ratio:13.3g}")
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", str(other)], cwd=ROOT, check=False)


if __name__ == "__main__":
    main()
