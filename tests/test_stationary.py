"""Stationary states on the circle, their stability and branches, against independent references.

References: the noisy Kuramoto self-consistency (Bessel ratio, scipy), the dispersion relation
(validation.growth_rate), the fixed-point iteration of validation.references, and the
time-dependent finite volumes (CircleFV) run from the states returned.
"""

import dataclasses

import numpy as np
import pytest
from scipy.optimize import brentq
from scipy.special import ive

import meanfield as mf
from solvers import CircleFV
from solvers.stationary.bifurcation import bifurcation_diagram
import solvers.stationary.continuation as continuation
from solvers.stationary.continuation import branch_from_uniform, stationary_state, uniform_bifurcations
import solvers.stationary.circle as circle
from solvers.stationary.circle import CircleStationary
from validation.references import circle_stationary_density, growth_rate


def kuramoto_order(diffusion):
    """The nonzero root of r = I_1(r/D) / I_0(r/D) (D < 1/2)."""
    return brentq(lambda r: ive(1, r / diffusion) / ive(0, r / diffusion) - r, 1e-12, 1.0, xtol=1e-15, rtol=1e-15)


def zero_of_growth_rate(model, parameter, mode, low, high):
    rate = lambda value: growth_rate(dataclasses.replace(model, **{parameter: value}), mode, 2)  # noqa: E731
    return brentq(rate, low, high, xtol=1e-15, rtol=1e-14)


@pytest.fixture(scope="module")
def kuramoto_diagram():
    return bifurcation_diagram(mf.SelfAttention(0.0, diffusion=0.3), "diffusion", (0.1, 0.7), cells=128,
                               modes=[1, 2], max_points=80, tol=1e-12, progress=False)


def test_noisy_kuramoto_bifurcates_at_one_half(kuramoto_diagram):
    ds = kuramoto_diagram
    assert list(ds.mode.values[1:]) == [1]  # only mode 1 is driven at beta = 0
    assert abs(float(ds.bifurcation_value[1]) - 0.5) < 1e-8


def test_noisy_kuramoto_branch_is_the_self_consistent_order_parameter(kuramoto_diagram):
    ds = kuramoto_diagram
    branch = ds.where(ds.on_branch == 1, drop=True)
    assert branch.point.size >= 10 and float(branch.diffusion.min()) < 0.15
    for diffusion, order in zip(branch.diffusion.values, branch.order_parameter.sel(wavenumber=1).values):
        assert abs(order - kuramoto_order(diffusion)) < 1e-8, diffusion
    # Supercritical: the branch exists below D = 1/2 and is stable there, where the uniform state is not.
    assert branch.stable.values.all() and (branch.diffusion.values < 0.5).all()
    uniform = ds.where(ds.on_branch == 0, drop=True)
    assert (uniform.stable.values == (uniform.diffusion.values > 0.5)).all()


@pytest.mark.parametrize("model, parameter, interval", [
    (mf.SelfAttention(4.0, diffusion=0.1), "diffusion", (0.02, 0.4)),
    (mf.SelfAttention(2.0, normalized=False, diffusion=0.1), "diffusion", (0.05, 1.0)),
    (mf.SelfAttention(4.0, diffusion=0.15), "beta", (0.5, 12.0)),
])
def test_bifurcation_points_are_the_zeros_of_the_dispersion_relation(model, parameter, interval):
    problem = CircleStationary(model, 128, parameter=parameter)
    found = uniform_bifurcations(problem, interval, range(1, 9))
    assert len(found) >= 2
    for mode, value in found:
        exact = zero_of_growth_rate(model, parameter, mode, value * 0.9, value * 1.1)
        assert abs(value - exact) < 1e-8 * max(1.0, abs(exact)), (mode, value, exact)
    # and no zero is missed: the sign changes of the dispersion relation on a fine scan
    scan = np.linspace(*interval, 4001)
    expected = 0
    for k in range(1, 9):
        rates = np.array([growth_rate(dataclasses.replace(model, **{parameter: v}), k, 2) for v in scan])
        expected += int(np.sum(rates[:-1] * rates[1:] < 0))
    assert len(found) == expected


