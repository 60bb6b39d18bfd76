"""The particle system against exact references (docs/theory/model.md, references.md)."""

import tracemalloc


import numpy as np
import pytest
from scipy.integrate import solve_ivp

import meanfield as mf
from meanfield.engines.frames import copy_with_norm_range
from validation import orthogonal_token_inner_product, wendel_probability


@pytest.mark.parametrize("normalized", [True, False], ids=["SA", "USA"])
@pytest.mark.parametrize("n, d, beta, value", [(3, 3, 1.0, 1.0), (4, 6, 4.0, 1.0), (3, 5, 2.0, -1.0)],
                         ids=["n3d3", "n4d6", "repulsive"])
def test_orthonormal_tokens_follow_the_inner_product_ode(normalized, n, d, beta, value):
    model = mf.SelfAttention(beta, normalized=normalized, value=value)
    times = np.linspace(0, 3, 7)
    ds = mf.simulate_particles(model, np.eye(d)[:n], times, rtol=1e-12, atol=1e-14)
    x = ds.x.values
    gram = np.einsum("tid,tjd->tij", x, x)
    pairs = gram[:, ~np.eye(n, dtype=bool)]
    expected = orthogonal_token_inner_product(model, n, times)
    np.testing.assert_allclose(pairs, np.repeat(expected[:, None], pairs.shape[1], axis=1), atol=1e-8)
    assert abs(expected[-1]) > 0.1  # the curve has moved well away from r(0) = 0


def test_time_rescaled_usa_follows_rescaled_ode():
    model = mf.SelfAttention(30.0, normalized=False, time_rescaled=True)
    times = np.linspace(0, 2, 5)
    x = mf.simulate_particles(model, np.eye(3), times, rtol=1e-12, atol=1e-14).x.values
    np.testing.assert_allclose(np.einsum("td,td->t", x[:, 0], x[:, 1]),
                               orthogonal_token_inner_product(model, 3, times), atol=1e-8)


@pytest.mark.parametrize("method", ["rk4", "dop853"])
@pytest.mark.parametrize("normalized", [True, False], ids=["SA", "USA"])
@pytest.mark.parametrize("value", [1.0, -1.0], ids=["attractive", "repulsive"])
def test_energy_is_monotone_and_points_stay_on_the_sphere(method, normalized, value, rng):
    model = mf.SelfAttention(3.0, normalized=normalized, value=value)
    x0 = mf.sample_uniform(24, 3, rng, batch=3)
    rtol = 1e-10
    ds = mf.simulate_particles(model, x0, np.linspace(0, 4, 41), method=method, dt=0.01, rtol=rtol,
                               observables=["energy"])
    energy = ds.energy.values
    increments = value * np.diff(energy, axis=-1)
    # Round-off of an n^2-term sum in the fixed mode; the global integration error in the adaptive one.
    slack = (1e-13 if method == "rk4" else 10 * rtol) * np.abs(energy).max()
    assert increments.min() >= -slack
    assert increments.max() > 1e3 * slack  # the run actually moved
    assert ds.norm_error.max() <= (1e-12 if method == "rk4" else 10 * rtol)


def test_beta_zero_on_the_circle_is_the_kuramoto_model(rng):
    theta0 = rng.uniform(0, 2 * np.pi, 12)
    times = np.linspace(0, 5, 11)

    def kuramoto(t, theta):
        return -np.mean(np.sin(theta[:, None] - theta[None, :]), axis=1)

    reference = solve_ivp(kuramoto, (0, 5), theta0, t_eval=times, method="DOP853", rtol=1e-13, atol=1e-13).y.T
    for normalized in (True, False):
        ds = mf.simulate_particles(mf.SelfAttention(0.0, normalized=normalized), mf.circle_points(theta0),
                                   times, rtol=1e-12, atol=1e-14)
        np.testing.assert_allclose(ds.x.values, mf.circle_points(reference), atol=1e-9)


@pytest.mark.parametrize("d", [2, 3, 5])
def test_noise_alone_decorrelates_at_the_heat_kernel_rate(d, rng):
    diffusion, t_end, systems = 0.25, 1.0, 20000
    model = mf.SelfAttention(1.0, diffusion=diffusion)
    x0 = mf.sample_uniform(1, d, rng, batch=systems)  # one particle per system: no interaction
    ds = mf.simulate_particles(model, x0, [0.0, t_end], dt=1e-3, rng=rng)
    overlap = np.einsum("sd,sd->s", ds.x.values[:, -1, 0], x0[:, 0])
    standard_error = overlap.std(ddof=1) / np.sqrt(systems)
    exact = np.exp(-(d - 1) * diffusion * t_end)
    # Weak-order-one bias is ~ D^2 dt t (d-1)(d+2) < 1e-3 here, far below 4 standard errors.
    assert abs(overlap.mean() - exact) < 4 * standard_error


def test_sde_is_reproducible_from_its_seed(rng):
    model = mf.SelfAttention(2.0, diffusion=0.1)
    x0 = mf.sample_uniform(10, 3, rng)
    first = mf.simulate_particles(model, x0, [0, 0.5], rng=7)
    second = mf.simulate_particles(model, x0, [0, 0.5], rng=7)
    np.testing.assert_array_equal(first.x.values, second.x.values)
    assert first.norm_error.max() < 1e-12


