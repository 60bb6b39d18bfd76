"""Time integration (meanfield.integration) against exact solutions, and one tableau in every solver."""

import json
from fractions import Fraction

import array_api_strict as xps
import numpy as np
import pytest
from scipy.optimize import brentq

import meanfield as mf
from meanfield.homogenized import output_steps
from meanfield.integration import (CLASSICAL_RK4, TABLEAUX, AdaptiveStep, ExplicitRungeKutta, ExplicitTableau,
                                   ExtrapolatedImplicitEuler, FixedStep, StepController, StepCounts, integrate)
from meanfield.integration.controller import MAX_FACTOR, MIN_FACTOR
from meanfield.integration.runge_kutta import _step_rows
from meanfield.integration.runs import noise_grid_run, rms
from solvers import CircleFV, SphereSpectral
from validation import orthogonal_token_inner_product

MU, Q0 = 3.0, 0.5


def bernoulli(t):
    r"""Exact solution of :math:`q' = -\mu q + q^2`, :math:`q(0) = q_0` (1/q solves a linear ODE)."""
    return 1.0 / (1.0 / MU + (1.0 / Q0 - 1.0 / MU) * np.exp(MU * t))


def fixed_step_error(tableau, steps, integrating_factor):
    decay = np.array([MU]) if integrating_factor else None
    rhs = (lambda q: q * q) if integrating_factor else (lambda q: -MU * q + q * q)
    stepper = ExplicitRungeKutta(tableau, rhs, decay=decay)
    q, h = np.array([Q0]), 1.0 / steps
    for _ in range(steps):
        q = stepper.advance(q, h)[0]
    return abs(q[0] - bernoulli(1.0))


@pytest.mark.parametrize("name", list(TABLEAUX))
def test_every_tableau_satisfies_its_order_conditions(name):
    TABLEAUX[name].check_order_conditions()


@pytest.mark.parametrize("integrating_factor", [False, True], ids=["plain", "lawson"])
@pytest.mark.parametrize("name", list(TABLEAUX))
def test_measured_order_against_an_exact_solution(name, integrating_factor):
    tableau = TABLEAUX[name]
    if integrating_factor and any(b < a for a, b in zip(tableau.c, tableau.c[1:])):
        pytest.skip("the integrating-factor form needs nondecreasing abscissas (refusal tested below)")
    # Errors above round-off: an eighth-order method reaches it from about 16 steps on.
    steps = [8, 16, 32, 64] if tableau.order <= 5 else [4, 6, 8, 12]
    errors = [fixed_step_error(tableau, n, integrating_factor) for n in steps]
    order = -np.polyfit(np.log(steps), np.log(errors), 1)[0]
    assert order >= tableau.order - 0.2, (errors, order)


@pytest.mark.parametrize("name", [name for name, tableau in TABLEAUX.items() if tableau.adaptive])
def test_the_error_estimate_has_the_declared_order(name):
    """One step from q0: the estimate shrinks like h^(q+1), q the estimator's order."""
    tableau = TABLEAUX[name]
    sizes = np.array([0.1, 0.05, 0.025, 0.0125])
    estimates = []
    for h in sizes:
        stepper = ExplicitRungeKutta(tableau, lambda q: -MU * q + q * q, norm=lambda e: float(np.abs(e).max()),
                                     tolerance=lambda q: 1.0)
        estimates.append(stepper.step(np.array([Q0]), h)[1])
    slope = np.polyfit(np.log(sizes), np.log(estimates), 1)[0]
    assert slope >= tableau.error_estimator_order + 1 - 0.2, (estimates, slope)


@pytest.mark.parametrize("name, expected, tolerance", [
    ("rk4", 2 * np.sqrt(2), 1e-4), ("bogacki_shampine", np.sqrt(3), 1e-4), ("merson", 2 * np.sqrt(3), 1e-4),
    ("heun_euler", 0.0, 2e-3)])
def test_imaginary_stability_of_known_polynomials(name, expected, tolerance):
    """sqrt(3) for every 3-stage third-order method, 2 sqrt(2) for 4-stage fourth order (and Merson's
    1 + z + ... + z^4/24 + z^5/144: 2 sqrt(3)); Heun's |R(iy)|^2 = 1 + y^4/4 exceeds 1 at once.

    Tolerances: the scan's grid spacing (6e-5) for the others; for Heun the 1e-12 round-off
    allowance of the scan, which |R(iy)| - 1 ~ y^4/8 only passes at y ~ 1.7e-3."""
    assert TABLEAUX[name].imaginary_stability == pytest.approx(expected, abs=tolerance)


