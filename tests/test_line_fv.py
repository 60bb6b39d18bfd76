"""The d = 1 mean-field equation of pure attention (solvers.line.finite_volumes.LineFV): mass, positivity, the
collapse toward the ends of the support, first-order convergence, and the particle system
approaching it like n^{-1/2} (1-D Wasserstein distance by scipy, independent of the solver)."""

import json
import math

import numpy as np
import pytest
from scipy.stats import wasserstein_distance

import meanfield as mf
from solvers.line.finite_volumes import GHOST_MASS, GHOST_SHARE, LineFV
from solvers.line.lagrangian import LineLagrangian
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


def test_particles_approach_the_mean_field_like_one_over_root_n():
    """Through the validation layer (mean_field_convergence on the line, LineLagrangian with 512
    labels as the reference): at the start and at t = 1.5, the slope of log W1 against log n
    fitted on the largest counts has a 99% bootstrap interval over 32 seeds that holds -1/2 (a
    single seed's W1 spreads by about 40% of its mean, so the interval is about +-0.2 wide: it
    could miss), and the reference's own error is far below the distances."""
    from validation import StudySettings, mean_field_convergence

    study = mean_field_convergence(MODEL, density, geometry="R^1", interval=(-1.0, 1.0), sizes=(16, 64, 256),
                                   seeds=32, times=(0.0, 1.5), rng=0, progress=False,
                                   settings=StudySettings(particle_dt=0.05, bootstrap=1000, confidence=0.99))
    for k in (0, 1):
        at = study.isel(time=k)
        assert float(at.rate_low) <= -0.5 <= float(at.rate_high)
        assert float(at.rate_high - at.rate_low) < 0.7
    assert float(study.pde_error.max()) < 0.01 * float(study.mean_distance.min())
    assert "energy_pde" not in study and "on the line" in study.attrs["distance"]


def test_the_line_w1_is_exact():
    """Against closed forms (a uniform density's cells against one token: 1/2) and scipy's
    wasserstein_distance between two clouds of tokens."""
    from validation.distances import line_w1

    cells = LineFV(MODEL, (-1.0, 1.0), cells=8).solve(lambda z: np.ones_like(z), [0.0, 1e-9])
    token = mf.simulate_particles(MODEL, np.zeros((1, 1)), [0.0, 1e-9], method="euler", dt=1e-9)
    assert line_w1(cells, 0, token, 0) == pytest.approx(0.5, rel=1e-14)
    rng = np.random.default_rng(3)
    a = mf.simulate_particles(MODEL, sample(7, rng), [0.0, 0.5], method="rk4", dt=0.1)
    b = mf.simulate_particles(MODEL, sample(11, rng), [0.0, 0.5], method="rk4", dt=0.1)
    for k in (0, 1):
        expected = wasserstein_distance(a.x.values[k, :, 0], b.x.values[k, :, 0])
        assert line_w1(a, k, b, k) == pytest.approx(expected, rel=1e-12)


def test_models_outside_its_equation_are_refused():
    with pytest.raises(ValueError, match="rescaled=True"):
        LineFV(mf.PureAttention(), (-1, 1))
    with pytest.raises(ValueError, match="LineLagrangian solves PureAttention"):
        LineLagrangian(mf.PureAttention(beta=math.inf, rescaled=True), (-1, 1))
    with pytest.raises(ValueError, match="v > 0"):
        LineFV(mf.PureAttention(value=-1.0, rescaled=True), (-1, 1))
    with pytest.raises(ValueError, match="interval"):
        LineFV(MODEL, (1, -1))
    with pytest.raises(ValueError, match="nonnegative"):
        LineFV(MODEL, (-1, 1), cells=10).solve(lambda z: z, [0, 1])


# ---------------------------------------------------------------------- mass coordinates (LineLagrangian)
@pytest.fixture(scope="module")
def labels_reference():
    return LineLagrangian(MODEL, (-1.0, 1.0), labels=512).solve(density, [0.0, 1.5, 8.0])


