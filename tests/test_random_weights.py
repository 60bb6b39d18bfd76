"""The random-weight chain and its homogenized limit (meanfield.random_weights, meanfield.homogenized).

References independent of the code under test: SelfAttention's attention output (one head and one
system at a time), the closed-form covariance of symmetric Gaussian values, a DOP853 run of the
deterministic flow, and the Brownian path summed onto coarser steps.
"""

import json

import numpy as np
import pytest

import meanfield as mf
from meanfield.homogenized import HomogenizedLimit, simulate_homogenized
from meanfield.random_weights import (GaussianWeights, RandomAttention, SampledWeights, attention_averages,
                                      simulate_random_layers, value_sum)

FIXED_ATTENTION = GaussianWeights(query_std=None, key_std=None)


def symmetric_values(rng, count, d):
    """Q = K = I and symmetric Gaussian values V = (G + G^T)/sqrt 2, G_ab ~ N(0, 1/d): centred, not isotropic."""
    g = rng.standard_normal((count, d, d)) / np.sqrt(d)
    eye = np.broadcast_to(np.eye(d), (count, d, d))
    return eye, eye, (g + np.swapaxes(g, -1, -2)) / np.sqrt(2)


def test_the_batched_layer_is_selfattention_head_by_head():
    rng = np.random.default_rng(1)
    systems, heads, n, d = 3, 4, 7, 5
    x = mf.sample_uniform(n, d, rng=rng, batch=systems)
    query, key, value = (m.reshape(systems, heads, d, d) for m in GaussianWeights().sample(rng, systems * heads, d))
    batched = value_sum(attention_averages(x, query, key, 2.0), value)
    reference = np.stack([mf.SelfAttention(2.0, query=query[s], key=key[s], value=value[s]).attention_output(x[s])
                          for s in range(systems)])
    np.testing.assert_allclose(batched, reference, rtol=0, atol=1e-14)
    model = RandomAttention(2.0, heads=heads, step=0.3)
    stepped = x + 0.3 / heads * reference
    np.testing.assert_allclose(model.layer(x, query, key, value), stepped / np.linalg.norm(stepped, axis=-1, keepdims=True),
                               rtol=0, atol=1e-14)


def test_runs_repeat_from_the_recorded_seed_and_a_system_does_not_depend_on_its_batch():
    model = RandomAttention(1.0, heads=2, step=0.2)
    x0 = mf.sample_uniform(5, 4, rng=0, batch=6)
    run = simulate_random_layers(model, x0, 5, seed=None)
    seed = json.loads(run.attrs["settings"])["seed"]
    again = simulate_random_layers(model, x0, 5, seed=seed)
    np.testing.assert_array_equal(run.x.values, again.x.values)
    first_three = simulate_random_layers(model, x0[:3], 5, seed=seed)
    np.testing.assert_array_equal(run.x.values[:3], first_three.x.values)
    assert not np.allclose(run.x.values[0, -1], run.x.values[1, -1])  # each system its own draws
    np.testing.assert_allclose(run.layer.values, np.arange(6))
    np.testing.assert_allclose(run.time.values, np.arange(6) * model.layer_time)
    np.testing.assert_allclose(np.linalg.norm(run.x.values, axis=-1), 1.0, atol=1e-15)


def measured_drift(law, x0, draws=100_000, step=0.05):
    """Tangential mean move per unit diffusive time of one layer from ``x0``, with antithetic values.

    V and -V give the same second-order move and opposite first-order ones, so their mean keeps
    the drift and drops the O(step) noise that would otherwise need ~1/step^2 more draws.
    """
    model = RandomAttention(2.0, heads=1, step=step, law=law)
    n, d = x0.shape
    query, key, value = (m[:, None] for m in law.sample(np.random.default_rng(7), draws, d))
    x = np.broadcast_to(x0, (draws, n, d))
    move = (model.layer(x, query, key, value) + model.layer(x, query, key, -value)) / 2 - x0
    tangential = move - np.sum(move * x0, axis=-1, keepdims=True) * x0
    return tangential.mean(axis=0) / model.layer_time, tangential.std(axis=0) / np.sqrt(draws) / model.layer_time