@pytest.mark.parametrize("cells", [64, 128])
def test_uniform_eigenvalues_are_the_dispersion_relation_to_second_order(cells):
    model = mf.SelfAttention(4.0, diffusion=0.1)
    problem = CircleStationary(model, cells)
    h = 2 * np.pi / cells
    values, _ = problem.leading_eigenvalues(np.zeros(problem.size), 0.1, count=6)
    exact = sorted((growth_rate(model, k, 2) for k in range(1, 6)), reverse=True)
    # each mode twice (cosine and sine); ARPACK's leading six are the three largest rates
    assert np.allclose(np.sort(values.real)[::-1][::2], exact[:3], rtol=(3 * h) ** 2 / 12, atol=1e-10)
    for k in range(1, 6):
        error = problem.uniform_eigenvalue(k, 0.1) / growth_rate(model, k, 2) - 1
        # the discrete Laplacian's symbol: 1 - sinc^2(kh/2) <= (kh)^2 / 12
        assert 0 < -error <= (k * h) ** 2 / 12
    finer = CircleStationary(model, 2 * cells)
    ratio = (problem.uniform_eigenvalue(2, 0.1) / growth_rate(model, 2, 2) - 1) / (
        finer.uniform_eigenvalue(2, 0.1) / growth_rate(model, 2, 2) - 1)
    assert abs(ratio - 4) < 0.05


def test_usa_state_equals_the_fixed_point_iteration():
    model = mf.SelfAttention(2.0, normalized=False, diffusion=0.12)
    problem = CircleStationary(model, 128)
    # The workflow: the dynamics' state at t = 5 (still moving) as the guess.
    run = CircleFV(model, cells=128, error_level=None).solve(lambda t: 1 + 0.3 * np.cos(t), [0.0, 5.0], progress=False)
    guess = problem.reduce(run.rho.values[-1] - problem.uniform)
    assert np.abs(problem.residual(guess, 0.12)).max() > 1e-4
    point = stationary_state(problem, guess)
    reference = circle_stationary_density(model, 128, problem.density(point.unknowns) + 0.05)
    rho = problem.density(point.unknowns)
    assert rho.std() > 0.1 * rho.mean()  # not the uniform state
    assert np.abs(rho - reference).max() < 1e-9 * rho.max()


def branch_state(model, mode, value, cells=128):
    problem = CircleStationary(model, cells)
    start = uniform_bifurcations(problem, (0.01, 1.0), [mode])[0][1]
    branch = branch_from_uniform(problem, mode, start, (value, start + 1e-9), max_points=400, progress=False)
    closest = min(branch.points, key=lambda p: abs(p.value - value))
    return problem, stationary_state(problem, closest.unknowns, closest.value)


def test_a_returned_state_does_not_move_under_the_time_dependent_solver():
    model = mf.SelfAttention(4.0, diffusion=0.08)
    problem, point = branch_state(model, 1, 0.08)
    rho = problem.density(point.unknowns)
    solver = CircleFV(dataclasses.replace(model, diffusion=point.value), cells=128, rtol=1e-8, error_level=None)
    ds = solver.solve(rho, [0.0, 10.0], progress=False)
    moved = np.sqrt(problem.width * np.sum((ds.rho.values[-1] - rho) ** 2))
    assert moved < solver.rtol * problem.norm(point.unknowns)


@pytest.mark.parametrize("mode", [1, 2])
def test_perturbations_grow_or_decay_at_the_leading_eigenvalue(mode):
    """An unstable state (mode 2: two clusters that would merge) leaves at its growth rate; a stable one returns."""
    model = mf.SelfAttention(4.0, diffusion=0.06)
    problem, point = branch_state(model, mode, 0.06)
    values, vectors = problem.leading_eigenvalues(point.unknowns, point.value, count=2)
    rate, direction = values[0].real, np.real(vectors[:, 0])
    assert (rate > 0) == (mode == 2) and abs(values[0].imag) < 1e-9
    rho = problem.density(point.unknowns)
    # Large enough that CircleFV's local errors (relative to the whole deviation) stay far below it over
    # ~1000 time units, small enough that it ends near e^3 * 1e-4: the quadratic terms change the rate by that order.
    size = 1e-4 * problem.uniform
    # Where rho is ~1e-99 (far from the cluster) the eigenvector's entries are ARPACK round-off, of either
    # sign; clipping them moves the start by ~1e-10 of the perturbation, far below the rate's tolerance.
    start = np.maximum(rho + size * direction / np.abs(direction).max(), 0.0)
    duration = 3.0 / abs(rate) if mode == 2 else 1.0 / abs(rate)
    solver = CircleFV(dataclasses.replace(model, diffusion=point.value), cells=128, rtol=1e-10, error_level=None)
    ds = solver.solve(start, [0.0, duration], progress=False)
    distance = lambda values: np.sqrt(problem.width * np.sum((values - rho) ** 2))  # noqa: E731
    measured = np.log(distance(ds.rho.values[-1]) / distance(ds.rho.values[0])) / duration
    assert abs(measured - rate) < 2e-3 * abs(rate)