def test_dormand_prince_853_reaches_further_along_the_imaginary_axis():
    """Its stability polynomial reaches 5.96 along the imaginary axis: per right-hand side,
    2.5x Dormand-Prince 5(4)'s reach (5.96 / 12 against 0.997 / 6)."""
    tableau = TABLEAUX["dormand_prince_853"]
    assert 5.9 < tableau.imaginary_stability < 6.0
    per_evaluation = tableau.imaginary_stability / tableau.stages
    assert per_evaluation > 2.5 * TABLEAUX["dormand_prince"].imaginary_stability / TABLEAUX["dormand_prince"].stages


def euler_damped_reach(ratio: float) -> float:
    r"""Forward Euler's reach along the imaginary axis under damping, in closed form: mode
    :math:`\eta` is multiplied by :math:`e^{-a\eta}(1 + i\eta)`, stable while
    :math:`g(\eta) = \log(1 + \eta^2) - 2a\eta \le 0`. ``g`` falls to its minimum, rises to its
    maximum (the two roots of :math:`g' = 0`), then falls for good: the reach is the root between
    them, or infinite when the maximum stays below zero (:math:`a \ge 0.4023`)."""
    root = np.sqrt(1.0 - 4.0 * ratio ** 2) if ratio < 0.5 else 0.0
    low, high = (1.0 - root) / (2.0 * ratio), (1.0 + root) / (2.0 * ratio)
    g = lambda eta: np.log1p(eta ** 2) - 2.0 * ratio * eta
    return brentq(g, low, high, xtol=1e-14) if ratio < 0.5 and g(high) > 0 else np.inf


@pytest.mark.parametrize("ratio", [0.01, 0.1, 0.3, 0.4, 0.41, 2.0])
def test_damped_imaginary_stability_of_forward_euler_is_the_closed_form(ratio):
    """Tolerance: the first unstable point of the scan, at most a grid spacing (6e-5 below 2 s,
    relative 5e-4 beyond) past the root, and the scan's 1e-12 round-off allowance."""
    euler = ExplicitTableau(name="euler", c=(0.0,), a=((),), b=(1.0,), order=1)
    expected = euler_damped_reach(ratio)
    found = float(euler.damped_imaginary_stability(ratio))
    if np.isinf(expected):
        assert np.isinf(found)
    else:
        assert expected <= found <= expected * (1 + 5e-4) + 6e-5


@pytest.mark.parametrize("name", ["dormand_prince", "rk4", "merson", "bogacki_shampine"])
@pytest.mark.parametrize("ratio", [0.0, 0.05, 0.3, 1.0])
def test_the_lawson_step_of_a_damped_advected_mode_is_stable_up_to_the_damped_reach(name, ratio):
    """One step of the stepper itself on q' = -mu q + i omega q, mu = a omega (the decay integrated
    exactly): its amplification is at most 1 just inside the reach, and above 1 just beyond."""
    tableau = TABLEAUX[name]
    reach = float(tableau.damped_imaginary_stability(ratio))
    omega = 3.0
    stepper = ExplicitRungeKutta(tableau, lambda q: 1j * omega * q, decay=np.array([ratio * omega]))
    amplification = lambda eta: abs(stepper.advance(np.array([1.0 + 0j]), eta / omega)[0][0])
    if np.isinf(reach):
        assert all(amplification(eta) <= 1 + 1e-12 for eta in np.linspace(0.1, 50, 400))
        return
    assert reach >= tableau.imaginary_stability
    assert amplification(0.999 * reach) <= 1 + 1e-12
    assert amplification(1.001 * reach) > 1


