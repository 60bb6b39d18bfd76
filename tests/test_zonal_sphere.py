"""ZonalSphereSpectral: densities of <x, e> on S^{d-1} for any d, against independent references.

The references here share no code with the solver: growth rates from scipy's adaptive
quadrature of the Funk-Hecke integral with scipy's Gegenbauer polynomials, SphereSpectral
(shtns) at d = 3, the model's own reference velocity of the same measure on a product
quadrature of S^3, and runs at 2 lmax + 1 for the error estimate.
"""

import warnings

import numpy as np
import pytest
from scipy.integrate import quad
from scipy.special import eval_gegenbauer, gammaln

import meanfield as mf
from solvers import SphereSpectral, UnderResolvedWarning, ZonalSphereSpectral
from validation import mean_field_convergence
from validation.convergence import StudySettings
from validation.high_dimension import gram_limit_gap, sample_zonal


def law_weight(d, s):
    """The density of <x, e> for uniform x on S^{d-1} (written here, not imported)."""
    return np.exp(gammaln(d / 2) - gammaln((d - 1) / 2) - 0.5 * np.log(np.pi) + (d - 3) / 2 * np.log1p(-s * s))


def gegenbauer_at_one(l, d, s):
    alpha = (d - 2) / 2
    return eval_gegenbauer(l, alpha, s) / eval_gegenbauer(l, alpha, 1.0)


def funk_hecke(kernel, l, d):
    """int kernel(s) P_l(s) pi_d(s) ds by adaptive quadrature (points where pi_d concentrates at large d)."""
    width = 1 / np.sqrt(d)
    points = [-6 * width, 0.0, 6 * width] if d > 20 else None
    return quad(lambda s: kernel(s) * gegenbauer_at_one(l, d, s) * law_weight(d, s), -1, 1, points=points,
                epsabs=0, epsrel=1e-13, limit=400)[0]


def exact_growth_rate(model, d, l):
    """MODEL.md sec. 6: gamma_l = l(l+d-2)(lambda_l/(beta lambda_0) - D) for SA, (rho_0 lambda_l/beta - D) for USA."""
    beta = model.beta
    kernel = lambda s: np.exp(beta * (s - 1))  # noqa: E731 (a common factor e^{-beta}: SA is invariant)
    if model.normalized:
        ratio = funk_hecke(kernel, l, d) / (beta * funk_hecke(kernel, 0, d))
    else:
        ratio = np.exp(beta) * funk_hecke(kernel, l, d) / beta
    return l * (l + d - 2) * (ratio - model.diffusion)


def zonal_mode(d, l, amplitude):
    """1 + amplitude P_l(<x, e>) / ||P_l||, P_l from scipy (the normalisation by the independent quadrature)."""
    norm = np.sqrt(quad(lambda s: gegenbauer_at_one(l, d, s) ** 2 * law_weight(d, s), -1, 1, epsabs=0,
                        epsrel=1e-13, limit=400)[0])
    return lambda x: 1 + amplitude * gegenbauer_at_one(l, d, x[..., -1]) / norm


@pytest.mark.parametrize("d, model, degree", [
    (4, mf.SelfAttention(4.0), 2),
    (16, mf.SelfAttention(6.0, normalized=False), 3),
    (128, mf.SelfAttention(4.0), 1),
    (128, mf.SelfAttention(9.0, diffusion=0.002), 2),
])
def test_small_perturbations_grow_at_the_dispersion_relation(d, model, degree):
    amplitude, horizon = 1e-9, 1.0
    solver = ZonalSphereSpectral(model, d=d, lmax=24, rtol=1e-11)
    ds = solver.solve(zonal_mode(d, degree, amplitude), [0.0, horizon], progress=False)
    coefficient = ds.coefficient.values[:, degree]
    assert coefficient[0] == pytest.approx(amplitude, rel=1e-10)
    measured = np.log(coefficient[1] / coefficient[0]) / horizon
    # nonlinear terms are O(amplitude) relative; the steps' error rtol
    assert measured == pytest.approx(exact_growth_rate(model, d, degree), rel=1e-6, abs=1e-9)
    others = np.delete(ds.coefficient.values[-1], [0, degree])
    assert np.abs(others).max() < 1e-15  # a pure mode stays pure to linear order


def clustering(x):
    u = x[..., -1]
    return 1 + 0.4 * u ** 3 - 0.2 * u ** 2 + 0.1 * np.cos(5 * u)