def test_without_diffusion_there_is_no_stationary_density():
    with pytest.raises(ValueError, match="diffusion=0.0.*sums of Dirac"):
        bifurcation_diagram(mf.SelfAttention(4.0, diffusion=0.1), "diffusion", (0.0, 0.3), cells=64)
    with pytest.raises(ValueError, match="sums of Dirac"):
        CircleStationary(mf.SelfAttention(4.0), 64)


def test_a_branch_that_leaves_the_resolved_range_says_so_and_is_kept():
    ds = bifurcation_diagram(mf.SelfAttention(9.0, diffusion=0.1), "diffusion", (0.002, 0.5), cells=32,
                             modes=[1], max_points=200, progress=False)
    end = str(ds.end.values[1])
    assert "left the resolved range" in end and "cells" in end
    branch = ds.where(ds.on_branch == 1, drop=True)
    assert branch.point.size > 5 and float(branch.diffusion.min()) > 0.002


def test_bad_input_is_named():
    rotating = mf.SelfAttention(1.0, value=np.array([[[1.0, -0.5], [0.5, 1.0]]]), diffusion=0.1)
    with pytest.raises(ValueError, match="rotations but not under reflections"):
        CircleStationary(rotating, 64)
    with pytest.raises(ValueError, match="parameter must be one of"):
        CircleStationary(mf.SelfAttention(1.0, diffusion=0.1), 64, parameter="D")
    problem = CircleStationary(mf.SelfAttention(1.0, diffusion=0.1), 64)
    with pytest.raises(ValueError, match="guess must hold the problem's 32 unknowns"):
        stationary_state(problem, np.zeros(64))
    with pytest.raises(ValueError, match="interval must be increasing"):
        bifurcation_diagram(mf.SelfAttention(1.0, diffusion=0.1), "diffusion", (0.3, 0.1))


def test_the_stationary_command_writes_the_diagram_and_refuses_bad_configs(tmp_path):
    from validation.app.cli import main
    import xarray as xr
    config = tmp_path / "bifurcation.toml"
    config.write_text('geometry = "circle"\noutput = "out"\n[model]\nbeta = 0.0\ndiffusion = 0.3\n'
                      '[continuation]\nparameter = "diffusion"\nstart = 0.2\nstop = 0.7\ncells = 64\n'
                      'modes = [1]\nmax_points = 20\n')
    assert main(["stationary", str(config), "--quiet"]) == 0
    ds = xr.open_dataset(tmp_path / "out" / "bifurcation.nc")
    assert abs(float(ds.bifurcation_value[1]) - 0.5) < 1e-8 and (tmp_path / "out" / "bifurcation.png").is_file()
    assert main(["run", str(config)]) == 2  # a stationary config is not an experiment
    for bad, message in (("start = 0.2", "start = 0.0"), ('"circle"', '"torus"'), ("modes = [1]", "modes = [0]")):
        config.write_text(config.read_text().replace(bad, message))
        assert main(["stationary", str(config), "--quiet"]) == 2
        config.write_text(config.read_text().replace(message, bad))


@pytest.mark.parametrize("extra, key", [
    ('homogenized = { value_std = 1.0 }', "homogenized"), ('graph = "graphon"\ngraphon = "x * y"', "graph"),
    ('frequencies = { law = "lorentzian", width = 0.5 }', "frequencies"), ('random = { heads = 2 }', "random"),
    ('graphon = "x * y"', "graphon"),
])
def test_the_stationary_command_refuses_families_of_models_in_one_line(tmp_path, extra, key):
    from validation.app import ConfigError
    from validation.app.stationary import load_stationary_config

    config = tmp_path / "bifurcation.toml"
    config.write_text(f'geometry = "circle"\noutput = "out"\n[model]\nbeta = 4.0\ndiffusion = 0.1\n{extra}\n'
                      '[continuation]\nparameter = "diffusion"\nstart = 0.05\nstop = 0.4\ncells = 64\nmodes = [1]\n')
    with pytest.raises(ConfigError, match=f"^model.{key} does not apply to stationary states"):
        load_stationary_config(config)