@pytest.mark.parametrize("decay", [None, np.linspace(0.0, 40.0, 7)], ids=["plain", "lawson"])
@pytest.mark.parametrize("shape", [(7,), (3, 7)], ids=["vector", "layers"])
@pytest.mark.parametrize("name", [name for name, tableau in TABLEAUX.items() if tableau.adaptive])
def test_stacked_and_termwise_combinations_give_the_same_numbers(name, shape, decay):
    """The two ways of forming a step's sums (small NumPy states: one operation over the stages)
    add the same products in the same order: bit for bit the same step and error."""
    tableau = TABLEAUX[name]
    if decay is not None and not tableau.nondecreasing_abscissas:
        pytest.skip("the integrating-factor form needs nondecreasing abscissas")
    q = np.random.default_rng(3).normal(size=shape) + 1j * np.random.default_rng(4).normal(size=shape)
    results = []
    for stacked_size in (ExplicitRungeKutta.STACKED_SIZE, 0):
        stepper = ExplicitRungeKutta(tableau, lambda q: 1j * q * q.conj() * q - 0.3 * q, decay=decay,
                                     norm=lambda e: float(np.abs(e).max()), tolerance=lambda q: 1e-3)
        stepper.STACKED_SIZE, stepper.PRODUCTS = stacked_size, False
        results.append(stepper.step(q, 0.07))
    (stacked, stacked_error), (termwise, termwise_error) = results
    assert np.array_equal(stacked, termwise) and stacked_error == termwise_error


@pytest.mark.parametrize("number", [complex, float])
@pytest.mark.parametrize("shape", [(7,), (3, 7), (2, 300)], ids=["vector", "layers", "large"])
@pytest.mark.parametrize("name", [name for name, tableau in TABLEAUX.items()
                                  if tableau.adaptive and _step_rows(tableau).long])
def test_products_over_the_stages_give_the_termwise_numbers_to_round_off(name, shape, number):
    """Without decay each sum is one weighted sum over the stored stages (another order of
    addition; BLAS for small products, einsum for large ones, complex ones as their real
    view): the step and its error as the termwise sums give them, to a few units of round-off."""
    q = np.random.default_rng(3).normal(size=shape) + 1j * np.random.default_rng(4).normal(size=shape)
    q = q if number is complex else q.real
    rotation = 1j if number is complex else -1.0
    rhs = lambda q: rotation * q * q.conj() * q - 0.3 * q  # noqa: E731
    h, tolerance, results = 0.07, 1e-3, []
    for products in (True, False):
        stepper = ExplicitRungeKutta(TABLEAUX[name], rhs, norm=lambda e: float(np.abs(e).max()),
                                     tolerance=lambda q: tolerance)
        stepper.STACKED_SIZE, stepper.PRODUCTS = 0, products
        results.append(stepper.step(q, h))
    (product, product_error), (termwise, termwise_error) = results
    np.testing.assert_allclose(product, termwise, rtol=1e-14)
    # The estimate is a sum of terms up to h |e_i| |k_i| that nearly cancel: its round-off is theirs.
    terms = h * np.abs(TABLEAUX[name].error).sum() * 2 * np.abs(rhs(q)).max()
    assert abs(product_error - termwise_error) <= 16 * np.finfo(float).eps * terms / tolerance


def test_the_integrating_factor_form_refuses_decreasing_abscissas():
    with pytest.raises(ValueError, match="nondecreasing"):
        ExplicitRungeKutta(TABLEAUX["dormand_prince_853"], lambda q: q, decay=np.ones(1),
                           norm=lambda e: float(abs(e[0])), tolerance=lambda q: 1.0)


def test_the_names_of_the_pairs_are_those_of_the_adaptive_tableaux():
    from meanfield.integration.tableaux import ADAPTIVE_PAIRS

    assert sorted(ADAPTIVE_PAIRS) == sorted(name for name, tableau in TABLEAUX.items() if tableau.adaptive)


def test_stability_function_is_the_taylor_polynomial_for_rk4():
    z = np.array([-2.0, 0.5j, -1 + 1j])
    np.testing.assert_allclose(TABLEAUX["rk4"].stability_function(z), 1 + z + z ** 2 / 2 + z ** 3 / 6 + z ** 4 / 24,
                               rtol=1e-14)


def test_controller_follows_scipys_rules():
    controller = StepController(error_estimator_order=4)
    assert controller.accepted(0.0) == MAX_FACTOR
    assert controller.accepted(1e-12) == MAX_FACTOR
    assert controller.accepted(1.0) == pytest.approx(0.9)
    assert controller.rejected(1e6) == MIN_FACTOR
    assert controller.accepted(0.5) == 1.0  # no growth right after a rejection
    assert controller.accepted(0.5) == pytest.approx(0.9 * 0.5 ** -0.2)  # then it grows again


