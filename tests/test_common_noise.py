"""The common noise in Stratonovich form and the stochastic density equation on the circle and on S^2.

References independent of the code under test: finite differences of the attention averages,
the Itô limit SDE by projected Euler-Maruyama (no Stratonovich drift in it), the density
equation's own fine-step solution on the same Brownian path, particles on the same path
(on S^2: the grid's weighted nodes moved as atoms), and SphereSpectral's deterministic flow.
"""

import numpy as np
import pytest

import meanfield as mf
from meanfield.common_noise import NoisePath, WeightedAttention
from meanfield.homogenized import HomogenizedLimit, simulate_homogenized
from meanfield.random_weights import GaussianWeights, attention_averages
from meanfield.sphere import normalize
from solvers import CommonNoiseCircle, CommonNoiseSphere, SphereSpectral

FIXED_ATTENTION = GaussianWeights(value_std=0.5, query_std=None, key_std=None)


def rho0(theta):
    return 1 + 0.6 * np.cos(theta) + 0.3 * np.sin(2 * theta)


def sphere_rho0(x):
    return 1 + 0.5 * x[..., 0] + 0.3 * x[..., 1] * x[..., 2]


def first_moment(ds, solver):
    """int x rho over the grid (exact for the band-limited density) at every recorded time."""
    circle = np.stack([np.cos(solver.theta), np.sin(solver.theta)], axis=-1)
    return (2 * np.pi / solver.points) * ds.rho.values @ circle


def brownian(steps, limit, systems, dt, seed=0, d=2):
    """Brownian increments over ``dt`` for ``steps`` steps of ``systems`` paths of ``limit`` in dimension ``d``."""
    return np.random.default_rng(seed).standard_normal((steps,) + limit.increment_shape(systems, d)) * np.sqrt(dt)


def test_the_weighted_averages_and_their_derivative_against_independent_references():
    limit = HomogenizedLimit(2.0, GaussianWeights(), nodes=3)
    systems, n, d = 2, 5, 3
    x = mf.sample_uniform(n, d, rng=1, batch=systems)
    path = NoisePath(limit, systems, d, seed=3, dt=0.01, steps=1)
    weights = np.full((systems, n), 1.0 / n)
    attention = WeightedAttention(x, weights, slice(None), path, 2.0)
    np.testing.assert_allclose(attention.averages, attention_averages(x, path.query, path.key, 2.0), atol=1e-14)
    moves = np.random.default_rng(0).standard_normal((systems, 2, 3, n, d))
    derivative = attention.derivative(moves)
    eps = 1e-6
    for field in range(2):
        def moved(sign):
            return np.stack([WeightedAttention(x + sign * eps * moves[:, field, m], weights, slice(None), path,
                                               2.0).averages[:, m] for m in range(3)], axis=1)
        difference = (moved(1) - moved(-1)) / (2 * eps)  # central differences: error ~ eps^2 * third derivative
        np.testing.assert_allclose(derivative[:, field], difference, rtol=0, atol=1e-8)


def test_heun_on_the_stratonovich_form_converges_to_the_ito_limit(monkeypatch):
    """Projected Euler-Maruyama integrates the Itô SDE with no correction; Heun needs the derived drift."""
    systems, n, d = 64, 4, 3
    x0 = np.broadcast_to(mf.sample_uniform(n, d, rng=3), (systems, n, d))
    limit = HomogenizedLimit(2.0, GaussianWeights(), nodes=4)
    fine, end = 2.0 ** -10, 1.0
    shape = limit.increment_shape(systems, d)
    increments = brownian(int(end / fine), limit, systems, fine, d=d)
    reference = simulate_homogenized(limit, x0, [0, end], dt=fine, seed=1, increments=increments).x.values[:, -1]

    def heun_gap(dt):
        coarse = increments.reshape((-1, int(dt / fine)) + shape).sum(axis=1)
        x = simulate_homogenized(limit, x0, [0, end], dt=dt, seed=1, increments=coarse, scheme="heun").x.values[:, -1]
        assert np.abs(np.linalg.norm(x, axis=-1) - 1).max() < 1e-14
        return x - reference
    steps = 2.0 ** -np.arange(5, 8)
    gaps = [heun_gap(dt) for dt in steps]
    errors = [np.sqrt(np.mean(np.sum(gap ** 2, axis=-1))) for gap in gaps]
    order = np.polyfit(np.log(steps), np.log(errors), 1)[0]
    assert 0.35 < order < 0.8, (errors, order)  # strong order 1/2; the reference's own error is ~1/3 of the last
    # The paths agree; so do their means (weak order 1), which a wrong drift would shift by ~drift * end.
    bias, standard_error = np.abs(gaps[-1].mean(axis=0)), gaps[-1].std(axis=0) / np.sqrt(systems)
    assert np.all(bias < 4.5 * standard_error), bias / standard_error  # 12 components
    original = WeightedAttention.stratonovich_drift
    monkeypatch.setattr(WeightedAttention, "stratonovich_drift",
                        lambda self: (np.zeros_like(original(self)[0]), original(self)[1]))
    assert np.abs(heun_gap(steps[-1]).mean(axis=0)).max() > 5 * bias.max()  # without the drift: another equation


