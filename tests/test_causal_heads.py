"""Causal attention with query, key, value and heads; mixtures of ALiBi slopes and their retrieval profile."""

import numpy as np
import pytest
from scipy.special import iv

import meanfield as mf
from meanfield.engines import select_kernel
from meanfield.engines.causal_series import CausalCircleSeries
from solvers import CausalCircleFV, CausalCircleSpectral, CausalSphereSpectral
from validation.causal import retrieval_profile
from validation.causal_heads import mixture_retrieval_profile, recency_time

from test_causal import MODELS, circle_tokens, layer_quantiles, rk4, tilted


def transcribed_velocity(heads, x, *, normalized, prefactor, include_self):
    """The definition of CAUSAL.md sec. 1 with heads, token by token and pair by pair (no library code).

    ``heads``: (beta, alibi, Q, K, V) with Q, K, V matrices.
    """
    n, d = x.shape
    out = np.zeros_like(x)
    for i in range(n):
        seen = range(i + 1) if include_self else range(i)
        if not seen:
            continue
        a = np.zeros(d)
        for beta, alibi, q, k, v in heads:
            positional = [np.exp(-alibi * (i - j) / n) for j in seen]
            weights = [p * np.exp(beta * (q @ x[i]) @ (k @ x[j])) for p, j in zip(positional, seen)]
            total = sum(weights) if normalized else sum(positional)
            a += prefactor * sum(w * (v @ x[j]) for w, j in zip(weights, seen)) / total
        out[i] = a - (a @ x[i]) * x[i]
    return out


def random_matrices(rng, heads, d, k=None, scale=0.6):
    k = d if k is None else k
    return scale * rng.normal(size=(heads, k, d))


@pytest.mark.parametrize("spec", MODELS)
def test_identity_matrices_give_todays_model_bit_for_bit(spec, rng):
    x = np.stack([mf.sample_uniform(17, 3, rng) for _ in range(2)])
    plain = mf.CausalAttention(**spec).velocity(x)
    eye = np.eye(3)
    with_matrices = mf.CausalAttention(**spec, query=eye, key=eye, value=eye).velocity(x)
    np.testing.assert_array_equal(with_matrices, plain)
    one_head_lists = mf.CausalAttention(**{**spec, "beta": [spec["beta"]], "alibi": [spec["alibi"]]}, value=[1.0])
    np.testing.assert_array_equal(one_head_lists.velocity(x), plain)


@pytest.mark.parametrize("normalized", [False, True])
@pytest.mark.parametrize("include_self", [False, True])
def test_heads_with_their_own_beta_slope_and_matrices_are_the_definition(normalized, include_self, rng):
    d, heads = 4, 2
    query, key = random_matrices(rng, heads, d, k=2), random_matrices(rng, heads, d, k=2)
    value = random_matrices(rng, heads, d)
    model = mf.CausalAttention([1.5, 0.7], normalized, alibi=[3.0, 0.0], prefactor=0.8, include_self=include_self,
                               query=query, key=key, value=value)
    x = mf.sample_uniform(13, d, rng)
    expected = transcribed_velocity(list(zip([1.5, 0.7], [3.0, 0.0], query, key, value)), x, normalized=normalized,
                                    prefactor=0.8, include_self=include_self)
    np.testing.assert_allclose(model.velocity(x), expected, rtol=0, atol=1e-13)
    # signed scalar values per head: the mixture of slopes
    mixture = mf.CausalAttention([2.0, 1.0], normalized, alibi=[2.0, 0.5], value=[1.0, -0.4],
                                 include_self=include_self)
    expected = transcribed_velocity([(2.0, 2.0, np.eye(d), np.eye(d), np.eye(d)),
                                     (1.0, 0.5, np.eye(d), np.eye(d), -0.4 * np.eye(d))], x,
                                    normalized=normalized, prefactor=1.0, include_self=include_self)
    np.testing.assert_allclose(mixture.velocity(x), expected, rtol=0, atol=1e-13)