@pytest.mark.parametrize("substeps", [2, 3, 4])
def test_extrapolated_implicit_euler_has_order_k(substeps):
    """Linear test equation q' = lambda q, whose linearly implicit Euler step is q / (1 - lambda h)."""
    lam = -2.0
    stepper = ExtrapolatedImplicitEuler(lambda q, h: q / (1 - lam * h), substeps, norm=lambda e: float(abs(e[0])),
                                        tolerance=lambda q: 1.0)
    steps = [16, 32, 64, 128]
    errors = []
    for n in steps:
        q = np.array([1.0])
        for _ in range(n):
            q = stepper.step(q, 1.0 / n)[0]
        errors.append(abs(q[0] - np.exp(lam)))
    order = -np.polyfit(np.log(steps), np.log(errors), 1)[0]
    assert order >= substeps - 0.2, (errors, order)
    assert stepper.error_estimator_order == substeps - 1


def test_extrapolation_is_blended_to_stay_above_the_bound():
    """Stiff decay with a large step: 2 T21 - T11 undershoots zero; the kept state does not."""
    lam = -50.0
    stepper = ExtrapolatedImplicitEuler(lambda q, h: q / (1 - lam * h), 2, norm=lambda e: float(np.abs(e).max()),
                                        tolerance=lambda q: 1.0, lower_bound=0.0)
    q = np.array([1.0, 2.0])
    z = lam * 1.0
    unbounded = 2 / (1 - z / 2) ** 2 - 1 / (1 - z)
    assert unbounded < 0
    new, _ = stepper.step(q, 1.0)
    assert new.min() >= 0.0
    finest = q / (1 - z / 2) ** 2
    factor = (new - finest) / (q * unbounded - finest)
    np.testing.assert_allclose(factor, factor[0], rtol=1e-12)  # one factor for the whole state


def test_adaptive_step_rejects_beyond_the_stability_bound_and_bounds_its_proposal():
    stepper = ExplicitRungeKutta(TABLEAUX["bogacki_shampine"], lambda q: -q, norm=lambda e: float(abs(e[0])),
                                 tolerance=lambda q: 1.0)
    attempt = AdaptiveStep(stepper, stable_step=lambda q: 0.1)
    new, proposal, reason = attempt(np.array([1.0]), 0.2)
    assert new is None and reason == "stability" and proposal < 0.1
    new, proposal, reason = attempt(np.array([1.0]), 0.05)
    assert reason is None and proposal <= 0.1


def fixed_step_outputs(advance, state, times, dt, wrapped=True):
    outputs, counts = [], StepCounts()
    attempt = FixedStep(advance) if wrapped else lambda q, h, t: (advance(q, t, h), h, None)
    integrate(state, np.asarray(times), attempt, fixed_step=dt, record=lambda t, q: outputs.append((t, q)),
              progress=False, name="test", counts=counts)
    return outputs, counts.steps


@pytest.mark.parametrize("wrapped", [True, False], ids=["FixedStep", "attempt"])
def test_fixed_steps_split_each_output_interval_equally_and_start_each_step_at_t0_plus_k_h(wrapped):
    # y' = t by forward Euler: each step adds h t_k exactly, so the sum over an interval of
    # count steps from t0 is count h t0 + h^2 count (count - 1) / 2, the starts t0 + k h.
    times, dt = [0.0, 0.25, 1.0, 1.05], 0.1
    starts = []

    def advance(y, t, h):
        starts.append((t, h))
        return y + h * t

    outputs, steps = fixed_step_outputs(advance, 0.0, times, dt, wrapped)
    counts = [3, 8, 1]  # ceil(0.25 / 0.1), ceil(0.75 / 0.1), ceil(0.05 / 0.1)
    assert steps == sum(counts) and [t for t, _ in outputs] == times
    expected, k = 0.0, 0
    for t0, t1, count in zip(times[:-1], times[1:], counts):
        h = (t1 - t0) / count
        assert starts[k:k + count] == [(t0 + j * h, h) for j in range(count)]
        expected += count * h * t0 + h * h * count * (count - 1) / 2
        k += count
        assert outputs[times.index(t1)][1] == pytest.approx(expected, rel=1e-14)


