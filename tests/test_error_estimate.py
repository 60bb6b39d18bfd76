"""CircleFV's error estimate against the true error (a run at twice the cells), and when it warns.

The claim (``solvers/circle/finite_volumes.py``): the recorded ``error_estimate`` is within a factor 3 of the
true max-norm error whenever that error is above round-off and below 5 % of ``max rho``, and
the run is declared under-resolved (the warning) no later than the first output whose true
error passes ``error_level = 1e-3`` of ``max rho``. Checked over the growth-rate runs of
``tests/test_growth_rates.py`` (tiny and finite perturbations, one long interval, default
settings) and three clustering runs (SA, noisy SA, USA).
"""

import json
import warnings

import numpy as np
import pytest
from test_growth_rates import CIRCLE_MODES, cases, circle_model

import meanfield as mf
from solvers import CircleFV, UnderResolvedWarning
from solvers.circle import finite_volumes
from solvers.resolution import fourier_tail_error

#: The range of true errors (relative to max rho) in which the factor is claimed.
ROUNDOFF_ERROR, LARGEST_CLAIMED = 1e-12, 0.05


def true_and_estimated(model, rho0, times):
    """Relative true and estimated errors per output, and the time the run declared itself under-resolved."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UnderResolvedWarning)
        run = CircleFV(model).solve(rho0, times, progress=False, underresolved="continue")
        reference = CircleFV(model, cells=2 * run.sizes["theta"], error_level=None).solve(rho0, times,
                                                                                          progress=False)
    rho = run.rho.values
    restricted = reference.rho.values.reshape(rho.shape[0], -1, 2).mean(axis=-1)
    scale = rho.max(axis=1)
    return (np.abs(rho - restricted).max(axis=1) / scale, run.error_estimate.values / scale,
            run.attrs["underresolved_since"])


def assert_calibrated(times, true, estimate, since, level=1e-3):
    claimed = (true > ROUNDOFF_ERROR) & (true < LARGEST_CLAIMED)
    ratio = estimate[claimed] / true[claimed]
    assert np.all((ratio > 1 / 3) & (ratio < 3)), np.c_[times[claimed], true[claimed], ratio]
    beyond = times[true > level]
    if beyond.size:
        assert since <= beyond[0], (since, beyond[0])
    elif true.max() < level / 3:
        assert np.isnan(since), since


CLUSTERING = {
    "SA-beta9": (mf.SelfAttention(9.0), lambda th: 1 + 0.1 * np.cos(4 * th) + 0.05 * np.sin(3 * th + 0.3),
                 np.linspace(0.0, 8.0, 17)),
    "SA-beta4-noisy": (mf.SelfAttention(4.0, diffusion=0.01), lambda th: 1 + 0.2 * np.cos(2 * th) + 0.1 * np.sin(5 * th),
                       np.linspace(0.0, 12.0, 7)),
    "USA-beta3": (mf.SelfAttention(3.0, normalized=False), lambda th: 1 + 0.1 * np.cos(3 * th) + 0.05 * np.sin(th),
                  np.linspace(0.0, 1.5, 7)),
}


@pytest.mark.parametrize("name", list(CLUSTERING))
def test_the_estimate_follows_clustering_runs_and_warns_in_time(name):
    model, rho0, times = CLUSTERING[name]
    true, estimate, since = true_and_estimated(model, rho0, times)
    assert true.max() > 1e-4  # the runs reach the regime the estimate is for
    assert_calibrated(times, true, estimate, since)


#: The default suite takes the largest mode and the longest runs; ``make test-all`` every one.
FAST = {"SA-beta5-D0-T2", "USA-beta5-D0.05-T2"}


@pytest.mark.parametrize("normalized, beta, diffusion, duration", [
    param if param.id in FAST else pytest.param(*param.values, id=param.id, marks=pytest.mark.slow)
    for param in cases((0.0, 1.0, 5.0))])
@pytest.mark.parametrize("amplitude", [1e-8, 1e-3])
def test_the_estimate_follows_the_growth_rate_runs(normalized, beta, diffusion, duration, amplitude):
    model = circle_model(normalized, beta, diffusion)
    for k in CIRCLE_MODES[-1:] if (f"{'SA' if normalized else 'USA'}-beta{beta:g}-D{diffusion:g}-T{duration:g}"
                                   in FAST) else CIRCLE_MODES:
        times = np.array([0.0, duration])
        true, estimate, since = true_and_estimated(model, lambda th: 1 + amplitude * np.cos(k * th + 0.7), times)
        assert_calibrated(times, true, estimate, since)


def test_the_estimate_needs_an_even_grid_and_can_be_switched_off():
    with pytest.raises(ValueError, match="cells must be even"):
        CircleFV(mf.SelfAttention(1.0), cells=255)
    ds = CircleFV(mf.SelfAttention(1.0), cells=255, error_level=None).solve(lambda th: 1 + 0.1 * np.cos(th),
                                                                            [0.0, 0.5], progress=False)
    assert np.isnan(ds.error_estimate.values).all()
    with pytest.raises(ValueError, match="error_level"):
        CircleFV(mf.SelfAttention(1.0), error_level=0.0)


@pytest.mark.parametrize("diffusion", [0.0, 0.05])
def test_the_shadow_observes_and_never_steers(diffusion):
    """The solution with the estimate is bitwise the one without; a run continued from its
    continuation_state (the shadow included) records the estimates of the uninterrupted run."""
    model = mf.SelfAttention(9.0, diffusion=diffusion)
    rho0, times = CLUSTERING["SA-beta9"][1], np.linspace(0.0, 3.0, 4)
    plain = CircleFV(model, cells=512, error_level=None).solve(rho0, times, progress=False)
    solver = CircleFV(model, cells=512)
    whole = solver.solve(rho0, times, progress=False)
    np.testing.assert_array_equal(whole.rho.values, plain.rho.values)
    first = solver.solve(rho0, times[:3], progress=False)
    second = solver.solve(solver.continuation_state(first), times[2:], continued=True, progress=False,
                          first_step=json.loads(first.attrs["settings"])["next_step"])
    np.testing.assert_array_equal(second.error_estimate.values, whole.error_estimate.values[2:])
    restarted = solver.solve(first.rho.values[-1], times[2:], continued=True, progress=False,
                             first_step=json.loads(first.attrs["settings"])["next_step"])
    assert restarted.error_estimate.values[-1] < whole.error_estimate.values[-1]  # only the error since the restart


@pytest.mark.parametrize("diffusion", [0.0, 0.05])
def test_a_shadow_that_loses_the_solution_says_the_error_is_unknown_and_the_run_goes_on(diffusion, monkeypatch):
    """The shadow's values stop being finite at its fifth step (its step patched): the run's own solution goes on,
    bitwise the one without the estimate; from the next output on the estimate is infinite and the shadow NaN, and
    the run says it is under-resolved because the error is unknown (not that its state is not finite)."""
    model = mf.SelfAttention(9.0, diffusion=diffusion)
    rho0, times = CLUSTERING["SA-beta9"][1], np.linspace(0.0, 3.0, 4)
    plain = CircleFV(model, cells=512, error_level=None).solve(rho0, times, progress=False)
    built = finite_volumes._ShadowedStep.__init__

    def failing_at_the_fifth_step(self, *arguments):
        built(self, *arguments)
        honest, taken = self._step, []

        def step(shadow, h):
            taken.append(h)
            new = honest(shadow, h)
            return new if len(taken) < 5 else np.full_like(new, np.nan)
        self._step = step
    monkeypatch.setattr(finite_volumes._ShadowedStep, "__init__", failing_at_the_fifth_step)
    with pytest.warns(UnderResolvedWarning, match="lost the solution"):
        ds = CircleFV(model, cells=512).solve(rho0, times, progress=False, underresolved="continue")
    np.testing.assert_array_equal(ds.rho.values, plain.rho.values)
    assert ds.error_estimate.values[0] == 0.0 and np.isinf(ds.error_estimate.values[1:]).all()
    assert np.isnan(ds.shadow_rho.values[1:]).all() and not ds.resolved.values[1:].any()


def test_the_missing_modes_of_an_exact_geometric_series():
    """On maxima 2|c_k| = A r^k the fitted line is exact, and the estimate is the sum of the missing
    modes, A r^{K+1} / (1 - r), summed here directly."""
    amplitude, ratio, top = 0.3, 0.55, 40
    maxima = amplitude * ratio ** np.arange(top + 1.0)
    missing = sum(amplitude * ratio ** k for k in range(top + 1, top + 400))
    # the envelope max(M_{k-1}, M_k) is M_{k-1} for a decreasing series: one mode further up
    assert fourier_tail_error(maxima) == pytest.approx(missing / ratio, rel=1e-11)