def test_gaussian_values_give_no_drift_and_anisotropic_ones_the_derived_drift():
    d = 3
    x0 = mf.sample_uniform(4, d, rng=2)
    drift, error = measured_drift(FIXED_ATTENTION, x0)
    assert np.max(np.abs(drift) / error) < 4.5  # 12 components
    drift, error = measured_drift(GaussianWeights(), x0)
    assert np.max(np.abs(drift) / error) < 4.5
    # Symmetric values: C(x, x) = (1/d)(|a|^2 I + a a^T), so the derivation's drift -P_x C x is
    # -(1/d) <a, x> P_x a, with a the SelfAttention average (Q = K = I).
    a = mf.SelfAttention(2.0).attention_output(x0)
    along = np.sum(a * x0, axis=-1, keepdims=True)
    predicted = -(along / d) * (a - along * x0)
    drift, error = measured_drift(SampledWeights(symmetric_values, "symmetric values"), x0)
    assert np.max(np.abs(drift - predicted) / error) < 4.5
    assert np.max(np.abs(predicted) / error) > 20  # the test can tell the drift from zero


def test_the_limit_sde_has_strong_order_one_half_and_stays_on_the_sphere():
    systems, n, d = 200, 4, 3
    x0 = np.broadcast_to(mf.sample_uniform(n, d, rng=3), (systems, n, d))
    limit = HomogenizedLimit(2.0, GaussianWeights(), nodes=8)
    fine, end = 2.0 ** -10, 1.0
    shape = limit.increment_shape(systems, d)
    increments = np.random.default_rng(0).standard_normal((int(end / fine),) + shape) * np.sqrt(fine)
    reference = simulate_homogenized(limit, x0, [0, end], dt=fine, seed=1, increments=increments).x.values[:, -1]
    assert np.abs(np.linalg.norm(reference, axis=-1) - 1).max() < 1e-14
    steps = 2.0 ** -np.arange(4, 7)
    errors = []
    for dt in steps:
        coarse = increments.reshape((-1, int(dt / fine)) + shape).sum(axis=1)
        x = simulate_homogenized(limit, x0, [0, end], dt=dt, seed=1, increments=coarse).x.values[:, -1]
        errors.append(np.sqrt(np.mean(np.sum((x - reference) ** 2, axis=-1))))
    # The known order is 1/2; the reference's own error (a quarter of the finest step's) tilts the fit up.
    order = np.polyfit(np.log(steps), np.log(errors), 1)[0]
    assert 0.4 < order < 0.7, (errors, order)


def test_without_noise_the_limit_is_the_deterministic_flow():
    law = GaussianWeights(value_std=0.0, value_mean=1.5, query_std=None, key_std=None)
    limit, layer_time = HomogenizedLimit.of(RandomAttention(2.0, heads=4, step=0.01, law=law), "deterministic")
    assert layer_time == 0.01 and not limit.noise and limit.drift == 1.5
    x0 = mf.sample_uniform(6, 3, rng=4)
    exact = mf.simulate_particles(mf.SelfAttention(2.0, value=1.5), x0, [0, 1], rtol=1e-12).x.values[-1]
    errors = [np.abs(simulate_homogenized(limit, x0, [0, 1], dt=dt).x.values[-1] - exact).max()
              for dt in (2e-3, 1e-3)]
    # Euler: first order, with an error constant of order one (the flow's speed and Lipschitz constant)
    assert errors[0] < 2e-3 and 1.7 < errors[0] / errors[1] < 2.3