STRONG_ORDER_CASES = {
    # solver, rho0, dimension, value_std, systems, end, finest step: the sphere's grid is 2048
    # nodes, each evaluation an attention over all their pairs, so it runs fewer paths over a
    # shorter time, with a noise that its coarsest step (wavenumbers up to 15.5) takes unsplit
    "circle": (lambda limit: CommonNoiseCircle(limit, 64), rho0, 2, 0.25, 6, 0.125, 2.0 ** -13),
    "sphere": (lambda limit: CommonNoiseSphere(limit, 15), sphere_rho0, 3, 0.1, 3, 2.0 ** -5, 2.0 ** -11),
}


@pytest.mark.parametrize("geometry", ["circle", pytest.param("sphere", marks=pytest.mark.slow)])
def test_the_density_path_has_strong_order_one_half_and_conserves_mass(geometry):
    build, initial, d, value_std, systems, end, fine = STRONG_ORDER_CASES[geometry]
    limit = HomogenizedLimit(2.0, GaussianWeights(value_std=value_std, query_std=None, key_std=None))
    solver = build(limit)
    increments = brownian(int(end / fine), limit, systems, fine, d=d)
    reference = solver.solve(initial, [0, end], dt=fine, systems=systems, increments=increments)
    assert np.abs(reference.mass.values - 1).max() < 1e-13
    assert reference.resolved.values.all()
    weights = solver.quadrature
    final = reference.rho.values[:, -1].reshape(systems, -1)
    steps = fine * 2.0 ** np.arange(4, 1, -1)
    errors = []
    for dt in steps:
        coarse = increments.reshape((-1, int(dt / fine)) + increments.shape[1:]).sum(axis=1)
        run = solver.solve(initial, [0, end], dt=dt, systems=systems, increments=coarse)
        assert run.attrs["settings"].endswith('"substeps": 1}')  # the coarse runs use the path's own increments
        gap = np.abs(run.rho.values[:, -1].reshape(systems, -1) - final) @ weights
        errors.append(np.sqrt(np.mean(gap ** 2)))
    order = np.polyfit(np.log(steps), np.log(errors), 1)[0]
    assert 0.35 < order < 0.8, (errors, order)
    moved = np.abs(final - reference.rho.values[:, 0].reshape(systems, -1)) @ weights
    assert errors[0] < 0.1 * np.sqrt(np.mean(moved ** 2))  # the errors are small against what the noise did


def test_particles_on_the_same_path_follow_the_density_path():
    """Quantile tokens and the density, one Brownian path, one scheme, one step: only space errors part them."""
    limit = HomogenizedLimit(2.0, FIXED_ATTENTION)
    solver = CommonNoiseCircle(limit, 64)
    dt, end, n = 2.0 ** -11, 0.125, 256
    increments = brownian(int(end / dt), limit, 1, dt)
    density = solver.solve(rho0, [0, end / 2, end], dt=dt, increments=increments)
    assert density.attrs["settings"].endswith('"substeps": 1}') and density.resolved.values.all()
    fine = np.linspace(0, 2 * np.pi, 1 << 16)
    cdf = (fine + 0.6 * np.sin(fine) + 0.15 * (1 - np.cos(2 * fine))) / (2 * np.pi)  # of rho0, in closed form
    theta = np.interp((np.arange(n) + 0.5) / n, cdf, fine)
    tokens = simulate_homogenized(limit, mf.circle_points(theta), [0, end / 2, end], dt=dt, increments=increments,
                                  scheme="heun")
    moments = first_moment(density, solver)[0]
    gaps = np.linalg.norm(tokens.x.values.mean(axis=-2) - moments, axis=-1)
    assert gaps[0] < 1.0 / n ** 2, gaps  # the midpoint rule in the quantile variable: O(1/n^2) for smooth rho0
    # Resolved means a spectral tail below 1e-10 of the energy: truncated amplitudes ~1e-5 of the
    # deviation, the density's spatial error; the tokens' quadrature error is far below it.
    assert gaps.max() < 1e-4, gaps
    other = solver.solve(rho0, [0, end / 2, end], dt=dt, increments=brownian(int(end / dt), limit, 1, dt, seed=9))
    assert np.linalg.norm(first_moment(other, solver)[0, -1] - moments[-1]) > 20 * gaps.max()  # the path matters


