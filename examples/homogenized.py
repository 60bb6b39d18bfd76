"""Representation collapse with random weights: the chain of "Homogenized Transformers" and its limit SDE.

Weights resampled at every layer and head (Gaussian, fan-in variances), H = 4 heads, step 0.25,
so one layer is tau = step^2 / H = 1/64 of diffusive time. For each setting the mean pairwise
inner product of the tokens (1 at collapse), averaged over independent weight draws, is drawn
against diffusive time for the chain (solid) and for its homogenized limit, the SDE with noise
common to all tokens (dashed, 16 quadrature nodes, dt = 1/64), as the dimension d, the number of
tokens n and the inverse temperature beta vary. The table gives the value at the end with its
standard error over the draws.

Writes ``OUTPUT/homogenized.png``.

    python examples/homogenized.py                            # about a minute
    python examples/homogenized.py --systems 16 --end 0.25    # a few seconds
"""

from __future__ import annotations

import argparse
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

import meanfield as mf  # noqa: E402

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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--systems", type=int, default=256, help="independent weight draws per setting")
    parser.add_argument("--end", type=float, default=2.0, help="diffusive time at the end")
    parser.add_argument("--output", type=Path, default=Path("output"))
    args = parser.parse_args()
    args.output.mkdir(parents=True, exist_ok=True)
    fig, axes = plt.subplots(1, 3, figsize=(15, 4), sharey=True)
    print(f"{'setting':>12}  {'chain':>16}  {'limit SDE':>16}")
    for seed, (ax, (name, values)) in enumerate(zip(axes, VARIED.items())):
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
    axes[0].set_ylabel("mean <x_i, x_j> (solid: chain, dashed: limit SDE)")
    fig.tight_layout()
    fig.savefig(args.output / "homogenized.png", dpi=120)
    print(f"wrote {args.output / 'homogenized.png'}")


if __name__ == "__main__":
    main()
