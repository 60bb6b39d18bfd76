"""Tokens with natural frequencies (Kuramoto, Sakaguchi, attention): particles, the family mean field, Ott-Antonsen."""

import json

import numpy as np
import pytest
from scipy.integrate import quad, solve_ivp
from scipy.optimize import brentq

import meanfield as mf
from solvers import FrequencyCircleFV


def angles_to_points(theta):
    return np.stack([np.cos(theta), np.sin(theta)], axis=-1)


def sakaguchi(coupling, lag):
    """Kuramoto-Sakaguchi as SelfAttention at beta = 0: V = K R(-alpha) turns the mean by -alpha."""
    if lag == 0:
        return mf.SelfAttention(0.0, value=coupling)
    c, s = np.cos(lag), np.sin(lag)
    return mf.SelfAttention(0.0, value=coupling * np.array([[c, s], [-s, c]]))


@pytest.mark.parametrize("lag", [0.0, 0.7])
def test_the_velocity_is_kuramoto_sakaguchi_with_frequencies(lag, rng):
    theta, omega = rng.uniform(-np.pi, np.pi, 9), rng.normal(size=9)
    model = mf.NaturalFrequencies(sakaguchi(1.7, lag), omega)
    x = angles_to_points(theta)
    tangent = np.stack([-np.sin(theta), np.cos(theta)], axis=-1)
    angular = np.sum(model.velocity(x) * tangent, axis=-1)
    expected = [omega[i] + 1.7 / 9 * sum(np.sin(theta[j] - theta[i] - lag) for j in range(9)) for i in range(9)]
    np.testing.assert_allclose(angular, expected, rtol=0, atol=1e-14)
    # zero frequencies: the interaction bit for bit
    np.testing.assert_array_equal(mf.NaturalFrequencies(sakaguchi(1.7, lag), np.zeros(9)).velocity(x),
                                  sakaguchi(1.7, lag).velocity(x))


def test_the_ott_antonsen_radius_solves_its_equation():
    for coupling, lag in ((3.0, 0.0), (3.0, 0.5), (0.8, 0.0)):
        rate = lambda t, r: -0.5 * r + 0.5 * coupling * r * (1 - r * r) * np.cos(lag)  # noqa: E731
        times = np.linspace(0, 6, 7)
        direct = solve_ivp(rate, (0, 6), [0.2], t_eval=times, rtol=1e-12, atol=1e-14).y[0]
        np.testing.assert_allclose(mf.ott_antonsen_radius(times, coupling=coupling, width=0.5, r0=0.2,
                                                          phase_lag=lag), direct, rtol=1e-9)
    late = mf.ott_antonsen_radius(200.0, coupling=3.0, width=0.5, r0=0.2, phase_lag=0.5)
    assert late == pytest.approx(np.sqrt(1 - 2 * 0.5 / (3.0 * np.cos(0.5))), rel=1e-12)


def test_lorentzian_populations_approach_the_ott_antonsen_closed_form_as_the_nodes_grow():
    """The midpoint rule in the angle of omega = Delta tan(phi) converges slowly: the far nodes turn fast, and
    r(t) carries their rotation e^{i omega t}. Asked here: a steady fall with the nodes, to below 2e-3 at 256."""
    times = np.linspace(0, 2, 5)
    closed = mf.ott_antonsen_radius(times, coupling=2.0, width=0.5, r0=0.2)
    errors = []
    for count in (16, 64, 256):
        nodes, weights = mf.lorentzian_nodes(0.5, count)
        z = mf.ott_antonsen_populations(times, nodes, weights, 0.2 * np.exp(0.3j), coupling=2.0)
        errors.append(np.abs(np.abs(z) - closed).max())
    assert errors[0] > 3 * errors[1] > 9 * errors[2] and errors[2] < 2e-3, errors


