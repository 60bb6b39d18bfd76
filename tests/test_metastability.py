"""Metastability predicted from the start and read off runs (validation.metastability) against references."""

import numpy as np
import pytest
from scipy.integrate import solve_ivp

import meanfield as mf
from meanfield.reduction import cluster_masses
from validation import (asymptotic_merge_time, merge_time_fit, plateau_saddles, plateaus, predicted_cluster_count,
                        predicted_cluster_positions, rescaled_time)


def ode_merge_time(beta, gap, masses, width=1e-6):
    """The two-cluster equation on the circle's angles, written here from the atoms' attention (as in test_reduction)."""
    first, second = masses

    def closing(t, y):
        a = np.exp(beta * (np.cos(y[0]) - 1.0))
        return [-np.sin(y[0]) * (second * a / (first + second * a) + first * a / (second + first * a))]

    def reached(t, y):
        return 2.0 * np.sin(y[0] / 2.0) - width

    reached.terminal = True
    return float(solve_ivp(closing, [0.0, 1e16], [gap], method="DOP853", rtol=1e-13, atol=1e-16,
                           events=reached).t_events[0][0])


def test_the_asymptotic_merge_law_holds_the_runs_to_a_relative_error_falling_like_one_over_beta():
    gap, masses = 0.9, (0.3, 0.7)
    errors = []
    for beta in (30.0, 50.0, 70.0):
        law = asymptotic_merge_time(beta, gap, masses)
        ds = mf.simulate_clusters(mf.SelfAttention(beta), mf.circle_points(np.array([0.0, gap])),
                                  np.array([0.0, 10 * law]), masses=np.array(masses), rtol=1e-10, width=1e-6,
                                  progress=False)
        errors.append(float(ds.merge_time[0]) / law - 1)
    scaled = np.array(errors) * np.array([30.0, 50.0, 70.0])
    assert np.all(np.diff(errors) < 0) and np.all((1.5 < scaled) & (scaled < 3.5)), scaled


def test_a_fit_of_merge_times_over_beta_recovers_the_gap_in_the_exponent():
    gap, masses = 0.9, (0.3, 0.7)
    betas = np.arange(30.0, 71.0, 8.0)
    fit = merge_time_fit(betas, [ode_merge_time(beta, gap, masses) for beta in betas])
    assert fit.slope == pytest.approx(1 - np.cos(gap), rel=1e-2)
    assert fit.intercept == pytest.approx(-np.log(np.sin(gap) ** 2 * (0.3 / 0.7 + 0.7 / 0.3)), abs=0.2)
    assert fit.slope_error > 0


def first_plateau_count(model, x0):
    ds = mf.simulate_clusters(model, x0, np.concatenate([[0.0], np.geomspace(0.5, 40.0, 30)]), progress=False)
    return int(ds.cluster_count.values.max())


def test_the_fastest_growing_mode_counts_the_clusters_iid_tokens_form():
    # beta = 9: the mode 4 grows fastest (rates 0.59, 0.70, 0.66 for modes 3, 4, 5); at other beta the
    # count of iid tokens can differ by one (the guide's table)
    model = mf.SelfAttention(9.0)
    assert predicted_cluster_count(model) == 4
    counts = [first_plateau_count(model, mf.sample_uniform(1024, 2, np.random.default_rng(seed))) for seed in range(3)]
    assert counts == [4] * 3


def test_clusters_form_at_the_maxima_of_a_dominant_mode():
    # tokens at the quantiles of 1 + 0.05 cos(4 (theta - 0.3)), placed symmetrically about each maximum:
    # the mode 4, the fastest at beta = 9, is the only one, and its maxima are where the clusters must form
    grid = np.linspace(0.0, np.pi / 4, 100001)
    cdf = grid + 0.05 / 4 * np.sin(4 * grid)
    offsets = np.interp((np.arange(128) + 0.5) / 128 * np.pi / 4, cdf, grid)
    maxima = 0.3 + np.arange(4) * np.pi / 2
    x0 = mf.circle_points((maxima[:, None] + np.concatenate([-offsets, offsets])).ravel())
    predicted = predicted_cluster_positions(x0, 4)
    np.testing.assert_allclose(predicted, maxima, atol=1e-12)
    ds = mf.simulate_clusters(mf.SelfAttention(9.0), x0, np.array([0.0, 30.0]), progress=False)
    _, where = cluster_masses(ds.x.values[-1], np.full(1024, 1 / 1024), 0.2, 0.01)
    observed = np.sort(np.mod(np.arctan2(where[:, 1], where[:, 0]), 2 * np.pi))
    np.testing.assert_allclose(observed, predicted, atol=1e-9)


def test_a_run_climbs_a_staircase_of_saddles_to_the_consensus():
    rng = np.random.default_rng(0)
    theta = np.concatenate([centre + 0.02 * rng.standard_normal(16) for centre in (0.0, 2.0, 4.1)])
    model = mf.SelfAttention(9.0)
    ds = mf.simulate_clusters(model, mf.circle_points(theta), np.concatenate([[0.0], np.geomspace(0.1, 1e8, 80)]),
                              progress=False)
    steps = plateau_saddles(model, ds)
    assert [plateau.count for plateau, _ in steps] == [3, 2, 1]
    assert [saddle.index for _, saddle in steps] == [2, 1, 0] and steps[-1][1].strict_optimum
    energies = [plateau.energy for plateau, _ in steps]
    assert np.all(np.diff(energies) > 0)
    # the consensus of 48 tokens: E = e^beta / (2 beta), computed apart from the run
    assert energies[-1] == pytest.approx(np.exp(9.0) / 18.0, rel=1e-12)
    assert np.all(rescaled_time(ds.merge_time.values[-2:], 9.0) < 2.0)
    assert len(plateaus(ds)) == 3


def test_the_merge_law_and_its_fit_refuse_what_they_cannot_give():
    with pytest.raises(OverflowError, match="double precision"):
        asymptotic_merge_time(1000.0, 2.0)
    with pytest.raises(ValueError, match="gap"):
        asymptotic_merge_time(10.0, 4.0)
    with pytest.raises(ValueError, match="finite"):
        merge_time_fit([10.0, 20.0, 30.0, 40.0], [1.0, 2.0, np.inf, 4.0])
