r"""Metastability on the circle (d = 2): a few clusters form fast, then merge slowly.
=================================================================================

1. Particles (the paper's setting): SA, ``n = 32`` tokens iid uniform on the circle,
   ``beta = 4`` and ``beta = 9``, RK4 with step 0.05 to ``t = T``: snapshots of the tokens
   and the number of clusters (gaps wider than 0.2 rad separate them) over time.
2. The PDE (CircleFV, 1024 cells) from the uniform density perturbed in every mode
   ``k = 1..32`` with random phases: which mode wins is not put in by hand. The number of
   density clusters that form is compared with the fastest-growing mode ``k*`` of the
   dispersion relation :math:`\gamma_k = k^2 I_k(\beta) / (\beta I_0(\beta))` (docs/theory/references.md).
3. How many clusters (the seeds' question): for each ``beta`` of ``--kde-betas``, systems of
   256 tokens iid uniform; the number of metastable clusters (the most frequent count over
   ``t`` in [10, 40], tokens closer than 0.1 rad joined) against the number of modes of the
   initial tokens' kernel density estimate at bandwidth :math:`\beta^{-1/2}` (the attention kernel
   itself, ``validation.kde_mode_count(..., circle=True)``), means over the systems with their
   correlation system by system.

Writes ``OUTPUT/metastability_particles.png``, ``OUTPUT/metastability_pde.png``,
``OUTPUT/cluster_count_kde.png`` and the data (``particles_beta*.nc``, ``pde_beta*.nc``,
``cluster_counts.csv``, ``cluster_count_kde.csv``).

    python examples/metastability.py            # about 15 s
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
from solvers import CircleFV, UnderResolvedWarning  # noqa: E402
from meanfield.sphere import circle_angles  # noqa: E402
from validation import (circle_cluster_counts, cluster_statistics, kde_mode_count,  # noqa: E402
                        predicted_cluster_count)
from validation.app.files import write_atomically, write_text  # noqa: E402

BETAS = (4.0, 9.0)


def particle_runs(args) -> dict:
    x0 = mf.sample_uniform(32, 2, rng=args.seed)
    times = np.concatenate([[0.0], np.geomspace(0.1, args.t_particles, 200)])
    runs = {}
    for beta in BETAS:
        ds = mf.simulate_particles(mf.SelfAttention(beta), x0, times, method="rk4", dt=0.05, progress=False)
        write_atomically(args.output / f"particles_beta{beta:g}.nc", ds.to_netcdf)
        runs[beta] = ds
    return runs


def pde_runs(args) -> dict:
    generator = np.random.default_rng(args.seed)
    modes = np.arange(1, 33)
    phases = generator.uniform(0, 2 * np.pi, modes.size)

    def rho0(theta):
        return 1 + 1e-3 * np.cos(np.multiply.outer(theta, modes) + phases).sum(axis=-1)

    times = np.linspace(0, args.t_pde, 121)
    runs = {}
    for beta in BETAS:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", UnderResolvedWarning)
            ds = CircleFV(mf.SelfAttention(beta), cells=1024).solve(rho0, times, progress=False)
        for warning in caught:
            print(f"beta = {beta:g}: {warning.message}")
        write_atomically(args.output / f"pde_beta{beta:g}.nc", ds.to_netcdf)
        runs[beta] = ds
    return runs


def cluster_counts(ds, separation=0.2) -> np.ndarray:
    if "x" in ds:
        return np.array([cluster_statistics(ds, k, separation=separation).count for k in range(ds.sizes["time"])])
    return np.array([cluster_statistics(ds, k).count for k in range(ds.sizes["time"])])


def fastest_mode(beta: float) -> int:
    return predicted_cluster_count(mf.SelfAttention(beta))


def particle_figure(runs: dict, path: Path) -> None:
    snapshots = 4
    fig, axes = plt.subplots(len(runs), snapshots + 1, figsize=(3.0 * (snapshots + 1), 3.0 * len(runs)),
                             constrained_layout=True)
    for row, (beta, ds) in zip(axes, runs.items()):
        times = ds.time.values
        counts = cluster_counts(ds)
        picks = np.unique(np.searchsorted(times, [0.0, 2.0, times[-1] ** 0.5, times[-1]]))[:snapshots]
        for ax, k in zip(row[:snapshots], picks):
            x = ds.x.values[k]
            ax.add_patch(plt.Circle((0, 0), 1, fill=False, color="0.8"))
            ax.plot(x[:, 0], x[:, 1], "o", color="C0", ms=4, alpha=0.6)
            ax.set(xlim=(-1.2, 1.2), ylim=(-1.2, 1.2), aspect="equal", xticks=[], yticks=[],
                   title=f"β = {beta:g}, t = {times[k]:.3g}: {counts[k]} clusters")
        ax = row[-1]
        ax.semilogx(times[1:], counts[1:], color="C1")
        ax.set(xlabel="t", ylabel="clusters", title=f"β = {beta:g}, n = 32", ylim=(0, None))
    fig.suptitle("SA tokens on the circle: a few clusters persist, then merge")
    fig.savefig(path, dpi=110)
    plt.close(fig)


def pde_figure(runs: dict, path: Path) -> dict:
    fig, axes = plt.subplots(2, len(runs), figsize=(5.5 * len(runs), 7), constrained_layout=True)
    summary = {}
    for column, (beta, ds) in zip(axes.T, runs.items()):
        counts = cluster_counts(ds)
        k_star = fastest_mode(beta)
        summary[beta] = (k_star, counts)
        theta, times = ds.theta.values, ds.time.values
        mesh = column[0].pcolormesh(theta, times, np.log10(np.maximum(ds.rho.values * 2 * np.pi, 1e-6)),
                                    cmap="magma", shading="nearest", rasterized=True)
        fig.colorbar(mesh, ax=column[0], label="log10(2π ρ) (0: uniform density)")
        column[0].set(xlabel="angle θ (rad)", ylabel="time t", title=f"SA β = {beta:g}, 1024 cells")
        column[1].plot(times, counts, color="C0", label="density clusters (ρ > 2/(2π))")
        column[1].axhline(k_star, color="C3", ls="--", label=f"fastest-growing mode k* = {k_star}")
        column[1].set(xlabel="t", ylabel="clusters", ylim=(0, max(counts.max(), k_star) + 2))
        column[1].legend(loc="lower right")
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return summary


def kde_comparison(args) -> None:
    """Section 3 of the module docstring: metastable clusters against the initial tokens' KDE modes."""
    times = np.linspace(0.0, 40.0, 81)
    plateau = times >= 10.0
    rows, means = ["beta,system,kde_modes,metastable_clusters"], []
    for beta in args.kde_betas:
        x0 = mf.sample_uniform(256, 2, rng=np.random.default_rng([args.seed, int(beta)]), batch=args.kde_systems)
        modes = np.array([kde_mode_count(circle_angles(x), beta ** -0.5, circle=True) for x in x0])
        counts = np.array(mf.observe_particles(mf.SelfAttention(beta), x0, times,
                                               lambda x: circle_cluster_counts(x, separation=0.1),
                                               method="rk4", dt=0.05))
        clusters = np.array([np.bincount(counts[plateau, s]).argmax() for s in range(args.kde_systems)])
        rows += [f"{beta:g},{s},{m},{c}" for s, (m, c) in enumerate(zip(modes, clusters))]
        correlation = np.corrcoef(modes, clusters)[0, 1] if modes.std() > 0 and clusters.std() > 0 else np.nan
        means.append((beta, modes.mean(), modes.std() / np.sqrt(modes.size), clusters.mean(),
                      clusters.std() / np.sqrt(clusters.size)))
        print(f"beta = {beta:g}: KDE modes of the initial tokens {modes.mean():.2f}, metastable clusters "
              f"{clusters.mean():.2f} (mean of {args.kde_systems} systems of 256 tokens; correlation {correlation:.2f})")
    write_text(args.output / "cluster_count_kde.csv", "\n".join(rows) + "\n")
    beta, modes, modes_error, clusters, clusters_error = np.array(means).T
    fig, ax = plt.subplots(figsize=(5.5, 4), constrained_layout=True)
    ax.errorbar(beta, modes, modes_error, fmt="o-", label="modes of the initial KDE (bandwidth β^-1/2)")
    ax.errorbar(beta, clusters, clusters_error, fmt="s-", label="metastable clusters of the particles")
    ax.set(xscale="log", xlabel="β", ylabel="count (mean over systems)", title="n = 256 tokens on the circle")
    ax.legend(fontsize=8)
    fig.savefig(args.output / "cluster_count_kde.png", dpi=110)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").partition("\n")[0])
    parser.add_argument("--t-particles", type=float, default=300.0)
    parser.add_argument("--t-pde", type=float, default=12.0)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--kde-betas", type=float, nargs="+", default=[4.0, 9.0, 16.0, 36.0, 64.0])
    parser.add_argument("--kde-systems", type=int, default=16)
    parser.add_argument("--output", type=Path, default=Path("output/metastability"))
    args = parser.parse_args()
    args.output.mkdir(parents=True, exist_ok=True)

    particle_figure(particle_runs(args), args.output / "metastability_particles.png")
    summary = pde_figure(pde_runs(args), args.output / "metastability_pde.png")
    lines = ["beta,fastest_mode,max_clusters,final_clusters"]
    for beta, (k_star, counts) in summary.items():
        lines.append(f"{beta:g},{k_star},{counts.max()},{counts[-1]}")
        print(f"PDE, beta = {beta:g}: fastest-growing mode k* = {k_star}; clusters formed: {counts.max()} "
              f"(at t = {args.t_pde:g}: {counts[-1]})")
    write_text(args.output / "cluster_counts.csv", "\n".join(lines) + "\n")
    kde_comparison(args)
    print(f"figures and data in {args.output}")


if __name__ == "__main__":
    main()