def test_d3_equals_sphere_spectral_on_axisymmetric_data():
    model, times = mf.SelfAttention(9.0), [0.0, 1.5, 3.0]
    zonal = ZonalSphereSpectral(model, d=3, lmax=31, rtol=1e-10)
    sphere = SphereSpectral(model, lmax=31, rtol=1e-10)
    z, s = (solver.solve(clustering, times, progress=False) for solver in (zonal, sphere))
    u = np.cos(s.colatitude.values)
    for k in range(len(times)):
        rho = zonal.law(z.coefficient.values[k], u) / law_weight(3, u) / (4 * np.pi)
        difference = np.abs(s.rho.values[k] - rho[:, None]).max()
        # two Galerkin truncations at the same degree: they differ by the steps' errors, well below
        # either's spatial error estimate
        assert difference <= float(s.error_estimate[k]) + 1e-9 * s.rho.values[k].max()
    assert z.energy.values == pytest.approx(s.energy.values, rel=1e-10)
    assert float(z.error_estimate[-1]) > 1e-5  # the comparison reaches the nonlinear regime


@pytest.mark.parametrize("d", [3, 16])
def test_estimate_is_within_ten_of_the_true_error_of_the_law_and_warns_in_time(d):
    """The claim of ``ZonalSphereSpectral.error_estimate``: within a factor 10 above 1e-6 (as SphereSpectral's,
    below it the error made earlier and carried along is not in the tail)."""
    model = mf.SelfAttention(9.0)
    times = np.linspace(0.0, {3: 2.0, 16: 2.5}[d], 9)
    rho0 = lambda x: np.exp(2 * x[..., -1] + np.cos(3 * x[..., -1]))  # noqa: E731
    lmax = 23
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UnderResolvedWarning)
        runs = [ZonalSphereSpectral(model, d=d, lmax=L, rtol=1e-11).solve(rho0, times, progress=False,
                                                                                   underresolved="continue")
                for L in (lmax, 2 * lmax + 1)]
    run, reference = runs
    deviation = reference.coefficient.values.copy()
    deviation[:, :lmax + 1] -= run.coefficient.values
    true = np.sqrt(np.sum(deviation ** 2, axis=1))  # L2(pi_d) of the error: bounds its total variation
    trusted = reference.error_estimate.values < true / 10
    claimed = trusted & (true > 1e-6)
    assert claimed.sum() >= 4, true
    ratio = run.error_estimate.values[claimed] / true[claimed]
    assert np.all((ratio > 1 / 10) & (ratio < 10)), np.c_[times[claimed], true[claimed], ratio]
    since = run.attrs["underresolved_since"]
    beyond = times[true > 1e-3]
    assert beyond.size and since <= beyond[0], (since, beyond)


def test_spectral_convergence_in_the_degree():
    model, d = mf.SelfAttention(5.0), 16
    rho0 = lambda x: np.exp(2 * x[..., -1])  # noqa: E731
    runs = {L: ZonalSphereSpectral(model, d=d, lmax=L, rtol=1e-12).solve(rho0, [0.0, 1.0], progress=False)
            for L in (12, 16, 20, 24, 48)}
    reference = runs[48].coefficient.values[-1]
    errors = []
    for L in (12, 16, 20, 24):
        difference = reference.copy()
        difference[:L + 1] -= runs[L].coefficient.values[-1]
        errors.append(np.linalg.norm(difference))
    rates = np.array(errors[1:]) / np.array(errors[:-1])
    assert np.all(rates < 0.1), errors  # geometric: at least a factor 10 per four degrees
    assert errors[-1] < 1e-9


def test_mass_and_profile_by_independent_quadrature():
    model, d = mf.SelfAttention(4.0, normalized=False), 32
    solver = ZonalSphereSpectral(model, d=d, lmax=32, rtol=1e-10)
    ds = solver.solve(lambda x: np.exp(3 * x[..., -1]), [0.0, 0.25, 0.5], progress=False)
    assert ds.resolved.values.all()
    coefficients = ds.coefficient.values[-1]
    law = lambda s: float(solver.law(coefficients, np.array([s]))[0])  # noqa: E731
    assert quad(law, -1, 1, points=[-0.5, 0, 0.5], epsabs=0, epsrel=1e-13, limit=400)[0] == pytest.approx(1, abs=1e-12)
    for u in (-0.3, 0.0, 0.2, 0.6):
        below = quad(law, -1, u, epsabs=1e-15, epsrel=1e-13, limit=400)[0]
        assert float(solver.mass_profile(coefficients, np.array([u]))[0]) == pytest.approx(below, abs=1e-12)
    assert np.all(ds.mass_profile.values[:, -1] < 1 + 1e-12)
    assert np.all(np.diff(ds.mass_profile.values, axis=1) > -1e-14)
    assert ds.mass.values == pytest.approx(1.0, abs=1e-12)