def sample_circle(rng, n):
    """n angles from rho0 (<= 1.9) by rejection, as points."""
    candidates = rng.uniform(0, 2 * np.pi, 8 * n)
    return mf.circle_points(candidates[rng.uniform(0, 1.9, 8 * n) < rho0(candidates)][:n])


def sample_sphere(rng, n):
    """n points from sphere_rho0 (<= 1.65 against the uniform density) by rejection."""
    candidates = mf.sample_uniform(8 * n, 3, rng=rng)
    return candidates[rng.uniform(0, 1.65, 8 * n) < sphere_rho0(candidates)][:n]


MONTE_CARLO_CASES = {
    # solver, rho0, its sampler, dimension, step, end
    "circle": (lambda limit: CommonNoiseCircle(limit, 64), rho0, sample_circle, 2, 2.0 ** -11, 0.125),
    "sphere": (lambda limit: CommonNoiseSphere(limit, 15), sphere_rho0, sample_sphere, 3, 2.0 ** -8, 2.0 ** -4),
}


@pytest.mark.slow
@pytest.mark.parametrize("geometry", ["circle", "sphere"])
def test_iid_tokens_approach_the_density_path_at_the_monte_carlo_rate(geometry):
    build, initial, sample, d, dt, end = MONTE_CARLO_CASES[geometry]
    limit = HomogenizedLimit(2.0, FIXED_ATTENTION)
    solver = build(limit)
    samples = 16
    increments = brownian(int(end / dt), limit, 1, dt, d=d)
    density = solver.solve(initial, [0, end], dt=dt, increments=increments)
    moment = (density.rho.values[0, -1].ravel() * solver.quadrature) @ solver.nodes()
    rng = np.random.default_rng(5)
    sizes, errors = [32, 128, 512], []
    for n in sizes:
        x0 = np.stack([sample(rng, n) for _ in range(samples)])
        paths = np.broadcast_to(increments, (increments.shape[0], samples) + increments.shape[2:])
        tokens = simulate_homogenized(limit, x0, [0, end], dt=dt, increments=paths, scheme="heun")
        errors.append(np.sqrt(np.mean(np.sum((tokens.x.values[:, -1].mean(axis=1) - moment) ** 2, axis=-1))))
    rate = np.polyfit(np.log(sizes), np.log(errors), 1)[0]
    assert -0.7 < rate < -0.3, (errors, rate)


def test_bad_input_to_the_density_solver():
    limit = HomogenizedLimit(2.0, FIXED_ATTENTION)
    with pytest.raises(ValueError, match="points must be even, got 33"):
        CommonNoiseCircle(limit, 33)
    with pytest.raises(TypeError, match="limit must be a HomogenizedLimit"):
        CommonNoiseCircle(mf.SelfAttention(1.0))
    with pytest.raises(ValueError, match="rho0"):
        CommonNoiseCircle(limit, 16).solve(-np.ones(16), [0, 0.1], dt=0.05)
    with pytest.raises(ValueError, match="increments must have shape"):
        CommonNoiseCircle(limit, 16).solve(rho0, [0, 0.1], dt=0.05, increments=np.zeros((3, 1, 1, 2, 2)))
    with pytest.raises(ValueError, match="scheme must be 'euler' or 'heun'"):
        simulate_homogenized(limit, mf.sample_uniform(3, 2, rng=0), [0, 0.1], dt=0.05, scheme="milstein")


def test_high_dimensional_paths_never_hold_every_field_at_once():
    """Gaussian values have d^2 noise fields of d x d matrices per node: d^4 numbers, 2 GiB at
    d = 64 with 16 nodes. An Euler step never needs them and the Stratonovich drift takes them
    a block at a time, so one step stays within a few work arrays."""
    import tracemalloc

    limit = HomogenizedLimit(1.0, GaussianWeights(), nodes=16)
    x0 = mf.sample_uniform(8, 64, rng=0)
    tracemalloc.start()
    try:
        simulate_homogenized(limit, x0, [0.0, 0.01], dt=0.01, seed=1)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 64 * 2**20, peak