@pytest.mark.parametrize("lag", [0.0, 0.6])
def test_the_family_finite_volumes_follow_the_populations_ott_antonsen_solution_at_second_order(lag):
    """Poisson kernels per node stay Poisson kernels: the order parameter of the finite volumes against the
    populations' ODEs (exact for the discrete law) falls fourfold per doubling of the cells."""
    nodes, weights = mf.lorentzian_nodes(0.5, 8)
    a0 = 0.3 * np.exp(0.3j)
    start = lambda omega, theta: (1 - abs(a0) ** 2) / np.abs(np.exp(1j * theta) - a0) ** 2 + 0 * omega  # noqa: E731
    times = np.linspace(0, 1, 3)
    exact = mf.ott_antonsen_populations(times, nodes, weights, a0, coupling=2.0, phase_lag=lag)
    errors = []
    for cells in (64, 128):
        solver = FrequencyCircleFV(sakaguchi(2.0, lag), frequencies=nodes, weights=weights, cells=cells, rtol=1e-7)
        run = solver.solve(start, times, progress=False)
        assert run.sizes["time"] == times.size and bool(run.resolved.all())
        np.testing.assert_allclose(run.mass.values, 1.0, rtol=1e-12)
        errors.append(np.abs(solver.order_parameter(run.rho.values) - exact).max())
    assert errors[1] < 5e-4 and 3.5 < errors[0] / errors[1] < 4.5, errors


def test_particles_approach_the_mean_field_order_parameter_at_n_to_the_minus_half():
    """Frequencies drawn from a four-node law, angles from the Poisson kernel: the particles' order parameter
    meets the populations' exact mean-field one with an error falling like n^{-1/2} (slope within three
    bootstrap standard errors)."""
    nodes, weights, a0 = np.array([-1.0, -0.3, 0.4, 1.2]), np.array([0.2, 0.3, 0.3, 0.2]), 0.3
    times = [0.0, 1.0, 2.0]
    exact = mf.ott_antonsen_populations(times, nodes, weights, a0, coupling=2.5)
    generator = np.random.default_rng(8)
    sizes, per_system = np.array([64, 256, 1024]), []
    for n, systems in zip(sizes, (256, 128, 64)):
        # Poisson-kernel angles: the wrapped Cauchy law of scale -log(a0)
        theta = generator.standard_cauchy((systems, n)) * -np.log(a0)
        omega = generator.choice(nodes, p=weights, size=(systems, n))
        x = mf.simulate_particles(mf.NaturalFrequencies(mf.SelfAttention(0.0, value=2.5), omega),
                                  angles_to_points(theta), times, method="rk4", dt=0.02).x.values
        z = (x[..., 0] + 1j * x[..., 1]).mean(axis=-1)  # (system, time)
        per_system.append(np.abs(z[:, 1:] - exact[1:]).mean(axis=1))
    slope = lambda errors: np.polyfit(np.log(sizes), np.log([e.mean() for e in errors]), 1)[0]  # noqa: E731
    boot = [slope([e[generator.integers(0, e.size, e.size)] for e in per_system]) for _ in range(400)]
    assert abs(slope(per_system) + 0.5) <= 3 * np.std(boot), (slope(per_system), np.std(boot))


def test_the_incoherent_state_loses_stability_at_the_closed_form_couplings():
    """Lorentzian with phase lag: rate K cos(alpha)/2 - Delta above K_c = 2 Delta / cos(alpha); below it the
    discrete law's neutral modes have rates falling like 1/M. Gaussian: the rates converge to the root of the
    continuum dispersion relation, computed here by quadrature, which vanishes at K_c = 2 / (pi g(0))."""
    width, lag = 0.5, 0.4
    critical = 2 * width / np.cos(lag)
    nodes, weights = mf.lorentzian_nodes(width, 400)
    for factor in (1.2, 2.0):
        rate = mf.incoherent_growth_rate(nodes, weights, coupling=factor * critical, phase_lag=lag)
        assert rate == pytest.approx(factor * width - width, abs=1e-9)
    below = [mf.incoherent_growth_rate(*mf.lorentzian_nodes(width, m), coupling=0.8 * critical, phase_lag=lag)
             for m in (100, 400)]
    assert 0 < below[1] < below[0] / 3.5, below
    sigma = 1.0
    density = lambda w: np.exp(-w * w / (2 * sigma**2)) / (sigma * np.sqrt(2 * np.pi))  # noqa: E731

    def continuum_rate(coupling):
        """The root of 1 = K int_0^inf g(w) lam / (lam^2 + w^2) dw, the integral taken at w = lam tan(u)."""
        dispersion = lambda lam: 1 - coupling * quad(lambda u: density(lam * np.tan(u)), 0, np.pi / 2)[0]  # noqa: E731
        return brentq(dispersion, 1e-9, 10)

    gaussian_critical = 2 / (np.pi * density(0.0))
    assert continuum_rate(1.001 * gaussian_critical) < 2e-3
    nodes, weights = mf.gaussian_nodes(sigma, 200)
    for factor in (1.5, 2.0):
        rate = mf.incoherent_growth_rate(nodes, weights, coupling=factor * gaussian_critical)
        assert rate == pytest.approx(continuum_rate(factor * gaussian_critical), rel=1e-4)