def test_fixed_rk4_steps_on_the_driver_give_the_stability_polynomial_power():
    # y' = lam y: each RK4 step multiplies by R(lam h) = 1 + z + z^2/2 + z^3/6 + z^4/24 (closed form)
    lam, times, dt = -1.7, [0.0, 0.3, 1.0], 0.065  # 4.6 and 10.8 steps: no interval near a whole count
    stepper = ExplicitRungeKutta(CLASSICAL_RK4, lambda q: lam * q)
    outputs, _ = fixed_step_outputs(lambda q, t, h: stepper.advance(q, h)[0], np.array([1.0]), times, dt)
    expected = 1.0
    for t0, t1 in zip(times[:-1], times[1:]):
        count = int(np.ceil((t1 - t0) / dt))
        z = lam * (t1 - t0) / count
        expected *= (1 + z + z ** 2 / 2 + z ** 3 / 6 + z ** 4 / 24) ** count
        assert outputs[times.index(t1)][1][0] == pytest.approx(expected, rel=1e-13)


def test_the_driver_takes_either_a_first_step_or_a_fixed_step():
    for steps in ({}, {"first_step": 0.1, "fixed_step": 0.1}):
        with pytest.raises(ValueError, match="first_step .* or fixed_step"):
            integrate(0.0, np.array([0.0, 1.0]), FixedStep(lambda y, t, h: y), record=lambda t, y: None,
                      progress=False, name="test", counts=StepCounts(), **steps)


@pytest.mark.parametrize("times, dt", [(np.linspace(0.0, 0.3, 7), 0.05), ([0.0, 0.1, 0.7], 0.1),
                                       ([1.0, 1.0 + 3 * 2.0 ** -11, 1.5 + 3e-10], 2.0 ** -11)])
def test_a_noise_grid_run_takes_the_grids_steps_in_order_and_records_at_each_output(times, dt):
    """Step k of the grid is taken k-th, and each output is recorded after round((t - t0)/dt) steps,
    however the times fall within the grid's tolerance (0.7/0.1 is just below 7; 0.5 + 3e-10 is
    1024 steps of 2^-11 and 6e-7 of one more)."""
    times = np.asarray(times)
    steps_at, dt = output_steps(times, dt)
    recorded = []
    noise_grid_run(lambda taken, k: taken + [k], [], times, steps_at, dt, False, recorded.append)
    expected = [list(range(1, round((t - times[0]) / dt) + 1)) for t in times]
    assert recorded == expected


# Bogacki-Shampine 3(2), written here once (independently of meanfield.integration.tableaux): the
# PDE solvers and the particle system all take it.
WRITTEN_ONCE = ExplicitTableau(
    name="bs32_test", c=(0.0, 0.5, 0.75), a=((), (0.5,), (0.0, 0.75)), b=(2 / 9, 1 / 3, 4 / 9), order=3,
    error=tuple(float(Fraction(b) - Fraction(e)) for b, e in zip(("2/9", "1/3", "4/9", "0"),
                                                                ("7/24", "1/4", "1/3", "1/8"))),
    error_estimator_order=2)


def deviation_error(run, reference):
    deviation = np.abs(reference.rho.values[0] - reference.rho.values[0].mean()).max()
    return np.abs(run.rho.values - reference.rho.values).max() / deviation


@pytest.mark.parametrize("solver_class, rho0, settings", [
    (CircleFV, lambda theta: 1 + 0.4 * np.cos(theta) + 0.2 * np.sin(3 * theta), {"cells": 128}),
    (SphereSpectral, lambda x: np.exp(x[..., 2] + 0.5 * x[..., 0]), {"lmax": 15})], ids=["circle", "sphere"])
def test_a_tableau_written_once_runs_in_both_pde_solvers(solver_class, rho0, settings):
    model = mf.SelfAttention(2.0)
    times = np.linspace(0.0, 1.0, 3)
    rtol = 1e-7
    run = solver_class(model, rtol=rtol, tableau=WRITTEN_ONCE, **settings).solve(rho0, times)
    reference = solver_class(model, rtol=1e-11, tableau="dormand_prince", **settings).solve(rho0, times)
    recorded = json.loads(run.attrs["settings"])
    assert recorded["tableau"] == "bs32_test"
    # Each step's local error is below rtol times the deviation: the global error below their sum.
    assert deviation_error(run, reference) <= recorded["steps"] * rtol


def test_a_tableau_written_once_runs_the_particles_against_the_exact_inner_product():
    model = mf.SelfAttention(2.0)
    times = np.linspace(0.0, 3.0, 7)
    ds = mf.simulate_particles(model, np.eye(4)[:3], times, method=WRITTEN_ONCE, rtol=1e-10, atol=1e-12)
    settings = json.loads(ds.attrs["settings"])
    assert settings["method"] == "bs32_test" and settings["steps"] > 0
    x = ds.x.values
    np.testing.assert_allclose(np.einsum("td,td->t", x[:, 0], x[:, 1]),
                               orthogonal_token_inner_product(model, 3, times), atol=1e-8)


