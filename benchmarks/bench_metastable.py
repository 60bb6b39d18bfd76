"""Metastability at its own time scale (issue 70): the cost of a run to t = 1e6 and 1e8 against the run to t = 1e3.

SA, beta = 9, no diffusion. Each run to a long time is timed against the run to ``t = 1e3``
from the same start with the same outputs up to it, in the same process, each twice in turn
(the ratio is the target: at most 3 at ``1e6``):

- particles, ``n = 1024`` iid uniform tokens on the circle and on S^2, with tight clusters reduced
  (``meanfield.simulate_clusters``, its defaults);
- the circle in mass coordinates: ``CircleFVLagrangian`` (finite volumes, then 4096 labels with
  ``width = rtol``) from ``1 + 0.1 cos 4t + 0.05 sin(3t + 0.3)``;
- S^2: ``SphereSpectralParticles`` at lmax = 24 (harmonics, then weighted atoms that merge) from
  ``1 + 0.2 x + 0.8 yz + 0.3 z^2``.

and, at ``t = 1e6``, 4096 particles with the same reduction against ``CircleFVLagrangian`` and
``SphereSpectralParticles`` (the limit's solvers; the particles are iid uniform, the limits start
from the densities above: the same regime, not the same run). Each row says how many clusters the run ends with. Run: ``python benchmarks/bench_metastable.py``.
"""

from __future__ import annotations

import time
import warnings

import numpy as np

import meanfield as mf
from solvers import CircleFVLagrangian, SphereSpectralParticles, UnderResolvedWarning

BETA = 9.0
LONG = (1e6, 1e8)


def circle_start(theta):
    return 1 + 0.1 * np.cos(4 * theta) + 0.05 * np.sin(3 * theta + 0.3)


def sphere_start(x):
    return 1 + 0.2 * x[..., 0] + 0.8 * x[..., 1] * x[..., 2] + 0.3 * x[..., 2] ** 2


def outputs(end: float) -> np.ndarray:
    """The outputs of the run to ``1e3``, and beyond it 10 per decade: a longer run repeats the shorter one's steps."""
    beyond = np.geomspace(1e3, end, 1 + int(round(10 * np.log10(end / 1e3))))[1:] if end > 1e3 else []
    return np.concatenate([[0.0], np.geomspace(1.0, 1e3, 25), beyond])


def timed(run, end: float) -> tuple[float, int]:
    clock = time.perf_counter()
    with warnings.catch_warnings():  # the hand-overs say that the density stopped being resolved: expected
        warnings.simplefilter("ignore", UnderResolvedWarning)
        ds = run(outputs(end))
    return time.perf_counter() - clock, int(ds.cluster_count.values[-1])


def rows_of(name: str, run) -> list[tuple[str, float, float, float]]:
    """The long runs against the run to 1e3, each timed twice in alternation (the faster of the two: the first
    call of a process pays its warm-up)."""
    walls: dict[float, list[float]] = {end: [] for end in (1e3, *LONG)}
    clusters = {}
    for _ in range(2):
        for end in walls:
            wall, clusters[end] = timed(run, end)
            walls[end].append(wall)
    base = min(walls[1e3])
    return [(f"{name} to t = {end:.0e} vs to 1e3 ({clusters[end]} clusters)", min(walls[end]), base,
             min(walls[end]) / base) for end in LONG]


def against_particles(name: str, tokens: np.ndarray, limit_run) -> tuple[str, float, float, float]:
    """4096 tokens with the same reduction against the limit's solver, both to 1e6."""
    particles, clusters = timed(lambda times: mf.simulate_clusters(mf.SelfAttention(BETA), tokens, times,
                                                                   progress=False), LONG[0])
    limit, _ = timed(limit_run, LONG[0])
    return (f"simulate_clusters n = 4096 vs {name}, to 1e6 ({clusters} clusters)", particles, limit,
            particles / limit)


def run() -> list[tuple[str, float, float, float]]:
    model = mf.SelfAttention(BETA)
    rng = np.random.default_rng(7)
    circle_tokens = mf.sample_uniform(1024, 2, rng)
    sphere_tokens = mf.sample_uniform(1024, 3, rng)
    rows = rows_of("simulate_clusters n = 1024, circle", lambda times: mf.simulate_clusters(
        model, circle_tokens, times, progress=False))
    rows += rows_of("simulate_clusters n = 1024, S^2", lambda times: mf.simulate_clusters(
        model, sphere_tokens, times, progress=False))
    rows += rows_of("CircleFVLagrangian width = rtol", lambda times: CircleFVLagrangian(model, width=1e-6).solve(
        circle_start, times, progress=False))
    rows.append(against_particles("CircleFVLagrangian", mf.sample_uniform(4096, 2, rng), lambda times: (
        CircleFVLagrangian(model, width=1e-6).solve(circle_start, times, progress=False))))
    rows.append(against_particles("SphereSpectralParticles", mf.sample_uniform(4096, 3, rng), lambda times: (
        SphereSpectralParticles(model, lmax=24).solve(sphere_start, times, progress=False))))
    rows += rows_of("SphereSpectralParticles lmax = 24", lambda times: SphereSpectralParticles(model, lmax=24).solve(
        sphere_start, times, progress=False))
    return rows


if __name__ == "__main__":
    print(f"{'benchmark (times in s)':70} {'ours':>9} {'to 1e3':>9} {'ratio':>7}")
    for label, ours, base, ratio in run():
        print(f"{label:70} {ours:9.3g} {base:9.3g} {ratio:7.3g}")