@pytest.mark.parametrize("heads", [1, 4])
def test_the_chain_and_its_limit_agree_in_law(heads):
    """The diffusive clock step**2/heads and the covariance's scale: the mean <x_1, x_2> at s = 1."""
    systems, d = 3000, 3
    x0 = np.broadcast_to(mf.sample_uniform(4, d, rng=5), (systems, 4, d))
    law = GaussianWeights(value_std=2.0)
    model = RandomAttention(2.0, heads=heads, step=np.sqrt(heads / 16), law=law)
    chain = simulate_random_layers(model, x0, 16, seed=1).x.values[:, -1]
    limit = simulate_homogenized(HomogenizedLimit(2.0, law, nodes=16), x0, [0, 1], dt=1 / 32, seed=2).x.values[:, -1]
    statistics = [np.sum(x[:, 0] * x[:, 1], axis=-1) for x in (chain, limit)]
    gap = statistics[0].mean() - statistics[1].mean()
    error = np.hypot(*(s.std() / np.sqrt(systems) for s in statistics))
    assert abs(gap) < 4 * error
    initial = float(x0[0, 0] @ x0[0, 1])
    assert abs(statistics[1].mean() - initial) > 10 * error  # the tokens moved: the comparison means something


@pytest.mark.slow
def test_one_layer_moves_the_tokens_with_the_limit_covariance_up_to_a_gap_falling_like_the_layer_time():
    r"""The derivation's diffusion: a layer's tangential moves have covariance tau P_i C(x_i, x_j) P_j + O(tau^2).

    With Gaussian values C = (sigma_V^2/d) E_QK<a_QK(x_i), a_QK(x_j)> I, so per unit diffusive
    time E<dx_i, dx_j>/tau = C_ij tr(P_i P_j) = C_ij (d - 2 + <x_i, x_j>^2) up to O(tau) (the
    next terms of the normalisation's expansion and the heads' fourth cumulant). The expectation
    over (Q, K) is a Monte Carlo average of 2^21 draws, whose standard error is added to the layers'.
    At fixed depth the same O(tau) is out of reach: the law's spread over weight draws (a
    standard deviation of ~0.5 on <x_1, x_2> at s = 1) buries gaps of ~1e-3 under 10^5 systems.
    """
    d, n, beta, heads = 3, 4, 2.0, 2
    law = GaussianWeights(value_std=1.0)
    x0 = mf.sample_uniform(n, d, rng=2)
    draws = 1 << 21
    query, key, _ = law.sample(np.random.default_rng(11), draws, d)
    a = attention_averages(np.broadcast_to(x0, (draws, n, d)), query[:, None], key[:, None], beta)[:, 0]
    upper = np.triu_indices(n)
    per_draw = (np.einsum("mid,mjd->mij", a, a) / d * (d - 2 + (x0 @ x0.T) ** 2))[:, upper[0], upper[1]]
    predicted, predicted_error = per_draw.mean(axis=0), per_draw.sum(axis=-1).std() / np.sqrt(draws)
    taus, gaps, errors = np.array([1 / 8, 1 / 16, 1 / 32]), [], []
    for tau in taus:
        model = RandomAttention(beta, heads=heads, step=np.sqrt(heads * tau), law=law)
        systems = 1 << 19
        q, k, v = (m.reshape(systems, heads, d, d) for m in law.sample(np.random.default_rng(int(1 / tau)), systems * heads, d))
        x = np.broadcast_to(x0, (systems, n, d))
        moves = model.layer(x, q, k, v) - x
        moves -= np.sum(moves * x0, axis=-1, keepdims=True) * x0
        gap = (np.einsum("sid,sjd->sij", moves, moves)[:, upper[0], upper[1]] / tau - predicted).sum(axis=-1)
        gaps.append(gap.mean())
        errors.append(np.hypot(gap.std() / np.sqrt(systems), predicted_error))
    gaps, errors = np.abs(gaps), np.array(errors)
    assert gaps[-1] < 0.05 * predicted.sum()  # the leading term is the derivation's covariance
    assert np.all(gaps > 3 * errors), (gaps, errors)  # each gap measured
    # Weighted least squares of log gap on log tau; the log's standard error is error / gap.
    weights = (gaps / errors) ** 2
    centred = np.log(taus) - np.average(np.log(taus), weights=weights)
    rate = np.sum(weights * centred * np.log(gaps)) / np.sum(weights * centred ** 2)
    rate_error = 1 / np.sqrt(np.sum(weights * centred ** 2))
    assert rate_error < 0.25 and abs(rate - 1) < 3 * rate_error, (gaps, errors, rate, rate_error)


