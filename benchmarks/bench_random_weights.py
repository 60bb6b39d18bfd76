"""Random weights resampled per layer and head (issue 37): the cost of one layer.

n = 64 tokens in d = 64, H = 16 heads, 256 systems each with its own draws: one layer of
``simulate_random_layers`` against the baseline of drawing the same weights (3 x 256 x 16
Gaussian 64 x 64 matrices) plus one layer of the fixed-weight model (``SelfAttention`` with 16
heads, one set of matrices for all systems), timed in the same run. Target: ratio <= 2. The
homogenized limit's step at the same sizes (64 quadrature nodes instead of 16 heads) is timed
against the same baseline.

The stochastic density solvers (the common-noise transport equation): one Heun step of
``CommonNoiseCircle`` (64 points) and ``CommonNoiseSphere`` (lmax = 15, 32 x 64 nodes), Gaussian
values with Q = K = I (d^2 noise fields), against one softmax attention over the same nodes
(the logits, their exponentials, one product with the nodes), the floor of one evaluation of
the fields; a step evaluates them twice, with the measure derivative of every field.
"""

from __future__ import annotations

import numpy as np

import meanfield as mf
from common import compare
from solvers import CommonNoiseCircle, CommonNoiseSphere

TOKENS, DIMENSION, HEADS, SYSTEMS = 64, 64, 16, 256


def run() -> list[tuple[str, float, float, float]]:
    law = mf.GaussianWeights()
    x0 = mf.sample_uniform(TOKENS, DIMENSION, rng=0, batch=SYSTEMS)
    model = mf.RandomAttention(1.0, heads=HEADS, step=0.1, law=law)
    query, key, value = law.sample(np.random.default_rng(1), HEADS, DIMENSION)
    fixed = mf.SelfAttention(1.0, query=query, key=key, value=value)
    generator = np.random.default_rng(2)

    def draw_and_fixed_step():
        law.sample(generator, SYSTEMS * HEADS, DIMENSION)
        moved = x0 + (model.step / HEADS) * fixed.attention_output(x0)
        return moved / np.linalg.norm(moved, axis=-1, keepdims=True)

    ours, base, ratio = compare(lambda: mf.simulate_random_layers(model, x0, 1, seed=3, keep_positions=False),
                                draw_and_fixed_step, rounds=3, repeats=1)
    rows = [(f"random layer, n = {TOKENS}, d = {DIMENSION}, H = {HEADS}, {SYSTEMS} draws vs drawing the weights "
             "+ the fixed-weight layer", ours, base, ratio)]
    limit = mf.HomogenizedLimit(1.0, law, nodes=HEADS)
    step = model.layer_time
    ours, base, ratio = compare(lambda: mf.simulate_homogenized(limit, x0, [0.0, step], dt=step, seed=3,
                                                                keep_positions=False),
                                draw_and_fixed_step, rounds=3, repeats=1)
    rows.append((f"homogenized limit, one step with {HEADS} nodes, same sizes, vs the same baseline", ours, base, ratio))
    return rows + heun_against_euler() + density_steps()


def heun_against_euler() -> list[tuple[str, float, float, float]]:
    r"""The limit SDE's Heun step against its Euler step (4 systems, 16 tokens, 64 nodes, Gaussian values).

    Heun integrates the Stratonovich form, whose drift carries the correction
    :math:`-\frac12\sum_k (D\sigma_k)\sigma_k` over the :math:`d^2` noise fields of every node,
    each with the measure derivative of the attention; Euler's Ito step needs none of it.
    """
    rows = []
    limit = mf.HomogenizedLimit(1.0, nodes=64)
    for d in (2, 8, 16):
        x0 = mf.sample_uniform(16, d, rng=0, batch=4)
        ours, base, ratio = compare(
            lambda: mf.simulate_homogenized(limit, x0, [0.0, 0.01], dt=0.01, seed=0, scheme="heun", progress=False),
            lambda: mf.simulate_homogenized(limit, x0, [0.0, 0.01], dt=0.01, seed=0, scheme="euler", progress=False),
            rounds=2, repeats=1)
        rows.append((f"homogenized limit, Heun step vs Euler step, d = {d} (d^2 fields x 64 nodes)", ours, base, ratio))
    return rows


def softmax_attention(points: np.ndarray) -> np.ndarray:
    """One attention over all pairs of ``points`` (the density solvers' floor per evaluation)."""
    logits = points @ points.T
    logits -= logits.max(axis=-1, keepdims=True)
    np.exp(logits, out=logits)
    return (logits @ points) / logits.sum(axis=-1, keepdims=True)


def density_steps() -> list[tuple[str, float, float, float]]:
    limit = mf.HomogenizedLimit(1.0, mf.GaussianWeights(value_std=0.1, query_std=None, key_std=None))
    rows = []
    for solver, rho0 in ((CommonNoiseCircle(limit, 64), lambda theta: 1 + 0.5 * np.cos(theta)),
                         (CommonNoiseSphere(limit, 15), lambda x: 1 + 0.5 * x[..., 0])):
        nodes, dt = solver.nodes(), 2.0 ** -10
        ours, base, ratio = compare(lambda: solver.solve(rho0, [0.0, dt], dt=dt, seed=3),
                                    lambda: softmax_attention(nodes), rounds=3, repeats=3)
        rows.append((f"{type(solver).__name__}, one Heun step on {nodes.shape[0]} nodes, vs one softmax attention "
                     "over them", ours, base, ratio))
    return rows


if __name__ == "__main__":
    for name, seconds, baseline, ratio in run():
        print(f"{name}: {seconds:.4g} s (baseline {baseline:.4g} s, ratio {ratio:.3g})")