def test_mass_coordinates_are_second_order_in_the_labels_through_the_collapse(labels_reference):
    """W1 against 512 labels, before (t = 1.5) and after (t = 8) the collapse onto one point:
    for an error C/M^2 the ratio from 64 to 128 labels is (1/64^2 - 1/512^2)/(1/128^2 - 1/512^2)."""
    from validation.distances import line_w1

    runs = [LineLagrangian(MODEL, (-1.0, 1.0), labels=m).solve(density, [0.0, 1.5, 8.0]) for m in (64, 128)]
    expected = math.log2((1 / 64**2 - 1 / 512**2) / (1 / 128**2 - 1 / 512**2))
    for k in (1, 2):
        errors = [line_w1(run, k, labels_reference, k) for run in runs]
        assert math.log2(errors[0] / errors[1]) == pytest.approx(expected, abs=0.25), (k, errors)
    final = labels_reference.position.values[-1]
    assert np.ptp(final) < 0.01 and np.abs(labels_reference.mass.values - 1.0).max() < 1e-12


def test_mass_coordinates_agree_with_the_finite_volumes_within_their_error(reference, labels_reference):
    """Where LineFV is trustworthy (t = 1.5): the two discretisations differ by at most LineFV's
    error, which for a first-order method is about its distance to a run at half the cells."""
    from validation.distances import line_w1

    half = LineFV(MODEL, (-1.0, 1.0), cells=200).solve(density, [0.0, 1.5])
    assert line_w1(reference, 1, labels_reference, 1) < 1.5 * line_w1(reference, 1, half, 1)


@pytest.mark.slow
def test_particles_approach_the_mass_coordinates_like_one_over_root_n_after_the_collapse(labels_reference):
    """At t = 8, where LineFV has failed, the particles' W1 to the labels' measure falls like n^{-1/2}
    (mean over 32 systems per n; slope within three standard errors)."""
    from validation.distances import line_w1

    rng = np.random.default_rng(4)
    sizes, means, spreads = [16, 64, 256], [], []
    for n in sizes:
        run = mf.simulate_particles(MODEL, np.stack([sample(n, rng) for _ in range(32)]), [0.0, 1.5, 8.0],
                                    method="rk4", dt=0.05)
        w = np.array([line_w1(run.isel(system=s), 2, labels_reference, 2) for s in range(32)])
        means.append(w.mean())
        spreads.append(w.std() / math.sqrt(w.size) / w.mean())
    slope = np.polyfit(np.log(sizes), np.log(means), 1)[0]
    slope_error = math.sqrt(2.0 * max(spreads) ** 2) / math.log(sizes[-1] / sizes[0])
    assert abs(slope + 0.5) < 3 * slope_error, (slope, slope_error)


@pytest.mark.parametrize("solver", [LineFV(MODEL, (-1.0, 1.0), cells=40), LineLagrangian(MODEL, (-1.0, 1.0), labels=40)],
                         ids=["LineFV", "LineLagrangian"])
def test_a_collapse_raises_with_the_outputs_so_far(solver, monkeypatch):
    """A right-hand side that turns NaN after t = 0.3 rejects every step until the step
    collapses: the error (a NonFiniteState) names the solver, the time and the overflow, and
    ``partial`` holds the outputs before it with the step counts and the reason in its settings."""
    rhs = type(solver).rhs

    def failing(self, state):
        return rhs(self, state) if state[0] < 0.3 else np.full_like(state, np.nan)

    monkeypatch.setattr(type(solver), "rhs", failing)
    with pytest.raises(mf.NonFiniteState, match=f"{solver.name} stopped at t=0.3") as caught:
        solver.solve(density, [0.0, 0.1, 0.2, 0.5, 1.0])
    partial = caught.value.partial
    np.testing.assert_array_equal(partial["time"].values, [0.0, 0.1, 0.2])
    settings = json.loads(partial.attrs["settings"])
    assert settings["failure"].startswith("every step from t=0.3 overflows") and settings["rejected_steps"] > 0
