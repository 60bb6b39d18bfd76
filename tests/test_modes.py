"""kde_mode_count: the modes of a kernel density estimate, against exact thresholds and the seeds' law."""

import numpy as np
import pytest

from validation import kde_mode_count


@pytest.mark.parametrize("factor, modes", [(0.97, 1), (1.03, 2)])
def test_two_gaussians_are_bimodal_beyond_twice_the_bandwidth(factor, modes):
    """An equal mixture of two Gaussians of standard deviation h is bimodal iff their distance exceeds 2 h."""
    h = 0.1
    assert kde_mode_count([0.3, 0.3 + factor * 2 * h], h) == modes


@pytest.mark.parametrize("factor, modes", [(0.97, 1), (1.03, 2)])
def test_two_von_mises_kernels_are_bimodal_beyond_their_threshold(factor, modes):
    """e^{b cos(t - a)} + e^{b cos(t + a)}: the second derivative at t = 0 is
    e^{b cos a} (b^2 sin^2 a - b cos a), so it is bimodal iff b sin^2 a > cos a."""
    beta = 50.0
    critical = np.arccos((np.sqrt(1 + 4 * beta ** 2) - 1) / (2 * beta))  # b (1 - c^2) = c
    a = factor * critical
    assert kde_mode_count([2.0 - a, 2.0 + a], beta ** -0.5, circle=True) == modes


def test_separated_groups_are_one_mode_each_on_the_line_and_the_circle(rng):
    centres = np.array([0.5, 2.0, 3.5, 5.0])
    samples = (centres[:, None] + 0.01 * rng.standard_normal((4, 50))).ravel()
    assert kde_mode_count(samples, 0.05) == 4
    assert kde_mode_count(samples + 6.0, 0.05, circle=True) == 4  # wrapped past 2 pi
    assert kde_mode_count(rng.uniform(0, 2 * np.pi, 10), 10.0, circle=True) == 1  # wider than the circle


def test_the_expected_mode_count_grows_like_sqrt_beta_log_beta():
    """The seeds' law, by Monte Carlo: n = beta iid N(0, 1) samples at bandwidth beta^{-1/2}, beta from 64
    to 4096 (inside n^c <= beta <= n^{2-c}). The mean count over sqrt(beta log beta) stays within 15 % while
    sqrt(beta log beta) grows 11-fold (standard errors below 3 %); over sqrt(beta) alone it drifts by the
    log factor, sqrt(log 4096 / log 64) = 1.41."""
    generator = np.random.default_rng(7)
    betas = np.array([64, 256, 1024, 4096])
    means = np.array([np.mean([kde_mode_count(generator.standard_normal(beta), beta ** -0.5) for _ in range(100)])
                      for beta in betas])
    with_log = means / np.sqrt(betas * np.log(betas))
    without = means / np.sqrt(betas)
    assert with_log.max() / with_log.min() < 1.15, with_log
    assert without.max() / without.min() > 1.25, without


def test_bad_input_is_refused():
    with pytest.raises(ValueError, match="bandwidth"):
        kde_mode_count([0.0, 1.0], 0.0)
    with pytest.raises(ValueError, match="samples"):
        kde_mode_count([], 0.1)
    with pytest.raises(ValueError, match="samples"):
        kde_mode_count([0.0, np.nan], 0.1)