def test_energy_of_the_uniform_state():
    beta, d = 3.0, 24
    model = mf.SelfAttention(beta, normalized=False)
    ds = ZonalSphereSpectral(model, d=d, lmax=16).solve(lambda x: np.ones(x.shape[:-1]), [0.0, 1.0],
                                                                 progress=False)
    exact = 0.5 * quad(lambda s: np.exp(beta * s) / beta * law_weight(d, s), -1, 1, epsabs=0, epsrel=1e-13)[0]
    assert ds.energy.values == pytest.approx(exact, rel=1e-12)
    assert np.abs(ds.coefficient.values[:, 1:]).max() < 1e-15  # uniform is stationary


def product_rule_s2(nodes):
    """Gauss-Legendre in cos(theta) times the trapezoid rule in phi: points of S^2 and probability weights."""
    z, wz = np.polynomial.legendre.leggauss(nodes)
    phi = 2 * np.pi * np.arange(2 * nodes) / (2 * nodes)
    zz, pp = np.meshgrid(z, phi, indexing="ij")
    r = np.sqrt(1 - zz ** 2)
    points = np.stack([r * np.cos(pp), r * np.sin(pp), zz], axis=-1).reshape(-1, 3)
    weights = (wz[:, None] * np.ones(2 * nodes) / (2 * 2 * nodes)).ravel()
    return points, weights


@pytest.mark.parametrize("model", [mf.SelfAttention(3.0), mf.SelfAttention(2.0, normalized=False),
                                   mf.ZonalAggregation(lambda s: s ** 3 - s, lambda s: 3 * s ** 2 - 1)])
def test_velocity_is_the_models_reference_velocity_of_the_same_measure(model):
    d = 4
    solver = ZonalSphereSpectral(model, d=d, lmax=20)
    coefficients = solver.initial_coefficients(lambda x: np.exp(1.5 * x[..., -1]) + x[..., -1] ** 2)
    # the zonal measure on S^3 by a product rule: u by Gauss for pi_4 (numpy's Gauss-Jacobi is scipy's:
    # take scipy's roots_jacobi here, not the solver's rule), the fibre S^2 by a product rule
    from scipy.special import roots_jacobi
    u, wu = roots_jacobi(40, 0.5, 0.5)
    wu = wu / wu.sum()
    fibre, wf = product_rule_s2(24)
    density = solver.law(coefficients, u) / law_weight(d, u)
    nodes = np.concatenate([u[:, None, None] * np.eye(d)[-1] + np.sqrt(1 - u[:, None, None] ** 2)
                            * np.pad(fibre, ((0, 0), (0, 1)))[None]], axis=0).reshape(-1, d)
    weights = (wu[:, None] * density[:, None] * wf[None]).ravel()
    at = solver.flux_nodes
    x = at[:, None] * np.eye(d)[-1] + np.sqrt(1 - at[:, None] ** 2) * np.eye(d)[0]
    reference = model.velocity_field(x, nodes, weights)
    w = solver.velocity(coefficients)
    mine = w[:, None] * (np.eye(d)[-1] - at[:, None] * x)
    assert np.abs(mine - reference).max() <= 1e-12 * np.abs(reference).max()


def test_bad_input_gets_one_clear_line():
    with pytest.raises(ValueError, match="d >= 3, got d=2"):
        ZonalSphereSpectral(mf.SelfAttention(1.0), d=2)
    with pytest.raises(ValueError, match="needs the dimension"):
        ZonalSphereSpectral(mf.SelfAttention(1.0))
    with pytest.raises(ValueError, match="zonal model"):
        ZonalSphereSpectral(mf.SelfAttention(1.0, query=np.diag([1.0, 2.0, 1.0, 1.0])), d=4)
    with pytest.raises(ValueError, match="interaction"):
        ZonalSphereSpectral(mf.SelfAttention(1.0), d=4, interaction="reference")
    with pytest.raises(ValueError, match="does not resolve the kernel"):
        ZonalSphereSpectral(mf.SelfAttention(400.0), d=3, lmax=8)
    solver = ZonalSphereSpectral(mf.SelfAttention(1.0), d=5, lmax=8)
    with pytest.raises(ValueError, match="not zonal about the last axis"):
        solver.solve(lambda x: 1 + 0.5 * x[..., 0], [0.0, 1.0], progress=False)
    with pytest.raises(ValueError, match="nonnegative"):
        solver.solve(lambda x: x[..., -1], [0.0, 1.0], progress=False)