@pytest.mark.parametrize("model", [mf.SelfAttention(4.0, diffusion=0.1), mf.SelfAttention(2.0, normalized=False,
                                                                                       diffusion=0.4),
                                   mf.SelfAttention(9.0, value=-1.0, diffusion=0.2)], ids=["SA", "USA", "repulsive"])
def test_the_potential_response_is_the_right_hand_sides_derivative_beyond_the_frozen_generator(model):
    """Central differences of the drift-diffusion right-hand side, at a lopsided density, along three random smooth
    directions: the generator frozen at the density plus potential_response, to the differences' own error."""
    from solvers.circle.operators import CircleOperators, _next, _previous

    operators = CircleOperators(model, 128)
    theta, uniform = operators.theta, operators.uniform
    deviation = uniform * (0.6 * np.cos(theta) + 0.3 * np.sin(2 * theta + 0.4))
    sub, diag, sup, _ = operators.drift_diffusion_generator(operators.potential_jumps(deviation), model.diffusion)
    coefficients = np.random.default_rng(3).normal(size=(3, 2, 4))  # smooth: where the potential matters
    modes = np.arange(1, 5)[:, None] * theta
    directions = uniform * (coefficients[:, 0] @ np.cos(modes) + coefficients[:, 1] @ np.sin(modes))
    response = operators.potential_response(deviation, directions, model.diffusion)
    for direction, potential in zip(directions, response):
        step = 1e-6
        exact = (operators.drift_diffusion_rhs(deviation + step * direction, model.diffusion)
                 - operators.drift_diffusion_rhs(deviation - step * direction, model.diffusion)) / (2 * step)
        frozen = sub * _previous(direction) + diag * direction + sup * _next(direction)
        np.testing.assert_allclose(frozen + potential, exact, rtol=0, atol=1e-6 * np.abs(exact).max())
        assert np.abs(potential).max() > 1e-3 * np.abs(exact).max()  # the potential's part is not negligible


def test_the_preconditioner_inverts_the_jacobian_up_to_its_shift():
    """At a state of the mode-1 branch: the preconditioner times the residual's Jacobian (central differences of
    the residual) is the identity on a smooth direction to 1e-4 with the potential's part, and off by more than 0.1
    with the frozen generator alone (the general path's)."""
    problem = CircleStationary(mf.SelfAttention(4.0, diffusion=0.1), 128)
    start = uniform_bifurcations(problem, (0.05, 0.4), [1])[0][1]
    state = branch_from_uniform(problem, 1, start, (0.05, 0.4), max_points=5, progress=False, stability=False).points[-1]
    direction = problem.reduce(np.cos(2 * problem.theta) + 0.5 * np.cos(3 * problem.theta))
    step = 1e-6
    image = (problem.residual(state.unknowns + step * direction, state.value)
             - problem.residual(state.unknowns - step * direction, state.value)) / (2 * step)
    preconditioner = problem.preconditioner(state.value)
    preconditioner.update(state.unknowns)
    error = np.abs(preconditioner.matvec(image) - direction).max()
    # what is left out: the symbol's modes below POTENTIAL_MODES_CUTOFF = 1e-6 of its largest, the shift 1e-6 D
    assert preconditioner.potential is not None and error < 1e-4 * np.abs(direction).max()
    preconditioner.potential = None
    assert np.abs(preconditioner.matvec(image) - direction).max() > 0.1 * np.abs(direction).max()