def test_heads_sharing_beta_and_slope_merge_and_the_circle_scan_serves_them(rng):
    model = mf.CausalAttention([1.0, 1.0], False, alibi=[2.0, 2.0], value=[1.0, -0.25], prefactor=3.0)
    assert len(model.mixed_groups) == 1 and model.mixed_model.value == pytest.approx(3.0 * 0.75)
    x = circle_tokens(rng, (2, 300))
    direct = model.velocity_unchecked(x)
    series = CausalCircleSeries(model).velocity_unchecked(x)
    assert np.abs(series - direct).max() <= 1e-12 * np.abs(direct).max()
    assert select_kernel(model, x, "auto").name == "series"
    with_matrices = mf.CausalAttention(1.0, False, query=np.eye(2))
    assert select_kernel(with_matrices, x, "auto").name == "numpy"


@pytest.mark.parametrize("kwargs,match", [
    (dict(beta=[1.0, 2.0], alibi=[1.0, 2.0, 3.0]), "same number of heads"),
    (dict(beta=1.0, alibi=[1.0, -2.0]), "alibi must be >= 0"),
    (dict(beta=[1.0, np.nan]), "beta must be finite"),
    (dict(beta=1.0, value=[[1.0, 0.0], [0.0, 1.0]], query=np.eye(3)), "same R\\^d"),
    (dict(beta=1.0, query=np.ones((2, 3))), "query alone must be square"),
    (dict(beta=800.0, query=np.eye(2)), "overflows"),
    (dict(beta=1.0, value=["a"]), "value must be a number or one number per head"),
])
def test_bad_heads_are_refused_naming_the_argument(kwargs, match):
    with pytest.raises((ValueError, TypeError), match=match):
        mf.CausalAttention(normalized=False, **kwargs)


def test_a_mixture_of_slopes_has_no_single_mixed_model_and_the_spectral_layers_refuse_it(rng):
    model = mf.CausalAttention([1.0, 1.0], False, alibi=[2.0, 0.5], value=[1.0, -0.5])
    with pytest.raises(ValueError, match="use mixed_groups"):
        model.mixed_model
    for solver in (CausalCircleSpectral, CausalSphereSpectral):
        with pytest.raises(ValueError, match="use CausalCircleFV"):
            solver(model)
    with pytest.raises(ValueError, match="pass alibi"):
        model.positional_totals(10)
    with pytest.raises(ValueError, match="R\\^3 but the model's matrices act on R\\^2"):
        mf.CausalAttention(1.0, True, query=np.eye(2)).velocity(mf.sample_uniform(5, 3, rng))
    assert mf.model_from_dict(model.to_dict()).to_dict() == model.to_dict()


def quantile_layers(heads, normalized, rho0, layers, points, t_end, dt):
    """Quantile particles per layer moved by the layered equation with heads (D = 0), written in the test:

    every particle of layer l sees the particles of every layer m with the cell weight W_g[l, m] of its
    head's slope (the s-quadrature both methods share) divided by the points, through the heads' logits
    beta <Q x, K y> and values V y, and the tangent projection."""
    phi = layer_quantiles(rho0, layers, points)
    mixing = [mf.positional_cell_weights(alibi, layers) for _, alibi, _, _, _ in heads]

    def angular_velocity(phi):
        x = np.stack([np.cos(phi), np.sin(phi)], axis=-1).reshape(-1, 2)  # (layers * points, 2)
        output = np.zeros_like(x)
        for (beta, _, q, k, v), w in zip(heads, mixing):
            pair = np.kron(w, np.ones((points, points))) / points  # (layer, particle) x (layer, particle)
            kernel = pair * np.exp(beta * (x @ q.T) @ (x @ k.T).T)
            average = kernel @ (x @ v.T)
            output += average / (kernel.sum(axis=1, keepdims=True) if normalized else 1.0)
        tangent = np.stack([-x[:, 1], x[:, 0]], axis=-1)
        return np.sum(output * tangent, axis=-1).reshape(phi.shape)

    return rk4(angular_velocity, phi, dt, int(round(t_end / dt)))


