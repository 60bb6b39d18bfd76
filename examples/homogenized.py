r"""Representation collapse with random weights: the chain of "Homogenized Transformers", its limit SDE and density equation.
=========================================================================================================================

Weights resampled at every layer and head (Gaussian, fan-in variances), H = 4 heads, step 0.25,
so one layer is tau = step^2 / H = 1/64 of diffusive time. For each setting the mean pairwise
inner product of the tokens (1 at collapse), averaged over independent weight draws, is drawn
against diffusive time for the chain (solid) and for its homogenized limit, the SDE with noise
common to all tokens (dashed, 16 quadrature nodes, dt = 1/64), as the dimension d, the number of
tokens n and the inverse temperature beta vary. The table gives the value at the end with its
standard error over the draws. The last panel is the circle (d = 2): the chain and the SDE for
n = 256 tokens next to the stochastic density equation (n = infinity, Fourier collocation on 64
angles, one path per 16 draws), all from rho0 = (1 + cos(theta)/2)/(2 pi) (a uniform start stays
antipodally symmetric, its mean 0); :math:`|\int x\,\rho|^2` has no :math:`1/n` self term. The density concentrates
as the tokens collapse; its curve stops where the grid no longer resolves it (NaN in the table).

Writes ``OUTPUT/homogenized.png``.

    python examples/homogenized.py                            # about three minutes
    python examples/homogenized.py --systems 16 --end 0.25    # a few seconds
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
from solvers import CommonNoiseCircle, UnderResolvedWarning  # noqa: E402

HEADS, STEP, NODES = 4, 0.25, 16
BASE = {"d": 8, "n": 16, "beta": 1.0}
VARIED = {"d": [2, 4, 8, 16], "n": [4, 16, 64], "beta": [0.0, 1.0, 4.0]}


def collapse_curves(d: int, n: int, beta: float, systems: int, end: float, seed: int):
    """Mean inner product against diffusive time: the chain's and the limit's, with their draws."""
    model = mf.RandomAttention(beta, heads=HEADS, step=STEP)
    limit, layer_time = mf.HomogenizedLimit.of(model, nodes=NODES)
    layers = int(round(end / layer_time))
    x0 = mf.sample_uniform(n, d, rng=seed, batch=systems)
    chain = mf.simulate_random_layers(model, x0, layers, seed=seed + 1, keep_positions=False)
    sde = mf.simulate_homogenized(limit, x0, chain.time.values, dt=layer_time, seed=seed + 2, keep_positions=False)
    return chain.time.values, chain.mean_inner_product.values, sde.mean_inner_product.values


def circle_curves(systems: int, end: float, seed: int):
    """On the circle: the chain and the SDE (n = 256) and the density equation, from rho0 = 1 + cos(theta)/2."""
    model = mf.RandomAttention(BASE["beta"], heads=HEADS, step=STEP)
    limit, layer_time = mf.HomogenizedLimit.of(model, nodes=NODES)
    layers = int(round(end / layer_time))
    rng = np.random.default_rng(seed)
    angles = rng.uniform(0, 2 * np.pi, (systems, 4096))
    angles = np.stack([a[rng.uniform(0, 1.5, a.size) < 1 + 0.5 * np.cos(a)][:256]  # rejection sampling
                                                     for a in angles])
    x0 = np.stack([np.cos(angles), np.sin(angles)], axis=-1)
    chain = mf.simulate_random_layers(model, x0, layers, seed=seed + 1, keep_positions=False)
    sde = mf.simulate_homogenized(limit, x0, chain.time.values, dt=layer_time, seed=seed + 2, keep_positions=False)
    with warnings.catch_warnings():  # the dataset's `resolved` says where: the curve stops there
        warnings.simplefilter("ignore", UnderResolvedWarning)
        density = CommonNoiseCircle(limit, 64).solve(lambda theta: 1 + 0.5 * np.cos(theta), chain.time.values,
                                                     dt=layer_time, systems=max(1, systems // 16), seed=seed + 3)
    resolved = density.resolved.values.all(axis=0)
    return chain.time.values, [chain.mean_inner_product.values, sde.mean_inner_product.values,
                               np.where(resolved, density.mean_inner_product.values, np.nan)]


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").partition("\n")[0])
    parser.add_argument("--systems", type=int, default=256, help="independent weight draws per setting")
    parser.add_argument("--end", type=float, default=2.0, help="diffusive time at the end")
    parser.add_argument("--output", type=Path, default=Path("output"))
    args = parser.parse_args()
    args.output.mkdir(parents=True, exist_ok=True)
    fig, axes = plt.subplots(1, 4, figsize=(20, 4), sharey=True)
    print(f"{'setting':>12}  {'chain':>16}  {'limit SDE':>16}")
    for seed, (ax, (name, values)) in enumerate(zip(axes[:3], VARIED.items())):
        for colour, value in enumerate(values):
            setting = {**BASE, name: value}
            times, chain, sde = collapse_curves(setting["d"], setting["n"], setting["beta"], args.systems,
                                                args.end, 100 * seed + 10 * colour)
            line, = ax.plot(times, chain.mean(axis=0), label=f"{name} = {value:g}")
            ax.plot(times, sde.mean(axis=0), "--", color=line.get_color())
            ends = [f"{r[:, -1].mean():.3f} +- {r[:, -1].std() / np.sqrt(args.systems):.3f}" for r in (chain, sde)]
            print(f"{name + ' = ' + format(value, 'g'):>12}  {ends[0]:>16}  {ends[1]:>16}")
        others = ", ".join(f"{k} = {v:g}" for k, v in BASE.items() if k != name)
        ax.set(title=f"varying {name} ({others})", xlabel="diffusive time s = layers step^2 / H")
        ax.legend()
    times, runs = circle_curves(args.systems, args.end, 1000)
    for run, style, label in zip(runs, ("-", "--", ":"), ("chain", "limit SDE", "density equation")):
        axes[3].plot(times, run.mean(axis=0), style, color="k", label=label)
    ends = [f"{r[:, -1].mean():.3f} +- {r[:, -1].std() / np.sqrt(r.shape[0]):.3f}" if r.shape[0] > 1
            else f"{r[0, -1]:.3f} (one path)" for r in runs]
    print(f"{'circle':>12}  {ends[0]:>16}  {ends[1]:>16}  density equation {ends[2]}")
    axes[3].set(title="circle, n = 256 (density: n = infinity)", xlabel="diffusive time s")
    axes[3].legend()
    axes[0].set_ylabel("mean <x_i, x_j> (solid: chain, dashed: limit SDE)")
    fig.tight_layout()
    fig.savefig(args.output / "homogenized.png", dpi=120)
    print(f"wrote {args.output / 'homogenized.png'}")


if __name__ == "__main__":
    main()
