r"""Attention as Transformers build it: clustering under softmax and Sinkhorn, post- and pre-LN, with and without RoPE.
=====================================================================================================================

The same tokens (n = 32 in d = 4, uniform on the sphere, ``--systems`` independent draws) move
under six variants of one attention layer at beta = 4:

- softmax attention with post-LN (:class:`meanfield.SelfAttention`, tokens on the sphere),
- doubly stochastic attention (:class:`meanfield.SinkhornAttention`, Sinkformers),
- the same softmax layer with pre-LN (:class:`meanfield.PureAttention` with
  ``normalization="pre"``: attention reads the directions, the tokens leave the sphere),
- pre-LN with an RMS gain (1, 1, 1, 1/2),
- post-LN with a gain per layer :math:`e^{\Delta t\,\gamma}`, :math:`\gamma = (0, 0, 0, -1)`
  (``normalization="post"``, the layers themselves at :math:`\Delta t = 0.05`: tokens on an
  ellipsoid, pulled away from the fourth axis; their limit is SA plus the gain's field),
- softmax attention with the rotary positional encoding (:class:`meanfield.RotaryAttention`,
  RoPE's frequencies for 32 tokens).

Left: the share of token pairs whose directions lie within 8 degrees of each other (cosine
above 0.99: the same cluster), mean over the draws with its standard error; middle: the mean
token norm (post-LN keeps 1); right: the distribution of the pairwise cosines at the end (the
spikes are clusters). Pre-LN moves the directions at :math:`|P_u a|/|x|` while the norms grow
linearly, so its clock slows like :math:`1/t`: its directions cluster later than post-LN's.
The table prints the values at the end.

Writes ``OUTPUT/attention_variants.png``.

    python examples/attention_variants.py                        # about a minute
    python examples/attention_variants.py --systems 2 --end 2    # a few seconds
"""

from __future__ import annotations

import argparse
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

import meanfield as mf  # noqa: E402

N, D, BETA = 32, 4, 4.0
#: Two directions closer than this cosine (8 degrees) are in one cluster.
SAME_CLUSTER = 0.99


#: The step of the schemes (RK4, and the post-LN layers).
DT = 0.05


def variants() -> dict[str, tuple[object, str]]:
    """Each variant's model and the scheme it runs with (post-LN with a gain is a discrete layer only)."""
    post_gain = np.exp(DT * np.array([0.0, 0.0, 0.0, -1.0]))
    return {"softmax, post-LN": (mf.SelfAttention(BETA), "rk4"),
            "Sinkhorn, post-LN": (mf.SinkhornAttention(BETA), "rk4"),
            "softmax, pre-LN": (mf.PureAttention(beta=BETA, normalization="pre"), "rk4"),
            "softmax, pre-LN, gain": (mf.PureAttention(beta=BETA, normalization="pre", gain=[1.0, 1.0, 1.0, 0.5]), "rk4"),
            "softmax, post-LN, gain": (mf.PureAttention(beta=BETA, normalization="post", gain=post_gain), "layer"),
            "softmax, RoPE": (mf.RotaryAttention(BETA, mf.rope_frequencies(D, N)), "rk4")}


def directions(x: np.ndarray) -> np.ndarray:
    return x / np.linalg.norm(x, axis=-1, keepdims=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").partition("\n")[0])
    parser.add_argument("--systems", type=int, default=16, help="independent draws of the initial tokens")
    parser.add_argument("--end", type=float, default=12.0, help="the last time")
    parser.add_argument("--output", type=Path, default=Path("output"))
    args = parser.parse_args()
    args.output.mkdir(parents=True, exist_ok=True)
    times = np.linspace(0.0, args.end, 25)
    x0 = mf.sample_uniform(N, D, rng=1, batch=args.systems)

    fig, (ax_mean, ax_norm, ax_cos) = plt.subplots(1, 3, figsize=(15, 4.5))
    print(f"{'variant':24s} {'pairs in a cluster at the end':>30s} {'mean |x| at the end':>20s}")
    for label, (model, method) in variants().items():
        x = mf.simulate_particles(model, x0, times, method=method, dt=DT).x.values  # (system, time, n, d)
        unit = directions(x)
        pairs = (unit @ np.swapaxes(unit, -1, -2))[..., *np.triu_indices(N, 1)]  # (system, time, pair)
        clustered = np.mean(pairs > SAME_CLUSTER, axis=-1)
        mean, error = clustered.mean(axis=0), clustered.std(axis=0, ddof=1) / np.sqrt(args.systems)
        line, = ax_mean.plot(times, mean, label=label)
        ax_mean.fill_between(times, mean - error, mean + error, color=line.get_color(), alpha=0.2)
        norms = np.linalg.norm(x, axis=-1).mean(axis=(0, 2))
        ax_norm.plot(times, norms, color=line.get_color(), label=label)
        ax_cos.hist(pairs[:, -1].ravel(), bins=40, range=(-1, 1), histtype="step", density=True, color=line.get_color(),
                    label=label)
        print(f"{label:24s} {mean[-1]:22.3f} +- {error[-1]:.3f} {norms[-1]:20.3f}")
    ax_mean.set(xlabel="time", ylabel=r"share of pairs with $\langle u_i, u_j\rangle > 0.99$",
                title="clustering of the directions")
    ax_norm.set(xlabel="time", ylabel="mean token norm", title="norms: post-LN keeps 1, pre-LN grows")
    ax_cos.set(xlabel=r"$\langle u_i, u_j\rangle$ at the end", ylabel="density", title="pairwise cosines at the end",
               yscale="log")
    ax_mean.legend(fontsize=8)
    fig.suptitle(f"One attention layer, six ways: n = {N}, d = {D}, beta = {BETA:g}, {args.systems} draws")
    fig.tight_layout()
    fig.savefig(args.output / "attention_variants.png", dpi=110)
    plt.close(fig)


if __name__ == "__main__":
    main()