def test_the_drift_by_blocks_of_fields_equals_the_drift_over_all_of_them(monkeypatch):
    """The same Heun step with the fields kept at once and built a block at a time (a budget
    forcing blocks of one field): equal up to the order of the sums."""
    import meanfield.common_noise as common_noise

    limit = HomogenizedLimit(2.0, GaussianWeights(), nodes=3)
    x0 = mf.sample_uniform(6, 3, rng=0, batch=2)
    whole = simulate_homogenized(limit, x0, [0.0, 0.02], dt=0.01, seed=4, scheme="heun").x.values
    monkeypatch.setattr(common_noise, "ATTENTION_BLOCK", 1)
    blocks = simulate_homogenized(limit, x0, [0.0, 0.02], dt=0.01, seed=4, scheme="heun").x.values
    np.testing.assert_allclose(blocks, whole, rtol=0, atol=1e-14)


def test_without_noise_the_sphere_density_is_the_deterministic_flow():
    """Heun on the grid against SphereSpectral's Dormand-Prince run (rtol 1e-12) of SelfAttention with V = m_V I (Funk-Hecke, no quadrature)."""
    law = GaussianWeights(value_std=0.0, value_mean=1.5, query_std=None, key_std=None)
    limit = HomogenizedLimit(2.0, law, drift=1.5, noise=False)
    solver = CommonNoiseSphere(limit, 15)
    exact = SphereSpectral(mf.SelfAttention(2.0, value=1.5), lmax=15, rtol=1e-12).solve(sphere_rho0, [0, 0.25])
    errors = [np.abs(solver.solve(sphere_rho0, [0, 0.25], dt=dt, seed=0).rho.values[0, -1] - exact.rho.values[-1]).max()
              for dt in (2.0 ** -4, 2.0 ** -5)]
    # Heun is second order; the two discretisations of space agree far below these errors
    assert errors[0] < 3e-5 and 3.5 < errors[0] / errors[1] < 4.5, errors


def test_the_sphere_density_follows_the_grid_nodes_moved_as_atoms_on_the_same_path():
    """The Eulerian transport (divergence by the vector transform) against the Lagrangian one: the
    grid's nodes, weighted by their share of rho0, moved by Heun with the same increments."""
    limit = HomogenizedLimit(2.0, GaussianWeights(value_std=0.1, query_std=None, key_std=None))
    solver = CommonNoiseSphere(limit, 15)
    dt, end = 2.0 ** -7, 2.0 ** -5
    increments = brownian(int(end / dt), limit, 1, dt, d=3)
    density = solver.solve(sphere_rho0, [0, end], dt=dt, increments=increments)
    assert density.attrs["settings"].endswith('"substeps": 1}') and density.resolved.values.all()
    assert np.abs(density.mass.values - 1).max() < 1e-13
    atoms = solver.nodes()[None]
    weights = (solver.quadrature * solver.initial_density(sphere_rho0))[None]
    path = NoisePath(limit, 1, 3, seed=0, dt=dt, steps=increments.shape[0], increments=increments)

    def move(points, increment):
        attention = WeightedAttention(points, weights, slice(None), path, limit.beta)
        return attention.stratonovich_drift()[0] * dt + attention.noise(increment)
    for increment in increments:
        first = move(atoms, increment)
        atoms = normalize(atoms + 0.5 * (first + move(normalize(atoms + first), increment)))
    moments = [weights[0] @ atoms[0], (density.rho.values[0, -1].ravel() * solver.quadrature) @ solver.nodes()]
    initial = weights[0] @ solver.nodes()
    # Both are Heun on the same path; what parts them is the density's truncation at degree 15
    # (below 2e-8) and the two schemes' different time errors, which fall with dt (1.5e-7,
    # 3.5e-8, 1.6e-8 at dt = 2^-7, 2^-8, 2^-9): 3e-5 of what the noise moved at this step,
    # bounded here with a margin of 6. A wrong divergence (sign, factor, a missing term) parts
    # them by a fraction of order one.
    assert np.linalg.norm(moments[0] - moments[1]) < 2e-4 * np.linalg.norm(moments[1] - initial), moments


# ---------------------------------------------------------------------------- from a config
def noise_config(tmp_path, geometry="circle", **changes):
    method = {"kind": "CommonNoiseCircle", "points": 64} if geometry == "circle" else {"kind": "CommonNoiseSphere",
                                                                                       "lmax": 5}
    raw = {"geometry": geometry, "output": str(tmp_path / "run"), "times": {"stop": 0.25, "count": 3},
           "model": {"beta": 1.0, "homogenized": {"value_std": 0.5, "nodes": 4}},
           "method": {**method, "dt": 0.0625, "systems": 2, "seed": 3},
           "initial": {"kind": "perturbed_uniform", "amplitude": 0.05, "mode": 1}}
    for key, value in changes.items():
        raw[key] = {**raw[key], **value} if isinstance(value, dict) else value
    return raw