def test_a_pair_refuses_arrays_of_another_namespace():
    with pytest.raises(ValueError, match="method='bogacki_shampine' integrates numpy arrays"):
        mf.simulate_particles(mf.SelfAttention(1.0), xps.asarray(np.eye(3)[:2]), [0.0, 1.0], method="bogacki_shampine")


# DOP853 as scipy runs it: blended estimate, dense output, and the driver stepping past outputs.

LINEAR = np.array([[-0.1, 2.0, 0.0], [-2.0, -0.1, 0.5], [0.0, -0.5, -0.3]])


def linear_solution(t, y0):
    """Exact solution of y' = LINEAR y (its eigen-decomposition: independent of any stepper)."""
    values, vectors = np.linalg.eig(LINEAR)
    return (vectors @ (np.exp(values * t) * np.linalg.solve(vectors, y0))).real


@pytest.mark.parametrize("name, local_order", [("dop853", 8), ("dormand_prince_853", 8), ("dormand_prince", 5)])
def test_a_dense_output_has_its_order_against_the_exact_solution(name, local_order):
    """The interpolant inside one step from y0: its error at theta = 0.37 falls like h^(p+1) for an
    extension of order p (DOP853's 7, Dormand-Prince 5(4)'s quartic 4)."""
    y0 = np.array([1.0, 0.5, -0.25])
    stepper = ExplicitRungeKutta(TABLEAUX[name], lambda q: LINEAR @ q, norm=rms, tolerance=lambda q: 1.0)
    sizes = np.array([0.8, 0.4, 0.2])
    errors = []
    for h in sizes:
        stepper.step(y0, h)
        errors.append(np.abs(stepper.interpolate(0.37) - linear_solution(0.37 * h, y0)).max())
    slope = np.polyfit(np.log(sizes), np.log(errors), 1)[0]
    assert slope >= local_order - 0.2, (errors, slope)
    assert TABLEAUX[name].continuous_extension.order == local_order - 1


@pytest.mark.parametrize("name, scipy_method, evaluations", [
    ("dop853", "DOP853", 12 + 1 + 3),  # twelve stages, f at the new solution, the extension's three
    ("dormand_prince", "RK45", 6 + 1)])  # six stages and f at the new solution: the extension needs no more
def test_a_dense_output_is_scipys_and_ends_at_the_step(name, scipy_method, evaluations):
    """The continuous extension, written as stage weights b_i(theta), against scipy's own interpolant."""
    import scipy.integrate

    rhs = lambda q: LINEAR @ q + 0.3 * np.sin(q)  # noqa: E731
    y0 = np.array([1.0, 0.5, -0.25])
    solver = getattr(scipy.integrate, scipy_method)(lambda t, y: rhs(y), 0.0, y0, 10.0, first_step=0.3)
    solver.step()
    tableau = TABLEAUX[name]
    stepper = ExplicitRungeKutta(tableau, rhs, norm=rms, tolerance=lambda q: 1.0)
    new, _ = stepper.step(y0, solver.t - solver.t_old)
    # Round-off: both sum the same stage terms in their own order (BLAS kernels differ by CPU);
    # DOP853's stage coefficients sum to ~330 in absolute value, with cancellation.
    eps, scale = np.finfo(float).eps, 2 * np.abs(rhs(y0)).max()
    terms = sum(abs(x) for row in tableau.a for x in row) + sum(abs(x) for x in tableau.b)
    np.testing.assert_allclose(new, solver.y, rtol=0, atol=eps * (np.abs(y0).max() + solver.t * terms * scale))
    dense = solver.dense_output()
    # The weights b_i(theta) sum polynomial coefficients of up to ~500 with cancellation.
    weights = np.abs(np.array(tableau.continuous_extension.weights)).sum()
    roundoff = solver.t * eps * weights * scale
    for theta in (0.0, 0.2, 0.5, 0.9, 1.0):
        np.testing.assert_allclose(stepper.interpolate(theta), dense(theta * solver.t), rtol=0, atol=roundoff)
    assert stepper.evaluations == evaluations