def test_the_bordered_preconditioner_inverts_the_augmented_jacobian():
    """At a state of the mode-1 branch, the continuation's system (residual and a pseudo-arclength constraint in
    the state and the diffusion): the bordered preconditioner times its Jacobian (central differences of the
    augmented residual, the parameter included) is the identity to 1e-4 on a direction that moves both; the
    block-diagonal one (the state's preconditioner, identity on the parameter) is off by more than 0.1."""
    problem = CircleStationary(mf.SelfAttention(4.0, diffusion=0.1), 128)
    start = uniform_bifurcations(problem, (0.05, 0.4), [1])[0][1]
    points = branch_from_uniform(problem, 1, start, (0.05, 0.4), max_points=5, progress=False,
                                 stability=False).points
    current = np.append(points[-1].unknowns, points[-1].value)
    tangent = current - np.append(points[-2].unknowns, points[-2].value)
    metric = continuation._Metric(problem, 0.4)
    gradient = metric.gradient(tangent)
    constraint = continuation._Constraint(gradient, gradient @ current)

    def augmented(z):
        return np.append(problem.residual(z[:-1], z[-1]), constraint(z))
    step = 1e-6
    parameter_derivative = (augmented(current + step * np.eye(current.size)[-1])
                            - augmented(current - step * np.eye(current.size)[-1]))[:-1] / (2 * step)
    direction = np.append(problem.reduce(np.cos(2 * problem.theta) + 0.5 * np.cos(3 * problem.theta)), 0.3)
    image = (augmented(current + step * direction) - augmented(current - step * direction)) / (2 * step)
    bordered = continuation._Bordered(problem, current, constraint, parameter_derivative)
    assert bordered.schur is not None
    error = np.abs(bordered.matvec(image) - direction).max()
    # what the state's preconditioner leaves out (test above), now on the state and the parameter
    assert error < 1e-4 * np.abs(direction).max()
    bordered.schur = None  # the block-diagonal preconditioner
    assert np.abs(bordered.matvec(image) - direction).max() > 0.1 * np.abs(direction).max()


def test_a_points_cost_counts_every_residual_it_took(monkeypatch):
    """The right-hand sides recorded per point are the residuals the solve evaluated (the parameter derivative's
    included; a start evaluated again by scipy is not evaluated, so not counted, twice)."""
    problem = CircleStationary(mf.SelfAttention(4.0, diffusion=0.1), 128)
    start = uniform_bifurcations(problem, (0.05, 0.4), [1])[0][1]
    calls = []
    residual = problem.residual
    monkeypatch.setattr(problem, "residual", lambda *args: calls.append(1) or residual(*args))
    branch = branch_from_uniform(problem, 1, start, (0.05, 0.4), max_points=2, progress=False, stability=False)
    assert sum(point.residual_evaluations for point in branch.points) == len(calls)
    calls.clear()
    guess = branch.points[-1].unknowns * 1.01
    point = stationary_state(problem, guess, branch.points[-1].value, stability=False)
    assert point.residual_evaluations == len(calls) > 2


def test_the_stationary_command_can_leave_out_the_eigenvalues(tmp_path):
    """``continuation.stability = false``: the same states as with them, bit for bit; the branch's stability NaN
    (the uniform branch's, from the dispersion relation, kept); the figure says it is not computed."""
    import xarray as xr
    from validation.app.cli import main

    text = ('geometry = "circle"\noutput = "{}"\n[model]\nbeta = 4.0\ndiffusion = 0.1\n[continuation]\n'
            'parameter = "diffusion"\nstart = 0.1\nstop = 0.4\ncells = 64\nmodes = [1]\nmax_points = 8\n{}')
    for name, extra in (("with", ""), ("without", "stability = false\n")):
        (tmp_path / f"{name}.toml").write_text(text.format(name, extra))
        assert main(["stationary", str(tmp_path / f"{name}.toml"), "--quiet"]) == 0
    full, alone = (xr.open_dataset(tmp_path / name / "bifurcation.nc") for name in ("with", "without"))
    np.testing.assert_array_equal(alone.density.values, full.density.values)
    branch = (alone.on_branch > 0).values
    assert np.all(np.isnan(alone.stable.values[branch])) and np.all(np.isnan(alone.growth_rate.values[branch]))
    np.testing.assert_array_equal(alone.stable.values[~branch], full.stable.values[~branch].astype(float))
    assert full.stable.dtype == bool and np.isfinite(full.growth_rate.values[branch]).any()


