"""Causal attention (docs/theory/causal.md): the particle velocity, its O(nK) scan, the closed forms, the layered PDE."""

import json

import numpy as np
import pytest
from scipy.optimize import minimize_scalar
from scipy.special import iv

import meanfield as mf
from meanfield.engines.causal_series import CausalCircleSeries
from solvers import CausalCircleFV, CausalCircleSpectral, CausalSphereSpectral, CircleFV, CircleSpectral, SphereSpectral
from validation.causal import (binned_correlation_limit, correlation_limit, correlation_profile,
                               layered_moment_error, layered_moments, mode_rates, positional_kernel, retrieval_profile,
                               u_shape_condition)


def circle_tokens(rng, shape, spread=np.pi):
    theta = rng.uniform(-spread, spread, shape)
    return np.stack([np.cos(theta), np.sin(theta)], axis=-1)


def reference_attention(model, x):
    """Token by token, pair by pair: the definition of docs/theory/causal.md (no shared code)."""
    n, d = x.shape
    out = np.zeros_like(x)
    for i in range(n):
        seen = range(i + 1) if model.include_self else range(i)
        weights = [np.exp(-model.alibi * (i - j) / n) * np.exp(model.beta * x[i] @ x[j]) for j in seen]
        positional = [np.exp(-model.alibi * (i - j) / n) for j in seen]
        if not weights:
            continue
        total = sum(weights) if model.normalized else sum(positional)
        a = model.prefactor * sum(w * x[j] for w, j in zip(weights, seen)) / total
        out[i] = a - (a @ x[i]) * x[i]
    return out


MODELS = [dict(beta=b, normalized=sa, alibi=lam, include_self=inc, prefactor=c)
          for b, lam, c in ((1.0, 2.0, 1.0), (0.0, 0.0, 1.0), (4.0, 0.5, 4.0))
          for sa in (False, True) for inc in (False, True)]


@pytest.mark.parametrize("spec", MODELS)
def test_direct_velocity_is_the_definition(spec, rng):
    model = mf.CausalAttention(**spec)
    x = np.stack([mf.sample_uniform(11, 3, rng) for _ in range(2)])
    v = model.velocity(x)
    for system in range(2):
        np.testing.assert_allclose(v[system], reference_attention(model, x[system]), rtol=0, atol=1e-13)
    if not model.include_self:
        assert np.all(v[:, 0] == 0)  # the first token sees nothing


@pytest.mark.usefixtures("two_numba_threads")  # the scan's parallel loop over systems
@pytest.mark.parametrize("spec", MODELS + [dict(beta=9.0, normalized=False, alibi=3.0)])
@pytest.mark.parametrize("clustered", [False, True])
def test_circle_scan_equals_the_direct_sum(spec, clustered, rng):
    model = mf.CausalAttention(**spec)
    x = circle_tokens(rng, (3, 700), spread=0.3 if clustered else np.pi)
    direct = model.velocity_unchecked(x)
    series = CausalCircleSeries(model).velocity_unchecked(x)
    assert np.abs(series - direct).max() <= 1e-12 * np.abs(direct).max()


def test_paper_convention_on_the_circle(rng):
    """prefactor = beta: d theta_i/dt = Z_i^{-1} sum_{j<i} pi_ij w'(theta_i - theta_j), w = e^{beta cos}."""
    beta, alibi, n = 1.5, 2.0, 40
    model = mf.CausalAttention(beta, normalized=False, alibi=alibi, prefactor=beta)
    theta = rng.uniform(0, 2 * np.pi, n)
    x = np.stack([np.cos(theta), np.sin(theta)], axis=-1)
    v = model.velocity(x)
    angular = x[:, 0] * v[:, 1] - x[:, 1] * v[:, 0]
    expected = np.zeros(n)
    for i in range(1, n):
        j = np.arange(i)
        pi = np.exp(-alibi * (i - j) / n)
        dw = -beta * np.sin(theta[i] - theta[j]) * np.exp(beta * np.cos(theta[i] - theta[j]))
        expected[i] = pi @ dw / pi.sum()
    np.testing.assert_allclose(angular, expected, rtol=0, atol=1e-13)