def test_a_dense_output_needs_a_continuous_extension_and_the_plain_form():
    with pytest.raises(ValueError, match="interpolate reads the last step: take one first"):
        ExplicitRungeKutta(TABLEAUX["dop853"], lambda q: -q, norm=rms, tolerance=lambda q: 1.0).interpolate(0.5)
    stepper = ExplicitRungeKutta(TABLEAUX["bogacki_shampine"], lambda q: -q, norm=rms, tolerance=lambda q: 1.0)
    stepper.step(np.ones(2), 0.1)
    with pytest.raises(ValueError, match="'bogacki_shampine': no dense output"):
        stepper.interpolate(0.5)
    stepper = ExplicitRungeKutta(TABLEAUX["dormand_prince"], lambda q: -q, decay=np.ones(2), norm=rms,
                                 tolerance=lambda q: 1.0)
    stepper.step(np.ones(2), 0.1)
    with pytest.raises(ValueError, match="'dormand_prince': no dense output in integrating-factor form"):
        stepper.interpolate(0.5)
    with pytest.raises(ValueError, match="continuous extension needs f at the new solution"):
        ExplicitTableau(name="no_fsal", c=(0.0, 1.0), a=((), (1.0,)), b=(0.5, 0.5), order=2, error=(-0.5, 0.5),
                        error_estimator_order=1,
                        continuous_extension=TABLEAUX["dop853"].continuous_extension)


@pytest.mark.parametrize("rtol, times", [(1e-6, [0.0, 10.0]), (1e-9, np.linspace(0.0, 10.0, 41)),
                                         (1e-12, np.linspace(2.0, 4.0, 5))], ids=["one-interval", "many", "tight"])
def test_dop853_on_the_driver_takes_scipys_steps_and_meets_the_exact_solution(rtol, times):
    """Hairer's first step, the blended estimate, scipy's controller and the dense output: the
    same accepted and rejected steps as scipy.integrate.solve_ivp's DOP853, the same frames to
    round-off, and a global error within the tolerance's reach of the exact solution."""
    from scipy.integrate import solve_ivp

    from meanfield.integration.runs import embedded_pair_run

    times = np.asarray(times, dtype=float)
    rhs = lambda q: LINEAR @ q  # noqa: E731
    y0 = np.array([1.0, 0.5, -0.25])
    frames, settings = [], {}
    evaluations = embedded_pair_run(rhs, y0, times, TABLEAUX["dop853"], rtol, rtol / 100, False, norm=rms,
                                    record=lambda t, q: frames.append(q), fail=None, settings=settings)
    theirs = solve_ivp(lambda t, y: rhs(y), (times[0], times[-1]), y0, method="DOP853", t_eval=times,
                       rtol=rtol, atol=rtol / 100)
    stepped = solve_ivp(lambda t, y: rhs(y), (times[0], times[-1]), y0, method="DOP853", rtol=rtol, atol=rtol / 100)
    assert settings["steps"] == stepped.t.size - 1  # without t_eval, scipy returns every step's end
    # The same evaluations as scipy's, except that solve_ivp also interpolates t_eval[0] and the
    # output the last step ends on (three extension stages each), which the driver records as they are.
    assert theirs.nfev - 6 <= evaluations <= theirs.nfev
    np.testing.assert_allclose(np.array(frames), theirs.y.T, rtol=0, atol=1e3 * np.finfo(float).eps)
    exact = np.array([linear_solution(t - times[0], y0) for t in times])
    assert np.abs(np.array(frames) - exact).max() <= 10 * settings["steps"] * rtol


def test_the_driver_steps_past_outputs_with_a_dense_output_and_lands_on_the_last():
    """Steps are cut short only at the end; each output is interpolated in the step that passes it."""
    attempts, records = [], []

    def attempt(state, dt, t):
        attempts.append((t, dt))
        return state + dt, 0.3, None  # q' = 1, always accepted, next step 0.3

    integrate(0.0, np.array([0.0, 0.1, 0.2, 0.25, 1.0]), attempt, first_step=0.3, progress=False, name="test",
              counts=StepCounts(), record=lambda t, q: records.append((t, q)),
              interpolate=lambda theta: ("theta", round(theta, 12)))
    assert [round(dt, 12) for _, dt in attempts] == [0.3, 0.3, 0.3, 0.1]  # the last one cut to end at 1.0
    assert records[1:4] == [(0.1, ("theta", round(1 / 3, 12))), (0.2, ("theta", round(2 / 3, 12))),
                            (0.25, ("theta", round(0.25 / 0.3, 12)))]
    assert records[-1][0] == 1.0 and records[-1][1] == pytest.approx(1.0)
    with pytest.raises(ValueError, match="interpolate is the dense output of adaptive steps"):
        integrate(0.0, np.array([0.0, 1.0]), attempt, fixed_step=0.1, progress=False, name="test",
                  counts=StepCounts(), record=lambda t, q: None, interpolate=lambda theta: None)



