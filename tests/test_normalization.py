"""Where layer normalisation sits: pre-LN and post-LN with an RMS gain (PureAttention(normalization=...)) against
SelfAttention's post-LN on the sphere."""

import numpy as np
import pytest

import meanfield as mf
from meanfield.engines import check_consistency


def rms_normalised(y, gain):
    """g y / |y|, token by token."""
    return [gain * y[i] / np.sqrt(sum(c * c for c in y[i])) for i in range(len(y))]


def transcribed_layer(x, h, heads, gain, normalization):
    """One layer token by token: pre-LN x + h a(u), u = g x / |x|; post-LN g (x + h a(x)) / |x + h a(x)|;
    a_i = sum_h V_h sum_j softmax_j(beta <Q u_i, K u_j>) u_j."""
    n, d = x.shape
    u = rms_normalised(x, gain) if normalization == "pre" else list(x)
    out = x.copy()
    for i in range(n):
        for beta, q, k, v in heads:
            logits = [beta * (q @ u[i]) @ (k @ u[j]) for j in range(n)]
            top = max(logits)
            weights = [np.exp(logit - top) for logit in logits]
            out[i] = out[i] + h * (v @ (sum(w * u[j] for w, j in zip(weights, range(n))) / sum(weights)))
    return np.array(rms_normalised(out, gain)) if normalization == "post" else out


@pytest.mark.parametrize("normalization", ["pre", "post"])
def test_the_layer_is_its_formula(normalization):
    rng = np.random.default_rng(3)
    d, heads = 3, 2
    query, key, value = (0.8 * rng.normal(size=(heads, d, d)) for _ in range(3))
    gain = np.array([1.3, 0.7, -0.9])
    model = mf.PureAttention(query=query, key=key, value=value, beta=1.5, normalization=normalization, gain=gain)
    x = rng.normal(size=(9, d))
    ds = mf.simulate_particles(model, x, [0.0, 0.1, 0.3], method="layer", dt=0.1)
    expected = [x]
    for _ in range(3):
        expected.append(transcribed_layer(expected[-1], 0.1, list(zip([1.5] * heads, query, key, value)), gain,
                                          normalization))
    np.testing.assert_allclose(ds.x.values, np.array(expected)[[0, 1, 3]], rtol=0, atol=1e-13)
    if normalization == "post":  # the layer's output is on the ellipsoid g S^{d-1}
        np.testing.assert_allclose(np.linalg.norm(ds.x.values[1:] / gain, axis=-1), 1.0, rtol=1e-14)


def test_the_layers_converge_to_the_continuous_limit_at_order_one():
    rng = np.random.default_rng(4)
    model = mf.PureAttention(beta=2.0, value=np.diag([1.0, -0.5, 0.8]), normalization="pre", gain=[1.0, 2.0, 0.5])
    x0 = rng.normal(size=(12, 3))
    exact = mf.simulate_particles(model, x0, [0.0, 1.0], rtol=1e-12, atol=1e-14).x.values[-1]
    errors = [np.abs(mf.simulate_particles(model, x0, [0.0, 1.0], method="layer", dt=dt).x.values[-1] - exact).max()
              for dt in (0.04, 0.02, 0.01)]
    orders = np.log2(np.array(errors[:-1]) / np.array(errors[1:]))
    assert np.all(np.abs(orders - 1.0) < 0.1), (errors, orders)


def test_post_ln_without_gain_is_the_sphere_layer_of_self_attention():
    rng = np.random.default_rng(7)
    query, key, value = (rng.normal(size=(2, 3, 3)) for _ in range(3))
    x0 = mf.sample_uniform(20, 3, rng=8)
    post = mf.PureAttention(query=query, key=key, value=value, beta=2.0, normalization="post")
    sphere = mf.SelfAttention(2.0, query=query, key=key, value=value)
    times = [0.0, 0.5, 1.0]
    np.testing.assert_allclose(mf.simulate_particles(post, x0, times, method="layer", dt=0.05).x.values,
                               mf.simulate_particles(sphere, x0, times, method="layer", dt=0.05).x.values,
                               rtol=0, atol=1e-13)


def test_the_post_ln_layer_with_gain_e_dt_gamma_follows_its_limit_at_order_one():
    """The gain e^{dt gamma} per layer: the layers approach SA plus the field P_u diag(gamma) u at order one,
    and that limit is not SA alone (the gain's field matters at the scale of the errors)."""
    rng = np.random.default_rng(9)
    query, key, value = (rng.normal(size=(3, 3)) for _ in range(3))
    gamma = np.array([0.5, -0.3, 0.1])
    x0 = mf.sample_uniform(12, 3, rng=10)

    def layers(dt):
        return mf.PureAttention(query=query, key=key, value=value, normalization="post", gain=np.exp(dt * gamma))

    limit = layers(0.01).post_ln_limit(0.01)
    np.testing.assert_allclose(limit.external.matrix, np.diag(gamma), rtol=1e-12)
    exact = mf.simulate_particles(limit, x0, [0.0, 1.0], rtol=1e-12).x.values[-1]
    errors = np.array([np.abs(mf.simulate_particles(layers(dt), x0, [0.0, 1.0], method="layer", dt=dt).x.values[-1]
                              - exact).max() for dt in (0.02, 0.01, 0.005)])
    orders = np.log2(errors[:-1] / errors[1:])
    assert np.all(np.abs(orders - 1.0) < 0.1), (errors, orders)
    without_gain = mf.simulate_particles(mf.SelfAttention(1.0, query=query, key=key, value=value), x0, [0.0, 1.0],
                                         rtol=1e-12).x.values[-1]
    assert np.abs(without_gain - exact).max() > 10 * errors[0]


