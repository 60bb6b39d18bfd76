"""Lorentzian natural frequencies, exactly: the frequency family reduced by the residue at omega_0 + i Delta.

References: the Ott-Antonsen closed form on its manifold; particles whose frequencies are drawn from the
continuum (Cauchy draws) off it; the family's finite volumes on quadrature nodes of the law; the incoherent
state's closed-form rate with noise.
"""

import numpy as np
import pytest

import meanfield as mf
from solvers import FrequencyCircleFV, LorentzianKuramoto, UnderResolvedWarning

COUPLING, WIDTH = 2.0, 0.5


def sakaguchi(coupling: float, lag: float) -> mf.SelfAttention:
    """Kuramoto-Sakaguchi: sin(theta_j - theta_i - alpha), the coupling K R(-alpha)."""
    c, s = np.cos(lag), np.sin(lag)
    return mf.SelfAttention(0.0, value=coupling * np.array([[c, s], [-s, c]]) if lag else coupling)


def off_the_manifold(theta):
    """a_1 = 0.3 as on the manifold of r0 = 0.3, but a_2 = -0.15 instead of 0.09."""
    return 1 + 0.6 * np.cos(theta) - 0.3 * np.cos(2 * theta)


@pytest.mark.parametrize("lag", [0.0, 0.6])
def test_on_the_ott_antonsen_manifold_it_is_the_closed_form_to_round_off(lag):
    a0 = 0.3 * np.exp(0.3j)
    times = np.linspace(0.0, 10.0, 11)
    closed = mf.ott_antonsen_radius(times, coupling=COUPLING, width=WIDTH, r0=0.3, phase_lag=lag)
    solver = LorentzianKuramoto(sakaguchi(COUPLING, lag), WIDTH, center=0.7, modes=128)
    poisson = solver.solve(lambda theta: (1 - abs(a0) ** 2) / np.abs(np.exp(1j * theta) - a0) ** 2, times)
    assert poisson.sizes["time"] == times.size
    np.testing.assert_allclose(poisson.order_parameter.values, closed, rtol=0, atol=1e-12)
    moments = solver.solve(a0 ** np.arange(1, 129), times)  # the manifold's moments given directly
    np.testing.assert_allclose(moments.order_parameter.values, closed, rtol=0, atol=1e-12)
    np.testing.assert_allclose(poisson.rho.values.mean(axis=1) * 2 * np.pi, 1.0, rtol=1e-12)  # the marginal's mass
    late = solver.solve(a0 ** np.arange(1, 129), [0.0, 80.0]).order_parameter.values[-1]
    assert late == pytest.approx(np.sqrt(1 - 2 * WIDTH / (COUPLING * np.cos(lag))), abs=1e-12)  # stationary r


def test_off_the_manifold_particles_drawn_from_the_continuum_follow_it():
    """Frequencies drawn from the Lorentzian itself: the particles' r(t) within 4 standard errors of the
    reduction's, and 6 and more from the Ott-Antonsen curve of the same r0 (the start is off the manifold)."""
    times = np.array([0.0, 1.5])
    exact = LorentzianKuramoto(mf.SelfAttention(0.0, value=COUPLING), WIDTH, modes=128).solve(off_the_manifold, times)
    generator = np.random.default_rng(3)
    n, systems = 2000, 16
    theta = mf.sample_circle(n * systems, off_the_manifold, generator).reshape(systems, n, 2)
    omega = WIDTH * generator.standard_cauchy((systems, n))
    x = mf.simulate_particles(mf.NaturalFrequencies(mf.SelfAttention(0.0, value=COUPLING), omega), theta, times,
                              method="rk4", dt=0.02).x.values
    r = np.abs(x[..., 0].mean(axis=-1) + 1j * x[..., 1].mean(axis=-1))[:, -1]
    error = r.std(ddof=1) / np.sqrt(systems)
    assert abs(r.mean() - exact.order_parameter.values[-1]) < 4 * error, (r.mean(), exact.order_parameter.values)
    manifold = mf.ott_antonsen_radius(1.5, coupling=COUPLING, width=WIDTH, r0=0.3)
    assert abs(r.mean() - manifold) > 6 * error


def test_the_family_on_quadrature_nodes_of_the_law_approaches_it():
    """FrequencyCircleFV on 16 and 64 Lorentzian midpoint nodes (64 cells): the 64-node marginal within 3e-3 of
    the exact r, five times closer than the 16-node one (the law's quadrature converges slowly: its far nodes turn
    fast)."""
    times = np.array([0.0, 1.5])
    exact = LorentzianKuramoto(mf.SelfAttention(0.0, value=COUPLING), WIDTH, modes=128).solve(off_the_manifold, times)
    errors = []
    for count in (16, 64):
        nodes, weights = mf.lorentzian_nodes(WIDTH, count)
        family = FrequencyCircleFV(mf.SelfAttention(0.0, value=COUPLING), frequencies=nodes, weights=weights, cells=64)
        run = family.solve(lambda omega, theta: off_the_manifold(theta) + 0 * omega, times, progress=False)
        errors.append(abs(run.order_parameter.values[-1] - exact.order_parameter.values[-1]))
    assert errors[1] < 3e-3 and errors[0] > 5 * errors[1], errors


def test_noise_damps_the_incoherent_state_at_the_closed_form_rate():
    """A small first moment near the incoherent state grows like e^{(K/2 - Delta - D) t}."""
    solver = LorentzianKuramoto(mf.SelfAttention(0.0, value=1.2, diffusion=0.2), WIDTH, modes=16)
    moments = np.zeros(16, dtype=complex)
    moments[0] = 1e-7
    run = solver.solve(moments, [0.0, 5.0])
    rate = np.log(run.order_parameter.values[-1] / 1e-7) / 5.0
    assert rate == pytest.approx(0.6 - 0.5 - 0.2, rel=1e-6)


@pytest.mark.parametrize("build, match", [
    (lambda: LorentzianKuramoto(mf.SelfAttention(1.0), WIDTH), "linear in the measure"),
    (lambda: LorentzianKuramoto(mf.SelfAttention(1.0, normalized=False), WIDTH), "a pair kernel of one harmonic"),
    (lambda: LorentzianKuramoto(mf.SelfAttention(0.0), 0.0), "width must be > 0"),
    (lambda: LorentzianKuramoto(mf.SelfAttention(0.0), WIDTH).solve(np.ones(3), [0.0, 1.0]), "64 finite moments"),
])
def test_what_has_no_exact_reduction_is_refused_in_one_line(build, match):
    with pytest.raises(ValueError, match=match):
        build()


def test_a_marginal_that_sharpens_beyond_its_moments_ends_the_run():
    solver = LorentzianKuramoto(mf.SelfAttention(0.0, value=COUPLING), WIDTH, modes=16)
    with pytest.warns(UnderResolvedWarning, match="sharpens beyond 16 moments"):
        run = solver.solve(off_the_manifold, [0.0, 1.0, 5.0])
    assert np.isfinite(run.attrs["underresolved_since"]) and run.sizes["time"] < 3