def test_bad_regimes_and_laws_are_refused_with_the_reason():
    with pytest.raises(ValueError, match="centred values.*value_mean = 0.5.*deterministic"):
        HomogenizedLimit.of(RandomAttention(1.0, step=0.1, law=GaussianWeights(value_mean=0.5)))
    with pytest.raises(ValueError, match="small layer time.*1.0\\*\\*2/1"):
        HomogenizedLimit.of(RandomAttention(1.0, step=1.0))
    with pytest.raises(ValueError, match="noise does not average out"):
        HomogenizedLimit.of(RandomAttention(1.0, heads=1, step=0.5, law=GaussianWeights(value_mean=1.0)), "deterministic")
    with pytest.raises(ValueError, match="regime must be"):
        HomogenizedLimit.of(RandomAttention(1.0), "mixed")

    def shifted(rng, count, d):
        eye = np.broadcast_to(np.eye(d), (count, d, d))
        return eye, eye, rng.standard_normal((count, d, d)) + 0.2
    limit = HomogenizedLimit(1.0, SampledWeights(shifted, "shifted"))  # checked where d is known: at the tokens
    with pytest.raises(ValueError, match="centred weights.*'shifted' at d = 2, E V is .* standard errors"):
        simulate_homogenized(limit, mf.sample_uniform(3, 2, rng=0), [0, 0.1], dt=0.1)
    with pytest.raises(ValueError, match="returned Q of shape \\(2, 2\\); expected \\(1, 2, 2\\)"):
        simulate_random_layers(RandomAttention(1.0, law=SampledWeights(lambda rng, c, d: (np.eye(d),) * 3, "bad")),
                               mf.sample_uniform(3, 2, rng=0), 1)
    with pytest.raises(ValueError, match="step must be > 0"):
        RandomAttention(1.0, step=0.0)
    with pytest.raises(TypeError, match="law must be a GaussianWeights, MatrixWeights or SampledWeights, got 'gaussian'"):
        RandomAttention(1.0, law="gaussian")
    with pytest.raises(ValueError, match="key_std"):
        GaussianWeights(key_std=-1.0)
    with pytest.raises(ValueError, match="grid of dt"):
        simulate_homogenized(HomogenizedLimit(1.0), mf.sample_uniform(3, 2, rng=0), [0, 0.25], dt=0.1)
    with pytest.raises(ValueError, match="unit sphere"):
        simulate_random_layers(RandomAttention(1.0), np.ones((3, 2)), 1)


def test_a_run_repeats_from_its_record_alone():
    """The model and the seed a dataset records rebuild the run: the same tokens, bit for bit."""
    from meanfield.records import dataset_model, dataset_settings

    model = RandomAttention(2.0, heads=3, step=0.1, law=GaussianWeights(value_std=0.7, query_std=None))
    x0 = mf.sample_uniform(8, 4, rng=1, batch=2)
    first = simulate_random_layers(model, x0, 5)
    again = simulate_random_layers(mf.model_from_dict(dataset_model(first)), x0, 5,
                                   seed=dataset_settings(first)["seed"])
    np.testing.assert_array_equal(again.x.values, first.x.values)

    limit, _ = HomogenizedLimit.of(model)
    first = simulate_homogenized(limit, x0, [0.0, 0.1], dt=0.05)
    again = simulate_homogenized(mf.model_from_dict(dataset_model(first)), x0, [0.0, 0.1], dt=0.05,
                                 seed=dataset_settings(first)["seed"])
    np.testing.assert_array_equal(again.x.values, first.x.values)


def test_a_user_sampler_is_refused_by_name_when_rebuilding():
    model = RandomAttention(1.0, law=SampledWeights(lambda rng, count, d: None, name="mine"))
    with pytest.raises(ValueError, match="SampledWeights"):
        mf.model_from_dict(model.to_dict())
