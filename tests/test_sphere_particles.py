"""Weighted particles on S^2 and the hand-over from harmonics (solvers.sphere.particles).

References independent of the code under test: the weighted velocity written out pair by
pair; duplicated tokens; the particle system's own integrator (scipy's DOP853); the angle
ODE of two atoms; closed-form moments of a polynomial density; a spectral run at twice
the degree while it is still resolved.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from scipy.integrate import solve_ivp

import meanfield as mf
from solvers import SphereSpectral, SphereSpectralParticles, SphereWeightedParticles, UnderResolvedWarning
from solvers.sphere.particles import atoms_of


def unit(rng, n):
    x = rng.normal(size=(n, 3))
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def pairwise_velocity(x, masses, beta, query, key, value, normalized):
    """sum_j m_j e^{beta <Q x_i, K x_j>} V x_j (over the total weight for SA), projected, one pair at a time."""
    out = np.zeros_like(x)
    for i in range(len(x)):
        total, weight = np.zeros(3), 0.0
        for j in range(len(x)):
            w = masses[j] * np.exp(beta * (query @ x[i]) @ (key @ x[j]))
            total += w * (value @ x[j])
            weight += w
        a = total / weight if normalized else total
        out[i] = a - (a @ x[i]) * x[i]
    return out


@pytest.mark.parametrize("normalized", [True, False])
def test_weighted_velocity_and_energy_pair_by_pair(normalized):
    rng = np.random.default_rng(1)
    x, masses = unit(rng, 7), rng.uniform(0.1, 1.0, 7)
    masses /= masses.sum()
    q, k, v = rng.normal(size=(3, 3, 3))
    model = mf.SelfAttention(1.7, normalized=normalized, query=q, key=k, value=v)
    expected = pairwise_velocity(x, masses, 1.7, q, k, v, normalized)
    np.testing.assert_allclose(model.weighted_velocity(x, masses), expected, atol=1e-13)
    energy = sum(masses[i] * masses[j] * np.exp(1.7 * (q @ x[i]) @ (k @ x[j])) for i in range(7) for j in range(7))
    assert model.energy(x, masses=masses) == pytest.approx(energy / (2 * 1.7), rel=1e-13)


def test_masses_are_duplicated_tokens():
    """An atom of mass k/n moves and weighs as k tokens at one point (SA, USA, beta = 0, aggregation)."""
    rng = np.random.default_rng(2)
    x = unit(rng, 5)
    counts = np.array([1, 3, 2, 1, 4])
    tokens = np.repeat(x, counts, axis=0)
    first = np.cumsum(counts) - counts
    models = [mf.SelfAttention(3.0), mf.SelfAttention(2.0, normalized=False), mf.SelfAttention(0.0),
              mf.ZonalAggregation(lambda s: s ** 3 / 3, lambda s: s ** 2)]
    for model in models:
        masses = counts / counts.sum()
        np.testing.assert_allclose(model.weighted_velocity(x, masses), model.velocity(tokens)[first], atol=1e-14)
        assert model.energy(x, masses=masses) == pytest.approx(model.energy(tokens), rel=1e-13, abs=1e-15)


def test_causal_model_has_no_weighted_velocity():
    with pytest.raises(TypeError, match="order"):
        mf.CausalAttention(1.0, normalized=True).weighted_velocity(np.eye(3), np.ones(3) / 3)


def test_equal_masses_reproduce_the_particle_system():
    """Tokens as atoms of mass 1/n follow the particle system (scipy's DOP853 on the engines) to the tolerances."""
    rng = np.random.default_rng(3)
    x0, times = unit(rng, 24), np.linspace(0.0, 4.0, 5)
    model = mf.SelfAttention(4.0)
    tokens = mf.simulate_particles(model, x0, times, rtol=1e-12, progress=False).x.values
    atoms = np.column_stack([x0, np.full(24, 1 / 24)])
    ds = SphereWeightedParticles(model, lmax=15, rtol=1e-10).solve(atoms, times, continued=True, progress=False)
    # each run's error is about its steps (a few hundred) times its local tolerance (1e-10 and 1e-12)
    np.testing.assert_allclose(ds.atom_position.values, tokens, atol=1e-8)
    assert np.all(ds.mass.values == 1.0)


def test_two_atoms_close_their_angle_as_the_ode_says():
    """Masses m1, m2 at angle phi: phi' = -(w12 + w21) sin phi, w12 = m2 e^{b cos phi} / (m1 e^b + m2 e^{b cos phi})."""
    beta, m1, m2, phi0 = 2.0, 0.3, 0.7, 1.5
    times = np.linspace(0.0, 6.0, 7)

    def angle_rate(t, phi):
        near = np.exp(beta * np.cos(phi))
        w12 = m2 * near / (m1 * np.exp(beta) + m2 * near)
        w21 = m1 * near / (m2 * np.exp(beta) + m1 * near)
        return -(w12 + w21) * np.sin(phi)

    expected = solve_ivp(angle_rate, (0, 6), [phi0], t_eval=times, rtol=1e-12, atol=1e-14).y[0]
    atoms = np.array([[1.0, 0.0, 0.0, m1], [np.cos(phi0), np.sin(phi0), 0.0, m2]])
    ds = SphereWeightedParticles(mf.SelfAttention(beta), lmax=15, rtol=1e-10).solve(atoms, times, continued=True,
                                                                                     progress=False)
    positions = ds.atom_position.values
    angle = np.arccos(np.clip(np.sum(positions[:, 0] * positions[:, 1], axis=1), -1, 1))
    np.testing.assert_allclose(angle, expected, atol=1e-8)
    assert expected[-1] < 0.05  # they did close in
    assert np.all(np.abs(positions[..., 2]) < 1e-12)  # the motion stays in the atoms' plane
    # the lighter atom travels further (it is drawn by the heavier one's mass)
    travelled = np.arccos(np.clip(np.sum(positions[-1] * positions[0], axis=1), -1, 1))
    assert travelled[0] > travelled[1]


def test_values_on_another_grid_are_the_series_at_its_points():
    """SphereGrid.values_on against shtns's point evaluation (SH_to_point) at the finer grid's points."""
    coarse = SphereWeightedParticles(mf.SelfAttention(4.0), lmax=15).grid
    fine = SphereWeightedParticles(mf.SelfAttention(4.0), lmax=15, quadrature_lmax=40).quadrature
    points = coarse.points()
    coefficients = coarse.analyse(np.exp(points[..., 0]) * points[..., 1] ** 3)
    values = coarse.values_on(coefficients, fine)
    sample = fine.points()[::7, ::11].reshape(-1, 3)
    expected = coarse.point_values(coefficients, sample)
    np.testing.assert_allclose(values[::7, ::11].ravel(), expected, atol=1e-13)


def test_quadrature_atoms_have_the_density_moments_and_histogram():
    """rho = (1 + 0.3 x + 0.2 y z) / (4 pi): mean (0.1, 0, 0), second moments I/3 + 0.2/15 (e_y e_z + e_z e_y)."""
    solver = SphereWeightedParticles(mf.SelfAttention(4.0), lmax=15)
    points = solver.grid.points()
    values = (1 + 0.3 * points[..., 0] + 0.2 * points[..., 1] * points[..., 2]) / (4 * np.pi)
    atoms = solver.quadrature_atoms(values)
    x, m = atoms[:, :3], atoms[:, 3]
    assert m.sum() == pytest.approx(1.0, abs=1e-14)
    np.testing.assert_allclose(m @ x, [0.1, 0.0, 0.0], atol=1e-14)
    second = np.eye(3) / 3
    second[1, 2] = second[2, 1] = 0.2 / 15
    np.testing.assert_allclose(np.einsum("n,ni,nj->ij", m, x, x), second, atol=1e-14)
    # every Gauss latitude lies inside its band: the cell averages of the atoms are the values
    np.testing.assert_allclose(solver.density(atoms), values, rtol=1e-13)


def test_lightest_atoms_are_dropped_within_the_stated_mass():
    solver = SphereWeightedParticles(mf.SelfAttention(4.0), lmax=15, dropped_mass=1e-6)
    points = solver.grid.points()
    values = np.exp(20 * (points[..., 0] - 1))
    values /= solver.grid.integrate(values)
    atoms = solver.quadrature_atoms(values)
    assert len(atoms) < values.size // 2
    assert 1 - 1e-6 <= atoms[:, 3].sum() < 1.0


@pytest.fixture(scope="module")
def handover_run():
    model = mf.SelfAttention(4.0)

    def rho0(x):
        return 1 + 0.2 * x[..., 0] + 0.8 * x[..., 1] * x[..., 2] + 0.3 * x[..., 2] ** 2

    times = np.linspace(0.0, 6.0, 13)
    solver = SphereSpectralParticles(model, lmax=15, rtol=1e-8)
    return solver, rho0, times, solver.solve(rho0, times, progress=False)


def test_handover_is_recorded_and_keeps_mass_and_energy(handover_run):
    solver, _, times, ds = handover_run
    settings = json.loads(ds.attrs["settings"])
    handover = settings["handover_time"]
    assert times[0] < handover < times[-1]
    flags = ds.particles.values
    np.testing.assert_array_equal(flags, ds.time.values > handover)
    assert bool(ds.resolved.values[~flags].all())
    np.testing.assert_allclose(ds.mass.values, 1.0, atol=1e-12)
    assert np.all(np.diff(ds.energy.values) > 0)  # SA, V = I, D = 0: the energy increases
    assert np.all(np.isnan(ds.spectral_tail.values[flags])) and np.all(np.isnan(ds.atom_mass.values[~flags]))
    assert ds.cluster_count.values[-1] >= 2 and ds.cluster_mass.values[-1][0] < 1


MODELS = {"SA": mf.SelfAttention(4.0), "USA": mf.SelfAttention(2.0, normalized=False),
          "repulsive": mf.SelfAttention(2.0, value=-1.0),
          "matrices": mf.SelfAttention(2.0, query=np.eye(3) + 0.2 * np.arange(9.0).reshape(3, 3) / 9, key=np.eye(3),
                                       value=np.eye(3)),
          "aggregation": mf.ZonalAggregation(lambda s: np.exp(3 * s) / 3, lambda s: np.exp(3 * s), name="exp3"),
          "perceptron": mf.SelfAttention(4.0, external=mf.Perceptron([0.5], [[1.0, 0.0, 0.0]]))}


@pytest.mark.parametrize("name", list(MODELS))
def test_handover_atoms_carry_the_spectral_energy(name, handover_run):
    """The quadrature atoms' pair-sum energy equals the spectral (Funk-Hecke, Parseval) energy of their density."""
    _, rho0, _, _ = handover_run
    solver = SphereSpectralParticles(MODELS[name], lmax=23)
    spectral = solver.spectral
    coefficients = spectral.initial_coefficients(rho0)
    atoms, _ = solver.particles.band_limited_atoms(coefficients, spectral.grid)
    assert solver.particles.energy(atoms) == pytest.approx(spectral.energy(coefficients), rel=1e-12)
    assert solver.particles.lyapunov(solver.particles.energy(atoms)) == pytest.approx(
        spectral.lyapunov(coefficients), rel=1e-12, nan_ok=True)


def test_after_the_handover_the_atoms_converge_to_the_solution_from_the_handed_density(handover_run):
    """Moments of degree 1 and 2 against SphereSpectral at lmax = 31 started from the same density at the hand-over.

    Both then solve one initial-value problem by independent methods (harmonics against
    weighted particles). The atoms' error is the quadrature error of the transported
    measure: it must fall with the quadrature grid (32 to 48 latitudes; a fourth-order method
    would gain 5x). The truncation error the handed density itself carries is not in this
    comparison: that is the resolution of the spectral part, which the flow amplifies as the
    clusters form.
    """
    solver, rho0, times, ds = handover_run
    settings = json.loads(ds.attrs["settings"])
    handover = settings["handover_time"]
    assert settings["handover_clipped"] == 0.0  # the density handed over is the spectral one, not clipped
    coarse = SphereSpectral(mf.SelfAttention(4.0), lmax=15, rtol=1e-8)
    with pytest.warns(UnderResolvedWarning):  # the state the hand-over starts from is the first under-resolved one
        handed = coarse.grid.analyse(coarse.solve(rho0, [0.0, handover], progress=False).rho.values[-1])
    compared = times[times > handover][1:2]  # the second output after it: the clusters have sharpened
    fine = SphereSpectral(mf.SelfAttention(4.0), lmax=31, rtol=1e-10)
    reference = fine.solve(coarse.grid.values_on(handed, fine.grid), np.concatenate([[handover], compared]),
                           continued=True, progress=False)
    assert bool(reference.resolved.values.all())
    points = fine.grid.points()
    monomials = [points[..., i] for i in range(3)] + [points[..., i] * points[..., j] for i in range(3) for j in range(i, 3)]
    expected = np.array([[fine.grid.integrate(rho * f) for f in monomials] for rho in reference.rho.values[1:]])
    errors = []
    for quadrature_lmax in (15, 31):
        particles = SphereWeightedParticles(mf.SelfAttention(4.0), lmax=15, quadrature_lmax=quadrature_lmax, rtol=1e-9)
        atoms, _ = particles.band_limited_atoms(handed, coarse.grid)
        run = particles.solve(atoms, np.concatenate([[handover], compared]), continued=True, progress=False)
        moments = []
        for index in range(1, compared.size + 1):
            x, m = atoms_of(run, index)[:, :3], atoms_of(run, index)[:, 3]
            moments.append([m @ x[:, i] for i in range(3)] + [m @ (x[:, i] * x[:, j]) for i in range(3) for j in range(i, 3)])
        errors.append(np.abs(np.array(moments) - expected).max(axis=1))
    coarse_error, fine_error = errors
    assert np.all(fine_error <= coarse_error / 5), errors


def test_a_run_continues_from_its_atoms(handover_run):
    solver, _, times, ds = handover_run
    later = np.linspace(times[-1], times[-1] + 1.0, 3)
    more = solver.solve(solver.continuation_state(ds), later, continued=True, progress=False)
    assert bool(more.particles.values.all())
    np.testing.assert_allclose(more.atom_position.values[0], ds.atom_position.values[-1])
    assert more.energy.values[-1] >= ds.energy.values[-1]


def test_refusals():
    with pytest.raises(ValueError, match="no diffusion"):
        SphereWeightedParticles(mf.SelfAttention(4.0, diffusion=0.1))
    with pytest.raises(ValueError, match="causal"):
        SphereWeightedParticles(mf.CausalAttention(1.0, normalized=True))
    with pytest.raises(ValueError, match="S\\^2"):
        SphereWeightedParticles(mf.SelfAttention(1.0, query=np.eye(2)))
    with pytest.raises(ValueError, match="shape \\(n, 4\\)"):
        SphereWeightedParticles(mf.SelfAttention(1.0)).solve(np.ones((3, 3)), [0, 1], continued=True)
    # with diffusion the run stays spectral (no particle part), and says so
    assert SphereSpectralParticles(mf.SelfAttention(4.0, diffusion=0.1), lmax=15).particles is None


def test_atoms_of_a_collapsed_cluster_merge_into_one():
    """Two groups of 100 tokens collapse into two clusters: merged (at rtol), two atoms carry them,
    where the unmerged run's clusters are, with the mass and the mass-weighted mean kept exactly."""
    rng = np.random.default_rng(4)
    centres = np.array([[1.0, 0.0, 0.0], [-0.5, 0.6, 0.62]])
    x = np.repeat(centres, 100, axis=0) + 0.2 * rng.normal(size=(200, 3))
    atoms = np.column_stack([x / np.linalg.norm(x, axis=1, keepdims=True), rng.uniform(0.5, 1.5, 200)])
    atoms[:, 3] /= atoms[:, 3].sum()
    times = [0.0, 10.0, 30.0]
    model = mf.SelfAttention(9.0)
    merged = SphereWeightedParticles(model, lmax=15, rtol=1e-7).solve(atoms, times, continued=True, progress=False)
    exact = SphereWeightedParticles(model, lmax=15, rtol=1e-7, merge_distance=0.0).solve(atoms, times, continued=True,
                                                                                         progress=False)
    end = atoms_of(merged)
    assert len(end) == 2 and len(atoms_of(exact)) == 200
    np.testing.assert_allclose(np.sort(end[:, 3]), np.sort(exact.cluster_mass.values[-1][:2]), rtol=1e-14)
    assert end[:, 3].sum() == pytest.approx(1.0, abs=1e-15)
    for mass, position in zip(exact.cluster_mass.values[-1][:2], exact.cluster_position.values[-1][:2]):
        nearest = end[np.argmin(np.linalg.norm(end[:, :3] - position, axis=1))]
        assert nearest[3] == pytest.approx(mass, rel=1e-14)
        np.testing.assert_allclose(nearest[:3], position, atol=1e-6)  # both within the steps' error of the flow
    assert merged.energy.values[-1] == pytest.approx(exact.energy.values[-1], rel=1e-6)


def test_merging_keeps_mass_and_centre():
    solver = SphereWeightedParticles(mf.SelfAttention(1.0), lmax=15, merge_distance=1e-3)
    rng = np.random.default_rng(5)
    base = np.array([0.0, 0.0, 1.0])
    x = base + 1e-4 * rng.normal(size=(5, 3))
    atoms = np.vstack([np.column_stack([x / np.linalg.norm(x, axis=1, keepdims=True), rng.uniform(size=5)]),
                       [[1.0, 0.0, 0.0, 0.3]]])
    merged, merges = solver.merged(atoms)
    assert len(merged) == 2 and len(merges) == 1 and merges[0].atoms == 5
    assert merged[:, 3].sum() == pytest.approx(atoms[:, 3].sum(), rel=1e-15)
    centre = atoms[:5, 3] @ atoms[:5, :3]
    np.testing.assert_allclose(merged[0, :3], centre / np.linalg.norm(centre), atol=1e-15)


def test_interpolated_outputs_are_the_spectral_parts():
    """``outputs="interpolated"`` goes to SphereSpectral, which then takes fewer steps than its outputs;
    before the hand-over the outputs agree with a run that steps to each, within both runs' bounds (rtol
    times the deviation per step, once more for the interpolant)."""
    times = np.linspace(0.0, 6.0, 121)

    def rho0(x):
        return 1 + 0.2 * x[..., 0] + 0.8 * x[..., 1] * x[..., 2] + 0.3 * x[..., 2] ** 2
    runs = {outputs: SphereSpectralParticles(mf.SelfAttention(4.0), lmax=15, outputs=outputs).solve(
        rho0, times, progress=False) for outputs in ("stepped", "interpolated")}
    settings = json.loads(runs["interpolated"].attrs["settings"])
    assert settings["runs"]["SphereSpectral"]["outputs"] == "interpolated"
    spectral = ~runs["interpolated"].particles.values
    assert settings["runs"]["SphereSpectral"]["steps"] < spectral.sum()
    before = spectral & ~runs["stepped"].particles.values
    stepped = runs["stepped"].rho.values[before]
    deviation = np.abs(stepped - stepped.mean(axis=(1, 2), keepdims=True)).max(axis=(1, 2))
    errors = np.abs(runs["interpolated"].rho.values[before] - stepped).max(axis=(1, 2)) / deviation
    steps = [json.loads(run.attrs["settings"])["runs"]["SphereSpectral"]["steps"] for run in runs.values()]
    assert errors.max() <= (sum(steps) + 1) * 1e-6, (errors.max(), steps)  # both runs' bounds: rtol 1e-6
