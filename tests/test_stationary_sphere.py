"""Stationary states on S^2 (solvers.stationary.sphere): axisymmetric states, their stability, their branches.

References written apart from the solver: the dispersion relation (validation.growth_rate), the
self-consistency of the gradient flows solved in the polar variable alone (Gauss-Legendre
quadrature and the Funk-Hecke coefficients of exp(beta t) from scipy's modified spherical Bessel
functions), and SphereSpectral's own time integration for the eigenvalues of a branch.
"""

import numpy as np
import pytest
from numpy.polynomial.legendre import leggauss
from scipy.special import eval_legendre, spherical_in

import meanfield as mf
from solvers import SphereSpectral
from solvers.stationary.bifurcation import bifurcation_diagram
from solvers.stationary.continuation import branch_from_uniform, stationary_state, uniform_bifurcations
from solvers.stationary.sphere import SphereStationary
from validation import growth_rate


def gibbs_fixed_point(model, start, nodes=96, degrees=48, tol=1e-14):
    """An axisymmetric stationary density of SA or USA from rho = Gibbs(K * rho), in z = cos(theta) alone.

    K * rho (z) = sum_l (2l+1) i_l(beta) m_l P_l(z), m_l = int rho P_l (Funk-Hecke for exp(beta t));
    USA: rho ~ exp(c K*rho / (beta D)); SA: rho ~ (K*rho)^(c / (beta D)). Returns rho as a function of z.
    """
    z, w = leggauss(nodes)
    legendre = np.array([eval_legendre(l, z) for l in range(degrees)])
    bessel = np.array([(2 * l + 1) * spherical_in(l, model.beta) for l in range(degrees)])
    exponent = model.value_scale / (model.beta * model.diffusion)

    def gibbs(rho, at):
        moments = 2 * np.pi * legendre @ (w * rho)
        convolution = (bessel * moments) @ np.array([eval_legendre(l, at) for l in range(degrees)])
        if model.velocity_is_linear:  # shifted by the largest possible value, the same at every point
            return np.exp(exponent * (convolution - np.abs(bessel * moments).sum()))
        return convolution ** exponent

    rho = start(z)
    for _ in range(20000):
        new = gibbs(rho, z)
        new /= 2 * np.pi * (w @ new)
        change = np.abs(new - rho).max() / rho.max()
        rho = 0.5 * rho + 0.5 * new
        if change < tol:
            break
    else:
        raise RuntimeError("no convergence")
    mass = 2 * np.pi * (w @ gibbs(rho, z))
    return lambda at: gibbs(rho, at) / mass


@pytest.mark.parametrize("normalized", [True, False])
def test_uniform_eigenvalues_are_the_dispersion_relation_with_multiplicity_two_l_plus_one(normalized):
    model = mf.SelfAttention(3.0, normalized=normalized, diffusion=0.1)
    problem = SphereStationary(model, lmax=15)
    for degree in range(1, 6):
        exact = growth_rate(model, degree, 3)
        assert abs(problem.uniform_eigenvalue(degree, 0.1) - exact) <= 1e-9 * max(1.0, abs(exact))
    values, _ = problem.leading_eigenvalues(np.zeros(problem.size), 0.1, count=9)
    rates = sorted((growth_rate(model, l, 3) for l in range(1, 16)), reverse=True)
    expected = [rate for rate, l in sorted(((growth_rate(model, l, 3), l) for l in range(1, 16)), reverse=True)
                for _ in range(2 * l + 1)][:9]
    np.testing.assert_allclose(values.real, expected, rtol=0, atol=1e-9)
    assert rates[0] == expected[0]


def test_bifurcation_points_are_the_zeros_of_the_dispersion_relation():
    """In D: mode l bifurcates where its drive equals D (validation.growth_rate vanishes)."""
    model = mf.SelfAttention(3.0, diffusion=0.1)
    problem = SphereStationary(model, lmax=15)
    found = uniform_bifurcations(problem, (0.02, 0.5), [1, 2, 3, 4])
    for degree, value in found:
        drive = growth_rate(model, degree, 3) / (degree * (degree + 1)) + model.diffusion
        assert abs(value - drive) < 1e-10, (degree, value, drive)
    assert {degree for degree, _ in found} == {1, 2, 3}  # mode 4's drive is below 0.02


def first_branch_state(problem, fraction):
    """The state of the mode-1 branch at ``fraction`` of its onset's diffusion: followed there, then solved."""
    _, onset = uniform_bifurcations(problem, (0.02, 2.0), [1])[0]
    branch = branch_from_uniform(problem, 1, onset, (fraction * onset, onset), max_points=60, progress=False)
    return stationary_state(problem, branch.points[-1].unknowns, fraction * onset)


@pytest.mark.parametrize("normalized,beta", [(True, 3.0), (False, 1.0)])
def test_a_state_on_the_first_branch_is_the_gibbs_fixed_point(normalized, beta):
    """Newton on SphereSpectral's discretisation (lmax = 23) against the self-consistency solved in z alone
    (SA beta = 3 and USA beta = 1: their mode-1 branches are supercritical, so 0.8 of the onset is on them)."""
    model = mf.SelfAttention(beta, normalized=normalized, diffusion=0.1)
    problem = SphereStationary(model, lmax=23)
    point = first_branch_state(problem, 0.8)
    diffusion = point.value
    reference = gibbs_fixed_point(mf.SelfAttention(beta, normalized=normalized, diffusion=diffusion),
                                  lambda z: 1 + 0.5 * z)
    density = problem.density(point.unknowns)
    exact = reference(np.cos(problem.colatitude))
    assert np.abs(density - exact).max() < 1e-9 * exact.max()
    assert np.abs(density - problem.uniform).max() > 0.05 * problem.uniform  # a real cluster, not the uniform state
    assert point.eigenvalues.real.max() < -1e-3  # the first branch is stable, the rotations left out