@pytest.mark.parametrize("build,match", [
    (lambda: mf.NaturalFrequencies(mf.SelfAttention(1.0), [0.0, np.nan]), "frequencies must be a finite"),
    (lambda: mf.NaturalFrequencies(mf.SelfAttention(1.0, query=np.eye(3)), [0.0]), "on the circle"),
    (lambda: mf.NaturalFrequencies(mf.SelfAttention(1.0), [0.0, 1.0]).velocity(mf.sample_uniform(3, 2, 0)),
     "frequencies for 2 tokens, got n=3"),
    (lambda: FrequencyCircleFV(mf.SelfAttention(0.0), frequencies=[0.0, 1.0], weights=[1.0, -1.0]),
     "weights must be 2 positive numbers"),
    (lambda: FrequencyCircleFV(mf.SelfAttention(0.0)), "needs frequencies"),
    (lambda: mf.lorentzian_nodes(0.0, 4), "width must be > 0"),
    (lambda: mf.ott_antonsen_populations([0, 1], [0.0], [1.0], 1.2, coupling=1.0), "modulus below one"),
])
def test_bad_input_is_refused_naming_the_argument(build, match):
    with pytest.raises((ValueError, TypeError), match=match):
        build()


def test_the_model_round_trips():
    model = mf.NaturalFrequencies(sakaguchi(1.5, 0.3), [0.1, -0.2, 0.3])
    assert mf.model_from_dict(model.to_dict()).to_dict() == model.to_dict()


def test_locked_oscillators_are_those_the_order_parameter_holds_and_their_share_is_the_closed_form():
    """Kuramoto with Lorentzian frequencies (K = 2, Delta = 0.5): in the stationary state the tokens with
    |omega| < K r stand still on average, the others drift; the share locked is (2/pi) arctan(K r / Delta)
    (binomial standard error over the sampled frequencies)."""
    from validation import locked_oscillators, order_parameters

    n, coupling, width = 4000, 2.0, 0.5
    generator = np.random.default_rng(3)
    omega = width * generator.standard_cauchy(n)
    model = mf.NaturalFrequencies(mf.SelfAttention(0.0, value=coupling), omega)
    run = mf.simulate_particles(model, angles_to_points(generator.uniform(-np.pi, np.pi, n)),
                                np.arange(0.0, 60.01, 0.05), method="rk4", dt=0.05)
    radius = np.abs(order_parameters(run.x.sel(time=slice(30, 60)).values)[:, 0]).mean()
    stationary = np.sqrt(1 - 2 * width / coupling)
    assert abs(radius - stationary) < 3 / np.sqrt(n)
    locked = locked_oscillators(run, 30.0, 60.0)
    assert np.mean(locked == (np.abs(omega) < coupling * radius)) > 0.99
    share = 2 / np.pi * np.arctan(coupling * stationary / width)
    assert abs(locked.mean() - share) < 4 * np.sqrt(share * (1 - share) / n), (locked.mean(), share)
    two = order_parameters(angles_to_points(np.array([0.0, np.pi, 0.0, np.pi])), modes=(1, 2))
    np.testing.assert_allclose(two, [0.0, 1.0], atol=1e-15)  # two antipodal clusters: r_1 = 0, r_2 = 1


@pytest.mark.parametrize("interaction", [mf.SelfAttention(0.0, normalized=False, value=2.0), mf.SelfAttention(3.0),
                                         mf.SelfAttention(1.0, normalized=False, value=2.0)])
def test_every_engine_adds_the_rotation_to_the_interactions_own_engine(interaction):
    """The series (O(n K)) and fused engines of the interaction, plus the rotation, against the model's reference."""
    from meanfield.engines import check_consistency

    generator = np.random.default_rng(0)
    x = mf.sample_uniform(300, 2, generator, batch=3)
    model = mf.NaturalFrequencies(interaction, 0.5 * generator.standard_cauchy((3, 300)))
    assert {record.engine for record in check_consistency(model, x)} == {"fused", "series"}
    run = mf.simulate_particles(mf.NaturalFrequencies(interaction, model.frequencies[0].repeat(10)),
                                mf.sample_uniform(3000, 2, generator), [0.0, 0.1], progress=False)
    assert json.loads(run.attrs["settings"])["kernel"] == "series"  # O(n K) at n = 3000, not the pair sum
