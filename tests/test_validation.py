"""Distances, exact references and the mean-field convergence study."""

import json

import numpy as np
import ot
import pytest
import xarray as xr
from scipy.special import eval_legendre

import meanfield as mf
from meanfield.particles import particle_dataset
from solvers import CircleFV, SphereSpectral
from validation import distance
from validation.convergence import fit_ranges, fit_rates, mean_field_convergence
from validation.distances import mmd_degree, mmd_weights

MODEL = mf.SelfAttention(1.0)


def particles(x, model=MODEL, times=(0.0,)):
    return particle_dataset(model, np.stack([x] * len(times), axis=-3), np.zeros(len(times)), np.array(times), {})


def circle_density(values, model=MODEL):
    values = np.atleast_2d(values)
    cells = values.shape[-1]
    ds = xr.Dataset({"rho": (("time", "theta"), values)},
                    coords={"time": [0.0], "theta": (np.arange(cells) + 0.5) * 2 * np.pi / cells})
    ds.attrs.update(geometry="circle", model=json.dumps(model.to_dict()))
    return ds


@pytest.mark.parametrize("na, nb", [(1, 1), (5, 5), (50, 70), (3, 1000), (2000, 1500)])
def test_circle_w1_between_particles_matches_pot(na, nb, rng):
    xa, xb = mf.sample_uniform(na, 2, rng), mf.sample_uniform(nb, 2, rng)
    ua, ub = mf.circle_angles(xa) / (2 * np.pi), mf.circle_angles(xb) / (2 * np.pi)
    expected = 2 * np.pi * ot.wasserstein_circle(ua, ub, p=1)[0]
    assert distance(particles(xa), particles(xb)).values[0] == pytest.approx(expected, abs=1e-10)


def test_circle_w1_uniform_against_one_atom_is_pi_over_two():
    uniform = circle_density(np.full(16, 1 / (2 * np.pi)))
    atom = particles(np.array([[1.0, 0.0]]))
    assert distance(uniform, atom).values[0] == pytest.approx(np.pi / 2, abs=1e-14)


