"""Velocities and energies against independent direct evaluations and the circle form."""

import numpy as np
import pytest
from scipy.special import logsumexp, softmax

import meanfield as mf
from meanfield.interaction import pair_sums


def direct_velocity(x, beta, normalized, q=None, k=None, v=None):
    """Unblocked textbook evaluation of docs/theory/model.md for one system and one head."""
    n, d = x.shape
    q = np.eye(d) if q is None else q
    k = np.eye(d) if k is None else k
    v = np.eye(d) if v is None else v
    logits = beta * (x @ q.T) @ (x @ k.T).T
    weights = softmax(logits, axis=1) if normalized else np.exp(logits) / n
    drive = weights @ (x @ v.T)
    return drive - np.sum(drive * x, axis=1, keepdims=True) * x


@pytest.mark.parametrize("normalized", [True, False], ids=["SA", "USA"])
@pytest.mark.parametrize("beta", [0.0, 0.7, 6.0])
def test_circle_velocity_matches_angle_form(normalized, beta, rng):
    theta = rng.uniform(0, 2 * np.pi, 40)
    diff = theta[:, None] - theta[None, :]
    weights = np.exp(beta * np.cos(diff))
    denominator = weights.sum(axis=1) if normalized else len(theta)
    theta_dot = -np.sum(weights * np.sin(diff), axis=1) / denominator
    expected = theta_dot[:, None] * np.stack([-np.sin(theta), np.cos(theta)], axis=1)
    model = mf.SelfAttention(beta, normalized=normalized)
    np.testing.assert_allclose(model.velocity(mf.circle_points(theta)), expected, atol=1e-13)


@pytest.mark.parametrize("normalized", [True, False], ids=["SA", "USA"])
def test_general_query_key_value_against_direct_evaluation(normalized, rng):
    d = 4
    q, k, v = (rng.normal(size=(d, d)) / 2 for _ in range(3))
    x = mf.sample_uniform(30, d, rng)
    model = mf.SelfAttention(1.3, normalized=normalized, query=q, key=k, value=v)
    np.testing.assert_allclose(model.velocity(x), direct_velocity(x, 1.3, normalized, q, k, v),
                               rtol=1e-12, atol=1e-13)


def test_heads_add_up(rng):
    d = 3
    mats = rng.normal(size=(3, 2, d, d))
    x = mf.sample_uniform(25, d, rng)
    both = mf.SelfAttention(2.0, query=mats[0], key=mats[1], value=mats[2])
    separate = sum(mf.SelfAttention(2.0, query=mats[0, h], key=mats[1, h], value=mats[2, h]).velocity(x)
                   for h in range(2))
    np.testing.assert_allclose(both.velocity(x), separate, rtol=1e-12, atol=1e-14)
    assert both.heads == 2 and not both.is_zonal


def test_batched_velocity_equals_per_system(rng):
    x = mf.sample_uniform(16, 3, rng, batch=5)
    model = mf.SelfAttention(3.0)
    np.testing.assert_allclose(model.velocity(x), np.stack([model.velocity(s) for s in x]), atol=1e-15)
    assert model.energy(x).shape == (5,)


@pytest.mark.parametrize("max_block", [1, 7, 100, 10**6])
def test_pair_sums_do_not_depend_on_blocking(max_block, rng):
    q = rng.normal(size=(3, 11, 2))
    u = rng.normal(size=(3, 11, 2))

    def weight(block):
        np.exp(block, out=block)

    blocked, _ = pair_sums(q, q, u, weight, max_block_elements=max_block)
    expected = np.exp(q @ q.transpose(0, 2, 1)) @ u
    # Sums of signed terms: round-off is relative to the largest term, not to each sum.
    np.testing.assert_allclose(blocked, expected, rtol=1e-13, atol=1e-14 * np.abs(expected).max())


def test_sa_at_beta_1000_is_finite_and_correct(rng):
    x = mf.sample_uniform(50, 3, rng)
    model = mf.SelfAttention(1000.0)
    velocity = model.velocity(x)
    assert np.all(np.isfinite(velocity))
    np.testing.assert_allclose(velocity, direct_velocity(x, 1000.0, True), atol=1e-13)
    expected_log = logsumexp(1000.0 * x @ x.T) - np.log(2 * 1000.0 * 50**2)
    assert model.log_energy(x) == pytest.approx(expected_log, rel=1e-13)
    with pytest.raises(OverflowError, match="log_energy"):
        model.energy(x)


