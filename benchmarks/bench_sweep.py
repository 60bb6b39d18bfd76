"""The phase-diagram sweep on 1 and 2 Dask workers (issues: sweeps, particle ensembles). Target: >= 1.8x.

The sweep of ``examples/phase_diagram.toml`` (SA, n = 32, d = 2, 90 values of beta,
the discrete layer with step 0.1 to t = 30) is run from scratch with a local cluster of one
worker process (the baseline) and of two; wall times include starting the cluster. Both
runs must give identical numbers. ``--size paper`` uses the paper's 2048 realisations per
beta (about two minutes for both runs on 2 cores; half an hour at first); the default ``small`` uses 256.

    python benchmarks/bench_sweep.py [--size paper|small] [--workers 1 2] [--interleave K [--rounds R]] [--dimension 2]

``--workers 1`` (or ``2``) times one configuration only, to repeat a measurement that
other load on the machine disturbed without paying for both. ``--interleave K`` splits the
betas into ``K`` slices and runs each slice on 1 and on 2 workers back to back (alternating
which goes first), so that load on the machine hits both configurations alike; the times
are summed per configuration. ``--rounds R`` repeats that ``R`` times, still alternating:
``--interleave 1 --rounds 2`` runs the whole sweep on 1, 2, 2 and 1 workers, each paying
one cluster start as a user's sweep does (every slice pays its own). ``--dimension 128 --workers 2`` times the diagram of
``d = 128`` (the issue's target: 2048 systems per beta in at most 5 minutes).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from validation.app.config import tomllib
from validation.app.sweep import run_sweep
from validation.app.sweep_config import check_sweep_config

CONFIG = Path(__file__).parents[1] / "examples" / "phase_diagram.toml"
REALISATIONS = {"paper": 2048, "small": 256}


def timed_sweep(workers: int, realisations: int, folder: Path, betas: list[float] | None = None,
                dimension: int = 2):
    raw = tomllib.loads(CONFIG.read_text())
    raw["output"] = str(folder / f"workers{workers}")
    raw["sweep"]["realisations"] = realisations
    raw["sweep"]["grid"]["d"] = [dimension]
    if betas is not None:
        raw["sweep"]["grid"]["beta"] = betas
    sweep = check_sweep_config(raw)
    start = time.perf_counter()
    ds = run_sweep(sweep, workers=workers, progress=False)
    return time.perf_counter() - start, ds


def run(size: str = "small") -> list[tuple[str, float, float, float]]:
    realisations = REALISATIONS[size]
    with tempfile.TemporaryDirectory() as folder:
        one, reference = timed_sweep(1, realisations, Path(folder))
        two, ds = timed_sweep(2, realisations, Path(folder))
    for name in reference.data_vars:
        np.testing.assert_array_equal(ds[name].values, reference[name].values)
    label = f"sweep 90 betas x {realisations} systems n=32 d=2 t<=30 (2 vs 1 worker)"
    return [(label, two, one, two / one)]


def interleaved(size: str, slices: int, rounds: int = 1) -> list[tuple[str, float, float, float]]:
    """1 and 2 workers on the same slices of betas, back to back, alternating the order."""
    grid = tomllib.loads(CONFIG.read_text())["sweep"]["grid"]["beta"]
    betas = np.linspace(grid["start"], grid["stop"], grid["count"])
    totals = {1: 0.0, 2: 0.0}
    pairs = [part.tolist() for _ in range(rounds) for part in np.array_split(betas, slices)]
    for index, part in enumerate(pairs):
        results = {}
        for workers in ((1, 2) if index % 2 == 0 else (2, 1)):
            with tempfile.TemporaryDirectory() as folder:
                seconds, results[workers] = timed_sweep(workers, REALISATIONS[size], Path(folder), part)
            print(f"  betas {part[0]:g}..{part[-1]:g} on {workers} worker(s): {seconds:.1f} s", flush=True)
            totals[workers] += seconds
        for name in results[1].data_vars:
            np.testing.assert_array_equal(results[2][name].values, results[1][name].values)
    label = (f"sweep 90 betas x {REALISATIONS[size]} systems n=32 d=2 t<=30, {slices} interleaved slice(s) "
             f"x {rounds} round(s) (2 vs 1 worker)")
    return [(label, totals[2], totals[1], totals[2] / totals[1])]


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", choices=sorted(REALISATIONS), default="small")
    parser.add_argument("--workers", type=int, nargs="+", choices=[1, 2], default=[1, 2])
    parser.add_argument("--interleave", type=int, default=0, help="slices of betas run on 1 and 2 workers in turn")
    parser.add_argument("--rounds", type=int, default=1, help="repeats of the interleaved slices")
    parser.add_argument("--dimension", type=int, default=2, help="d of the tokens (with one --workers value)")
    args = parser.parse_args(argv)
    if args.dimension != 2 and (args.interleave or sorted(args.workers) == [1, 2]):
        parser.error("--dimension other than 2 times one configuration: give --workers 1 or --workers 2")
    if args.interleave:
        for label, ours, base, ratio in interleaved(args.size, args.interleave, args.rounds):
            print(f"{label}: 2 workers {ours:.1f} s, 1 worker {base:.1f} s, speed-up {1 / ratio:.2f}x")
        return
    if sorted(args.workers) != [1, 2]:
        with tempfile.TemporaryDirectory() as folder:
            for workers in args.workers:
                seconds, _ = timed_sweep(workers, REALISATIONS[args.size], Path(folder), dimension=args.dimension)
                print(f"sweep 90 betas x {REALISATIONS[args.size]} systems, d = {args.dimension}, "
                      f"{workers} worker(s): {seconds:.1f} s")
        return
    for label, ours, base, ratio in run(args.size):
        print(f"{label}: 2 workers {ours:.1f} s, 1 worker {base:.1f} s, speed-up {1 / ratio:.2f}x")


if __name__ == "__main__":
    main(sys.argv[1:])