def test_a_subcritical_branch_folds_and_gains_stability_at_the_fold():
    """Kuramoto coupling plus a strong second harmonic, W(s) = s + 0.8 T_2(s): the mode-1 pitchfork at
    D = 1/2 is subcritical (the branch first goes to D > 1/2, unstable), folds, and is stable after."""
    model = mf.ZonalAggregation(lambda s: s + 0.8 * (2 * s * s - 1), lambda s: 1 + 3.2 * s, diffusion=0.3)
    ds = bifurcation_diagram(model, "diffusion", (0.2, 1.0), cells=64, modes=[1], max_points=40, progress=False)
    assert abs(float(ds.bifurcation_value[1]) - 0.5) < 1e-8  # mode 1 of the coupling: rho_bar * pi = 1/2
    branch = ds.where(ds.on_branch == 1, drop=True)
    folds = np.flatnonzero(branch.fold.values)
    assert folds.size == 1
    fold = folds[0]
    diffusion, stable = branch.diffusion.values, branch.stable.values
    assert diffusion[fold] > 0.5 and diffusion[fold] >= diffusion[: fold + 1].max()
    assert not stable[:fold].any() and stable[fold + 1:].all()


def test_a_branch_without_its_stability_is_the_same_branch():
    """stability=False skips the eigenvalues (most of a point's cost) and finds the same states, bit for bit."""
    problem = CircleStationary(mf.SelfAttention(4.0, diffusion=0.1), 64)
    start = uniform_bifurcations(problem, (0.05, 0.4), [1])[0][1]
    full = branch_from_uniform(problem, 1, start, (0.05, 0.4), max_points=6, progress=False)
    alone = branch_from_uniform(problem, 1, start, (0.05, 0.4), max_points=6, progress=False, stability=False)
    assert len(alone.points) == len(full.points) == 6
    for with_eigenvalues, without in zip(full.points, alone.points):
        np.testing.assert_array_equal(without.unknowns, with_eigenvalues.unknowns)
        assert np.all(np.isnan(without.eigenvalues)) and np.all(np.isfinite(with_eigenvalues.eigenvalues))
    point = stationary_state(problem, full.points[-1].unknowns, full.points[-1].value, stability=False)
    assert np.all(np.isnan(point.eigenvalues))


def test_the_dense_eigenvalues_are_arpacks(monkeypatch):
    """LAPACK on the dense Jacobian (the default up to DENSE_EIGEN_CELLS) against ARPACK on its products, at a
    state of the branch near its bifurcation (a smooth density: the Jacobian's central differences agree there)."""
    problem = CircleStationary(mf.SelfAttention(4.0, diffusion=0.1), 128)
    start = uniform_bifurcations(problem, (0.05, 0.4), [1])[0][1]
    state = branch_from_uniform(problem, 1, start, (0.05, 0.4), max_points=4, progress=False, stability=False).points[-1]
    dense, _ = problem.leading_eigenvalues(state.unknowns, state.value, 4)
    monkeypatch.setattr(circle, "DENSE_EIGEN_CELLS", 0)
    arpack, _ = problem.leading_eigenvalues(state.unknowns, state.value, 4)
    np.testing.assert_allclose(dense, arpack, rtol=0, atol=1e-8)
    assert dense.real[0] < 0 < abs(dense.real[0]) * 1e6  # the rotation's zero eigenvalue is left out


def test_the_entry_constraint_is_the_modes_amplitude():
    """The branch is entered at the amplitudes asked for: the constraint's gradient (the amplitude's values on the
    unit vectors) is the amplitude on any state, and the first two states carry 0.02 and 0.04 of the uniform density."""
    problem = CircleStationary(mf.SelfAttention(4.0, diffusion=0.1), 64)
    gradient = continuation._amplitude_gradient(problem, 2)
    state = np.random.default_rng(7).normal(size=problem.size)
    assert gradient[-1] == 0.0
    np.testing.assert_allclose(gradient[:-1] @ state, problem.amplitude(state, 2) / problem.uniform, rtol=1e-13)
    start = uniform_bifurcations(problem, (0.05, 0.4), [1])[0][1]
    points = branch_from_uniform(problem, 1, start, (0.05, 0.4), max_points=2, progress=False, stability=False).points
    amplitudes = [problem.amplitude(point.unknowns, 1) / problem.uniform for point in points]
    # Newton stops once every entry of the residual, the constraint (amplitude / uniform - target) included, is below
    np.testing.assert_allclose(amplitudes, [0.02, 0.04], rtol=0, atol=problem.residual_tolerance)