@pytest.mark.usefixtures("two_numba_threads")  # the scan's parallel loop over systems
@pytest.mark.parametrize("method,diffusion", [("rk4", 0.0), ("euler", 0.2), ("layer", 0.0)])
def test_particle_runs_scan_vs_direct(method, diffusion, rng):
    model = mf.CausalAttention(1.0, normalized=method == "layer", alibi=2.0, prefactor=1.0, diffusion=diffusion)
    x0 = circle_tokens(rng, (4, 50))
    runs = [mf.simulate_particles(model, x0, [0.0, 1.0], method=method, dt=0.01, rng=7, kernel=kernel)
            for kernel in ("series", "numpy")]
    assert runs[0].attrs["settings"] != runs[1].attrs["settings"]  # the kernels really differ
    np.testing.assert_allclose(runs[0].x.values, runs[1].x.values, rtol=0, atol=1e-10)
    assert "energy" not in runs[0]


def test_the_system_is_lower_triangular(rng):
    """Tokens 1..k evolve as a closed system: the later tokens change nothing before them."""
    model = mf.CausalAttention(2.0, normalized=True, alibi=0.0, prefactor=1.0)
    x0 = mf.sample_uniform(30, 3, rng)
    full = mf.simulate_particles(model, x0, [0.0, 2.0], method="rk4", dt=0.02)
    head = mf.simulate_particles(model, x0[:12], [0.0, 2.0], method="rk4", dt=0.02)
    # pi_ij = e^{-lambda (i - j)/n} depends on n unless lambda = 0
    np.testing.assert_allclose(full.x.values[:, :12], head.x.values, rtol=0, atol=1e-13)
    np.testing.assert_array_equal(full.x.values[-1, 0], x0[0])


def test_auto_kernel_and_records(rng):
    model = mf.CausalAttention(1.0, normalized=False, alibi=2.0)
    x0 = circle_tokens(rng, (2, 400))
    ds = mf.simulate_particles(model, x0, [0.0, 0.1], method="rk4", dt=0.05)
    assert ds.attrs["settings"].count('"kernel": "series"') == 1
    assert mf.model_from_dict(ds.attrs["model"]).to_dict() == model.to_dict()
    hot = mf.CausalAttention(8.0, normalized=True)  # 2 beta + lambda > 10: the series' SA denominators lose digits
    ds = mf.simulate_particles(hot, x0, [0.0, 0.1], method="rk4", dt=0.05)
    assert '"kernel": "numpy"' in ds.attrs["settings"]


@pytest.mark.parametrize("bad,match", [
    (dict(beta=1.0, normalized=False, alibi=-1.0), "alibi"),
    (dict(beta=-1.0, normalized=False), "beta"),
    (dict(beta=1.0, normalized="yes"), "normalized"),
])
def test_bad_models_are_refused(bad, match):
    with pytest.raises((ValueError, TypeError), match=match):
        mf.CausalAttention(**bad)


def test_bad_inputs_are_refused(rng):
    model = mf.CausalAttention(1.0, normalized=False)
    with pytest.raises(ValueError, match="n >= 2"):
        model.velocity(np.array([[1.0, 0.0]]))
    with pytest.raises(ValueError, match="x0 must hold n >= 2"):
        mf.simulate_particles(model, np.array([[[1.0, 0.0]]]), [0, 1], method="rk4")
    with pytest.raises(ValueError, match="series"):
        mf.simulate_particles(model, mf.sample_uniform(5, 3, rng), [0, 1], method="rk4", kernel="series")
    with pytest.raises(ValueError, match="fused"):
        mf.simulate_particles(model, circle_tokens(rng, (5,)), [0, 1], method="rk4", kernel="fused")
    for s0 in (0.0, 1.5, -0.1):
        with pytest.raises(ValueError, match="s0"):
            correlation_limit(0.5, 1.0, 1.0, s0, 2.0)
    with pytest.raises(ValueError, match="alibi"):
        positional_kernel(1.0, 0.5, -2.0)


# --------------------------------------------------------------------------- closed forms
def rk4(rhs, y, dt, steps):
    """Classical RK4 for the test references (independent of the library's integrators)."""
    for _ in range(steps):
        k1 = rhs(y)
        k2 = rhs(y + dt / 2 * k1)
        k3 = rhs(y + dt / 2 * k2)
        k4 = rhs(y + dt * k3)
        y = y + dt / 6 * (k1 + 2 * k2 + 2 * k3 + k4)
    return y