def test_a_stop_inside_a_step_past_outputs_loses_none_of_them():
    """With a dense output and a ``stop``: the outputs strictly inside the step at whose end ``stop``
    holds are recorded (interpolated) before the run ends there; the one it ends on is not (the
    solver it hands over to records it), nor are the later ones."""
    records = []

    def attempt(state, dt, t):
        return state + dt, 0.3, None  # q' = 1, always accepted, next step 0.3

    reached, state = integrate(0.0, np.array([0.0, 0.1, 0.35, 0.4, 0.5, 0.6, 0.9, 1.0]), attempt, first_step=0.3,
                               progress=False, name="test", counts=StepCounts(),
                               record=lambda t, q: records.append((t, q)), stop=lambda t, q: t > 0.5,
                               interpolate=lambda theta: ("theta", round(theta, 12)))
    assert reached == pytest.approx(0.6) and state == pytest.approx(0.6)  # the second step, 0.3 to 0.6
    assert [t for t, _ in records] == [0.0, 0.1, 0.35, 0.4, 0.5]
    assert records[2:] == [(0.35, ("theta", round(0.05 / 0.3, 12))), (0.4, ("theta", round(0.1 / 0.3, 12))),
                           (0.5, ("theta", round(0.2 / 0.3, 12)))]

@pytest.mark.parametrize("name", ["dormand_prince", "merson"])
def test_a_step_retried_after_a_rejection_does_not_evaluate_its_first_stage_again(name):
    tableau = TABLEAUX[name]
    stepper = ExplicitRungeKutta(tableau, lambda q: q * q, norm=rms, tolerance=lambda q: 1e-12)
    q = np.array([1.0, 0.5])
    stepper.step(q, 0.5)
    first = stepper.evaluations
    stepper.step(q, 0.1)
    assert first == tableau.stages + tableau.first_same_as_last
    assert stepper.evaluations - first == tableau.stages - 1 + tableau.first_same_as_last


def test_the_blended_estimate_is_hairers_formula_of_the_two_error_rows():
    """The scaled error of one step against the blend formed by hand from the stages (scipy's rows E5, E3)."""
    from scipy.integrate._ivp import dop853_coefficients as k

    rhs = lambda q: LINEAR @ q + 0.3 * np.sin(q)  # noqa: E731
    y0, h = np.array([1.0, 0.5, -0.25]), 0.4
    stages = np.zeros((13, 3))
    for i in range(12):
        stages[i] = rhs(y0 + h * k.A[i, :i] @ stages[:i])
    new = y0 + h * k.B @ stages[:12]
    stages[12] = rhs(new)
    scale = 1e-6 + 1e-4 * np.maximum(np.abs(y0), np.abs(new))
    fifth, third = rms(h * k.E5 @ stages / scale), rms(h * k.E3 @ stages / scale)
    stepper = ExplicitRungeKutta(TABLEAUX["dop853"], rhs, norm=rms, tolerance=lambda q: 1e-6 + 1e-4 * np.abs(q))
    assert stepper.step(y0, h)[1] == pytest.approx(fifth ** 2 / np.sqrt(fifth ** 2 + 0.01 * third ** 2), rel=1e-12)


def test_a_hidden_bar_is_lent_on_and_shows_nothing(capsys):
    """``progress=False`` hands out a bar that only takes updates; a call lent it (a segment of one
    run) advances it rather than opening a bar of its own. ``progress=True`` shows a bar."""
    from tqdm.auto import tqdm

    from meanfield.progress import time_progress

    with time_progress(0.0, 1.0, False, "run") as bar:
        assert not bar
        with time_progress(0.0, 0.5, bar, "segment") as lent:
            assert lent is bar
            lent.update(0.5)
    assert capsys.readouterr().err == ""
    with time_progress(0.0, 1.0, True, "shown") as shown:
        assert isinstance(shown, tqdm)
        shown.update(1.0)
    assert "shown" in capsys.readouterr().err
