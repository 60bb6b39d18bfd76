"""The S^2 PDE with general query, key and value matrices and several heads (issue: mean field of real attention)."""

import json

import numpy as np
import pytest
from scipy.spatial.transform import Rotation

import meanfield as mf
from solvers import SphereSpectral
from validation.convergence import StudySettings, mean_field_convergence

QUERY = np.stack([np.array([[1.0, 0.3, 0.0], [0.0, 0.8, 0.2], [0.1, 0.0, 1.1]]),
                  Rotation.from_rotvec([0.3, 0.0, 0.2]).as_matrix()])
KEY = np.stack([np.array([[0.9, 0.0, 0.1], [0.2, 1.0, 0.0], [0.0, -0.2, 0.8]]), np.eye(3)])
VALUE = np.stack([np.array([[1.0, 0.2, 0.0], [-0.1, 0.7, 0.1], [0.0, 0.1, 0.9]]), 0.5 * np.diag([0.6, 1.0, 0.8])])


def general_model(normalized=True, diffusion=0.0):
    return mf.SelfAttention(1.0, normalized=normalized, diffusion=diffusion, query=QUERY, key=KEY, value=VALUE)


def bumpy(points):
    return np.exp(1.5 * points[..., 2] + 0.8 * points[..., 0] * points[..., 1] + 0.5 * points[..., 0])


def settings_of(run):
    settings = json.loads(run.attrs["settings"])
    return settings["steps"], settings["rejected_steps"]


@pytest.mark.parametrize("normalized", [False, True])
@pytest.mark.parametrize("diffusion", [0.0, 0.05])
def test_general_path_equals_the_zonal_solver(normalized, diffusion):
    """Q = K = I, V = cI, one head: the general path gives the zonal run (same grid, same steps) to 1e-12."""
    zonal = mf.SelfAttention(1.0, normalized=normalized, diffusion=diffusion, value=1.3)
    matrices = mf.SelfAttention(1.0, normalized=normalized, diffusion=diffusion, value=1.3 * np.eye(3),
                                query=np.eye(3), key=np.eye(3))
    times = [0.0, 0.2, 0.4]
    reference = SphereSpectral(zonal, lmax=23).solve(bumpy, times)
    for model, interaction in ((zonal, "general"), (matrices, "auto")):
        solver = SphereSpectral(model, lmax=23, interaction=interaction)
        assert solver.general is not None
        run = solver.solve(bumpy, times)
        assert settings_of(run) == settings_of(reference)
        np.testing.assert_allclose(run.rho.values, reference.rho.values, rtol=0, atol=1e-12)
        np.testing.assert_allclose(run.energy.values, reference.energy.values, rtol=1e-12)


def direct_attention(solver, model, coefficients):
    """The velocity's grid components and the energy by plain quadrature over the solver's grid (O(G^2))."""
    grid = solver.grid
    weights = (grid.synthesise(coefficients) * grid.area_weight).ravel()
    y = grid.points().reshape(-1, 3)
    output, energy = np.zeros_like(y), 0.0
    for q, k, v in zip(model.query, model.key, model.value):
        kernel = np.exp(model.beta * (y @ q.T) @ (y @ k.T).T)
        z, n = kernel @ weights, kernel @ (weights[:, None] * y)
        output += (n / z[:, None] if model.normalized else n) @ v.T
        energy += weights @ z / (2 * model.beta)
    theta, phi = np.arccos(y[:, 2]), np.arctan2(y[:, 1], y[:, 0])
    e_theta = np.stack([np.cos(theta) * np.cos(phi), np.cos(theta) * np.sin(phi), -np.sin(theta)], axis=-1)
    e_phi = np.stack([-np.sin(phi), np.cos(phi), np.zeros_like(phi)], axis=-1)
    return np.sum(output * e_theta, axis=-1), np.sum(output * e_phi, axis=-1), energy