def volterra_solution(a, t_end, s0, alibi, points, steps=200):
    """g(t, s; s0) on a grid of s in [s0, 1] by the method of lines: trapezoid in s, RK4 in t.

    Written from the Volterra equation d_t g = a (k(s, s0) + int_{s0}^{s} k(s, s') g(s') ds').
    """
    s = np.linspace(s0, 1.0, points)
    if alibi == 0:
        kernel = lambda u, v: 1.0 / u  # noqa: E731
    else:
        kernel = lambda u, v: alibi * np.exp(-alibi * (u - v)) / (1 - np.exp(-alibi * u))  # noqa: E731
    k = kernel(s[:, None], s[None, :])
    h = s[1] - s[0]
    trapezoid = np.tril(np.full((points, points), h))
    trapezoid[:, 0] = h / 2
    trapezoid[np.arange(points), np.arange(points)] = h / 2
    trapezoid[0, 0] = 0.0
    operator = trapezoid * k
    source = a * kernel(s, s0)

    def rhs(g):
        return source + a * operator @ g
    return s, rk4(rhs, np.zeros(points), t_end / steps, steps)


@pytest.mark.parametrize("alibi", [0.0, 2.0])
@pytest.mark.parametrize("t_end", [1.0, 2.0])
def test_closed_form_solves_the_volterra_equation(alibi, t_end):
    a, s0 = mode_rates(1.0, 1), 0.2
    # Richardson on the trapezoid (h^2) leaves O(h^4), about 1e-10 at h = 1/312: far below 1e-8
    s, coarse = volterra_solution(a, t_end, s0, alibi, points=251)
    _, fine = volterra_solution(a, t_end, s0, alibi, points=501)
    extrapolated = (4 * fine[::2] - coarse) / 3
    exact = correlation_limit(a, t_end, s[1:], s0, alibi)
    np.testing.assert_allclose(extrapolated[1:], exact, rtol=0, atol=1e-8)


def test_reference_values():
    """docs/theory/causal.md, to the digits printed there (beta = 1, lambda = 2, M = 4)."""
    np.testing.assert_allclose(mode_rates(1.0, np.arange(1, 6)), [0.56516, 0.54299, 0.19952, 0.04379, 0.00679],
                               atol=5e-6)
    g = correlation_limit(mode_rates(1.0, 1), 2.0, 1.0, np.array([0.1, 0.3, 0.5, 0.8]), 2.0)
    np.testing.assert_allclose(g, [1.974, 1.743, 1.876, 2.273], atol=5e-4)
    for t, argmin in ((1.0, 0.125), (2.0, 0.266)):
        found = minimize_scalar(lambda s0: retrieval_profile(t, s0, beta=1.0, alibi=2.0, words=4),
                                bounds=(0.01, 0.99), method="bounded", options={"xatol": 1e-7}).x
        assert abs(found - argmin) <= 5e-4
    holds, left, bound = u_shape_condition(2.0, beta=1.0, alibi=2.0)
    assert holds and abs(left - 1.13) < 5e-3 and abs(bound - 1.268) < 5e-4
    assert mode_rates(2.0, 1) == pytest.approx(iv(1, 2.0))


def test_the_profile_is_u_shaped():
    s0 = np.linspace(0.002, 0.999, 2000)  # s0 = 1 is the last token itself: no correlation term
    profile = retrieval_profile(1.0, s0, beta=1.0, alibi=2.0, words=4)
    slope = np.diff(profile)
    turn = np.flatnonzero(slope > 0)[0]
    assert np.all(slope[:turn] < 0) and np.all(slope[turn:] > 0)  # one interior minimum
    # Primacy: unbounded as s0 -> 0, but only like exp(2 sqrt(a t log(1/s0))); recency: S'(1-) > 0.
    tiny = retrieval_profile(1.0, np.array([1e-12, 1e-6]), beta=1.0, alibi=2.0, words=4)
    assert tiny[0] > tiny[1] > profile[0] and slope[-1] > 0


def test_correlation_profile_estimator(rng):
    """Prompts where the last token copies the first one at time t: C(1) = n, every other mean zero."""
    prompts, n = 4000, 32
    theta0 = rng.uniform(0, 2 * np.pi, (prompts, n))
    theta = theta0.copy()
    theta[:, -1] = theta0[:, 0]
    profile = correlation_profile(theta0, theta, modes=(1, 2), bins=4)
    expected = np.zeros((2, 4))
    expected[:, 0] = n / profile["tokens"].values[0]
    z = (profile["correlation"].values - expected) / profile["standard_error"].values
    assert np.all(np.abs(z) < 4)
    none = correlation_profile(theta0, theta0, bins=4)
    assert np.all(none["correlation"].values == 0)