@pytest.mark.parametrize("normalized", [False, True])
def test_layered_finite_volumes_with_matrices_and_a_mixture_of_slopes_against_quantile_particles(normalized):
    """The layered PDE of two heads (own beta, slope, Q, K, V) against an independent Lagrangian
    discretisation of the same equation: Fourier moments agree, at second order in the cells."""
    rng = np.random.default_rng(5)
    query, key = 0.8 * np.eye(2) + 0.3 * rng.normal(size=(2, 2, 2)), 0.8 * np.eye(2) + 0.3 * rng.normal(size=(2, 2, 2))
    value = np.stack([np.eye(2), -0.5 * np.eye(2) + 0.2 * rng.normal(size=(2, 2))])
    betas, slopes = [2.0, 1.0], [2.0, 0.3]
    model = mf.CausalAttention(betas, normalized, alibi=slopes, query=query, key=key, value=value)
    t_end, layers = 0.5, 8
    phi = quantile_layers(list(zip(betas, slopes, query, key, value)), normalized, tilted, layers, 256, t_end, 0.05)
    particle_moments = np.stack([np.mean(np.exp(1j * k * phi), axis=1) for k in (1, 2)])
    errors = []
    for cells in (64, 128):
        run = CausalCircleFV(model, cells=cells, layers=layers, rtol=1e-8).solve(tilted, [0.0, t_end])
        theta, rho = run.theta.values, run.rho.values[-1]
        moments = np.stack([(rho * np.exp(1j * k * theta)).sum(axis=1) * 2 * np.pi / cells for k in (1, 2)])
        errors.append(np.abs(moments - particle_moments).max())
    # the quantiles' own error (~1/points^2 in the moments) and RK4's stay far below the cells'
    assert errors[1] < 3e-3 and errors[0] / errors[1] > 3, errors


# --------------------------------------------------------------------------- retrieval profile of a mixture
def quadrature_correlation(slopes_rates, t, s0, grid=1200, steps=200):
    """g(t, 1; s0) of the mixture's Volterra equation on a uniform grid in s (trapezoid rule) marched by RK4 in
    t, written from docs/theory/causal.md sec. 3 with one positional kernel per slope (no library code)."""
    s = np.linspace(s0, 1.0, grid + 1)
    h = s[1] - s[0]

    def kernel(slope, at, source):
        return 1.0 / at if slope == 0 else slope * np.exp(-slope * (at - source)) / (1 - np.exp(-slope * at))

    weights = np.tril(np.ones((s.size, s.size))) * h  # the trapezoid rule on [s0, s_i], row i
    weights[:, 0] *= 0.5
    weights[np.arange(s.size), np.arange(s.size)] *= 0.5
    weights[0] = 0.0
    operator = np.zeros((s.size, s.size))
    forcing = np.zeros(s.size)
    for slope, rate in slopes_rates:
        operator += rate * weights * kernel(slope, s[:, None], s[None, :])
        forcing += rate * kernel(slope, s, s0)
    return rk4(lambda g: operator @ g + forcing, np.zeros(s.size), t / steps, steps)[-1]


def quadrature_profile(heads, t, s0, words, modes=8):
    """S_t(s0) = sum_k e^{-pi^2 k^2/(2M^2)} g_k with a_k = (c v / beta) k^2 I_k(beta) per head, c = 1."""
    total = 0.0
    for k in range(1, modes + 1):
        slopes_rates = {}
        for beta, slope, v in heads:
            slopes_rates[slope] = slopes_rates.get(slope, 0.0) + v / beta * k**2 * iv(k, beta)
        # Richardson: the trapezoid's error is O(h^2)
        fine, coarse = (quadrature_correlation(slopes_rates.items(), t, s0, grid=n) for n in (1200, 600))
        total += np.exp(-np.pi**2 * k**2 / (2 * words**2)) * (4 * fine - coarse) / 3
    return total


def test_one_slope_of_the_mixture_takes_the_closed_form():
    heads = mf.CausalAttention([1.0, 1.0], False, alibi=[2.0, 2.0], value=[0.7, 0.3])
    s0 = np.array([0.01, 0.3, 0.9])
    np.testing.assert_allclose(mixture_retrieval_profile(heads, 1.5, s0, words=4),
                               retrieval_profile(1.5, s0, beta=1.0, alibi=2.0, words=4), rtol=1e-14)