def test_circle_w1_density_against_particles_matches_brute_force(rng):
    cells = 64
    theta = (np.arange(cells) + 0.5) * 2 * np.pi / cells
    rho = 1 + 0.5 * np.cos(theta)
    rho /= rho.sum() * 2 * np.pi / cells
    x = mf.sample_uniform(40, 2, rng)
    exact = distance(circle_density(rho), particles(x)).values[0]
    # Brute force: min_c of the integral of |F_mu - F_rho - c| on a fine midpoint grid.
    grid = (np.arange(2_000_000) + 0.5) * 2 * np.pi / 2_000_000
    f_mu = np.searchsorted(np.sort(mf.circle_angles(x)), grid, side="right") / 40
    index = (grid // (2 * np.pi / cells)).astype(int)
    f_rho = np.concatenate([[0], np.cumsum(rho)])[index] * 2 * np.pi / cells + rho[index] * (grid - index * 2 * np.pi / cells)
    gap = f_mu - f_rho
    brute = np.mean(np.abs(gap - np.median(gap))) * 2 * np.pi
    assert exact == pytest.approx(brute, abs=1e-6)  # midpoint-rule error of the brute force


def piecewise_constant_cdf(rho, grid):
    cells = rho.size
    h = 2 * np.pi / cells
    index = np.minimum((grid // h).astype(int), cells - 1)
    return np.concatenate([[0], np.cumsum(rho)])[index] * h + rho[index] * (grid - index * h)


def test_w1_between_two_pde_runs_matches_brute_force():
    solver = CircleFV(MODEL, cells=64)
    a = solver.solve(lambda th: 1 + 0.5 * np.cos(th), [0.0])
    b = solver.solve(lambda th: 1 + 0.3 * np.sin(2 * th), [0.0])
    grid = (np.arange(2_000_000) + 0.5) * 2 * np.pi / 2_000_000
    gap = piecewise_constant_cdf(a.rho.values[0], grid) - piecewise_constant_cdf(b.rho.values[0], grid)
    brute = np.mean(np.abs(gap - np.median(gap))) * 2 * np.pi
    assert distance(a, b).values[0] == pytest.approx(brute, abs=1e-9)  # midpoint rule, smooth integrand
    assert brute > 0.1


def test_mmd_between_two_pde_runs_matches_the_closed_form():
    """rho_a - rho_b = (0.5 z - 0.3 x y) / (4 pi): MMD^2 = sum_l e^{-s l(l+1)} ||degree-l part||^2."""
    solver = SphereSpectral(MODEL, lmax=31)
    a = solver.solve(lambda p: 1 + 0.5 * p[..., 2], [0.0])
    b = solver.solve(lambda p: 1 + 0.3 * p[..., 0] * p[..., 1], [0.0])
    smoothing = 0.05  # the default
    degree_1 = 0.25 * (4 * np.pi / 3) / (4 * np.pi) ** 2
    degree_2 = 0.09 * (4 * np.pi / 15) / (4 * np.pi) ** 2
    exact = np.sqrt(np.exp(-2 * smoothing) * degree_1 + np.exp(-6 * smoothing) * degree_2)
    assert distance(a, b).values[0] == pytest.approx(exact, rel=1e-12)


def test_mmd_between_particle_sets_matches_direct_kernel_sum(rng):
    smoothing = 0.05
    x, y = mf.sample_uniform(30, 3, rng), mf.sample_von_mises_fisher(25, [0, 0, 1], 2.0, rng)
    lmax = mmd_degree(smoothing)
    degrees = np.arange(lmax + 1)
    a = np.exp(-smoothing * degrees * (degrees + 1)) * (2 * degrees + 1) / (4 * np.pi)

    def kernel_mean(p, q):  # addition theorem: sum_m Y_lm(p) conj Y_lm(q) = (2l+1)/(4 pi) P_l(<p, q>)
        s = np.clip(p @ q.T, -1, 1)
        return sum(a[l] * eval_legendre(l, s).mean() for l in degrees)

    direct = np.sqrt(kernel_mean(x, x) + kernel_mean(y, y) - 2 * kernel_mean(x, y))
    assert distance(particles(x), particles(y)).values[0] == pytest.approx(direct, rel=1e-10)
    assert mmd_weights(lmax, smoothing)[-1] < 1e-17


def test_mmd_between_density_and_its_particles_shrinks_like_root_n(rng):
    ds = SphereSpectral(MODEL, lmax=31).solve(lambda p: np.exp(p[..., 0]), [0.0])
    values = {n: np.mean([distance(ds, particles(mf.sample_sphere(n, lambda p: np.exp(p[:, 0]), 3, rng))).values[0]
                          for _ in range(6)]) for n in (100, 1600)}
    # n^{-1/2} predicts 0.25. One MMD sample spreads by ~12 % (measured over 40 seeds), a mean of 6
    # by ~5 %, the ratio of two such means by ~7 %: 0.2 is about 3 of those.
    assert values[1600] / values[100] == pytest.approx(0.25, rel=0.2)


def test_fit_rates_recovers_an_exact_power_law(rng):
    sizes = np.array([10, 100, 1000])
    noise = np.exp(0.05 * rng.normal(size=(3, 8, 2)))
    distances = sizes[:, None, None] ** -0.5 * noise
    rate, low, high = fit_rates(sizes, distances, 500, 0.95, rng)
    assert np.all(low <= -0.5) and np.all(high >= -0.5) and np.all(np.abs(rate + 0.5) < 0.02)


@pytest.mark.parametrize("kwargs, argument", [
    (dict(sizes=[64]), "sizes"),
    (dict(sizes=[1, 64]), "sizes"),
    (dict(seeds=0), "seeds"),
    (dict(geometry="torus"), "geometry"),
])
def test_bad_study_arguments(kwargs, argument):
    arguments = dict(geometry="circle", sizes=[16, 32], seeds=2, times=[0.0, 0.1])
    arguments.update(kwargs)
    with pytest.raises(ValueError, match=argument):
        mean_field_convergence(MODEL, lambda th: 1 + 0 * th, **arguments)


def test_mismatched_datasets_are_refused(rng):
    circle = particles(mf.sample_uniform(5, 2, rng))
    sphere = particles(mf.sample_uniform(5, 3, rng))
    other_model = particles(mf.sample_uniform(5, 2, rng), model=mf.SelfAttention(2.0))
    later = particles(mf.sample_uniform(5, 2, rng), times=(0.0, 1.0))
    with pytest.raises(ValueError, match="geometr"):
        distance(circle, sphere)
    with pytest.raises(ValueError, match="model"):
        distance(circle, other_model)
    with pytest.raises(ValueError, match="times"):
        distance(circle, later)


def test_particles_and_pde_agree_on_an_unstable_mode():
    model = mf.SelfAttention(5.0)
    epsilon, k, t_end, n, systems = 0.1, 3, 1.0, 400, 30
    rho0 = lambda th: 1 + epsilon * np.cos(k * th)  # noqa: E731
    pde = CircleFV(model, cells=1024).solve(rho0, [0.0, t_end])
    theta = pde.theta.values
    pde_mode = pde.rho.values @ np.cos(k * theta) * (2 * np.pi / theta.size)
    generator = np.random.default_rng(5)
    x0 = np.stack([mf.sample_circle(n, rho0, generator) for _ in range(systems)])
    run = mf.simulate_particles(model, x0, [0.0, t_end], method="rk4", dt=0.05)
    modes = np.cos(k * mf.circle_angles(run.x.values)).mean(axis=-1)  # (system, time)
    standard_error = modes.std(axis=0, ddof=1) / np.sqrt(systems)
    assert pde_mode[1] > 1.8 * pde_mode[0]  # the mode is linearly unstable and grew
    np.testing.assert_array_less(np.abs(modes.mean(axis=0) - pde_mode), 4 * standard_error)


@pytest.mark.slow
@pytest.mark.parametrize("geometry", ["circle", "sphere"])
def test_short_default_study_recovers_minus_one_half_at_every_time(geometry):
    """Default counts, seeds and settings; the default times up to the second."""
    from validation.app.validate import default_specs
    spec = default_specs()[geometry]
    study = mean_field_convergence(spec.model, spec.rho0, geometry=geometry, sizes=spec.sizes, seeds=spec.seeds,
                                   times=spec.times[:2], settings=spec.settings, progress=False)
    assert study.attrs["fitted_sizes"][-1] >= (16384 if geometry == "circle" else 8192)
    np.testing.assert_array_less(study.rate_low.values, -0.5)
    np.testing.assert_array_less(-0.5, study.rate_high.values)
    assert np.all(study.rate_high.values - study.rate_low.values <= 2 * 0.03 + 0.01)  # half-width ~0.03


def test_saturation_test_sees_a_flattening_at_small_n(rng):
    """Synthetic distances: n^{-1/2} from n = 256 on, flat below; the test must flag the small counts."""
    sizes = np.array([16, 32, 64, 128, 256, 512, 1024, 2048])
    law = np.where(sizes < 256, 256.0 ** -0.5 * (sizes / 256.0) ** -0.2, sizes ** -0.5)
    distances = law[:, None, None] * np.exp(0.05 * rng.normal(size=(sizes.size, 16, 1)))
    fits = fit_ranges(sizes, distances, 1000, 0.95, rng)
    assert fits["rate_low"][1][0] <= -0.5 <= fits["rate_high"][1][0]
    assert fits["saturation_low"][1][0] > 0.1
    flat = sizes ** -0.5 * np.exp(0.05 * rng.normal(size=(sizes.size, 16, 1)))
    fits = fit_ranges(sizes, flat, 1000, 0.95, rng)
    assert fits["saturation_low"][1][0] <= 0 <= fits["saturation_high"][1][0]


def test_cluster_statistics_of_particles_on_both_geometries(rng):
    from validation import cluster_statistics, order_parameter

    centres = mf.circle_points(np.array([0.05, 2.0, 4.0]))  # the first cluster straddles angle 0
    offsets = np.concatenate([np.full(10, -0.06), np.linspace(-0.03, 0.03, 10)])
    circle = np.concatenate([mf.circle_points(mf.circle_angles(c[None])[0] + offsets[: k]) for c, k in
                             zip(centres, (20, 12, 8))])
    summary = cluster_statistics(particles(circle))
    np.testing.assert_allclose(summary.masses, [0.5, 0.3, 0.2])
    assert summary.count == 3
    sphere = np.concatenate([mf.sample_von_mises_fisher(30, [0, 0, 1], 2000.0, rng),
                             mf.sample_von_mises_fisher(10, [1, 0, 0], 2000.0, rng)])
    summary = cluster_statistics(particles(sphere))
    np.testing.assert_allclose(summary.masses, [0.75, 0.25])
    np.testing.assert_allclose(summary.positions, [[0, 0, 1], [1, 0, 0]], atol=0.02)
    m = sphere.mean(axis=0)
    assert order_parameter(particles(sphere)).values[0] == pytest.approx(np.linalg.norm(m), rel=1e-14)


def test_cluster_statistics_of_densities():
    from validation import cluster_statistics, order_parameter

    cells = 256
    theta = (np.arange(cells) + 0.5) * 2 * np.pi / cells
    bumps = np.exp(40 * (np.cos(theta - 1.0) - 1)) + 0.5 * np.exp(40 * (np.cos(theta - 4.0) - 1))
    rho = bumps / (bumps.sum() * 2 * np.pi / cells)
    summary = cluster_statistics(circle_density(rho))
    assert summary.count == 2
    # The level set is cut at cell boundaries: positions are exact to within a cell.
    np.testing.assert_allclose(mf.circle_angles(summary.positions), [1.0, 4.0], atol=2 * np.pi / cells)
    # Masses count the density where it exceeds twice the uniform value: the heavier bump first.
    assert summary.masses[0] > summary.masses[1] > 0.2 and summary.masses.sum() < 1
    # Order parameter of a von Mises density exp(k cos th): I_1(k) / I_0(k).
    from scipy.special import iv
    fine = (np.arange(cells * 64) + 0.5) * 2 * np.pi / (cells * 64)
    von_mises = np.exp(3 * np.cos(fine)).reshape(cells, 64).mean(axis=1)  # cell averages
    von_mises /= von_mises.sum() * 2 * np.pi / cells
    assert order_parameter(circle_density(von_mises)).values[0] == pytest.approx(iv(1, 3) / iv(0, 3), rel=1e-8)
    ds = SphereSpectral(MODEL, lmax=31).solve(lambda p: np.exp(8 * p[..., 2]) + np.exp(8 * p[..., 0]), [0.0])
    summary = cluster_statistics(ds)
    assert summary.count == 2
    # Equal bumps at the pole and on the equator: the level sets are cut on different grid cells
    # (spacing pi/48 here), which moves their masses by a fraction of a cell ring.
    np.testing.assert_allclose(summary.masses[0], summary.masses[1], rtol=0.02)
    # Each bump sits on the tail of the other, which pulls its centre of mass by about 0.01.
    np.testing.assert_allclose(np.sort(np.abs(summary.positions), axis=0), [[0, 0, 0], [1, 0, 1]], atol=0.02)