@pytest.mark.filterwarnings("ignore:The occurrence of roundoff error")  # quad at l = 3, d = 768: still 1e-10
def test_large_dimension_spectrum_against_its_funk_hecke_integral():
    """Where the surface measure underflows (d = 768), the spectrum per unit of uniform measure stays exact."""
    beta, d = 1.0, 768
    values = mf.attention_spectrum(beta, 3, d, uniform_measure=True)
    for l in range(4):
        assert values[l] == pytest.approx(funk_hecke(lambda s: np.exp(beta * s), l, d), rel=1e-10)
    assert mf.attention_spectrum(beta, 3, 5, uniform_measure=True) * mf.sphere_area(5) == pytest.approx(
        mf.attention_spectrum(beta, 3, 5), rel=1e-14)


def test_iid_tokens_approach_the_limit_gram_dynamics_at_the_rate_of_thm_6_9():
    """Thm 6.9: the gap to the orthogonal-token curve falls like sqrt(log n / d), a slope -1/2 in log d."""
    result = gram_limit_gap(mf.SelfAttention(1.0), 8, [64, 512, 4096], np.linspace(0.0, 4.0, 9), seeds=8)
    assert result["rate_low"] <= -0.5 <= result["rate_high"], result
    assert result["rate_high"] < -0.3  # and the interval is tight enough to tell


@pytest.mark.parametrize("d", [16, 128])
def test_particles_and_the_zonal_solver_agree_on_the_mean_of_u(d):
    """Tokens sampled from the initial density move their mean <x, e> as the solver's law does (4 standard errors).

    beta = 1: each token's own term in its softmax, e^beta against n E[e^{beta <x, y>}] for the others,
    slows the particles by a relative O(e^beta / n), which at beta = 4, n = 400 (9 %) is several
    standard errors of 24 systems; at beta = 1, 0.7 %, it is below them.
    """
    model, t_end, n, systems = mf.SelfAttention(1.0), 1.0, 400, 24
    rho0 = lambda x: np.exp(2 * x[..., -1])  # noqa: E731
    solver = ZonalSphereSpectral(model, d=d, lmax=24)
    pde = solver.solve(rho0, [0.0, t_end], progress=False)
    # E[u] = 1 - int_{-1}^{1} F(u) du, by adaptive quadrature of the distribution function
    means = [1 - quad(lambda u: float(solver.mass_profile(c, np.array([u]))[0]), -1, 1, limit=200)[0]
             for c in pde.coefficient.values]
    generator = np.random.default_rng(3)
    x0 = np.stack([mf.sample_sphere(n, rho0, d, generator) for _ in range(systems)])
    run = mf.simulate_particles(model, x0, [0.0, t_end], method="rk4", dt=0.05, progress=False)
    observed = run.x.values[..., -1].mean(axis=-1)  # (system, time)
    standard_error = observed.std(axis=0, ddof=1) / np.sqrt(systems)
    assert means[1] > means[0] + 10 * standard_error[1]  # the mean moved, by much more than the noise
    np.testing.assert_array_less(np.abs(observed.mean(axis=0) - means), 4 * standard_error)


@pytest.mark.slow
@pytest.mark.parametrize("d", [16, 128])
def test_particles_approach_the_zonal_law_at_n_to_the_minus_half(d):
    """The validation layer on S^{d-1}: W1 of the laws of u against ZonalSphereSpectral, slope in n."""
    study = mean_field_convergence(mf.SelfAttention(4.0), lambda x: np.exp(2 * x[..., -1]), geometry=f"S^{d - 1}",
                                   sizes=(256, 512, 1024, 2048, 4096), seeds=16, times=[0.0, 1.0],
                                   settings=StudySettings(lmax=24, particle_dt=0.05))
    assert study.pde_error.values.max() < 1e-6  # the reference's own error is far below the distances
    assert study.attrs["distance"].startswith("Wasserstein-1 distance of the laws of u")
    np.testing.assert_array_less(study.rate_low.values, -0.5)
    np.testing.assert_array_less(-0.5, study.rate_high.values)


