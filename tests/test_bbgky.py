"""The BBGKY hierarchy on the circle: the ensemble estimator of the pair correlation and the closures.

References: the exact initial slope of E[cos(theta_i - theta_j)] from the particles' own
velocities, and in closed form (2/n) c I_1(beta)/beta; the ensemble itself (independent
systems) for the closures over time.
"""

import warnings

import numpy as np
import pytest
from scipy.special import iv

import meanfield as mf
from solvers import PairCorrelation, UnderResolvedWarning
from validation import closure_deviation, pair_correlation

MODEL, N = mf.SelfAttention(1.0, normalized=False), 8


@pytest.fixture(scope="module")
def ensemble():
    times = np.array([0.0, 0.25, 0.5, 1.0])
    x0 = mf.sample_uniform(N, 2, np.random.default_rng(0), batch=4000)
    run = mf.simulate_particles(MODEL, x0, times, method="rk4", dt=0.0125, progress=False)
    return times, run


def test_at_t0_the_pair_correlation_is_uniform_and_its_error_falls_like_the_root_of_the_ensembles(ensemble):
    times, run = ensemble
    estimate = pair_correlation(run, modes=4)
    assert np.all(np.abs(estimate.coefficient.values[0]) < 4 * estimate.standard_error.values[0])
    quarter = pair_correlation(run.isel(system=slice(0, 1000)), modes=4)
    ratio = quarter.standard_error.values / estimate.standard_error.values
    assert np.all(np.abs(ratio - 2.0) < 0.2), ratio  # sqrt(4000 / 1000), to the noise of the estimates


def test_the_chaos_closure_has_the_exact_initial_slope():
    """d/dt E[cos(theta_1 - theta_2)] at t = 0: the closure, the particles' velocities, (2/n) I_1(beta)/beta."""
    closure = PairCorrelation(MODEL, N, closure="chaos", modes=16)
    slope = float(np.fft.rfft(closure.rhs(np.ones(closure.angles.size))).real[1] / closure.angles.size)
    exact = 2 / N * iv(1, 1.0) / 1.0
    assert slope == pytest.approx(exact, rel=1e-12)
    x = mf.sample_uniform(N, 2, np.random.default_rng(1), batch=100_000)
    theta, velocity = np.arctan2(x[..., 1], x[..., 0]), MODEL.velocity(x)
    angular = x[..., 0] * velocity[..., 1] - x[..., 1] * velocity[..., 0]
    c, dc = np.exp(1j * theta).mean(-1), (1j * angular * np.exp(1j * theta)).mean(-1)
    per_system = 2 * np.real(np.conj(c) * dc) * N / (N - 1)
    assert abs(per_system.mean() - exact) < 4 * per_system.std() / np.sqrt(per_system.size)


@pytest.mark.parametrize("closure", ["chaos", "kirkwood"])
def test_a_correlated_start_has_the_slope_of_its_pair_term(closure):
    """From g0 = 1 + a cos(phi) (tokens correlated pair by pair): E cos(phi) starts at a/2, and under the chaos
    closure moves at (2/n) (1/2 pi) int psi g0 sin(phi), psi(s) = e^(cos s) sin s for USA at beta = 1, by quad;
    Kirkwood's three-body term adds -((n - 2)/n)(1/pi)(1/2 pi) int g0 J sin(phi), J(phi) = int psi(s) g0(s) g0(s + phi).
    The run's increment over t = 1e-4 against it, to the O(t) of the difference quotient."""
    from scipy.integrate import quad

    a, n, dt = 0.3, N, 1e-4
    ds = PairCorrelation(MODEL, n, closure=closure, modes=32).solve(lambda phi: 1 + a * np.cos(phi), [0.0, dt])
    assert float(ds.mean_inner_product[0]) == pytest.approx(a / 2, rel=1e-13)
    g0 = lambda phi: 1 + a * np.cos(phi)  # noqa: E731
    psi = lambda s: np.exp(np.cos(s)) * np.sin(s)  # noqa: E731
    slope = (2 / n) * quad(lambda p: psi(p) * g0(p) * np.sin(p), 0, 2 * np.pi, epsabs=1e-13)[0] / (2 * np.pi)
    if closure == "kirkwood":
        def three_body(phi):
            return quad(lambda u: psi(u) * g0(u) * g0(u + phi), 0, 2 * np.pi, epsabs=1e-13)[0]
        slope -= (n - 2) / n / np.pi * quad(lambda p: g0(p) * three_body(p) * np.sin(p), 0, 2 * np.pi,
                                            epsabs=1e-12)[0] / (2 * np.pi)
    measured = float(ds.mean_inner_product[1] - ds.mean_inner_product[0]) / dt
    assert measured == pytest.approx(slope, rel=1e-3)
    with pytest.raises(ValueError, match="must be even in the relative angle"):
        PairCorrelation(MODEL, n).solve(lambda phi: 1 + a * np.sin(phi), [0.0, dt])


