r"""The BBGKY hierarchy on the circle: the pair correlation of clustering tokens against two closures.
=====================================================================================================

``n = 8`` tokens of USA (``beta = 1``) from iid uniform angles, ``--systems`` independent systems
("A mathematical perspective on Transformers", sec. 8). Their pair correlation :math:`g(t, \varphi)`
(the law of :math:`\varphi = \theta_i - \theta_j` relative to uniform) obeys the first equation of
the BBGKY hierarchy, which needs the three-point law; two closures of it
(:class:`solvers.PairCorrelation`):

- molecular chaos (the third token independent): exact at :math:`t = 0`, it keeps only the two
  tokens' own attraction and misses the clusters the others form;
- Kirkwood's superposition (three tokens correlated pair by pair), a closure that sees clusters
  (the paper's Problem 4): it follows the ensemble until the correlation concentrates beyond the
  grid's modes, where it stops.

Left: :math:`E[\cos(\theta_i - \theta_j)]` against time (the ensemble's mean with two standard
errors, :func:`validation.pair_correlation`). Middle: :math:`g(\varphi)` at ``t = 1``, the histogram of
the ensemble's pair angles against the closures. Right: the closures' distance from the ensemble in
standard errors (:func:`validation.closure_deviation`), the first three modes' largest.

Writes ``OUTPUT/bbgky.png``.

    python examples/bbgky.py        # about 5 s
"""

from __future__ import annotations

import argparse
import warnings
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

import meanfield as mf  # noqa: E402
from solvers import PairCorrelation, UnderResolvedWarning  # noqa: E402
from validation import closure_deviation, pair_correlation  # noqa: E402

N, MODEL = 8, mf.SelfAttention(1.0, normalized=False)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description="The BBGKY hierarchy's closures against particle ensembles.")
    parser.add_argument("--output", type=Path, default=Path("output/bbgky"))
    parser.add_argument("--systems", type=int, default=4000)
    parser.add_argument("--end", type=float, default=2.0)
    args = parser.parse_args(argv)
    args.output.mkdir(parents=True, exist_ok=True)

    times = np.linspace(0.0, args.end, 17)
    x0 = mf.sample_uniform(N, 2, np.random.default_rng(0), batch=args.systems)
    run = mf.simulate_particles(MODEL, x0, times, method="rk4", dt=0.0125, progress=False)
    estimate = pair_correlation(run, modes=3)
    closures = {}
    for closure in ("chaos", "kirkwood"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UnderResolvedWarning)  # Kirkwood's ends where g concentrates
            closures[closure] = PairCorrelation(MODEL, N, closure=closure, modes=32).solve(None, times)

    fig, (ax_mode, ax_g, ax_z) = plt.subplots(1, 3, figsize=(15, 4.2), layout="constrained")
    mean, error = estimate.coefficient.values[:, 0], estimate.standard_error.values[:, 0]
    ax_mode.fill_between(times, mean - 2 * error, mean + 2 * error, color="0.8", label="ensemble, 2 standard errors")
    ax_mode.plot(times, mean, color="k", lw=1)
    for closure, ds in closures.items():
        ax_mode.plot(ds.time, ds.coefficient.values[:, 0], label=closure)
    ax_mode.set(xlabel="t", ylabel="E[cos(θ_i - θ_j)]", title=f"n = {N}, USA beta = 1, {args.systems} systems")
    ax_mode.legend(fontsize=8)

    k = int(np.argmin(np.abs(times - 1.0)))
    theta = np.arctan2(run.x.values[:, k, :, 1], run.x.values[:, k, :, 0])
    pairs = (theta[:, :, None] - theta[:, None, :])[:, ~np.eye(N, dtype=bool)]
    ax_g.hist(np.mod(pairs.ravel(), 2 * np.pi), bins=64, density=True, color="0.8", label="ensemble")
    for closure, ds in closures.items():
        if ds.sizes["time"] > k:
            ax_g.plot(ds.phi, ds.g.values[k] / (2 * np.pi), label=closure)
    ax_g.set(xlabel="φ = θ_i - θ_j", ylabel="density of φ", title=f"pair correlation at t = {times[k]:g}")
    ax_g.legend(fontsize=8)

    for closure, ds in closures.items():
        reached = ds.sizes["time"]
        subset = estimate.isel(time=slice(0, reached))
        z = np.abs(closure_deviation(ds, subset).z.values).max(axis=1)
        ax_z.semilogy(ds.time, np.maximum(z, 1e-2), "o-", label=closure)
    ax_z.axhline(3, color="k", ls="--", lw=1, label="3 standard errors")
    ax_z.set(xlabel="t", ylabel="largest |closure - ensemble| / standard error", title="distance from the ensemble")
    ax_z.legend(fontsize=8)
    fig.savefig(args.output / "bbgky.png", dpi=110)
    print(f"wrote {args.output / 'bbgky.png'}")


if __name__ == "__main__":
    main()