def test_usa_overflow_is_refused_and_time_rescaling_is_exact(rng):
    with pytest.raises(ValueError, match="time_rescaled=True"):
        mf.SelfAttention(800.0, normalized=False)
    x = mf.sample_uniform(20, 3, rng)
    plain = mf.SelfAttention(5.0, normalized=False)
    rescaled = mf.SelfAttention(5.0, normalized=False, time_rescaled=True)
    np.testing.assert_allclose(rescaled.velocity(x), np.exp(-5.0) * plain.velocity(x), rtol=1e-13, atol=1e-16)
    assert rescaled.energy(x) == pytest.approx(np.exp(-5.0) * plain.energy(x), rel=1e-13)
    assert np.all(np.isfinite(mf.SelfAttention(1000.0, normalized=False, time_rescaled=True).velocity(x)))


@pytest.mark.parametrize("normalized", [True, False], ids=["SA", "USA"])
def test_energy_matches_definition(normalized, rng):
    x = mf.sample_uniform(30, 3, rng)
    expected = np.exp(2.0 * x @ x.T).sum() / (2 * 2.0 * 30**2)
    assert mf.SelfAttention(2.0, normalized=normalized).energy(x) == pytest.approx(expected, rel=1e-13)


def test_beta_zero_energy_is_half_squared_mean(rng):
    x = mf.sample_uniform(30, 2, rng)
    m = x.mean(axis=0)
    assert mf.SelfAttention(0.0).energy(x) == pytest.approx(0.5 * m @ m, rel=1e-14)


def test_zonal_aggregation_with_exponential_is_usa(rng):
    beta = 1.5
    x = mf.sample_uniform(40, 3, rng)
    zonal = mf.ZonalAggregation(lambda s: np.exp(beta * s) / beta, lambda s: np.exp(beta * s))
    usa = mf.SelfAttention(beta, normalized=False)
    np.testing.assert_allclose(zonal.velocity(x), usa.velocity(x), rtol=1e-13, atol=1e-15)
    assert zonal.energy(x) == pytest.approx(usa.energy(x), rel=1e-13)
    np.testing.assert_allclose(zonal.potential_spectrum(6, 3), usa.potential_spectrum(6, 3),
                               rtol=1e-11, atol=1e-13 * usa.potential_spectrum(6, 3)[0])


def test_model_round_trips_through_its_description():
    model = mf.SelfAttention(2.5, normalized=False, diffusion=0.1, value=-1.0)
    rebuilt = mf.model_from_dict(model.to_dict())
    assert rebuilt.to_dict() == model.to_dict()


@pytest.mark.parametrize("kwargs, argument", [
    (dict(beta=-1.0), "beta"),
    (dict(beta=float("nan")), "beta"),
    (dict(beta=1.0, diffusion=-0.1), "diffusion"),
    (dict(beta=1.0, query=np.eye(3)[:2]), "query"),
    (dict(beta=1.0, query=np.eye(3), key=np.eye(4)), "same heads and d"),
    (dict(beta=1.0, value=np.full((2, 2), np.nan)), "value"),
])
def test_bad_model_arguments_raise_value_error_naming_them(kwargs, argument):
    with pytest.raises(ValueError, match=argument):
        mf.SelfAttention(**kwargs)


@pytest.mark.parametrize("x, message", [
    (np.ones(3), "shape"),
    (np.ones((4, 3)), "unit sphere"),
    (np.full((4, 3), np.nan), "NaN"),
    (np.ones((4, 1)), "shape"),
])
def test_bad_points_raise_value_error_naming_x(x, message):
    with pytest.raises(ValueError, match=message) as info:
        mf.SelfAttention(1.0).velocity(x)
    assert "x" in str(info.value)


def test_non_zonal_model_has_no_spectrum():
    model = mf.SelfAttention(1.0, query=2 * np.eye(3))
    with pytest.raises(NotImplementedError, match="non-zonal"):
        model.kernel_spectrum(4, 3)
    with pytest.raises(ValueError, match="R\\^2"):
        model.velocity(mf.sample_uniform(4, 2, 0))