def test_the_chaos_closure_departs_from_the_tokens_at_second_order_in_t():
    """Exact at t = 0 with the exact slope, so its error in E[cos(theta_1 - theta_2)] grows like t^2: measured
    on the increments from t = 0 of 40000 systems (each system's own increment, which has a far smaller spread
    than the value: the pair mean from |sum_j e^{i theta_j}|^2, not the library's estimator)."""
    times = np.array([0.0, 0.1, 0.2, 0.4])
    x0 = mf.sample_uniform(N, 2, np.random.default_rng(2), batch=40_000)
    x = mf.simulate_particles(MODEL, x0, times, method="rk4", dt=0.0125, progress=False).x.values
    z = np.exp(1j * np.arctan2(x[..., 1], x[..., 0]))
    pair_mean = (np.abs(z.sum(axis=-1)) ** 2 - N) / (N * (N - 1))  # (system, time)
    increments = pair_mean[:, 1:] - pair_mean[:, :1]
    closure = PairCorrelation(MODEL, N, closure="chaos", modes=32).solve(None, times).coefficient.values[:, 0]
    error = increments.mean(axis=0) - (closure[1:] - closure[0])
    noise = increments.std(axis=0, ddof=1) / np.sqrt(increments.shape[0])
    assert np.all(error > 5 * noise), (error, noise)  # a measured departure, not noise
    order = np.polyfit(np.log(times[1:]), np.log(error), 1)[0]
    assert abs(order - 2.0) < 0.25, (order, error)


def test_kirkwood_follows_the_ensemble_where_chaos_does_not(ensemble):
    """The clustering closure within 3 standard errors: every mode to t = 0.5, the first to t = 1 (the higher ones
    part from the ensemble as the correlation sharpens); molecular chaos 10 and more away by t = 1."""
    times, run = ensemble
    estimate = pair_correlation(run, modes=3)
    chaos = closure_deviation(PairCorrelation(MODEL, N, closure="chaos", modes=32).solve(None, times), estimate)
    kirkwood = closure_deviation(PairCorrelation(MODEL, N, closure="kirkwood", modes=32).solve(None, times), estimate)
    assert np.all(np.abs(kirkwood.z.values[times <= 0.5]) < 3), kirkwood.z.values
    assert abs(kirkwood.z.values[-1, 0]) < 3, kirkwood.z.values
    assert chaos.z.values[-1, 0] < -10, chaos.z.values


def test_the_closure_ends_where_the_correlation_concentrates_and_refuses_sa():
    with pytest.warns(UnderResolvedWarning, match="concentrates beyond 16 modes"):
        ds = PairCorrelation(MODEL, N, closure="kirkwood", modes=16).solve(None, [0.0, 1.0, 2.0, 4.0])
    assert ds.time.values.tolist() == [0.0, 1.0] and ds.attrs["underresolved_since"] == 2.0
    with pytest.raises(ValueError, match="sum over pairs"):
        PairCorrelation(mf.SelfAttention(1.0), N)
    with pytest.raises(ValueError, match="closure must be one of"):
        PairCorrelation(MODEL, N, closure="boltzmann")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert PairCorrelation(MODEL, N).solve(None, [0.0, 1.0]).attrs["underresolved_since"] != 1.0