def test_sampled_tokens_follow_the_solvers_law():
    """sample_zonal against the exact distribution function: a Kolmogorov-Smirnov test at 1e-3."""
    from scipy.stats import kstest
    solver = ZonalSphereSpectral(mf.SelfAttention(2.0), d=32, lmax=16)
    coefficients = solver.initial_coefficients(lambda x: np.exp(4 * x[..., -1]))
    x = sample_zonal(solver, coefficients, 4000, np.random.default_rng(5))
    assert np.abs(np.linalg.norm(x, axis=1) - 1).max() < 1e-14
    assert kstest(x[:, -1], lambda u: solver.mass_profile(coefficients, np.atleast_1d(u))).pvalue > 1e-3
    # the fibre is uniform: the other coordinates have mean zero and equal variances (1 - E u^2)/(d - 1)
    spread = np.var(x[:, :-1], axis=0)
    assert np.abs(spread.mean() - (1 - np.mean(x[:, -1] ** 2)) / 31) < 1e-3


def test_the_w1_of_the_laws_of_u_against_adaptive_quadrature():
    """validation.distance on S^15: particles against the series, against quad between the tokens."""
    from validation import distance

    model, d = mf.SelfAttention(2.0), 16
    solver = ZonalSphereSpectral(model, d=d, lmax=16)
    rho0 = lambda x: np.exp(3 * x[..., -1])  # noqa: E731
    pde = solver.solve(rho0, [0.0, 0.5], progress=False)
    tokens = mf.sample_sphere(50, rho0, d, np.random.default_rng(2))
    run = mf.simulate_particles(model, tokens, [0.0, 0.5], progress=False)
    measured = distance(run, pde).values
    for k in range(2):
        u = np.sort(run.x.values[k, :, -1])
        edges = np.concatenate([[-1.0], u, [1.0]])
        profile = lambda s: float(solver.mass_profile(pde.coefficient.values[k], np.array([s]))[0])  # noqa: E731
        exact = sum(quad(lambda s: abs(profile(s) - j / u.size), a, b, epsabs=1e-13, limit=100)[0]
                    for j, (a, b) in enumerate(zip(edges[:-1], edges[1:])))
        assert measured[k] == pytest.approx(exact, rel=1e-6)
    assert distance(run, run).values == pytest.approx(0.0, abs=1e-15)


@pytest.mark.parametrize("model, window", [(mf.SelfAttention(1.0), (6.0, 10.0)),
                                           (mf.SelfAttention(1.0, normalized=False), (2.0, 4.0))])
def test_tokens_with_d_above_n_cluster_at_the_consensus_rate(model, window):
    """d >= n: iid tokens share a hemisphere and 1 - min <x_i, x_j> falls like exp(-rate t), rate 2c (SA), 2c e^beta (USA)."""
    from validation import consensus_rate

    n, d = 8, 16
    times = np.linspace(window[0], window[1], 9)
    x0 = mf.sample_uniform(n, d, np.random.default_rng(4))
    run = mf.simulate_particles(model, x0, np.concatenate([[0.0], times]), rtol=1e-12, progress=False)
    gram = np.einsum("tid,tjd->tij", run.x.values[1:], run.x.values[1:])
    gap = 1 - gram[:, ~np.eye(n, dtype=bool)].min(axis=1)
    slope = np.polyfit(times, np.log(gap), 1)[0]
    # the rate of the linearisation, exact in the limit: what is left at these times is of the order of the gap
    assert -slope == pytest.approx(consensus_rate(model), rel=1e-2)
    assert consensus_rate(model) == pytest.approx(2.0 if model.normalized else 2 * np.e, rel=1e-15)


@pytest.mark.parametrize("d", [3, 16, 768])
def test_the_gauss_rule_integrates_the_law_of_u_to_round_off(d):
    """Moments E[u^2] = 1/d, E[u^4] = 3/(d(d+2)) of the uniform law of <x, e>, and the basis orthonormal, at 192 nodes."""
    from solvers.sphere.gegenbauer import gauss_rule, orthonormal_gegenbauer

    u, w = gauss_rule(d, 192)
    assert np.sum(w) == pytest.approx(1.0, abs=1e-14)
    assert np.sum(w * u ** 2) == pytest.approx(1 / d, rel=1e-13)
    assert np.sum(w * u ** 4) == pytest.approx(3 / (d * (d + 2)), rel=1e-13)
    basis = orthonormal_gegenbauer(d, 127, u)
    assert np.abs((basis * w[:, None]).T @ basis - np.eye(128)).max() < 1e-13
