"""Rotary positional encoding: the particle velocity, relative-position invariance, the position-indexed mean field."""

import numpy as np
import pytest

import meanfield as mf
from solvers import PositionalQuantiles
from solvers.circle.positional import layer_moments


def transcribed_velocity(x, beta, frequencies, q, k, v, positions, normalized, causal=False):
    """RoPE attention token by token: plane (2m, 2m+1) of query and key turned by omega_m p (no library code)."""
    n, d = x.shape

    def turn(y, p):
        out = y.copy()
        for m, omega in enumerate(frequencies):
            c, s = np.cos(omega * p), np.sin(omega * p)
            out[2 * m], out[2 * m + 1] = c * y[2 * m] - s * y[2 * m + 1], s * y[2 * m] + c * y[2 * m + 1]
        return out

    velocity = np.zeros_like(x)
    for i in range(n):
        query = turn(q @ x[i], positions[i])
        seen = range(i + 1) if causal else range(n)
        weights = np.array([np.exp(beta * query @ turn(k @ x[j], positions[j])) for j in seen])
        a = sum(w * (v @ x[j]) for w, j in zip(weights, seen)) / (weights.sum() if normalized else len(seen))
        velocity[i] = a - (a @ x[i]) * x[i]
    return velocity


@pytest.mark.parametrize("normalized", [True, False])
@pytest.mark.parametrize("mask", ["none", "causal"])
def test_the_velocity_is_the_definition(normalized, mask, rng):
    d = 4
    q, k, v = (np.eye(d) + 0.4 * rng.normal(size=(d, d)) for _ in range(3))
    frequencies = np.array([3.0, 0.5])
    model = mf.RotaryAttention(1.5, frequencies, normalized=normalized, query=q, key=k, value=v, mask=mask)
    x = mf.sample_uniform(9, d, rng)
    expected = transcribed_velocity(x, 1.5, frequencies, q, k, v, np.arange(1, 10) / 9, normalized,
                                    causal=mask == "causal")
    np.testing.assert_allclose(model.velocity(x), expected, rtol=0, atol=1e-13)


@pytest.mark.parametrize("mask", ["none", "causal"])
def test_shifting_every_position_leaves_the_dynamics_unchanged_but_order_matters(mask, rng):
    model = mf.RotaryAttention(2.0, [4.0, 1.5], mask=mask)
    x0 = mf.sample_uniform(12, 4, rng)
    positions = np.arange(1, 13) / 12
    shifted = mf.RotaryAttention(2.0, [4.0, 1.5], positions=positions + 0.37, mask=mask)
    np.testing.assert_allclose(shifted.velocity(x0), model.velocity(x0), rtol=0, atol=1e-14)
    runs = [mf.simulate_particles(m, x0, [0.0, 1.0, 2.0]).x.values for m in (model, shifted)]
    np.testing.assert_allclose(runs[1], runs[0], rtol=0, atol=1e-9)
    # not exchangeable: permuting the tokens does not permute their velocities
    order = rng.permutation(12)
    assert not np.allclose(model.velocity(x0[order]), model.velocity(x0)[order], atol=1e-6)
    if mask == "none":  # no rotation is plain self-attention
        np.testing.assert_allclose(mf.RotaryAttention(2.0, 0.0).velocity(x0), mf.SelfAttention(2.0).velocity(x0),
                                   rtol=0, atol=1e-14)
    else:  # the first token sees only itself: it does not move
        np.testing.assert_allclose(model.velocity(x0)[0], 0.0, atol=1e-15)