@pytest.mark.parametrize("normalized", [False, True])
def test_velocity_and_energy_match_direct_quadrature(normalized):
    """Coefficient-space matrices vs the pair sum over the Gauss grid (exact here: band-limited rho, kernel tail 2^-56)."""
    model = general_model(normalized)
    solver = SphereSpectral(model, lmax=23)
    coefficients = solver.initial_coefficients(bumpy)
    along_t, along_p = solver.velocity(coefficients)
    direct_t, direct_p, energy = direct_attention(solver, model, coefficients)
    scale = np.abs(direct_t).max()
    np.testing.assert_allclose(along_t.ravel(), direct_t, rtol=0, atol=1e-13 * scale)
    np.testing.assert_allclose(along_p.ravel(), direct_p, rtol=0, atol=1e-13 * scale)
    np.testing.assert_allclose(solver.energy(coefficients), energy, rtol=1e-13)


@pytest.mark.parametrize("normalized", [False, True])
def test_rotation_covariance(normalized):
    """rho(R^T x) with (Q R^T, K R^T, R V R^T) is the rotated solution.

    Truncation at degree lmax commutes with rotations, so what remains is the time
    integration: both runs hold their local error below rtol = 1e-9 of the deviation norm.
    """
    r = Rotation.from_rotvec([0.4, -0.7, 0.5]).as_matrix()
    model = general_model(normalized)
    turned = mf.SelfAttention(1.0, normalized=normalized, query=QUERY @ r.T, key=KEY @ r.T, value=r @ VALUE @ r.T)
    times = [0.0, 0.2, 0.4]
    solver, turned_solver = SphereSpectral(model, lmax=31, rtol=1e-9), SphereSpectral(turned, lmax=31, rtol=1e-9)
    run = solver.solve(bumpy, times)
    turned_run = turned_solver.solve(lambda p: bumpy(p @ r), times)
    points = turned_solver.grid.points().reshape(-1, 3)
    for k in range(len(times)):
        original = solver.grid.point_values(solver.grid.analyse(run.rho.values[k]), points @ r)  # at R^T x
        rotated = turned_run.rho.values[k].ravel()
        np.testing.assert_allclose(rotated, original, rtol=0, atol=1e-8 * rotated.max())
    assert bool(run.resolved.all()) and bool(turned_run.resolved.all())


@pytest.mark.parametrize("normalized,diffusion", [(True, 0.0), (False, 0.0), (True, 0.1)])
def test_mass(normalized, diffusion):
    run = SphereSpectral(general_model(normalized, diffusion), lmax=31).solve(bumpy, [0.0, 0.2, 0.4])
    np.testing.assert_allclose(run.mass.values, 1.0, rtol=0, atol=1e-12)


def test_symmetric_usa_energy_is_non_decreasing():
    """USA with every V_h = A_h = Q_h^T K_h symmetric ascends (1/2 beta) sum_h int int e^{beta <x, A_h y>}."""
    a1 = np.array([[1.0, 0.4, 0.0], [0.4, 0.5, 0.2], [0.0, 0.2, 0.8]])
    a2 = np.array([[0.3, -0.2, 0.1], [-0.2, 0.9, 0.0], [0.1, 0.0, 0.6]])
    model = mf.SelfAttention(1.0, normalized=False, query=np.stack([a1, a2]), key=np.stack([np.eye(3)] * 2),
                             value=np.stack([a1, a2]))
    run = SphereSpectral(model, lmax=31).solve(bumpy, np.linspace(0.0, 0.3, 7))
    assert bool(run.resolved.all())
    energy = run.energy.values
    assert np.all(np.diff(energy) >= -1e-12 * np.abs(energy[1:])), np.diff(energy)
    assert energy[-1] > energy[0] * (1 + 1e-3)  # it moves
    np.testing.assert_allclose(run.lyapunov.values, -energy, rtol=1e-14)
    other = SphereSpectral(general_model(False), lmax=23)  # V_h != A_h: no known functional
    assert np.isnan(other.lyapunov(other.initial_coefficients(bumpy)))