@pytest.mark.parametrize("n, d", [(5, 2), (6, 3), (8, 4)])
def test_wendel_hemisphere_probability(n, d, rng):
    trials = 1500
    hits = sum(mf.in_common_hemisphere(mf.sample_uniform(n, d, rng)) for _ in range(trials))
    p = wendel_probability(n, d)
    assert abs(hits / trials - p) < 4 * np.sqrt(p * (1 - p) / trials)


def test_hemisphere_test_on_known_configurations():
    assert mf.in_common_hemisphere(np.array([[1, 0, 0], [0, 1, 0], [0, 0, 1.0]]))
    assert not mf.in_common_hemisphere(np.array([[1, 0], [-1, 0.0]]))
    assert not mf.in_common_hemisphere(mf.circle_points(np.arange(3) * 2 * np.pi / 3))


def test_large_system_velocity_memory_is_bounded(rng):
    x = mf.sample_uniform(20000, 3, rng)
    tracemalloc.start()
    velocity = mf.SelfAttention(4.0).velocity(x)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert np.all(np.isfinite(velocity))
    assert peak < 64 * 2**20  # the 20000^2 pair matrix alone would take 3 GiB


def test_dataset_contract(rng):
    model = mf.SelfAttention(1.0)
    ds = mf.simulate_particles(model, mf.sample_uniform(8, 3, rng), [0.0, 0.5, 1.0], observables=["energy"])
    assert ds.x.dims == ("time", "particle", "component")
    assert ds.energy.dims == ("time",)
    assert "energy" not in mf.simulate_particles(model, mf.sample_uniform(8, 3, rng), [0.0, 1.0])  # on request
    assert mf.model_from_dict(ds.attrs["model"]).to_dict() == model.to_dict()
    batched = mf.simulate_particles(model, mf.sample_uniform(8, 3, rng, batch=2), [0.0, 1.0], method="rk4")
    assert batched.x.dims == ("system", "time", "particle", "component")


@pytest.mark.parametrize("kwargs, argument", [
    (dict(times=[0.0, 1.0, 0.5]), "times"),
    (dict(times=[0.0, np.nan]), "times"),
    (dict(method="midpoint"), "method"),
    (dict(dt=-0.1, method="rk4"), "dt"),
    (dict(rtol=0.0), "rtol"),
])
def test_bad_simulation_arguments(kwargs, argument, rng):
    arguments = dict(times=[0.0, 1.0])
    arguments.update(kwargs)
    with pytest.raises(ValueError, match=argument):
        mf.simulate_particles(mf.SelfAttention(1.0), mf.sample_uniform(4, 3, rng), **arguments)


@pytest.mark.parametrize("method", ["dop853", "rk4"])
def test_ode_schemes_with_diffusion_are_refused(method, rng):
    with pytest.raises(ValueError, match=f"method='{method}' integrates the ODE.*method='euler'"):
        mf.simulate_particles(mf.SelfAttention(1.0, diffusion=0.1), mf.sample_uniform(4, 3, rng),
                              [0, 1], method=method)


@pytest.mark.parametrize("old", ["adaptive", "fixed"])
def test_the_method_names_of_0_1_are_refused_since_0_3(old, rng):
    with pytest.raises(ValueError, match="method must be one of"):
        mf.simulate_particles(mf.SelfAttention(2.0), mf.sample_uniform(6, 3, rng), [0.0, 0.5], method=old)


def test_off_sphere_initial_points_are_refused():
    with pytest.raises(ValueError, match="x0"):
        mf.simulate_particles(mf.SelfAttention(1.0), np.ones((4, 3)), [0, 1])


@pytest.mark.parametrize("method, order", [("euler", 1), ("layer", 1), ("rk4", 4)], ids=["euler", "layer", "rk4"])
def test_fixed_step_schemes_converge_at_their_order(method, order):
    model = mf.SelfAttention(2.0)
    times = np.array([0.0, 2.0])
    exact = orthogonal_token_inner_product(model, 3, times)[-1]
    steps = np.array([0.2, 0.1, 0.05, 0.025])
    errors = [abs(np.dot(*mf.simulate_particles(model, np.eye(3), times, method=method, dt=h).x.values[-1, :2])
                  - exact) for h in steps]
    measured = np.polyfit(np.log(steps), np.log(errors), 1)[0]
    assert measured >= order - 0.2


@pytest.mark.parametrize("method, diffusion", [("euler", 0.0), ("rk4", 0.0), ("layer", 0.0), ("euler", 0.2),
                                               ("layer", 0.2)],
                         ids=["ode-euler", "ode-rk4", "ode-layer", "sde-euler", "sde-layer"])
