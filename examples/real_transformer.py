r"""A trained Transformer against the theory: its tokens cluster through the layers, beside the library's dynamics.
=================================================================================================================

Reads a Hugging Face checkpoint (``--checkpoint FOLDER`` with ``config.json`` and
``model.safetensors``; ALBERT, BERT or GPT-2) or, without one, writes a small one with random
weights in the real format (:func:`meanfield.pretrained.write_random_checkpoint`), runs its
forward pass on a prompt (``--ids``, token ids from the model's own tokenizer; random ids by
default) and holds the hidden states against the library's dynamics from the same input
embeddings (:func:`validation.compare_dynamics`).

Top left: the histograms of the pairwise cosine similarities of the real hidden states at a few
layers ("A mathematical perspective on Transformers", Fig. 1: they move toward one as the tokens
cluster). Top right: the mean inner product of the token directions per layer for the real
model, the library's layers with the checkpoint's weights, the same with attention only, and
the isotropic model Q = K = V = I at the fitted beta. Bottom left: how far each points from the
real tokens. Bottom right: the eigenvalues of every head's value matrix (output projection
folded in) in the complex plane, good triples (a real, positive, simple leading eigenvalue
with a positive query-key form on its eigenvector) marked; the title gives their fraction.

Writes ``OUTPUT/real_transformer.png``.

    python examples/real_transformer.py                               # a random ALBERT, a few seconds
    python examples/real_transformer.py --checkpoint albert-xlarge-v2 --ids 2,48,1268,...
"""

from __future__ import annotations

import argparse
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from meanfield.pretrained import read_checkpoint, write_random_checkpoint  # noqa: E402
from validation.real_models import SYSTEMS, compare_dynamics, value_spectra  # noqa: E402


def prompt(text: str | None, vocabulary: int, positions: int, tokens: int) -> np.ndarray:
    """The token ids: parsed from ``--ids``, or ``tokens`` random ids (seeded)."""
    if text:
        return np.array([int(token) for token in text.split(",")])
    return np.random.default_rng(0).integers(0, vocabulary, min(tokens, positions))


def cosine_histograms(ax, x: np.ndarray, layers: list[int]) -> None:
    """Histograms of the pairwise cosine similarities of the hidden states at ``layers``."""
    directions = x / np.linalg.norm(x, axis=-1, keepdims=True)
    pairs = np.triu_indices(x.shape[1], 1)
    for layer in layers:
        cosines = (directions[layer] @ directions[layer].T)[pairs]
        ax.hist(cosines, bins=40, range=(-1, 1), density=True, histtype="step", label=f"layer {layer}")
    ax.set(xlabel=r"$\langle u_i, u_j\rangle$", ylabel="density", title="real hidden states")
    ax.legend(fontsize=8)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").partition("\n")[0])
    parser.add_argument("--checkpoint", type=Path, help="a checkpoint folder (default: write a random ALBERT)")
    parser.add_argument("--ids", help="comma-separated token ids of the prompt (default: random ids)")
    parser.add_argument("--tokens", type=int, default=64, help="length of the random prompt")
    parser.add_argument("--output", type=Path, default=Path("output"))
    args = parser.parse_args()
    args.output.mkdir(parents=True, exist_ok=True)
    folder = args.checkpoint or write_random_checkpoint(args.output / "random_albert", "albert", hidden=128,
                                                        heads=8, layers=12, vocabulary=512, positions=128, seed=0)
    model = read_checkpoint(folder)
    ids = prompt(args.ids, model.embeddings.word.shape[0], model.embeddings.position.shape[0], args.tokens)
    ds = compare_dynamics(model, ids)
    spectra = value_spectra(model)

    fig, ((ax_hist, ax_mean), (ax_error, ax_spectra)) = plt.subplots(2, 2, figsize=(12, 9))
    real = model.hidden_states(ids).x.values
    cosine_histograms(ax_hist, real, sorted({0, model.layers // 3, 2 * model.layers // 3, model.layers}))
    for k, system in enumerate(SYSTEMS):
        label = f"isotropic, beta = {ds.beta:.3g}" if system == "isotropic" else system
        ax_mean.plot(ds.time, ds.mean_inner_product.sel(model=system), "o-", ms=3, color=f"C{k}", label=label)
        if system != "real":
            ax_error.plot(ds.time, ds.direction_error.sel(model=system), "o-", ms=3, color=f"C{k}", label=label)
    ax_mean.set(xlabel="layer", ylabel=r"$|\bar u|^2$", ylim=(0, 1.02),
                title=f"{model.architecture.model_type}, d = {model.dimension}, n = {len(ids)}")
    ax_mean.legend(fontsize=8)
    ax_error.set(xlabel="layer", ylabel=r"mean $1 - \langle u_i, u_i^{\rm real}\rangle$",
                 title="distance to the real tokens")
    ax_error.legend(fontsize=8)
    eigenvalues = spectra.eigenvalues.values
    good = spectra.good_triple.values
    ax_spectra.scatter(eigenvalues.real.ravel(), eigenvalues.imag.ravel(), s=2, color="0.6", label="eigenvalues")
    leading = eigenvalues[..., 0]
    ax_spectra.scatter(leading.real[good], leading.imag[good], s=25, marker="*", color="C3",
                       label="leading, good triple")
    ax_spectra.set(xlabel="Re", ylabel="Im", aspect="equal",
                   title=f"value spectra: {good.mean():.0%} of the {good.size} (layer, head) triples are good")
    ax_spectra.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(args.output / "real_transformer.png", dpi=110)
    plt.close(fig)
    print(f"{model.source}: {model.architecture.model_type}, {model.layers} layers, d = {model.dimension}; "
          f"isotropic beta = {ds.beta:.4g}")
    print("mean inner product per layer:")
    print(ds.mean_inner_product.to_pandas().round(3).to_string())


if __name__ == "__main__":
    main()
