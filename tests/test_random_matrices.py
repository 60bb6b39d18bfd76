"""Random weights drawn once per system (the random-matrix phase diagrams) and the rank-collapse observable.

References: the chain against the fixed-weight discrete layer written out from SelfAttention's
attention output with the same draws; the laws' moments against their definitions; the span
dimension on tokens built in a known subspace.
"""

import numpy as np
import pytest

import meanfield as mf
from meanfield.homogenized import HomogenizedLimit
from meanfield.random_weights import system_generators


def test_weights_drawn_once_per_system_are_the_fixed_weight_layer_repeated():
    systems, heads, n, d, step, beta = 3, 2, 6, 4, 0.3, 1.5
    model = mf.RandomAttention(beta, heads=heads, step=step, law=mf.MatrixWeights("gaussian", "wishart"),
                               redraw="system")
    x0 = mf.sample_uniform(n, d, rng=4, batch=systems)
    run = mf.simulate_random_layers(model, x0, 5, seed=9)
    for s, generator in enumerate(system_generators(9, systems)):
        query, key, value = model.law.sample(generator, heads, d)
        layer = mf.SelfAttention(beta, query=query, key=key, value=value)  # all heads: sum_h V_h a_h
        x = x0[s]
        for _ in range(5):
            moved = x + step / heads * layer.attention_output(x)
            x = moved / np.linalg.norm(moved, axis=-1, keepdims=True)
        np.testing.assert_allclose(run.x.values[s, -1], x, rtol=0, atol=1e-13)
    np.testing.assert_allclose(run.time.values, step * np.arange(6))  # the Euler clock t = layer * step
    again = mf.simulate_random_layers(model, x0, 5, seed=9)
    np.testing.assert_array_equal(run.x.values, again.x.values)


def test_the_matrix_laws_have_their_moments():
    rng = np.random.default_rng(0)
    d = 200
    query, key, value = mf.MatrixWeights("wigner", "bilinear").sample(rng, 1, d)
    bilinear = (np.swapaxes(query, -1, -2) @ key)[0]
    np.testing.assert_array_equal(bilinear, bilinear.T)
    off = bilinear[np.triu_indices(d, 1)]
    # variances 1 off the diagonal, 2 on it: within four standard errors of the sample variance
    assert abs(off.var() - 1) < 4 * np.sqrt(2 / off.size)
    assert abs(np.mean(np.diag(bilinear) ** 2) - 2) < 4 * 2 * np.sqrt(2 / d)
    np.testing.assert_allclose(value[0], bilinear / np.sqrt(d), rtol=0, atol=0)
    # G G'/sqrt d: one entry over independent draws is a sum of d products of normals, variance 1
    # and kurtosis 3 + 6/d, so its sample second moment has standard error sqrt((2 + 6/d)/N)
    draws, small = 4000, 16
    query, key, value = mf.MatrixWeights("gaussian", "-bilinear").sample(rng, draws, small)
    bilinear = np.swapaxes(query, -1, -2) @ key
    entry = bilinear[:, 2, 5]
    assert abs(np.mean(entry ** 2) - 1) < 4 * np.sqrt((2 + 6 / small) / draws)
    np.testing.assert_allclose(value, -bilinear / np.sqrt(small), rtol=1e-15, atol=1e-15)
    _, _, wishart = mf.MatrixWeights("identity", "wishart").sample(rng, 1, d)
    assert np.linalg.eigvalsh(wishart[0]).min() > -1e-12
    with pytest.raises(ValueError, match="bilinear must be one of"):
        mf.MatrixWeights("cauchy")
    with pytest.raises(ValueError, match="value = 'bilinear' ties V to a random bilinear form"):
        mf.MatrixWeights("identity", "bilinear")


def test_span_dimension_counts_the_directions_the_tokens_fill():
    rng = np.random.default_rng(2)
    basis = np.linalg.qr(rng.standard_normal((6, 3)))[0]  # three orthonormal columns of R^6
    x = rng.standard_normal((10, 3)) @ basis.T
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    assert mf.span_dimension(x) == 3
    assert mf.span_dimension(np.tile(x[:1], (10, 1))) == 1
    assert mf.span_dimension(mf.sample_uniform(4, 6, rng=0)) == 4  # n < d: n directions
    run = mf.simulate_random_layers(mf.RandomAttention(1.0, law=mf.MatrixWeights("identity"), step=1.0,
                                                       redraw="system"), mf.sample_uniform(8, 5, rng=1), 60, seed=0)
    assert run.span_dimension.values[0] == 5 and run.span_dimension.values[-1] == 1  # Q = K = V = I, beta = 1: one cluster


def test_fixed_weights_have_no_homogenized_limit():
    with pytest.raises(ValueError, match="redraw='system'.*no such limit"):
        HomogenizedLimit.of(mf.RandomAttention(1.0, step=0.1, redraw="system"))
    with pytest.raises(ValueError, match="redraw must be 'layer' or 'system'"):
        mf.RandomAttention(1.0, redraw="never")


def test_observe_random_layers_records_the_layers_asked():
    model = mf.RandomAttention(1.0, law=mf.MatrixWeights("wigner", "-bilinear"), redraw="system")
    x0 = mf.sample_uniform(5, 3, rng=0, batch=2)
    seen, layers = mf.observe_random_layers(model, x0, [2, 5], lambda x: x[:, 0].copy(), seed=3)
    full = mf.simulate_random_layers(model, x0, 5, seed=3)
    np.testing.assert_array_equal(layers, [0, 2, 5])
    np.testing.assert_array_equal(np.stack(seen), full.x.values[:, [0, 2, 5], 0].transpose(1, 0, 2))
    with pytest.raises(ValueError, match="record must be increasing"):
        mf.observe_random_layers(model, x0, [3, 3], lambda x: 0)