def test_observations_are_those_of_the_full_simulation(method, diffusion, rng):
    model = mf.SelfAttention(3.0, diffusion=diffusion)
    x0 = mf.sample_uniform(10, 3, rng, batch=4)
    times = np.linspace(0, 1, 6)
    full = mf.simulate_particles(model, x0, times, method=method, dt=0.05, rng=7).x.values
    seen = mf.observe_particles(model, x0, times, lambda x: x[:, 0] @ [1.0, 0.0, 0.0], method=method,
                                dt=0.05, rng=7)
    np.testing.assert_array_equal(np.stack(seen, axis=1), full[:, :, 0, 0])


@pytest.mark.parametrize("rtol", [1e-12, 1e-6, 1e-3])
def test_any_rtol_runs_and_the_norm_drift_is_reported_not_raised(rtol):
    """USA beta = 3, n = 64: at rtol = 1e-6 the drift (1.2e-6) used to raise in the energy."""
    model = mf.SelfAttention(3.0, normalized=False)
    x0 = mf.sample_uniform(64, 3, 0)
    times = [0.0, 1.0, 2.0]
    reference = mf.simulate_particles(model, x0, times, rtol=1e-13)
    ds = mf.simulate_particles(model, x0, times, rtol=rtol, observables=["energy"])
    np.testing.assert_allclose(np.linalg.norm(ds.x.values, axis=-1), 1.0, atol=1e-15)
    assert 0 < ds.norm_error.max() <= 10 * rtol
    assert np.all(np.diff(ds.energy.values) > 0)
    # Global error of a step-size controlled method: a modest multiple of the local tolerance.
    assert np.abs(ds.x.values - reference.x.values).max() <= 10 * rtol


@pytest.mark.parametrize("normalized", [True, False], ids=["SA", "USA"])
def test_one_layer_step_is_the_papers_residual_plus_layer_norm(normalized, rng):
    """normalize(x + h a) with a = sum_j w_ij x_j written out here, not through the model's kernels."""
    beta, h = 2.5, 0.3
    x = mf.sample_uniform(7, 3, rng)
    logits = beta * x @ x.T
    if normalized:
        weights = np.exp(logits - logits.max(axis=1, keepdims=True))
        weights /= weights.sum(axis=1, keepdims=True)
    else:
        weights = np.exp(logits) / x.shape[0]
    moved = x + h * weights @ x
    expected = moved / np.linalg.norm(moved, axis=1, keepdims=True)
    ds = mf.simulate_particles(mf.SelfAttention(beta, normalized=normalized), x, [0.0, h], method="layer", dt=h)
    np.testing.assert_allclose(ds.x.values[-1], expected, rtol=1e-14, atol=1e-15)
    # Projected Euler is the same step with the radial part of a removed, a different scheme.
    attention = weights @ x
    tangent = attention - np.sum(attention * x, axis=1, keepdims=True) * x
    projected = x + h * tangent
    euler = mf.simulate_particles(mf.SelfAttention(beta, normalized=normalized), x, [0.0, h], method="euler", dt=h)
    np.testing.assert_allclose(euler.x.values[-1], projected / np.linalg.norm(projected, axis=1, keepdims=True),
                               rtol=1e-14, atol=1e-15)
    assert np.abs(euler.x.values[-1] - expected).max() > 1e-3


@pytest.mark.parametrize("d", [2, 3, 5])
def test_a_frame_is_copied_with_its_squared_norms_extremes(d, rng):
    """The compiled pass (d = 2, 3) and numpy's (d = 5) against the squares written out, into a strided target."""
    x = rng.normal(size=(7, 33, d)) * rng.uniform(0.5, 2.0, size=(7, 33, 1))
    frames = np.zeros((7, 4, 33, d))
    smallest, largest = copy_with_norm_range(x, frames[:, 2])
    squares = x[..., 0] ** 2
    for component in range(1, d):
        squares = squares + x[..., component] ** 2
    assert (smallest, largest) == (squares.min(), squares.max())
    np.testing.assert_array_equal(frames[:, 2], x)
    assert not frames[:, [0, 1, 3]].any()
    single = np.empty((33, d))
    assert copy_with_norm_range(x[3], single) == (squares[3].min(), squares[3].max())
    nested = np.zeros((7, 1, 4, 33, d))  # batches of batches: numpy's pass
    assert copy_with_norm_range(x[:, None], nested[:, :, 3]) == (smallest, largest)
    np.testing.assert_array_equal(nested[:, 0, 3], x)
    x[2, 5, 0] = np.nan
    assert np.isnan(copy_with_norm_range(x, frames[:, 1])).all()


@pytest.mark.parametrize("d", [2, 3])
def test_the_recorded_norm_drift_is_the_frames_own(d):
    """A fixed-step run's drift off the sphere, measured as each frame is kept, against the frames' norms after."""
    x0 = mf.sample_uniform(16, d, 0, batch=3)
    ds = mf.simulate_particles(mf.SelfAttention(2.0), x0, np.linspace(0.0, 1.0, 6), method="rk4", dt=0.05,
                               progress=False)
    after = np.abs(np.linalg.norm(ds.x.values, axis=-1) - 1.0).max(axis=(0, 2))
    assert after.max() > 0  # RK4 leaves the sphere: the drift is not all zeros
    np.testing.assert_array_equal(ds.norm_error.values, after)