def test_a_config_runs_the_common_noise_density_as_the_class_does(tmp_path):
    """``[model.homogenized]`` with ``method.kind = "CommonNoiseCircle"``: the same limit, grid, noise step, paths and
    seed as the class's own run, bit for bit; on S^2 the config builds CommonNoiseSphere with the run's keywords."""
    from validation.app.builders import solve_keywords
    from validation.app.experiment import prepare, run_experiment

    ds = run_experiment(noise_config(tmp_path), progress=False)
    limit = HomogenizedLimit(1.0, GaussianWeights(value_std=0.5, query_std=None, key_std=None), nodes=4)
    direct = CommonNoiseCircle(limit, 64).solve(lambda theta: 1 + 0.05 * np.cos(theta), [0.0, 0.125, 0.25],
                                                dt=0.0625, systems=2, seed=3, progress=False)
    np.testing.assert_array_equal(ds.rho.values, direct.rho.values)
    np.testing.assert_array_equal(ds.mean_inner_product.values, direct.mean_inner_product.values)
    run = prepare(noise_config(tmp_path / "sphere", "sphere"))
    assert isinstance(run.solver, CommonNoiseSphere) and run.solver.lmax == 5 and run.solver.limit == limit
    assert solve_keywords(run.config) == {"dt": 0.0625, "systems": 2, "seed": 3}


@pytest.mark.parametrize("changes, message", [
    ({"method": {"kind": "CircleFV", "cells": 64, "dt": 0.01, "systems": 1, "seed": 0, "points": None}},
     "model.homogenized runs on its stochastic density equation"),
    ({"model": {"beta": 1.0, "homogenized": None}}, "needs \\[model.homogenized\\]"),
    ({"times": {"stop": 0.3, "count": 3}}, "method.dt: times must lie on the grid of dt = 0.0625"),
    ({"model": {"normalized": False}}, "model.normalized does not apply with model.homogenized"),
    ({"model": {"homogenized": {"value_std": -1.0}}}, "model.homogenized: .*value_std"),
    ({"model": {"homogenized": {"spread": 1.0}}}, "model.homogenized takes value_std, query_std, key_std, nodes"),
    ({"checkpoint_every": 1}, "runs in one piece"),
])
def test_a_bad_common_noise_config_is_refused_naming_the_key(tmp_path, changes, message):
    from validation.app import ConfigError, check_config

    raw = noise_config(tmp_path, **changes)
    raw["method"] = {key: value for key, value in raw["method"].items() if value is not None}
    raw["model"] = {key: value for key, value in raw["model"].items() if value is not None}
    with pytest.raises(ConfigError, match=message):
        check_config(raw)


def test_the_front_door_sends_a_limit_with_common_noise_to_its_solvers():
    from solvers import solve
    from solvers.methods import choose_method

    limit = HomogenizedLimit(1.0, FIXED_ATTENTION, nodes=2)
    assert choose_method(limit, "circle").name == "CommonNoiseCircle"
    assert choose_method(limit, "sphere").name == "CommonNoiseSphere"
    front = solve(limit, rho0, [0.0, 0.0625], points=64, dt=0.03125, systems=1, seed=5, progress=False)
    direct = CommonNoiseCircle(limit, 64).solve(rho0, [0.0, 0.0625], dt=0.03125, systems=1, seed=5, progress=False)
    np.testing.assert_array_equal(front.rho.values, direct.rho.values)
    with pytest.raises(ValueError, match="solved by CommonNoiseCircle, not by CircleFV"):
        solve(limit, rho0, [0.0, 0.1], method="CircleFV")
    with pytest.raises(ValueError, match="CommonNoiseCircle solves the stochastic density equation"):
        solve(mf.SelfAttention(1.0), rho0, [0.0, 0.1], method="CommonNoiseCircle", dt=0.05)


def test_a_common_noise_run_beyond_max_hours_is_refused_from_a_probe_on_the_smallest_grid(tmp_path):
    """At lmax = 63 one noise step takes minutes (its fields pair every grid node): the preflight times a step on the
    smallest grid and scales it by the squared ratio of the nodes (18432 / 2048) instead of running one."""
    from validation.app import ConfigError
    from validation.app.experiment import prepare

    raw = noise_config(tmp_path, "sphere", method={"lmax": 63}, max_hours=1.0, times={"stop": 1.0, "count": 3})
    with pytest.raises(ConfigError, match="the run would take about .* h .* lower method.lmax"):
        prepare(raw)
