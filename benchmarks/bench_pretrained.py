"""The forward pass of a checkpoint in numpy, against a plain transcription and against `transformers`.

An ALBERT-shaped checkpoint with random weights (``write_random_checkpoint``: d = 768, 12 heads,
feed-forward width 3072, 12 layers sharing one block; the cost of a forward pass is that of 12
distinct BERT layers) on a prompt of n = 128 tokens, float64:

- ``Transformer.hidden_states`` (every layer recorded) against a plain numpy transcription of
  the same layers, head by head, as a user would write it from the papers;
- the same against its floor: the layers' matrix products alone (the same shapes, one BLAS
  call each), which is what the flops cost at this machine's GEMM rate;
- the same against ``transformers``' ``AlbertModel`` in float64 on the CPU, when the ``hf``
  extra is installed (``make test-hf`` installs it), with torch on as many threads as numpy's BLAS.

The floor: a layer is ``24 n d^2 + 4 n^2 d`` flops (the four projections, the feed-forward and
the attention products), 1.86 GFlop at n = 128, d = 768; 22.4 GFlop for the 12 layers.

    python benchmarks/bench_pretrained.py
"""

from __future__ import annotations

import math
import tempfile

import numpy as np
from scipy.special import erf
from threadpoolctl import threadpool_info

from common import compare
from meanfield.pretrained import read_checkpoint, write_random_checkpoint

N, D, HEADS, LAYERS = 128, 768, 12, 12


def plain_layer(x, block):
    """One post-LN layer written out head by head from the raw weights (no batching over heads)."""
    attention, k = block.attention, block.attention.head_dimension
    out = np.zeros_like(x)
    for h in range(attention.heads):
        q = x @ attention.query[h] + attention.query_bias[h]
        key = x @ attention.key[h] + attention.key_bias[h]
        v = x @ attention.value[h] + attention.value_bias[h]
        scores = q @ key.T / math.sqrt(k)
        weights = np.exp(scores - scores.max(axis=1, keepdims=True))
        out += (weights / weights.sum(axis=1, keepdims=True)) @ v @ attention.output[h]
    x = layer_norm(x + out + attention.output_bias, block.attention_norm)
    ff = block.feed_forward
    hidden = ff.inner_bias + x @ ff.inner
    hidden = 0.5 * hidden * (1 + np.tanh(math.sqrt(2 / math.pi) * (hidden + 0.044715 * hidden ** 3)))
    return layer_norm(x + hidden @ ff.outer + ff.outer_bias, block.feed_forward_norm)


def layer_norm(x, norm):
    centred = x - x.mean(axis=1, keepdims=True)
    return centred / np.sqrt((centred ** 2).mean(axis=1, keepdims=True) + norm.eps) * norm.gain + norm.bias


def run() -> list[tuple[str, float, float, float]]:
    with tempfile.TemporaryDirectory() as scratch:
        folder = write_random_checkpoint(scratch, "albert", hidden=D, heads=HEADS, layers=LAYERS, embedding=128,
                                         vocabulary=1000, positions=N, dtype="float64")
        model = read_checkpoint(folder)
        ids = np.random.default_rng(0).integers(0, 1000, N)
        x0 = model.embed(ids)

        def plain():
            x = x0
            for block in model.blocks:
                x = plain_layer(x, block)
            return x

        assert np.allclose(plain(), model.hidden_states(ids).x.values[-1], atol=1e-9)
        rows = [("forward pass, n = 128, d = 768, 12 layers, vs plain numpy", *compare(
            lambda: model.hidden_states(ids), plain, rounds=3, repeats=2))]
        square, wide, tall = np.ones((D, D)), np.ones((D, 4 * D)), np.ones((4 * D, D))
        heads = np.ones((HEADS, N, D // HEADS))

        def products():  # per layer: 4 projections, scores and averages of every head, the feed-forward
            x, hidden = np.ones((N, D)), np.ones((N, 4 * D))
            for _ in range(LAYERS):
                for _ in range(4):
                    x @ square
                heads @ np.swapaxes(heads, -1, -2) @ heads
                x @ wide
                hidden @ tall

        rows.append(("forward pass, same, vs its matrix products alone (the floor)", *compare(
            lambda: model.hidden_states(ids), products, rounds=3, repeats=2)))
        try:
            import torch
            from transformers import AlbertModel
        except ImportError:
            return rows
        threads = max(info["num_threads"] for info in threadpool_info() if info["user_api"] == "blas")
        torch.set_num_threads(threads)
        reference = AlbertModel.from_pretrained(folder).double().eval()
        prompt = torch.tensor(ids)[None]

        def with_torch():
            with torch.no_grad():
                return reference(prompt, output_hidden_states=True)

        assert np.allclose(with_torch().hidden_states[-1][0].numpy(), model.hidden_states(ids).x.values[-1],
                           atol=1e-9)
        rows.append((f"forward pass, same, vs transformers (float64, {threads} torch threads)",
                     *compare(lambda: model.hidden_states(ids), with_torch, rounds=3, repeats=2)))
        return rows


if __name__ == "__main__":
    for label, ours, base, ratio in run():
        print(f"{label:70} {ours:10.4g} {base:10.4g} {ratio:8.3g}")