def test_particle_correlations_match_the_closed_form():
    """docs/theory/causal.md: iid uniform prompts, t = 1, modes 1 and 2 within 3 standard errors for s0 > 1/8.

    RK4 with steps of 0.1 moves the tokens by about 2e-5 at t = 1 against steps of 0.05, far below
    the standard errors of the correlations (0.02 to 0.04)."""
    beta, alibi, n, prompts = 1.0, 2.0, 128, 16000
    model = mf.CausalAttention(beta, normalized=False, alibi=alibi, prefactor=beta)
    generator = np.random.default_rng(2026)
    theta0 = generator.uniform(0, 2 * np.pi, (prompts, n))
    x0 = np.stack([np.cos(theta0), np.sin(theta0)], axis=-1)
    x = mf.observe_particles(model, x0, [0.0, 1.0], lambda y: np.arctan2(y[..., 1], y[..., 0]), method="rk4",
                             dt=0.1)[-1]
    profile = correlation_profile(theta0, x, modes=(1, 2), bins=8)
    limit = binned_correlation_limit(profile, 1.0, beta=beta, alibi=alibi)
    z = ((profile["correlation"] - limit) / profile["standard_error"]).where(profile["bin_low"] >= 1 / 8, drop=True)
    assert np.all(np.abs(z.values) < 3), z.values


# --------------------------------------------------------------------------- layered PDE
def tilted(s, theta):
    return np.exp(1.5 * np.cos(theta - np.pi * s))


def test_uniform_is_stationary_in_every_layer():
    model = mf.CausalAttention(1.0, normalized=True, alibi=2.0, diffusion=0.1)
    circle = CausalCircleFV(model, cells=64, layers=8).solve(lambda s, th: 1.0 + 0 * th, [0.0, 1.0])
    np.testing.assert_allclose(circle.rho.values, 1 / (2 * np.pi), rtol=1e-14)
    sphere = CausalSphereSpectral(model, lmax=15, layers=4).solve(lambda s, x: 1.0 + 0 * x[..., 0], [0.0, 1.0])
    np.testing.assert_allclose(sphere.rho.values, 1 / (4 * np.pi), rtol=1e-13)


@pytest.mark.parametrize("normalized,diffusion", [(False, 0.0), (True, 0.0), (True, 0.05)])
def test_layer_masses_are_kept(normalized, diffusion):
    model = mf.CausalAttention(1.0, normalized=normalized, alibi=1.0, diffusion=diffusion)
    ds = CausalCircleFV(model, cells=128, layers=16).solve(tilted, [0.0, 0.25, 0.5])
    masses = ds.rho.sum("theta").values * (2 * np.pi / 128)
    np.testing.assert_allclose(masses, 1.0, rtol=0, atol=1e-12)
    assert ds.rho.min() >= 0 and ds.rho.dims == ("time", "position", "theta")
    sphere = CausalSphereSpectral(model, lmax=23, layers=4).solve(
        lambda s, x: np.exp(2 * x[..., 2] * (1 - s)), [0.0, 0.5])
    weights = SphereSpectral(model.mixed_model, lmax=23).grid.area_weight
    np.testing.assert_allclose((sphere.rho.values * weights).sum(axis=(-2, -1)), 1.0, rtol=0, atol=1e-12)


def test_first_layer_follows_the_non_causal_equation():
    """The first layer sees only itself: the same density as the non-causal solver, up to both runs' time errors."""
    model = mf.CausalAttention(1.0, normalized=True, alibi=2.0, prefactor=1.0)
    differences = []
    for rtol in (1e-7, 1e-9):
        layered = CausalCircleFV(model, cells=128, layers=8, rtol=rtol).solve(tilted, [0.0, 0.5])
        first = layered.position.values[0]
        alone = CircleFV(model.mixed_model, cells=128, rtol=rtol).solve(lambda th: tilted(first, th), [0.0, 0.5])
        differences.append(np.abs(layered.rho.values[-1, 0] - alone.rho.values[-1]).max())
    assert differences[1] < 1e-7 and differences[1] < differences[0] / 10, differences  # falls with rtol
    assert np.abs(layered.rho.values[-1, -1] - alone.rho.values[-1]).max() > 0.1  # later layers differ
    sphere_model = mf.CausalAttention(1.0, normalized=False, alibi=0.0)
    start = lambda s, x: np.exp(x[..., 2] * (1 - s))  # noqa: E731
    layered = CausalSphereSpectral(sphere_model, lmax=23, layers=4, rtol=1e-10).solve(start, [0.0, 0.5])
    alone = SphereSpectral(sphere_model.mixed_model, lmax=23, rtol=1e-10).solve(
        lambda x: start(layered.position.values[0], x), [0.0, 0.5])
    np.testing.assert_allclose(layered.rho.values[-1, 0], alone.rho.values[-1], rtol=0, atol=1e-9)