def test_the_quadratic_field_is_half_the_sphere_gradient_of_its_potential():
    """P_x A x against central differences of v(x) = <x, A x> along tangent directions (independent of field())."""
    rng = np.random.default_rng(11)
    a = rng.normal(size=(4, 4))
    field = mf.QuadraticField(a + a.T)
    x = mf.sample_uniform(6, 4, rng=12)
    tangent = mf.project_tangent(x, rng.normal(size=x.shape))
    h = 1e-5

    def v(points):
        return np.einsum("ni,ij,nj->n", points, a + a.T, points)

    def on_sphere(s):
        moved = x + s * tangent
        return moved / np.linalg.norm(moved, axis=-1, keepdims=True)

    directional = (v(on_sphere(h)) - v(on_sphere(-h))) / (2 * h)
    projected = mf.project_tangent(x, field.field(x))
    np.testing.assert_allclose(2 * np.sum(projected * tangent, axis=-1), directional, rtol=1e-8, atol=1e-9)
    np.testing.assert_allclose(field.potential(x), v(x), rtol=1e-13)
    model = mf.SelfAttention(1.0, external=field)
    assert mf.model_from_dict(model.to_dict()).external.matrix.tolist() == field.matrix.tolist()


def test_the_array_api_engine_implements_the_post_ln_layer(rng):
    xps = pytest.importorskip("array_api_strict")
    model = mf.PureAttention(beta=1.5, value=np.diag([1.0, -0.5, 0.8]), normalization="post", gain=[1.0, 2.0, 0.5])
    x0 = rng.normal(size=(2, 10, 3))
    times = [0.0, 0.2, 0.4]
    on_host = mf.simulate_particles(model, x0, times, method="layer", dt=0.1).x.values
    strict = mf.simulate_particles(model, xps.asarray(x0), times, method="layer", dt=0.1)
    np.testing.assert_allclose(strict.x.values, on_host, rtol=0, atol=1e-13)


def test_pre_ln_tokens_grow_at_most_linearly_while_attention_reads_their_directions():
    """With V = I and g = 1 the velocity is a softmax average of unit vectors: |x_i(t)| <= |x_i(0)| + t, and the
    dynamics depends on the directions only (scaling a token leaves every velocity unchanged)."""
    rng = np.random.default_rng(5)
    model = mf.PureAttention(beta=4.0, normalization="pre")
    x0 = rng.normal(size=(2, 16, 3))
    ds = mf.simulate_particles(model, x0, np.linspace(0.0, 10.0, 6))
    norms = np.linalg.norm(ds.x.values, axis=-1)
    assert np.all(norms <= norms[:, :1] + ds.time.values[None, :, None] + 1e-9)
    assert norms[:, -1].mean() > 3 * norms[:, 0].mean()  # they do grow: toward the cluster's direction
    scaled = x0 * rng.uniform(0.1, 10.0, size=x0.shape[:-1] + (1,))
    np.testing.assert_allclose(model.velocity(scaled), model.velocity(x0), rtol=1e-13, atol=1e-15)
    # without normalisation the same system is not scale invariant
    assert not np.allclose(mf.PureAttention(beta=4.0).velocity(scaled), mf.PureAttention(beta=4.0).velocity(x0))


def test_the_array_api_engine_implements_pre_ln(rng):
    xps = pytest.importorskip("array_api_strict")
    model = mf.PureAttention(beta=1.5, value=np.diag([1.0, -0.5, 0.8]), normalization="pre", gain=[1.0, 2.0, 0.5])
    records = check_consistency(model, rng.normal(size=(3, 20, 3)), like=xps.asarray([0.0]))
    assert [r.engine for r in records] == ["array_api"]


@pytest.mark.parametrize("kwargs,match", [
    (dict(normalization="pre", gain=[1.0, 0.0, 2.0]), "gain must have nonzero entries"),
    (dict(gain=[1.0, 2.0]), "gain is the RMS normalisation's diagonal gain: it needs normalization='pre' or 'post'"),
    (dict(normalization="mid"), "normalization must be one of 'none', 'pre', 'post' \\(post-LN is SelfAttention"),
    (dict(normalization="pre", rescaled=True), "normalization='pre' takes rescaled=False"),
    (dict(normalization="post", rescaled=True), "normalization='post' takes rescaled=False"),
    (dict(normalization="pre", gain=[1.0, 2.0], value=np.eye(3)), "gain has 2 entries but the matrices are 3 x 3"),
    (dict(normalization="pre", gain=[[1.0, 2.0]]), "gain must be a finite \\(d,\\) vector"),
])
def test_bad_normalisations_are_refused_naming_the_argument(kwargs, match):
    with pytest.raises(ValueError, match=match):
        mf.PureAttention(**kwargs)


