"""Samplers reproduce known moments within their Monte Carlo error."""

import numpy as np
import pytest
from scipy.special import iv

import meanfield as mf


def assert_mean_within_error(samples, exact, sigmas=4.0):
    error = samples.std(ddof=1) / np.sqrt(samples.size)
    assert abs(samples.mean() - exact) < sigmas * error


def test_uniform_points_are_unit_and_centred(rng):
    x = mf.sample_uniform(50000, 4, rng)
    np.testing.assert_allclose(np.linalg.norm(x, axis=1), 1.0, atol=1e-15)
    for component in x.T:
        assert_mean_within_error(component, 0.0)
    assert_mean_within_error(x[:, 0] ** 2, 0.25)


def test_circle_density_callable_by_rejection(rng):
    # rho ∝ 1 + 0.5 cos(th) has E[cos th] = 0.25 and E[sin th] = 0.
    x = mf.sample_circle(40000, lambda th: 1 + 0.5 * np.cos(th), rng)
    assert_mean_within_error(x[:, 0], 0.25)
    assert_mean_within_error(x[:, 1], 0.0)


def test_circle_density_on_cells_is_piecewise_constant(rng):
    cells = np.array([0.0, 3.0, 0.0, 1.0])
    theta = mf.circle_angles(mf.sample_circle(20000, cells, rng))
    cell = np.floor(theta / (np.pi / 2)).astype(int)
    assert set(np.unique(cell)) == {1, 3}
    assert_mean_within_error((cell == 1).astype(float), 0.75)


@pytest.mark.parametrize("d, kappa", [(3, 0.5), (3, 40.0), (2, 3.0), (5, 2.0)])
def test_von_mises_fisher_mean_resultant(d, kappa, rng):
    mean = np.arange(1.0, d + 1)
    x = mf.sample_von_mises_fisher(40000, mean, kappa, rng)
    mu = mean / np.linalg.norm(mean)
    exact = iv(d / 2, kappa) / iv(d / 2 - 1, kappa)  # A_d(kappa) = E <mu, x>
    assert_mean_within_error(x @ mu, exact)
    np.testing.assert_allclose(np.linalg.norm(x, axis=1), 1.0, atol=1e-14)


def test_sphere_density_by_rejection(rng):
    # rho ∝ 1 + z on S^2: E[z] = 1/3.
    x = mf.sample_sphere(40000, lambda p: 1 + p[:, 2], 3, rng)
    assert_mean_within_error(x[:, 2], 1 / 3)


def test_interval_density_by_rejection(rng):
    # rho = 1/2 + 2z/5 on [-1, 1]: E[z] = 4/15, E[z^2] = 1/3; nothing outside the interval.
    z = mf.sample_interval(40000, lambda z: 0.5 + 0.4 * z, (-1.0, 1.0), rng)
    assert z.shape == (40000, 1) and z.min() >= -1.0 and z.max() <= 1.0
    assert_mean_within_error(z[:, 0], 4 / 15)
    assert_mean_within_error(z[:, 0] ** 2, 1 / 3)


def test_rejection_envelope_recovers_from_a_missed_peak(rng):
    # A narrow spike the probe grid misses: the envelope must grow and the law stay exact.
    spike = lambda th: 1 + 500.0 * (np.abs(th - 1.0001) < 1e-3)  # noqa: E731
    theta = mf.circle_angles(mf.sample_circle(20000, spike, rng))
    mass_in_spike = 500 * 2e-3 / (2 * np.pi + 500 * 2e-3)
    assert_mean_within_error((np.abs(theta - 1.0001) < 1e-3).astype(float), mass_in_spike)


@pytest.mark.parametrize("call, argument", [
    (lambda: mf.sample_uniform(0, 3), "n"),
    (lambda: mf.sample_uniform(5, 1), "d"),
    (lambda: mf.sample_von_mises_fisher(5, [0, 0, 0], 1.0), "mean"),
    (lambda: mf.sample_von_mises_fisher(5, [0, 0, 1], -1.0), "kappa"),
    (lambda: mf.sample_circle(5, np.array([1.0, -1.0])), "density"),
    (lambda: mf.sample_circle(5, lambda th: np.zeros_like(th)), "no mass"),
    (lambda: mf.sample_interval(5, lambda z: 1.0 + z, (1.0, -1.0)), "interval"),
])
def test_bad_sampling_arguments(call, argument):
    with pytest.raises(ValueError, match=argument):
        call()


@pytest.mark.parametrize("old, message", [
    (lambda: mf.sample_circle(lambda th: 1 + np.cos(th), 50, 3), "n must be an integer"),
    (lambda: mf.sample_sphere(lambda p: 1 + p[:, 2], 50, 3, 3), "n must be an integer"),
    (lambda: mf.sample_von_mises_fisher([0, 0, 1], 4.0, 50, 3), "mean must be a nonzero finite vector"),
], ids=["circle", "sphere", "von-mises-fisher"])
def test_the_argument_order_of_0_1_is_refused_since_0_3(old, message):
    with pytest.raises((TypeError, ValueError), match=message):
        old()


def test_rng_must_be_a_seed_a_generator_or_none():
    with pytest.raises(TypeError, match="rng"):
        mf.sample_uniform(3, 2, rng=1.5)
    with pytest.raises(TypeError, match="rng"):
        mf.sample_uniform(3, 2, rng=-1)
