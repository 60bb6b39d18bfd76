"""The d = 1 mean-field equation of pure attention (solvers.line.LineFV): mass, positivity, the
collapse toward the ends of the support, first-order convergence, and the particle system
approaching it like n^{-1/2} (1-D Wasserstein distance by scipy, independent of the solver)."""

import math

import numpy as np
import pytest
from scipy.stats import wasserstein_distance

import meanfield as mf
from solvers.line import GHOST_MASS, GHOST_SHARE, LineFV
from solvers.resolution import UnderResolvedWarning

MODEL = mf.PureAttention(rescaled=True)  # Q = K = V = 1, d = 1 (Fig. 3 of the paper)


def density(z):
    """rho0 = 1/2 + 2z/5 on [-1, 1]: no symmetry to hide behind."""
    return 0.5 + 0.4 * z


def sample(n, rng):
    """Inverse CDF of ``density``: F(z) = (z + 1)/2 + (z^2 - 1)/5."""
    u = rng.uniform(size=n)
    return ((-0.5 + np.sqrt(0.25 - 0.8 * (0.3 - u))) / 0.4)[:, None]


def distance(ds, k, other, j):
    return wasserstein_distance(ds["z"].values, other["z"].values, ds["rho"].values[k], other["rho"].values[j])


@pytest.fixture(scope="module")
def reference():
    return LineFV(MODEL, (-1.0, 1.0), cells=400).solve(density, [0.0, 1.5])


def test_mass_positivity_and_the_shrinking_support():
    """Mass to round-off, no negative density, and the support's hull shrinks (Prop. C.2)."""
    ds = LineFV(MODEL, (-1.0, 1.0), cells=200).solve(density, [0.0, 0.75, 1.5])
    assert np.abs(ds["mass"].values - 1.0).max() < 1e-12
    assert ds["rho"].values.min() >= 0.0
    support = [ds["z"].values[ds["rho"].values[k] * 0.01 > GHOST_MASS][[0, -1]] for k in range(3)]
    assert support[0][0] < support[1][0] < support[2][0] and support[0][1] > support[1][1] > support[2][1]
    assert ds["ghost_attention"].values.max() < GHOST_SHARE


def test_late_times_steered_by_numerical_tails_are_flagged():
    """At t = 8 (s = e^16) the upwind tails ahead of the front outweigh the solution: the
    particles collapse to one cluster near 0.61 while the grid's mass is pulled to the far
    end. The run must say so rather than return it silently."""
    with pytest.warns(UnderResolvedWarning, match="cells of mass below"):
        ds = LineFV(MODEL, (-1.0, 1.0), cells=200).solve(density, [0.0, 1.0, 8.0])
    assert ds["ghost_attention"].values[1] < GHOST_SHARE < ds["ghost_attention"].values[-1]


def test_first_order_in_the_cell_width(reference):
    """Errors against the 400-cell run: for an exactly first-order error C/N they would be
    C (1/50 - 1/400) and C (1/100 - 1/400), a ratio of 7/3."""
    coarse = [LineFV(MODEL, (-1.0, 1.0), cells=n).solve(density, [0.0, 1.5]) for n in (50, 100)]
    errors = [distance(ds, -1, reference, -1) for ds in coarse]
    assert math.log2(errors[0] / errors[1]) == pytest.approx(math.log2(7 / 3), abs=0.15)


def test_particles_approach_the_mean_field_like_one_over_root_n(reference):
    """Mean W1 over 32 systems per n: the slope of log W1 against log n, with its standard
    error from the spread over systems, must hold -1/2."""
    rng = np.random.default_rng(0)
    sizes, means, spreads = [16, 64, 256], [], []
    for n in sizes:
        x0 = np.stack([sample(n, rng) for _ in range(32)])
        final = mf.simulate_particles(MODEL, x0, [0.0, 1.5], method="rk4", dt=0.05)["x"].values[:, -1, :, 0]
        w = [wasserstein_distance(p, reference["z"].values, None, reference["rho"].values[-1]) for p in final]
        means.append(np.mean(w))
        spreads.append(np.std(w) / math.sqrt(len(w)) / np.mean(w))  # relative standard error of the mean
    slope = np.polyfit(np.log(sizes), np.log(means), 1)[0]
    slope_error = math.sqrt(2.0 * max(spreads) ** 2) / math.log(sizes[-1] / sizes[0])
    assert slope_error < 0.1
    assert abs(slope + 0.5) < 2.5 * slope_error, (slope, slope_error)


def test_models_outside_its_equation_are_refused():
    with pytest.raises(ValueError, match="rescaled=True"):
        LineFV(mf.PureAttention(), (-1, 1))
    with pytest.raises(ValueError, match="v > 0"):
        LineFV(mf.PureAttention(value=-1.0, rescaled=True), (-1, 1))
    with pytest.raises(ValueError, match="interval"):
        LineFV(MODEL, (1, -1))
    with pytest.raises(ValueError, match="nonnegative"):
        LineFV(MODEL, (-1, 1), cells=10).solve(lambda z: z, [0, 1])