def test_the_leading_eigenvalue_of_a_state_is_the_rate_at_which_sphere_spectral_moves_a_perturbation():
    """Mode 2 of USA bifurcates first (unstable uniform direction elsewhere): perturb a stationary state along
    each of its two leading eigenvectors and let SphereSpectral run; the perturbation's size changes at the
    eigenvalue's rate, to 1 % (perturbation 1e-5: the quadratic terms are 1e-5 of it)."""
    model = mf.SelfAttention(3.0, diffusion=0.2)
    problem = SphereStationary(model, lmax=23)
    point = first_branch_state(problem, 0.8)
    values, vectors = problem.leading_eigenvalues(point.unknowns, point.value, count=2)
    state = problem.coefficients(point.unknowns)
    solver = SphereSpectral(mf.SelfAttention(3.0, diffusion=point.value), lmax=23, rtol=1e-11)
    for value, vector in zip(values, vectors.T):
        direction = 1e-5 * vector / np.linalg.norm(vector)
        run = solver.solve(solver.grid.synthesise(state + direction), [0.0, 1.0], progress=False)
        moved = solver.grid.analyse(run.rho.values[-1]) - state
        rate = np.log(np.linalg.norm(moved) / np.linalg.norm(direction))
        assert abs(rate - value.real) < 0.01 * abs(value.real), (rate, value)


def test_the_rotation_is_the_zero_eigenvalue_left_out():
    model = mf.SelfAttention(3.0, diffusion=0.1)
    problem = SphereStationary(model, lmax=23)
    point = first_branch_state(problem, 0.7)
    order_one = np.linalg.eigvals(problem.blocks(point.unknowns, point.value)[1])
    assert np.abs(order_one).min() < 1e-6  # the rotation about an equatorial axis
    values, _ = problem.leading_eigenvalues(point.unknowns, point.value, count=6)
    assert np.all(np.abs(values) > 1e-3)


def test_a_subcritical_branch_on_the_sphere_folds_and_gains_stability_at_the_fold():
    """USA beta = 3: mode 1 bifurcates at D = 0.7476 toward larger D, unstable, folds, and is stable after."""
    model = mf.SelfAttention(3.0, normalized=False, diffusion=0.1)
    ds = bifurcation_diagram(model, "diffusion", (0.5, 1.0), geometry="sphere", lmax=31, modes=[1],
                             max_points=30, progress=False)
    branch = ds.where(ds.on_branch == 1, drop=True)
    folds = np.flatnonzero(branch.fold.values)
    assert folds.size == 1, branch.diffusion.values
    diffusion, stable = branch.diffusion.values, branch.stable.values
    fold = folds[0]
    assert diffusion[fold] > float(ds.bifurcation_value[1]) and diffusion[fold] >= diffusion[: fold + 1].max()
    assert not stable[1:fold].any() and stable[fold + 2:].all()


def test_a_sphere_diagram_follows_the_first_branch_and_records_its_geometry():
    model = mf.SelfAttention(3.0, diffusion=0.1)
    ds = bifurcation_diagram(model, "diffusion", (0.1, 0.3), geometry="sphere", lmax=15, modes=[1],
                             max_points=12, progress=False)
    assert ds.attrs["geometry"] == "sphere" and ds.attrs["lmax"] == 15 and "colatitude" in ds.density.dims
    branch = ds.where(ds.on_branch == 1, drop=True)
    assert branch.sizes["point"] >= 5 and bool(branch.stable.all())
    assert abs(float(ds.bifurcation_value[1]) - (growth_rate(model, 1, 3) / 2 + 0.1)) < 1e-10


def test_bad_input_is_refused():
    with pytest.raises(ValueError, match="zonal model without external field"):
        SphereStationary(mf.SelfAttention(1.0, diffusion=0.1, query=np.diag([1.0, 2.0, 3.0])), lmax=15)
    with pytest.raises(ValueError, match="without diffusion the stationary states are sums of Dirac masses"):
        stationary_state(SphereStationary(mf.SelfAttention(1.0, diffusion=0.1), lmax=15), np.zeros(15), 0.0)
    with pytest.raises(ValueError, match="does not resolve the kernel"):
        SphereStationary(mf.SelfAttention(200.0, diffusion=0.1), lmax=7)
    with pytest.raises(ValueError, match="geometry must be"):
        bifurcation_diagram(mf.SelfAttention(1.0, diffusion=0.1), "diffusion", (0.1, 0.3), geometry="torus")


def test_the_stationary_command_draws_a_sphere_diagram(tmp_path):
    from validation.app.cli import main
    import xarray as xr
    config = tmp_path / "sphere.toml"
    config.write_text('geometry = "sphere"\noutput = "out"\n[model]\nbeta = 1.0\nnormalized = false\ndiffusion = 0.1\n'
                      '[continuation]\nparameter = "diffusion"\nstart = 0.25\nstop = 0.5\nlmax = 15\n'
                      'modes = [1]\nmax_points = 8\n')
    assert main(["stationary", str(config), "--quiet"]) == 0
    ds = xr.open_dataset(tmp_path / "out" / "bifurcation.nc")
    model = mf.SelfAttention(1.0, normalized=False, diffusion=0.1)
    assert ds.attrs["geometry"] == "sphere" and (tmp_path / "out" / "bifurcation.png").is_file()
    assert abs(float(ds.bifurcation_value[1]) - (growth_rate(model, 1, 3) / 2 + 0.1)) < 1e-10
    config.write_text(config.read_text().replace("lmax = 15", "lmax = 1"))
    assert main(["stationary", str(config), "--quiet"]) == 2