def test_rope_frequencies_are_the_absolute_form_at_relative_positions():
    n, head = 64, 8
    omega = mf.rope_frequencies(head, n)
    theta = 10000.0 ** (-2.0 * np.arange(head // 2) / head)  # RoPE: angle theta_m k at integer position k
    np.testing.assert_allclose(omega * (5 / n), theta * 5, rtol=1e-15)


def tilted(s, theta):
    return np.exp(1.5 * np.cos(theta - np.pi * s))


def test_the_quantile_solution_converges_geometrically_in_the_points_and_at_second_order_in_the_positions():
    """Labels: the velocity is a midpoint rule over m of a smooth periodic integrand (X(m + 1) = X(m) + 2 pi), which
    converges geometrically while the densities are smooth. Positions: the midpoint rule in s, second order; with
    the finest as reference, e_L - e_32 ~ 1/L^2 - 1/32^2 gives the ratios 4.2 (L = 4 to 8) and 5.0 (8 to 16)."""
    model = mf.RotaryAttention(3.0, 4.0)

    def first_moments(layers, points):
        run = PositionalQuantiles(model, layers=layers, points=points).solve(tilted, [0.0, 0.5], method="rk4",
                                                                              dt=0.025)
        return layer_moments(run).values[-1, 0]

    by_points = [first_moments(8, m) for m in (16, 32, 48, 64, 96)]
    errors = [np.abs(run - by_points[-1]).max() for run in by_points[:-1]]
    assert errors[-1] < 1e-3 * errors[0] and np.all(np.diff(np.log(errors)) < -1.5), errors  # each +16: > e^1.5
    by_layers = [first_moments(layers, 64).reshape(4, -1).mean(axis=1) for layers in (4, 8, 16, 32)]
    errors = [np.abs(run - by_layers[-1]).max() for run in by_layers[:-1]]
    ratios = np.array(errors[:-1]) / np.array(errors[1:])
    np.testing.assert_allclose(ratios, [4.2, 5.0], rtol=0.2)


def test_each_positions_density_is_the_measure_of_the_exact_quantiles():
    """At t = 0 the quantile particles are the exact quantiles of each rho0(s, .) (brentq on its distribution
    function by quad, not the solver's table), and the recorded ``rho`` is their labels' measure (mass 1/M spread
    linearly between neighbours, taken here from the recorded angles) averaged over the cells, of mass one; it is
    within a few percent of the exact cell averages (the linear interpolation's error at 64 labels). The
    recorded order parameter is the closed form's."""
    from scipy import special
    from scipy.integrate import quad
    from scipy.optimize import brentq

    layers, points, cells = 4, 64, 32
    solver = PositionalQuantiles(mf.RotaryAttention(1.0, 2.0), layers=layers, points=points, cells=cells)
    ds = solver.solve(tilted, [0.0, 0.1], progress=False)
    width, labels = 2 * np.pi / cells, (np.arange(points) + 0.5) / points
    edges = np.arange(cells + 1) * width
    for index, s in enumerate(solver.positions):
        total = quad(lambda t: tilted(s, t), 0.0, 2 * np.pi, epsabs=1e-13)[0]
        distribution = lambda x: quad(lambda t: tilted(s, t), 0.0, x, epsabs=1e-13)[0] / total  # noqa: E731
        quantiles = [brentq(lambda x: distribution(x) - m, 0.0, 2 * np.pi, xtol=1e-13) for m in labels]
        angles = np.sort(np.mod(ds.angle.values[0, index], 2 * np.pi))
        np.testing.assert_allclose(angles, quantiles, atol=1e-8)
        lifted = np.concatenate([[angles[-1] - 2 * np.pi], angles, [angles[0] + 2 * np.pi]])
        masses = np.concatenate([[labels[-1] - 1.0], labels, [labels[0] + 1.0]])
        measure = np.diff(np.interp(edges, lifted, masses)) / width
        np.testing.assert_allclose(ds.rho.values[:, index].sum(axis=-1) * width, 1.0, atol=1e-13)
        np.testing.assert_allclose(ds.rho.values[0, index], measure, atol=1e-12)
        exact = np.diff([distribution(x) for x in edges]) / width
        assert np.abs(ds.rho.values[0, index] - exact).max() < 0.02 * exact.max()
    # the order parameter of all positions: |mean_s e^{i pi s}| I1(1.5)/I0(1.5), to the labels' midpoint rule
    exact_order = abs(np.exp(1j * np.pi * solver.positions).mean()) * special.i1(1.5) / special.i0(1.5)
    assert abs(float(ds.order_parameter[0]) - exact_order) < 1e-5


def test_particles_approach_the_position_indexed_solution_at_n_to_the_minus_half():
    """Token i von Mises with mean pi i/n, kappa = 1.5: the error of the binned first moments falls like n^{-1/2}
    (the fitted slope within three bootstrap standard errors, systems resampled)."""
    model = mf.RotaryAttention(3.0, 4.0)
    mean_field = layer_moments(PositionalQuantiles(model, layers=16, points=128).solve(tilted, [0.0, 1.0],
                                                                                      method="rk4", dt=0.05))
    bins = 8
    limit = mean_field.values[-1, 0].reshape(bins, -1).mean(axis=1)  # two positions per bin
    generator = np.random.default_rng(2)
    sizes, per_system = np.array([32, 128, 512]), []
    for n, systems in zip(sizes, (64, 32, 16)):
        theta = generator.vonmises(np.pi * np.arange(1, n + 1) / n, 1.5, size=(systems, n))
        x0 = np.stack([np.cos(theta), np.sin(theta)], axis=-1)
        x = mf.simulate_particles(model, x0, [0.0, 1.0], method="rk4", dt=0.05).x.values[:, -1]
        z = (x[..., 0] + 1j * x[..., 1]).reshape(systems, bins, -1).mean(axis=-1)
        per_system.append(np.abs(z - limit).mean(axis=1))
    slope = lambda errors: np.polyfit(np.log(sizes), np.log([e.mean() for e in errors]), 1)[0]  # noqa: E731
    boot = [slope([e[generator.integers(0, e.size, e.size)] for e in per_system]) for _ in range(400)]
    assert abs(slope(per_system) + 0.5) <= 3 * np.std(boot), (slope(per_system), np.std(boot))


@pytest.mark.parametrize("build,match", [
    (lambda: mf.RotaryAttention(1.0, [1.0, 2.0], query=np.eye(2)), "one angle per coordinate plane"),
    (lambda: mf.RotaryAttention(1.0, [1.0, np.inf]), "frequencies must be a non-empty 1-d array of finite"),
    (lambda: mf.RotaryAttention(-1.0, 1.0), "beta must be >= 0"),
    (lambda: mf.RotaryAttention(1.0, 1.0, positions=[0.1, 0.2]).velocity(mf.sample_uniform(3, 2, 0)),
     "positions are those of 2 tokens, got n=3"),
    (lambda: mf.RotaryAttention(1.0, 1.0).weighted_velocity(mf.sample_uniform(3, 2, 0), np.ones(3) / 3),
     "no velocity of a weighted measure"),
    (lambda: PositionalQuantiles(mf.SelfAttention(1.0)), "models whose tokens carry positions"),
    (lambda: PositionalQuantiles(mf.RotaryAttention(1.0, 1.0, diffusion=0.1)), "without diffusion"),
    (lambda: mf.rope_frequencies(5, 10), "head_dimension must be even"),
    (lambda: mf.RotaryAttention(1.0, 1.0, mask="decoder"), "mask must be 'none' or 'causal'"),
])
def test_bad_input_is_refused_naming_the_argument(build, match):
    with pytest.raises((ValueError, TypeError), match=match):
        build()


def test_the_model_round_trips():
    model = mf.RotaryAttention(1.0, [2.0, 3.0], normalized=False, query=np.eye(4), positions=np.arange(5) / 5.0,
                               mask="causal")
    assert mf.model_from_dict(model.to_dict()).to_dict() == model.to_dict()


def test_the_sinusoidal_encoding_is_vaswanis():
    n, d = 7, 6
    encoding = mf.sinusoidal_encoding(n, d)
    for k in range(n):
        for i in range(d // 2):
            angle = k / 10000 ** (2 * i / d)
            assert encoding[k, 2 * i] == pytest.approx(np.sin(angle), abs=1e-15)
            assert encoding[k, 2 * i + 1] == pytest.approx(np.cos(angle), abs=1e-15)
    with pytest.raises(ValueError, match="d must be an integer >= 1"):
        mf.sinusoidal_encoding(4, 0)