@pytest.mark.parametrize("t", [1.0, 3.0])
def test_a_signed_two_slope_mixture_against_an_independent_quadrature(t):
    """A double-well mixture: a recency head (steep slope) minus a weaker long-range one."""
    heads = [(1.0, 4.0, 1.0), (2.0, 0.0, -0.3)]
    model = mf.CausalAttention([h[0] for h in heads], False, alibi=[h[1] for h in heads], value=[h[2] for h in heads])
    s0 = np.array([0.05, 0.4, 0.85])
    expected = [quadrature_profile(heads, t, source, 4) for source in s0]
    np.testing.assert_allclose(mixture_retrieval_profile(model, t, s0, words=4), expected, rtol=1e-6, atol=1e-9)


def test_recency_time_is_where_the_profile_turns_at_the_end_of_the_prompt():
    heads = [(1.0, 4.0, 1.0), (2.0, 0.0, -0.3)]
    model = mf.CausalAttention([h[0] for h in heads], False, alibi=[h[1] for h in heads], value=[h[2] for h in heads])
    critical = recency_time(model, words=4)
    assert 0 < critical < np.inf
    for factor, rising in ((0.7, True), (1.3, False)):
        t = factor * critical
        end = [quadrature_profile(heads, t, s0, 4) for s0 in (0.985, 0.995)]
        assert (end[1] > end[0]) == rising, (factor, end)
    # one head, one mode (beta -> 0 leaves a_1 = c v / 2 only): the U-shape theorem's bound 2 (1 - e^{-lambda}) / a_1
    single = mf.CausalAttention(0.0, False, alibi=2.0, prefactor=3.0)
    assert recency_time(single, words=4) == pytest.approx(2 * (1 - np.exp(-2.0)) / 1.5, rel=1e-14)
    # a long-range head alone never favours the end (lambda = 0: P = 0)
    assert recency_time(mf.CausalAttention(1.0, False), words=4) == 0.0


def test_the_profile_refuses_what_it_does_not_cover():
    with pytest.raises(ValueError, match="causal USA"):
        mixture_retrieval_profile(mf.CausalAttention(1.0, True), 1.0, 0.5, words=4)
    with pytest.raises(ValueError, match="causal USA"):
        recency_time(mf.CausalAttention(1.0, False, query=np.eye(2)), words=4)
    with pytest.raises(TypeError, match="CausalAttention"):
        recency_time(mf.SelfAttention(1.0), words=4)
    with pytest.raises(ValueError, match="s0 must lie in"):
        mixture_retrieval_profile(mf.CausalAttention(1.0, False), 1.0, 0.0, words=4)


def test_causal_usa_at_a_stiff_beta_is_refused_up_front_naming_the_prefactor(rng):
    x0 = circle_tokens(rng, (16,))
    with pytest.raises(ValueError, match="times: USA at beta = 20 is stiff.*prefactor of about e\\^-beta"):
        mf.simulate_particles(mf.CausalAttention(20.0, False), x0, [0.0, 1.0], method="dop853")
    # the prefactor e^-beta measures time in units of e^beta: the same run is affordable
    ds = mf.simulate_particles(mf.CausalAttention(20.0, False, prefactor=np.exp(-20.0)), x0, [0.0, 1.0],
                               method="dop853")
    assert np.all(np.isfinite(ds.x.values))