def test_particles_converge_to_the_general_pde(assert_half_rate):
    """Two non-zonal heads on S^2: the particle-PDE distance falls like n^{-1/2} (interval contains -1/2).

    RK4 with step 0.05 (error ~1e-6, far below the distances); about 10 s.
    """
    study = mean_field_convergence(general_model(), bumpy, geometry="sphere", sizes=[32, 64, 128, 256, 512],
                                   seeds=32, times=[0.0, 0.25, 0.5], rng=3, settings=StudySettings(particle_dt=0.05))
    assert_half_rate(study, (0.25, 0.5))


def test_zonal_interaction_refuses_matrices_and_foreign_models():
    with pytest.raises(ValueError, match="interaction='zonal' needs"):
        SphereSpectral(general_model(), lmax=23, interaction="zonal")
    with pytest.raises(ValueError, match="interaction must be"):
        SphereSpectral(general_model(), lmax=23, interaction="matrix")
    with pytest.raises(ValueError, match="SphereSpectral's interaction='general' takes SelfAttention .* got ZonalAggregation"):
        SphereSpectral(mf.ZonalAggregation(lambda s: s, lambda s: 1 + 0 * s), lmax=23, interaction="general")
    with pytest.raises(ValueError, match="got CausalAttention \\(causal attention: use CausalSphereSpectral\\)"):
        SphereSpectral(mf.CausalAttention(1.0, True), lmax=23)
    with pytest.raises(ValueError, match="R\\^2"):
        SphereSpectral(mf.SelfAttention(1.0, query=np.eye(2)), lmax=23)
    with pytest.raises(ValueError, match="does not resolve the kernel"):
        SphereSpectral(mf.SelfAttention(30.0, query=QUERY, key=KEY, value=VALUE), lmax=15)


SPHERE_CONFIG = """
output = "out"
geometry = "sphere"
times = {{ stop = 0.2, count = 3 }}
[model]
beta = 1.0
query = "q.npy"
key = [[0.9, 0.0, 0.1], [0.2, 1.0, 0.0], [0.0, -0.2, 0.8]]
value = [[1.0, 0.2, 0.0], [-0.1, 0.7, 0.1], [0.0, 0.1, 0.9]]
[method]
kind = "{method}"
{lmax}
[initial]
kind = "perturbed_uniform"
"""


def test_configs_run_matrices_on_the_sphere(tmp_path):
    """The same config as SphereSpectral and as particles: one model, and the PDE run uses the general path."""
    from validation.app import run_experiment
    np.save(tmp_path / "q.npy", QUERY[0])
    config = tmp_path / "run.toml"
    config.write_text(SPHERE_CONFIG.format(method="SphereSpectral", lmax="lmax = 23"))
    pde = run_experiment(config, progress=False)
    model = mf.model_from_dict(pde.attrs["model"])
    np.testing.assert_array_equal(model.query[0], QUERY[0])
    assert not model.is_zonal and bool(pde.resolved.all())
    np.testing.assert_allclose(pde.mass.values, 1.0, atol=1e-12)


def test_time_rescaled_energy_is_scaled_and_labelled():
    """Time-rescaled USA: the kernel and the energy carry exp(-beta B), B = max_h ||Q_h^T K_h||, and the record says so."""
    model = mf.SelfAttention(1.0, normalized=False, query=QUERY, key=KEY, value=VALUE, time_rescaled=True)
    plain = general_model(normalized=False)
    solver, plain_solver = SphereSpectral(model, lmax=23), SphereSpectral(plain, lmax=23)
    coefficients = solver.initial_coefficients(bumpy)
    bound = max(np.linalg.norm(q.T @ k, 2) for q, k in zip(QUERY, KEY))
    _, _, energy = direct_attention(plain_solver, plain, coefficients)
    np.testing.assert_allclose(solver.energy(coefficients), np.exp(-bound) * energy, rtol=1e-13)
    for rescaled, original in zip(solver.velocity(coefficients), plain_solver.velocity(coefficients)):
        np.testing.assert_allclose(rescaled, np.exp(-bound) * original, rtol=0, atol=1e-15)
    run = solver.solve(bumpy, [0.0, 0.1])
    assert run.energy.attrs["note"] == f"exp(-beta B) E, B = max_h ||Q_h^T K_h||_2 = {bound:.6g}"