def _restrict(rho):
    """Average pairs of layers and pairs of cells: the coarse grid's cell averages."""
    layers, cells = rho.shape
    return rho.reshape(layers // 2, 2, cells // 2, 2).mean(axis=(1, 3))


def test_layered_solution_converges_in_s_and_theta():
    """Layers and cells doubled together: second order except in the first layers (first order, error ~ h/l)."""
    model = mf.CausalAttention(1.0, normalized=False, alibi=2.0, prefactor=1.0)
    runs = [CausalCircleFV(model, cells=64 * 2**k, layers=8 * 2**k, rtol=1e-9).solve(tilted, [0.0, 0.25]).rho.values[-1]
            for k in range(3)]
    errors = [np.abs(coarse - _restrict(fine)).max(axis=1) for coarse, fine in zip(runs[:-1], runs[1:])]
    order = lambda statistic: np.log2(statistic(errors[0]) / statistic(errors[1]))  # noqa: E731
    assert order(lambda e: e[e.size // 2:].max()) > 1.6, errors  # the later half of the layers
    assert order(np.mean) > 1.5, errors
    assert order(np.max) > 0.8, errors  # the first layer


def test_particles_approach_the_layered_solution():
    """Token i von Mises with mean pi i/n, kappa = 1.5: the binned error falls at least like n^{-1/2}.

    The tolerance on the fitted slope is three bootstrap standard errors (systems resampled).
    """
    model = mf.CausalAttention(1.0, normalized=False, alibi=2.0, prefactor=1.0)
    # Its error in these moments (against 512 cells x 128 layers): 5e-4 averaged over the bins,
    # 3e-3 in the first, far below one system's at n = 1024 (about 0.1)
    pde = CausalCircleFV(model, cells=256, layers=64, rtol=1e-7).solve(tilted, [0.0, 1.0])
    generator = np.random.default_rng(11)
    sizes, per_system, first_bin_bias = np.array([64, 256, 1024]), [], []
    for n in sizes:
        theta = generator.vonmises(np.pi * np.arange(1, n + 1) / n, 1.5, size=(64, n))
        x0 = np.stack([np.cos(theta), np.sin(theta)], axis=-1)
        x = mf.observe_particles(model, x0, [0.0, 1.0], np.copy, method="rk4", dt=0.05)[-1]
        per_system.append(layered_moment_error(x, pde, 1).mean("bin").values)
        moments = layered_moments(x, pde, 1)
        difference = moments["particles"].mean("system") - moments["pde"]
        first_bin_bias.append(float(np.linalg.norm(difference[0])))
    slope = lambda errors: np.polyfit(np.log(sizes), np.log([e.mean() for e in errors]), 1)[0]  # noqa: E731
    boot = [slope([e[generator.integers(0, e.size, e.size)] for e in per_system]) for _ in range(400)]
    assert slope(per_system) <= -0.5 + 3 * np.std(boot), (slope(per_system), np.std(boot))
    # The ensemble mean at n = 1024 sees the PDE to its Monte Carlo error for s > 1/8. In the first
    # bin the finite-n bias (bounds ~ s^{-2}; 0.06 there, the PDE's own error 3e-3) is resolved by
    # 64 systems: it must shrink with n.
    standard_error = moments["particles"].std("system", ddof=1) / np.sqrt(moments.sizes["system"])
    z = (difference / standard_error).values
    assert np.all(np.abs(z[1:]) < 4), z
    assert first_bin_bias[-1] < first_bin_bias[0] / 2, first_bin_bias


# --------------------------------------------------------------------------- configs
CAUSAL_RUN = """
output = "out"
geometry = "circle"
times = {{ stop = 1.0, count = 3 }}
[model]
beta = 1.0
normalized = false
{model}
[method]
kind = "{method}"
n = 64
dt = 0.05
[initial]
kind = "uniform"
"""


def test_causal_configs_run_and_sweep(tmp_path):
    from validation.app.cli import main
    import xarray as xr
    config = tmp_path / "run.toml"
    config.write_text(CAUSAL_RUN.format(model="causal = true\nalibi = 2.0\nvalue = 1.0", method="particles"))
    assert main(["run", str(config), "--quiet", "--no-animation"]) in (0, None)
    ds = xr.open_dataset(tmp_path / "out" / "dataset.nc")
    assert mf.model_from_dict(ds.attrs["model"]).to_dict() == mf.CausalAttention(1.0, False, 2.0).to_dict()
    sweep = tmp_path / "sweep.toml"
    sweep.write_text(CAUSAL_RUN.format(model="causal = true", method="particles").replace('"out"', '"swept"')
                     + "[sweep]\nrealisations = 8\nbatch = 8\n[sweep.grid]\nalibi = [0.0, 2.0]\n")
    assert main(["sweep", str(sweep), "--quiet", "--workers", "1"]) in (0, None)
    assert xr.open_dataset(tmp_path / "swept" / "sweep.nc").sizes["alibi"] == 2


@pytest.mark.parametrize("model,method,message", [
    ("alibi = 2.0", "particles", "model.alibi applies to causal attention only"),
    ("causal = true", "CircleFV", "runs with method.kind = 'CausalCircleFV' or 'CausalCircleSpectral' (its layered mean-field equation) or 'particles'"),
])
def test_causal_config_refusals(tmp_path, capsys, model, method, message):
    from validation.app.cli import main
    config = tmp_path / "bad.toml"
    config.write_text(CAUSAL_RUN.format(model=model, method=method))
    assert main(["run", str(config)]) == 2
    assert message in capsys.readouterr().err


def layer_quantiles(rho0, layers, points):
    """Quantile particles, shape ``(layers, points)``, of ``rho0(s, theta)`` at the layers' centres: its
    distribution function on a fine grid, inverted at the labels (i + 1/2) / points."""
    fine = np.linspace(0, 2 * np.pi, 20001)
    phi = np.empty((layers, points))
    for l, s in enumerate((np.arange(layers) + 0.5) / layers):
        density = rho0(s, 0.5 * (fine[1:] + fine[:-1]))
        cdf = np.concatenate(([0.0], np.cumsum(density)))
        phi[l] = np.interp((np.arange(points) + 0.5) / points * cdf[-1], cdf, fine)
    return phi


def lagrangian_layers(model, rho0, layers, points, t_end, dt):
    """Quantile particles per layer moved by the mixed causal velocity (D = 0), written independently of the
    finite volumes: each layer's empirical Fourier moments, mixed with the layer weights, give the velocity
    through the kernel's Bessel series (e^{beta cos t} = sum_j I_j(beta) e^{ijt})."""
    from scipy.special import iv
    phi = layer_quantiles(rho0, layers, points)
    weights = mf.positional_cell_weights(model.alibi, layers)  # the s-quadrature both methods share
    modes = 24  # I_24(2) / I_0(2) < 1e-20
    bessel = iv(np.arange(modes + 2), model.beta) * (np.exp(-model.beta) if model.normalized else 1.0)

    def angular_velocity(phi):
        z = np.exp(1j * phi)
        powers = [np.ones_like(z)]
        for _ in range(modes + 1):
            powers.append(powers[-1] * z)
        mixed = weights @ np.stack([p.mean(axis=1) for p in powers], axis=1)  # F_m = mean z^m, mixed over layers
        # N = sum_j I_|j| z^j conj(F_{j-1}), D = sum_j I_|j| z^j conj(F_j), with z^{-j} = conj(z^j), F_{-m} = conj(F_m)
        numerator = bessel[0] * mixed[:, 1][:, None] * np.ones_like(z)
        denominator = bessel[0] * mixed[:, 0].real[:, None] * np.ones(phi.shape)
        for j in range(1, modes + 1):
            numerator += bessel[j] * (powers[j] * np.conj(mixed[:, j - 1])[:, None]
                                      + np.conj(powers[j]) * mixed[:, j + 1][:, None])
            denominator += 2 * bessel[j] * (powers[j] * np.conj(mixed[:, j])[:, None]).real
        value = model.prefactor * numerator / (denominator if model.normalized else 1.0)
        return (np.conj(z) * value).imag

    return rk4(angular_velocity, phi, dt, int(round(t_end / dt)))


@pytest.mark.parametrize("normalized", [False, True])
def test_layered_finite_volumes_against_lagrangian_quantiles(normalized):
    """Two independent discretizations in theta of the same layered equation: Fourier moments of every layer
    agree, and the finite volumes' distance to the quantile particles falls at second order with the cells."""
    model = mf.CausalAttention(2.0, normalized=normalized, alibi=2.0, prefactor=1.0)
    t_end, layers = 0.5, 8
    phi = lagrangian_layers(model, tilted, layers, 2048, t_end, 0.025)
    particle_moments = np.stack([np.mean(np.exp(1j * k * phi), axis=1) for k in (1, 2)])
    errors = []
    for cells in (128, 256):
        run = CausalCircleFV(model, cells=cells, layers=layers, rtol=1e-8).solve(tilted, [0.0, t_end])
        theta = run.theta.values
        rho = run.rho.values[-1]
        moments = np.stack([(rho * np.exp(1j * k * theta)).sum(axis=1) * 2 * np.pi / cells for k in (1, 2)])
        errors.append(np.abs(moments - particle_moments).max())
    # second order in the cells (the quantiles' own error, ~1/M^2, and RK4's are far smaller)
    assert errors[1] < 1e-3 and errors[0] / errors[1] > 3, errors


@pytest.mark.parametrize("normalized", [False, True])
def test_layered_spectral_solver_against_lagrangian_quantiles(normalized):
    """Each layer's transport in Fourier space: its Fourier moments meet the quantile particles'
    (written independently) to the particles' own error. That error, measured by doubling their
    count and halving their step, is 6e-8 for USA and below 1e-9 for SA (quantile midpoints at
    M = 2048, RK4 at dt = 0.025); the bound 2e-7 is three times the larger. The spectral run's
    own error at 128 modes and rtol 1e-10 is below 1e-8 (it changes by less at 256)."""
    model = mf.CausalAttention(2.0, normalized=normalized, alibi=2.0, prefactor=1.0)
    t_end, layers = 0.5, 8
    phi = lagrangian_layers(model, tilted, layers, 2048, t_end, 0.025)
    particle_moments = np.stack([np.mean(np.exp(1j * k * phi), axis=1) for k in (1, 2)])
    run = CausalCircleSpectral(model, cells=256, layers=layers, rtol=1e-10).solve(tilted, [0.0, t_end])
    assert run.rho.dims == ("time", "position", "theta") and bool(run.resolved.all())
    averages, theta = run.rho.values[-1], run.theta.values
    # the moments of the series from its cell averages: mode k of an average carries sinc(k / cells)
    moments = np.stack([(averages * np.exp(1j * k * theta)).mean(axis=1) * 2 * np.pi / np.sinc(k / 256)
                        for k in (1, 2)])
    assert np.abs(moments - particle_moments).max() < 2e-7


def test_layered_spectral_solver_interpolates_its_outputs_within_its_steps_error():
    """``outputs="interpolated"`` on a state of many layers: 20 outputs from the continuous extension,
    against a run that steps to each at rtol 1e-11, within the steps' local errors (rtol times the
    deviation each) and one more for the interpolant, in fewer right-hand sides than stepping to each.
    The bound is the tolerance's guarantee, far above the errors of these stability-held steps; what it
    catches is a layered state interpolated wrongly (a wrong fraction of a step, or layers mixed up)."""
    model, times, rtol = mf.CausalAttention(1.0, normalized=True, alibi=2.0), np.linspace(0.0, 2.0, 21), 1e-8
    reference = CausalCircleSpectral(model, cells=64, layers=8, rtol=1e-11).solve(tilted, times)
    run = CausalCircleSpectral(model, cells=64, layers=8, rtol=rtol, outputs="interpolated").solve(tilted, times)
    settings = json.loads(run.attrs["settings"])
    deviation = np.abs(reference.rho.values - 1 / (2 * np.pi)).max()
    assert np.abs(run.rho.values - reference.rho.values).max() <= (settings["steps"] + 1) * rtol * deviation
    stepped = CausalCircleSpectral(model, cells=64, layers=8, rtol=rtol).solve(tilted, times)
    assert settings["rhs_evaluations"] < json.loads(stepped.attrs["settings"])["rhs_evaluations"]

def test_layered_spectral_solver_meets_the_finite_volumes_within_their_error_estimate():
    """Two discretisations of the same layered equation in theta: the spectral run (far more accurate)
    differs from CausalCircleFV by at most the finite volumes' Richardson estimate (second order: the
    difference to half the cells over 3), with 10 % for its higher-order remainder."""
    model = mf.CausalAttention(1.0, normalized=True, alibi=2.0, diffusion=0.05)
    times = [0.0, 0.5, 1.0]
    spectral = CausalCircleSpectral(model, cells=64, layers=8, record_cells=256, rtol=1e-10).solve(tilted, times)
    fine, coarse = (CausalCircleFV(model, cells=n, layers=8, rtol=1e-9).solve(tilted, times).rho.values
                    for n in (256, 128))
    estimate = np.abs(fine.reshape(3, 8, 128, 2).mean(axis=-1) - coarse).max(axis=(1, 2)) / 3
    difference = np.abs(spectral.rho.values - fine).max(axis=(1, 2))
    assert np.all(difference[1:] <= 1.1 * estimate[1:]), (difference, estimate)
    assert difference[0] < 1e-14  # the same cell averages of the start (both exact for this smooth density)


def test_layered_spectral_solver_keeps_uniform_and_masses_and_its_first_layer_is_non_causal():
    model = mf.CausalAttention(1.0, normalized=True, alibi=2.0, diffusion=0.1)
    uniform = CausalCircleSpectral(model, cells=32, layers=4).solve(lambda s, th: 1.0 + 0 * th, [0.0, 1.0])
    np.testing.assert_allclose(uniform.rho.values, 1 / (2 * np.pi), rtol=1e-14)
    layered = CausalCircleSpectral(model, cells=64, layers=8, rtol=1e-10).solve(tilted, [0.0, 0.5])
    np.testing.assert_allclose(layered.rho.sum("theta").values * (2 * np.pi / 64), 1.0, rtol=0, atol=1e-13)
    assert "energy" not in layered and "lyapunov" not in layered  # not a gradient flow: none is known
    first = layered.position.values[0]
    alone = CircleSpectral(model.mixed_model, cells=64, rtol=1e-10).solve(lambda th: tilted(first, th), [0.0, 0.5])
    np.testing.assert_allclose(layered.rho.values[-1, 0], alone.rho.values[-1], rtol=0, atol=1e-9)
    assert np.abs(layered.rho.values[-1, -1] - alone.rho.values[-1]).max() > 0.05  # later layers differ
    with pytest.raises(TypeError, match="CausalCircleSpectral solves the layered equation"):
        CausalCircleSpectral(mf.SelfAttention(1.0))


def test_resolution_diagnostics_of_a_layered_state_are_the_largest_over_its_layers():
    """``spectral_tail`` and ``error_estimate`` take the layered solvers' own state: the largest of
    the single-density solver's values over the layers (layers with different tails, so the
    largest is not the first)."""
    model = mf.CausalAttention(1.0, normalized=True, alibi=1.0)
    circle = CausalCircleSpectral(model, cells=64, layers=4)
    state = circle.initial_coefficients(lambda s, th: np.exp((1 + 6 * s) * np.cos(th)))
    single = CircleSpectral(model.mixed_model, cells=64)
    sphere = CausalSphereSpectral(model, lmax=23, layers=4)
    sphere_state = sphere.initial_coefficients(lambda s, x: np.exp((1 + 6 * s) * x[..., 2]))
    sphere_single = SphereSpectral(model.mixed_model, lmax=23)
    for layered, plain, coefficients in ((circle, single, state), (sphere, sphere_single, sphere_state)):
        for diagnostic in ("spectral_tail", "error_estimate"):
            per_layer = [getattr(plain, diagnostic)(layer) for layer in coefficients]
            assert np.argmax(per_layer) > 0, per_layer
            assert getattr(layered, diagnostic)(coefficients) == max(per_layer)
    # the circle's tail from its definition, by hand: power of the modes above 0.9 (N/2 - 1) over that of k >= 1
    power = np.abs(state[:, 1:]) ** 2
    top = np.arange(1, 32) > 0.9 * 31
    np.testing.assert_allclose(circle.spectral_tail(state), (power[:, top].sum(1) / power.sum(1)).max(), rtol=1e-13)