def test_a_config_with_heads_and_a_mixture_of_slopes_runs(tmp_path, capsys):
    import xarray as xr
    from validation.app.cli import main
    from test_causal import CAUSAL_RUN
    heads = "causal = true\nbeta = [1.0, 2.0]\nalibi = [4.0, 0.0]\nvalue = [1.0, -0.3]"
    for method, extra in (("particles", ""), ("CausalCircleFV", "cells = 32\nlayers = 4\n")):
        config = tmp_path / f"{method}.toml"
        text = CAUSAL_RUN.format(model=heads, method=method).replace('"out"', f'"{method}"').replace("beta = 1.0\n", "")
        config.write_text(text.replace("dt = 0.05\n", "dt = 0.05\n" + extra) if extra else text)
        if extra:
            config.write_text(config.read_text().replace("n = 64\ndt = 0.05\n", ""))
        assert main(["run", str(config), "--quiet", "--no-animation"]) in (0, None), capsys.readouterr().err
        model = mf.model_from_dict(xr.open_dataset(tmp_path / method / "dataset.nc").attrs["model"])
        assert model.to_dict() == mf.CausalAttention([1.0, 2.0], False, alibi=[4.0, 0.0], value=[1.0, -0.3]).to_dict()
    config = tmp_path / "matrices.toml"
    config.write_text(CAUSAL_RUN.format(model="causal = true\nquery = [[1.0, 0.5], [0.0, 1.0]]", method="particles"))
    assert main(["run", str(config), "--quiet", "--no-animation"]) in (0, None), capsys.readouterr().err
    config.write_text(CAUSAL_RUN.format(model="alibi = 0.0", method="particles").replace("beta = 1.0", "beta = [1.0, 2.0]"))
    assert main(["run", str(config)]) == 2
    assert "model.beta must be a number (one per head is for causal attention)" in capsys.readouterr().err
    config.write_text(CAUSAL_RUN.format(model="causal = true\nalibi = [1.0, -1.0]", method="particles"))
    assert main(["run", str(config)]) == 2
    assert "model.alibi must be >= 0, got [1.0, -1.0]" in capsys.readouterr().err


@pytest.mark.slow  # a rate study (n up to thousands, several seeds), as the library's other rate studies
def test_particles_of_a_mixture_with_matrices_approach_its_layered_solution_at_n_to_the_minus_half():
    """Two heads (own beta, slope, Q, K, V), tokens von Mises with mean pi i/n: the binned moment error of the
    causal particles against CausalCircleFV falls like n^{-1/2} (slope within three bootstrap standard errors)."""
    from validation.causal import layered_moment_error

    rng = np.random.default_rng(5)
    query, key = 0.8 * np.eye(2) + 0.3 * rng.normal(size=(2, 2, 2)), 0.8 * np.eye(2) + 0.3 * rng.normal(size=(2, 2, 2))
    value = np.stack([np.eye(2), -0.5 * np.eye(2) + 0.2 * rng.normal(size=(2, 2))])
    model = mf.CausalAttention([2.0, 1.0], False, alibi=[2.0, 0.3], query=query, key=key, value=value)
    pde = CausalCircleFV(model, cells=128, layers=32, rtol=1e-7).solve(tilted, [0.0, 1.0])
    generator = np.random.default_rng(12)
    sizes, per_system = np.array([64, 128, 256]), []
    for n, systems in zip(sizes, (64, 48, 32)):
        theta = generator.vonmises(np.pi * np.arange(1, n + 1) / n, 1.5, size=(systems, n))
        x = mf.observe_particles(model, np.stack([np.cos(theta), np.sin(theta)], axis=-1), [0.0, 1.0], np.copy,
                                 method="rk4", dt=0.05)[-1]
        per_system.append(layered_moment_error(x, pde, 1).mean("bin").values)
    slope = lambda errors: np.polyfit(np.log(sizes), np.log([e.mean() for e in errors]), 1)[0]  # noqa: E731
    boot = [slope([e[generator.integers(0, e.size, e.size)] for e in per_system]) for _ in range(400)]
    assert abs(slope(per_system) + 0.5) <= 3 * np.std(boot), (slope(per_system), np.std(boot))


@pytest.mark.parametrize("slope", [0.0, 2.0, 8.0])
def test_the_collocation_meets_the_closed_form_of_one_slope(slope):
    """The collocation the mixtures take, run on one slope (where the closed form holds), for sources down to
    s0 = 1e-3 and rates a t up to 10: to 1e-10 of the largest correlation."""
    from validation.causal import correlation_limit
    from validation.causal_heads import _mixture_correlation

    rates = np.array([0.56516, 2.0, -1.0])
    for s0 in (1e-3, 0.1, 0.95):
        for t in (1.0, 5.0):
            found = _mixture_correlation(np.array([slope]), rates[None, :], t, s0)
            exact = correlation_limit(rates, t, 1.0, s0, slope)
            assert np.abs(found - exact).max() <= 1e-10 * np.abs(exact).max(), (s0, t)