@pytest.mark.parametrize("method", ["rk4", "dop853", "euler"])
def test_post_ln_runs_as_its_layer_only(method):
    model = mf.PureAttention(normalization="post", gain=[1.0, 2.0])
    with pytest.raises(ValueError, match=f"method='{method}': normalization='post' is the discrete layer .*"
                                         "model.post_ln_limit"):
        mf.simulate_particles(model, np.array([[1.0, 0.0], [0.0, 1.0]]), [0.0, 1.0], method=method)
    with pytest.raises(ValueError, match="normalization='post' is the discrete layer"):
        mf.observe_particles(model, np.array([[1.0, 0.0], [0.0, 1.0]]), [0.0, 1.0], np.copy, method="rk4")


@pytest.mark.parametrize("kwargs,dt,match", [
    (dict(normalization="pre"), 0.1, "post_ln_limit is the limit of the post-LN layer, got normalization='pre'"),
    (dict(normalization="post", gain=[1.0, -2.0]), 0.1, "gain: post_ln_limit reads g = e\\^\\(dt gamma\\) > 0"),
    (dict(normalization="post", beta=np.inf), 0.1, "softmax attention with a finite beta and no mask"),
    (dict(normalization="post"), 0.0, "dt must be > 0"),
])
def test_the_post_ln_limit_refuses_what_has_none(kwargs, dt, match):
    with pytest.raises(ValueError, match=match):
        mf.PureAttention(**kwargs).post_ln_limit(dt)


@pytest.mark.parametrize("matrix,match", [
    ([[1.0, 2.0], [0.0, 1.0]], "matrix must be symmetric"),
    ([1.0, 2.0], "matrix must be a \\(d, d\\) array with d >= 2"),
    ([[1.0, np.nan], [np.nan, 1.0]], "matrix must be finite"),
])
def test_a_bad_quadratic_field_is_refused(matrix, match):
    with pytest.raises(ValueError, match=match):
        mf.QuadraticField(matrix)


def test_a_zero_token_is_refused_and_the_model_round_trips():
    model = mf.PureAttention(beta=2.0, normalization="pre", gain=[1.0, 2.0])
    with pytest.raises(ValueError, match="x0: pre-LN normalises every token, and a token is zero"):
        mf.simulate_particles(model, np.array([[1.0, 0.0], [0.0, 0.0]]), [0.0, 1.0])
    assert mf.model_from_dict(model.to_dict()).to_dict() == model.to_dict()


def test_a_pre_ln_config_runs(tmp_path, capsys):
    import xarray as xr
    from validation.app.cli import main
    text = """output = "out"
geometry = "euclidean"
times = {{ stop = 2.0, count = 3 }}
[model]
beta = 1.0
{model}
[method]
kind = "particles"
n = 16
d = 2
dt = 0.1
[initial]
kind = "gaussian"
"""
    config = tmp_path / "run.toml"
    config.write_text(text.format(model='normalization = "pre"\ngain = [1.0, 0.5]'))
    assert main(["run", str(config), "--quiet", "--no-animation"]) in (0, None), capsys.readouterr().err
    model = mf.model_from_dict(xr.open_dataset(tmp_path / "out" / "dataset.nc").attrs["model"])
    assert model.normalization == "pre" and model.gain.tolist() == [1.0, 0.5]
    config.write_text(text.format(model='attention = "sinkhorn"').replace('"out"', '"sinkhorn"'))
    assert main(["run", str(config), "--quiet", "--no-animation"]) in (0, None), capsys.readouterr().err
    model = mf.model_from_dict(xr.open_dataset(tmp_path / "sinkhorn" / "dataset.nc").attrs["model"])
    assert model.attention == "sinkhorn"
    config.write_text(text.format(model='normalization = "post"\ngain = [1.0, 0.5]').replace('"out"', '"post"')
                      .replace('dt = 0.1', 'dt = 0.1\nscheme = "layer"'))
    assert main(["run", str(config), "--quiet", "--no-animation"]) in (0, None), capsys.readouterr().err
    tokens = xr.open_dataset(tmp_path / "post" / "dataset.nc").x.values
    np.testing.assert_allclose(np.linalg.norm(tokens[1:] / [1.0, 0.5], axis=-1), 1.0, rtol=1e-13)
    config.write_text(text.format(model='normalization = "post"'))
    assert main(["run", str(config)]) == 2
    assert "model.normalization = 'post' is the discrete layer" in capsys.readouterr().err
    config.write_text(text.format(model='gain = [1.0, 0.5]'))
    assert main(["run", str(config)]) == 2
    assert "gain is the RMS normalisation's diagonal gain" in capsys.readouterr().err
    config.write_text(text.format(model='normalization = "pre"').replace('"euclidean"', '"circle"')
                      .replace("d = 2\n", "").replace('"gaussian"', '"uniform"'))
    assert main(["run", str(config)]) == 2
    assert "model.normalization applies to geometry = 'euclidean'" in capsys.readouterr().err
