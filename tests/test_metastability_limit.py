"""Particle ensembles approach the mean-field limit's metastable timeline (examples/metastability_limit.py).

The limit is CircleFVLagrangian (written apart from the particle engines); the particles' cluster
counts come from the gap rule of validation.clusters.
"""

import warnings

import numpy as np

import meanfield as mf
from solvers import CircleFVLagrangian, UnderResolvedWarning
from validation import circle_cluster_counts, settling_time


def initial(theta):
    return 1 + 0.3 * np.cos(3 * theta) + 0.15 * np.cos(2 * theta + 0.7)


def test_cluster_counts_and_settling_time_on_known_cases():
    angles = np.array([[0.0, 0.1, 0.2, 3.0, 3.1], [0.0, 1.0, 2.0, 3.0, 4.0], [6.2, 0.0, 0.05, 0.1, 0.15]])
    np.testing.assert_array_equal(circle_cluster_counts(mf.circle_points(angles)), [2, 5, 1])
    assert settling_time([0, 1, 2, 3, 4, 5], [1, 3, 2, 3, 2, 2], final=2) == 4.0
    assert np.isnan(settling_time([0, 1, 2], [1, 2, 2], final=2))  # never above: nothing settled
    assert np.isnan(settling_time([0, 1, 2], [1, 2, 3], final=2))  # above at the end


def test_the_limit_merge_lies_among_the_particles_and_their_spread_shrinks_with_n():
    """SA beta = 4: three clusters form and two merge. The limit settles at two clusters at t ~ 23; the
    settling times of 16 systems of n = 2048 tokens hold it between their quartiles, and their spread
    (interquartile range) is smaller than at n = 256."""
    times = np.concatenate([[0.0], np.linspace(0.5, 60.0, 120)])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UnderResolvedWarning)  # the finite volumes hand over: expected
        limit = CircleFVLagrangian(mf.SelfAttention(4.0)).solve(initial, times, progress=False).cluster_count.values
    assert limit.max() == 3 and limit[-1] == 2
    limit_time = settling_time(times, limit, 2)
    spreads = []
    for n in (256, 2048):
        generator = np.random.default_rng([1, n])
        x0 = np.stack([mf.sample_circle(n, initial, generator) for _ in range(16)])
        counts = np.array(mf.observe_particles(mf.SelfAttention(4.0), x0, times, circle_cluster_counts,
                                              method="rk4", dt=0.1))
        settled = np.array([settling_time(times, counts[:, s], 2) for s in range(16)])
        low, high = np.nanpercentile(settled, [25, 75])
        spreads.append(high - low)
    assert low <= limit_time <= high, (low, limit_time, high)
    assert spreads[1] < spreads[0], spreads
