"""Pure self-attention in R^d (meanfield.PureAttention): the theorems of "The emergence of clusters
in self-attention dynamics" as measurements, the rescaled and discrete variables against the
original ones, the hardmax limit, and the errors of bad input.

The references are independent of the code under test: the velocity written out here with
numpy's softmax, closed-form hardmax solutions (straight lines toward the leaders), the
Boolean limit of Thm 2.1, and asymptotic laws derived in the docstrings of the tests.
"""

import math

import numpy as np
import pytest
from scipy.linalg import expm

import meanfield as mf
from meanfield import limit_geometry as lg
from meanfield.descriptions import model_from_dict

# Fig. 6 of the paper: a symmetric V with eigenvalues {1.35, -0.07} and phi_1 = (0.76, 0.65).
_ANGLE = math.atan2(0.65, 0.76)
_ROTATION = np.array([[math.cos(_ANGLE), -math.sin(_ANGLE)], [math.sin(_ANGLE), math.cos(_ANGLE)]])
GOOD_TRIPLE_V = _ROTATION @ np.diag([1.35, -0.07]) @ _ROTATION.T


def uniform_tokens(seed, n, d):
    return np.random.default_rng(seed).uniform(-1.0, 1.0, (n, d))


def direct_velocity(x, queries, keys, values, beta=1.0):
    """Eq. (1) of the paper with H heads, written out: sum_h V_h sum_j softmax_j(beta <Q_h x_i, K_h x_j>) x_j."""
    total = np.zeros_like(x)
    for q, k, v in zip(queries, keys, values):
        logits = beta * (x @ q.T) @ (x @ k.T).T
        weights = np.exp(logits - logits.max(axis=1, keepdims=True))
        weights /= weights.sum(axis=1, keepdims=True)
        total += (weights @ x) @ v.T
    return total


# ---------------------------------------------------------------------------- the model
def test_velocity_is_equation_one_with_heads():
    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal((2, 4, 4)) for _ in range(3))
    x = rng.standard_normal((30, 4))
    model = mf.PureAttention(query=q, key=k, value=v, beta=0.7)
    assert np.allclose(model.velocity(x), direct_velocity(x, q, k, v, beta=0.7), rtol=1e-13, atol=1e-13)


def test_rescaled_velocity_is_equation_four():
    """dz/dt = V sum_j P_ij (z_j - z_i), P at e^{tV} z (eq. (4)): from the original velocity by the chain rule."""
    rng = np.random.default_rng(1)
    q, k = rng.standard_normal((2, 3, 3))
    v = rng.standard_normal((3, 3))
    z, t = rng.standard_normal((12, 3)), 0.4
    m = expm(t * v)
    x = z @ m.T
    expected = -z @ v.T + direct_velocity(x, [q], [k], [v]) @ np.linalg.inv(m).T
    model = mf.PureAttention(query=q, key=k, value=v, rescaled=True)
    assert np.allclose(model.velocity(z, t), expected, rtol=1e-11, atol=1e-12)


def test_attention_matrix_rows_are_softmax():
    rng = np.random.default_rng(2)
    q, k = rng.standard_normal((2, 3, 3))
    x = rng.standard_normal((2, 7, 3))
    p = mf.PureAttention(query=q, key=k).attention_matrix(x)
    logits = (x @ q.T) @ np.swapaxes(x @ k.T, -1, -2)
    expected = np.exp(logits) / np.exp(logits).sum(axis=-1, keepdims=True)
    assert p.shape == (2, 1, 7, 7)
    assert np.allclose(p[:, 0], expected, rtol=1e-13)


# ---------------------------------------------------------------------------- variables and schemes
def test_rescaled_run_maps_onto_the_original_one():
    """x(t) = M(t) z(t): two integrations of different equations agree to their tolerance."""
    rng = np.random.default_rng(3)
    q, k = rng.standard_normal((2, 2, 3, 3)) * 0.6
    v = np.eye(3) + 0.3 * rng.standard_normal((3, 3))
    x0 = uniform_tokens(4, 15, 3)
    times = [0.0, 1.0, 2.0]
    original = mf.simulate_particles(mf.PureAttention(query=q, key=k, value=v), x0, times, rtol=1e-12)
    rescaled = mf.simulate_particles(mf.PureAttention(query=q, key=k, value=v, rescaled=True), x0, times, rtol=1e-12)
    mapped = np.einsum("tab,tnb->tna", rescaled["rescaling"].values, rescaled["x"].values)
    assert np.allclose(rescaled["rescaling"].values[-1], expm(2.0 * 2 * v), rtol=1e-13)  # M = e^{t H V}, H = 2
    scale = np.abs(original["x"].values).max()
    # two DOP853 runs at rtol 1e-12: their global errors, a local 1e-12 per step summed over the
    # steps of two units of time, stay within 1e-10 of the scale
    assert np.abs(mapped - original["x"].values).max() < 1e-10 * scale


def test_rk4_is_fourth_order_in_rescaled_variables():
    x0 = uniform_tokens(5, 20, 3)
    model = mf.PureAttention(value=GOOD_TRIPLE_V[[0, 1, 1]][:, [0, 1, 1]] + np.diag([0, 0, -0.5]), rescaled=True)
    times = [0.0, 2.0]
    reference = mf.simulate_particles(model, x0, times, rtol=1e-13)["x"].values[-1]
    steps = (0.1, 0.05, 0.025)
    errors = [np.abs(mf.simulate_particles(model, x0, times, method="rk4", dt=h)["x"].values[-1] - reference).max()
              for h in steps]
    orders = np.log2(np.array(errors[:-1]) / np.array(errors[1:]))
    assert np.all(np.abs(orders - 4.0) < 0.25), orders


def test_layer_scheme_rescaled_by_remark_four_is_exact():
    """z^[k] = R^{-k} x^[k], R = I + h V: the rescaled layer is the original layer, mapped, to round-off.

    The original layer is written out here (x + h V P x) as the reference.
    """
    rng = np.random.default_rng(6)
    q = np.eye(3) + 0.2 * rng.standard_normal((3, 3))
    v = np.diag([1.0, 0.5, -0.3]) + 0.1 * rng.standard_normal((3, 3))
    x0, h, layers = uniform_tokens(7, 25, 3), 0.1, 30
    x = x0.copy()
    for _ in range(layers):
        x = x + h * direct_velocity(x, [q], [np.eye(3)], [v])
    model = mf.PureAttention(query=q, value=v, rescaled=True)
    ds = mf.simulate_particles(model, x0, [0.0, layers * h], method="layer", dt=h)
    r = np.eye(3) + h * v
    assert np.allclose(ds["rescaling"].values[-1], np.linalg.matrix_power(r, layers), rtol=1e-13)
    assert np.abs(ds["x"].values[-1] @ ds["rescaling"].values[-1].T - x).max() < 1e-12 * np.abs(x).max()


def test_batches_run_each_system_as_alone():
    x0 = np.stack([uniform_tokens(s, 10, 2) for s in (8, 9)])
    model = mf.PureAttention(value=GOOD_TRIPLE_V, rescaled=True)
    batch = mf.simulate_particles(model, x0, [0.0, 1.0], method="rk4", dt=0.05)
    for s in range(2):
        alone = mf.simulate_particles(model, x0[s], [0.0, 1.0], method="rk4", dt=0.05)
        assert np.allclose(batch["x"].values[s], alone["x"].values, rtol=1e-14, atol=1e-14)


def test_observe_particles_sees_the_frames_of_simulate():
    model, x0, times = mf.PureAttention(value=-1.0), uniform_tokens(10, 12, 3), [0.0, 0.5, 1.0]
    seen = mf.observe_particles(model, x0, times, lambda x: x.copy(), method="euler", dt=0.1)
    ds = mf.simulate_particles(model, x0, times, method="euler", dt=0.1)
    assert np.array_equal(np.stack(seen), ds["x"].values)


@pytest.mark.parametrize("method", ["rk4", "euler", "layer"])
def test_array_api_tokens_run_every_fixed_step_scheme_as_numpy_does(method):
    """array_api_strict stands in for a GPU library: the run stays in its namespace (the kernel is the
    array API engine) and gives the numpy run's tokens to round-off, heads and Remark 4's rescaling included."""
    xps = pytest.importorskip("array_api_strict")
    rng = np.random.default_rng(12)
    model = mf.PureAttention(beta=1.5, query=np.eye(3) + 0.2 * rng.standard_normal((2, 3, 3)),
                             key=np.eye(3) + 0.2 * rng.standard_normal((2, 3, 3)),
                             value=np.diag([1.0, 0.5, -0.3]), rescaled=True)
    x0, times = np.stack([uniform_tokens(s, 12, 3) for s in (13, 14)]), [0.0, 0.5, 1.0]
    host = mf.simulate_particles(model, x0, times, method=method, dt=0.05)
    device = mf.simulate_particles(model, xps.asarray(x0), times, method=method, dt=0.05)
    assert '"kernel": "array_api"' in device.attrs["settings"]
    np.testing.assert_array_equal(device["rescaling"].values, host["rescaling"].values)
    assert np.abs(device["x"].values - host["x"].values).max() < 1e-13 * np.abs(host["x"].values).max()
    seen = mf.observe_particles(model, xps.asarray(x0[0]), times, lambda x: x, method=method, dt=0.05)
    assert all(isinstance(x, type(xps.asarray(0.0))) and x.shape == (12, 3) for x in seen)
    with pytest.raises(ValueError, match="method='dop853' integrates numpy arrays"):
        mf.simulate_particles(model, xps.asarray(x0), times)


def test_dataset_records_a_model_that_rebuilds():
    ds = mf.simulate_particles(mf.PureAttention(beta=math.inf, rescaled=True), uniform_tokens(11, 5, 2), [0, 1],
                               method="rk4", attention=True)
    rebuilt = model_from_dict(ds.attrs["model"])
    assert rebuilt.hardmax and rebuilt.rescaled
    assert ds.attrs["geometry"] == "R^2"
    assert np.allclose(ds["attention"].values.sum(axis=-1), 1.0)


# ---------------------------------------------------------------------------- the theorems
def test_identity_value_clusters_at_the_vertices_of_a_polytope():
    """Thm 3.1 (Fig. 5: n = 40, Q = K = I_3, V = I): every token ends at a vertex, and the hull shrinks (Prop. C.2)."""
    x0 = uniform_tokens(12, 40, 3)
    ds = mf.simulate_particles(mf.PureAttention(rescaled=True), x0, [0.0, 10.0, 20.0], rtol=1e-10)
    final = ds["x"].values[-1]
    vertices = lg.polytope_vertices(final, 1e-6)
    assert lg.vertex_distance(final, vertices).max() < 1e-6
    assert 3 < len(vertices) < len(lg.hull_vertices(x0)) <= 40
    assert lg.hull_boundary_distance(ds["x"].values[1], x0).min() > -1e-9
    assert lg.hull_boundary_distance(final, ds["x"].values[1]).min() > -1e-9


def test_good_triple_clusters_on_at_most_three_hyperplanes():
    """Thm 4.1 (Fig. 6): the coordinates along phi_1 take at most three values."""
    ds = mf.simulate_particles(mf.PureAttention(value=GOOD_TRIPLE_V, rescaled=True), uniform_tokens(13, 40, 2),
                               [0.0, 20.0], rtol=1e-10)
    coordinates = lg.leading_coordinates(ds["x"].values[-1], GOOD_TRIPLE_V)
    found = lg.levels(coordinates, 1e-6)
    assert 1 <= len(found) <= 3
    assert np.abs(coordinates[:, None] - found[None, :]).min(axis=1).max() < 1e-6
    _, phi, _ = lg.leading_eigenpair(GOOD_TRIPLE_V)
    assert np.allclose(phi, [0.76, 0.65], atol=0.005)  # the caption's phi_1


def test_paranormal_value_gives_a_polytope_times_a_diverging_line():
    """Thm 5.1 (Fig. 8, V = diag(1, 1, -1/2)): a polytope in the first two coordinates; the third
    of z = e^{-tV} x grows like e^{t/2} (x_3 settles, so z_3 = e^{t/2} x_3)."""
    v = np.diag([1.0, 1.0, -0.5])
    ds = mf.simulate_particles(mf.PureAttention(value=v, rescaled=True), uniform_tokens(14, 40, 3),
                               [0.0, 15.0, 20.0], rtol=1e-10)
    split = lg.paranormal_split(ds["x"].values[-1], v)
    assert split.polytope.shape == (40, 2)
    assert lg.vertex_distance(split.polytope, lg.polytope_vertices(split.polytope, 1e-6)).max() < 1e-6
    growth = [np.abs(lg.paranormal_split(ds["x"].values[k], v).subspace).max() for k in (1, 2)]
    assert math.log(growth[1] / growth[0]) / 5.0 == pytest.approx(0.5, abs=0.01)


def test_paranormal_split_reads_f_and_g_from_the_matrix():
    """F = ker(V - I) = span(e1) and G = span(e2, e3), where V rotates and shrinks (complex
    eigenvalues): the F coordinate is z_1 up to sign; a Jordan block is not paranormal."""
    z = uniform_tokens(19, 6, 3)
    v = np.array([[1.0, 0.0, 0.0], [0.0, 0.2, -0.3], [0.0, 0.3, 0.2]])
    split = lg.paranormal_split(z, v)
    assert split.eigenvalue == pytest.approx(1.0)
    assert np.allclose(np.abs(split.polytope[:, 0]), np.abs(z[:, 0]), atol=1e-13)
    assert np.allclose(split.rest[0], 0.0, atol=1e-13)
    with pytest.raises(ValueError, match="not paranormal"):
        lg.paranormal_split(z[:, :2], [[1.0, 1.0], [0.0, 1.0]])


def test_repulsive_value_collapses_to_the_origin_like_one_over_root_t():
    """V = -I (Thm C.5): a single cluster at 0. Derived here: once the logits are small,
    P_ij = (1 + <d_i, d_j>)/n to second order (d = x - mean), so the deviations follow
    d' = -C d with C their covariance, C' = -2C^2 and C^{-1}(t) = C^{-1}(0) + 2t: the tokens
    reach 0 like t^{-1/2}, the covariance's inverse grows with slope exactly 2."""
    ds = mf.simulate_particles(mf.PureAttention(value=-1.0), uniform_tokens(15, 40, 3), [0.0, 80.0, 160.0],
                               rtol=1e-10)
    inverse = [np.linalg.inv(np.cov(ds["x"].values[k].T, bias=True)) for k in (1, 2)]
    slope = np.linalg.eigvalsh((inverse[1] - inverse[0]) / 80.0)
    # the next terms of P_ij are of relative size C ~ 1/(2t): below 1 % from t = 80 on
    assert np.allclose(slope, 2.0, rtol=0.01), slope
    # the normalised deviations C^{-1/2} d_i are kept to leading order: the largest token shrinks
    # like (2t + c)^{-1/2}, c the offset C^{-1}(0), a relative O(c / 4t) from exact
    radius = np.linalg.norm(ds["x"].values, axis=-1).max(axis=-1)
    assert radius[2] * math.sqrt(160.0) == pytest.approx(radius[1] * math.sqrt(80.0), rel=0.02)


def test_one_dimensional_attention_becomes_boolean_of_rank_two_doubly_exponentially():
    """Thm 2.1 (Fig. 3: d = 1, n = 40, Q = K = V = 1). Derived rate: a token of the leader's
    cluster approaches it like e^{-t}, so its logit gap to the leader, e^{2t} z_i (z_L - z_j),
    grows like e^{t}: log(-log distance) rises with slope V = 1."""
    times = np.array([0.0, 6.0, 6.5, 7.0, 7.5, 8.0])
    ds = mf.simulate_particles(mf.PureAttention(rescaled=True), uniform_tokens(16, 40, 1), times, rtol=1e-12,
                               attention=True)
    limits = [lg.boolean_limit(p) for p in ds["attention"].values[:, 0]]
    assert limits[-1].distance < 1e-20
    assert limits[-1].rank <= 2 and len(limits[-1].leaders) <= 2
    z = ds["x"].values[-1, :, 0]
    assert set(limits[-1].leaders) == {int(np.argmin(z)), int(np.argmax(z))}
    rates = np.diff([math.log(-math.log(b.distance)) for b in limits[1:]]) / 0.5
    assert np.allclose(rates, 1.0, atol=0.03), rates


# ---------------------------------------------------------------------------- hardmax
def _leaders_and_lines(z0, t):
    """Hardmax, V = Q = K = I, rescaled: the argmax of <z_i, z_j> is scale-free, so while it stays
    put token i runs the straight line z_L + (z_i - z_L) e^{-t} toward its leader L."""
    leaders = (z0 @ z0.T).argmax(axis=1)
    return leaders, z0[leaders] + (z0 - z0[leaders]) * math.exp(-t)


def test_hardmax_moves_each_token_straight_to_its_leader():
    z0 = uniform_tokens(17, 8, 2)
    ds = mf.simulate_particles(mf.PureAttention(beta=math.inf, rescaled=True), z0, [0.0, 3.0], rtol=1e-12)
    _, expected = _leaders_and_lines(z0, 3.0)
    assert np.abs(ds["x"].values[-1] - expected).max() < 1e-11


def test_softmax_converges_to_hardmax_exponentially_in_beta():
    """The SA solution differs from hardmax by the weight of the runners-up, exp(-beta e^{2t} g):
    integrated over time this is ~exp(-beta g)/beta with g the smallest logit gap at t = 0.
    log(beta * error) is linear in beta with slope -g."""
    z0 = uniform_tokens(18, 6, 2)
    logits = np.sort(z0 @ z0.T, axis=1)
    gap = float((logits[:, -1] - logits[:, -2]).min())
    hard = _leaders_and_lines(z0, 2.0)[1]
    betas = np.array([0.5, 1.0, 1.5, 2.0]) * 12.0 / gap
    errors = [np.abs(mf.simulate_particles(mf.PureAttention(beta=b, rescaled=True), z0, [0.0, 2.0],
                                           rtol=1e-12)["x"].values[-1] - hard).max() for b in betas]
    slope = np.polyfit(betas, np.log(betas * np.array(errors)), 1)[0]
    assert slope == pytest.approx(-gap, rel=0.05)


def test_hardmax_example_nine_three_has_three_solutions():
    """A configuration of Example 9.3's kind ("A mathematical perspective", sec. 9.3): z_1 and z_2
    are their own leaders and do not move; z_3 is tied between them and every choice solves
    (9.5)-(9.6): toward z_1, toward z_2, or toward their midpoint (the tie kept by symmetry).
    The library's solution averages over ties (the midpoint); starts perturbed by +-1e-9 give
    the other two, which the limit of no perturbation does not select between."""
    z0 = np.array([[1.0, 1.0], [-1.0, 1.0], [0.0, 0.5]])
    model = mf.PureAttention(beta=math.inf, rescaled=True)
    t = 3.0
    decay = math.exp(-t)
    tied = mf.simulate_particles(model, z0, [0.0, t], rtol=1e-12)["x"].values[-1]
    assert np.allclose(tied[:2], z0[:2], atol=1e-15)
    assert np.allclose(tied[2], [0.0, 1.0] + (z0[2] - [0.0, 1.0]) * decay, atol=1e-12)
    for side, leader in ((1e-9, 0), (-1e-9, 1)):
        start = z0 + [[0, 0], [0, 0], [side, 0]]
        moved = mf.simulate_particles(model, start, [0.0, t], rtol=1e-12)["x"].values[-1]
        assert np.allclose(moved[2], z0[leader] + (start[2] - z0[leader]) * decay, atol=1e-11)
    assert np.abs(tied[2] - z0[0] - (z0[2] - z0[0]) * decay).max() > 0.1  # the three solutions differ


# ---------------------------------------------------------------------------- bad input
def test_bad_input_is_refused_with_the_argument_named():
    model = mf.PureAttention(rescaled=True)
    with pytest.raises(ValueError, match="x0 contains NaN"):
        mf.simulate_particles(model, [[np.nan, 0.0]], [0, 1])
    with pytest.raises(ValueError, match="times: e\\^\\(t H V\\) overflows"):
        mf.simulate_particles(mf.PureAttention(value=400.0, rescaled=True), np.ones((3, 2)), [0, 2])
    with pytest.raises(ValueError, match="times: the logits"):
        mf.simulate_particles(mf.PureAttention(value=200.0, rescaled=True), np.ones((3, 2)), [0, 2])
    with pytest.raises(ValueError, match="PureAttention"):
        mf.SelfAttention(1.0).velocity(np.full((4, 2), 2.0))
    with pytest.raises(ValueError, match="attention=True"):
        mf.simulate_particles(mf.SelfAttention(1.0), mf.sample_uniform(4, 2, rng=0), [0, 1], attention=True)
    with pytest.raises(ValueError, match="beta must be a number > 0"):
        mf.PureAttention(beta=0.0)
    with pytest.raises(ValueError, match="one value matrix shared"):
        mf.PureAttention(value=np.stack([np.eye(2), 2 * np.eye(2)]), rescaled=True)
    with pytest.raises(ValueError, match="x0 has tokens in R\\^3"):
        mf.simulate_particles(mf.PureAttention(value=np.eye(2)), np.ones((3, 3)), [0, 1])
    with pytest.raises(ValueError, match="value: the eigenvalue of largest modulus"):
        lg.leading_eigenpair(np.diag([1.0, -1.0]))
    with pytest.raises(ValueError, match="betas"):
        mf.observe_particles(model, np.ones((1, 3, 2)), [0, 1], np.copy, betas=[1.0])


# ---------------------------------------------------------------------------- configs
PURE_CONFIG = {"geometry": "euclidean", "times": {"stop": 20.0, "count": 5}, "model": {"beta": 1.0, "rescaled": True},
               "method": {"kind": "particles", "n": 40, "d": 3, "dt": 0.05, "seed": 3},
               "initial": {"kind": "gaussian", "std": 0.5}}


def test_a_config_runs_pure_attention_as_the_api_does(tmp_path):
    """``geometry = "euclidean"``: the run of ``meanfield run`` is ``simulate_particles`` of PureAttention from the
    seed's Gaussian tokens, bit for bit; the dataset rebuilds its model, and Thm 3.1 shows (V = I: vertices)."""
    from validation.app import run_experiment
    from validation.app.experiment_figures import experiment_figures

    ds = run_experiment({**PURE_CONFIG, "output": str(tmp_path / "run")}, progress=False)
    x0 = 0.5 * np.random.default_rng(3).standard_normal((40, 3))
    direct = mf.simulate_particles(mf.PureAttention(rescaled=True), x0, np.linspace(0, 20, 5), method="rk4", dt=0.05)
    np.testing.assert_array_equal(ds.x.values, direct.x.values)
    assert ds.attrs["geometry"] == "R^3" and model_from_dict(ds.attrs["model"]).rescaled
    final = ds.x.values[-1]
    assert lg.vertex_distance(final, lg.polytope_vertices(final, 1e-6)).max() < 1e-6  # as the theorem's own test
    names = {path.name for path in experiment_figures(ds, tmp_path / "run", "euclidean", animation=False)}
    assert names == {"snapshots.png", "diagnostics.png"}


def test_a_config_takes_the_tokens_from_a_file_and_any_dimension(tmp_path):
    from validation.app import run_experiment

    tokens = np.linspace(-1.0, 1.0, 6)[:, None]
    np.save(tmp_path / "tokens.npy", tokens)
    config = {**PURE_CONFIG, "output": str(tmp_path / "run"), "times": {"stop": 1.0, "count": 3},
              "method": {"kind": "particles", "n": 6, "d": 1, "dt": 0.1, "scheme": "layer"},
              "initial": {"kind": "file", "path": str(tmp_path / "tokens.npy")}}
    ds = run_experiment(config, progress=False)
    direct = mf.simulate_particles(mf.PureAttention(rescaled=True), tokens, [0.0, 0.5, 1.0], method="layer", dt=0.1)
    np.testing.assert_array_equal(ds.x.values, direct.x.values)
    from validation.app import ConfigError
    from validation.app.experiment import prepare
    with pytest.raises(ConfigError, match=r"initial.path must hold the tokens, shape \(method.n, method.d\) = \(7, 1\)"):
        prepare({**config, "output": str(tmp_path / "other"), "method": {**config["method"], "n": 7}})


LINE_CONFIG = {"geometry": "euclidean", "times": {"stop": 3.0, "count": 7}, "model": {"beta": 1.0, "rescaled": True},
               "method": {"kind": "LineLagrangian", "interval": [-3.0, 3.0], "labels": 64, "cells": 60},
               "initial": {"kind": "gaussian", "std": 0.8}}


def gaussian(z):
    return np.exp(-0.5 * (z / 0.8) ** 2)


def test_a_config_solves_the_line_equation_as_the_solvers_do(tmp_path):
    """``method.kind = "LineFV"`` or ``"LineLagrangian"``: the run is the solver's own solve, bit for bit; the
    labels' run in checkpointed segments (it continues from the recorded positions and next step) too."""
    from validation.app import run_experiment
    from solvers import LineFV, LineLagrangian

    times = np.linspace(0.0, 3.0, 7)
    model = mf.PureAttention(rescaled=True)
    ds = run_experiment({**LINE_CONFIG, "output": str(tmp_path / "labels"), "checkpoint_every": 2}, progress=False)
    direct = LineLagrangian(model, (-3.0, 3.0), labels=64, cells=60).solve(gaussian, times, progress=False)
    np.testing.assert_array_equal(ds.position.values, direct.position.values)
    np.testing.assert_array_equal(ds.rho.values, direct.rho.values)
    assert ds.attrs["segments"] == 3 and ds.attrs["trustworthy"] == 1
    fv = {**LINE_CONFIG, "output": str(tmp_path / "cells"), "times": {"stop": 1.5, "count": 4},
          "method": {"kind": "LineFV", "interval": [-3.0, 3.0], "cells": 120}}
    ds = run_experiment(fv, progress=False)
    direct = LineFV(model, (-3.0, 3.0), cells=120).solve(gaussian, [0.0, 0.5, 1.0, 1.5], progress=False)
    np.testing.assert_array_equal(ds.rho.values, direct.rho.values)
    np.testing.assert_array_equal(ds.ghost_attention.values, direct.ghost_attention.values)


def test_a_line_config_reads_its_density_from_a_file_and_draws_it(tmp_path):
    """A file of cell values is LineFV's cell averages and the labels' piecewise-constant density; the figures
    show the density against z."""
    from validation.app import run_experiment
    from validation.app.experiment_figures import experiment_figures
    from solvers import LineFV, LineLagrangian

    values = 1.0 + np.linspace(0.0, 1.0, 30)
    np.save(tmp_path / "rho0.npy", values)
    initial = {"kind": "file", "path": str(tmp_path / "rho0.npy")}
    model, times = mf.PureAttention(rescaled=True), [0.0, 0.5]
    for kind, solver, settings in (("LineFV", LineFV, {}), ("LineLagrangian", LineLagrangian, {"labels": 32})):
        config = {**LINE_CONFIG, "output": str(tmp_path / kind), "times": times, "initial": initial,
                  "method": {"kind": kind, "interval": [-1.0, 2.0], "cells": 30, **settings}}
        ds = run_experiment(config, progress=False)
        # the same density as a callable: exact cell averages for LineFV, the same quantiles for the labels
        direct = solver(model, (-1.0, 2.0), cells=30, **settings).solve(
            lambda z: 1.0 + np.clip(np.floor((z + 1.0) * 10.0), 0, 29) / 29.0, times, progress=False)
        np.testing.assert_allclose(ds.rho.values, direct.rho.values, rtol=1e-12, atol=1e-12)
        names = {path.name for path in experiment_figures(ds, tmp_path / kind, "euclidean", animation=False)}
        assert {"snapshots.png", "spacetime.png"} <= names


@pytest.mark.parametrize("edit,message", [
    ({"method": {"kind": "LineFV"}}, "needs method.interval"),
    ({"method": {"kind": "LineFV", "interval": [1.0, -1.0]}}, "method.interval must be two finite numbers"),
    ({"method": {"kind": "LineFV", "interval": [-1.0, 1.0], "d": 2}}, "method.d must be 1"),
    ({"method": {"kind": "LineFV", "interval": [-1.0, 1.0], "n": 30}}, "method.n does not apply"),
    ({"model": {"beta": 1.0}}, "it needs model.rescaled = true"),
    ({"model": {"beta": 1.0, "rescaled": True, "attention": "sinkhorn"}}, "model.attention does not apply"),
    ({"initial": {"kind": "uniform"}}, "takes initial.kind = 'gaussian'"),
    ({"initial": {"kind": "file", "path": "none.npy"}}, "initial.path: no file"),
    ({"times": {"stop": 400.0, "count": 2}, "method": {"kind": "LineFV", "interval": [-1.0, 1.0]}},
     "times: the logits .* end the run before t = 354"),
])
def test_a_bad_line_config_is_refused_naming_the_key(tmp_path, edit, message):
    from validation.app import ConfigError
    from validation.app.experiment import prepare

    with pytest.raises(ConfigError, match=message):
        prepare({**LINE_CONFIG, "output": str(tmp_path / "run"), **edit})


def test_a_line_config_refuses_a_file_of_the_wrong_shape(tmp_path):
    from validation.app import ConfigError
    from validation.app.experiment import prepare

    np.save(tmp_path / "rho0.npy", np.ones(7))
    with pytest.raises(ConfigError, match=r"initial.path holds shape \(7,\); the run needs method.cells = 60"):
        prepare({**LINE_CONFIG, "output": str(tmp_path / "run"),
                 "initial": {"kind": "file", "path": str(tmp_path / "rho0.npy")}})


@pytest.mark.parametrize("edit,message", [
    ({"method": {"kind": "CircleFV"}}, "geometry = 'euclidean' runs with method.kind = 'particles'"),
    ({"method": {"kind": "particles", "n": 8}}, "geometry = 'euclidean' needs method.d"),
    ({"model": {"beta": 1.0, "diffusion": 0.1}}, "model.diffusion does not apply to pure attention"),
    ({"model": {"beta": 1.0, "normalized": False}}, "model.normalized does not apply to pure attention"),
    ({"model": {"beta": 0.0}}, "model: beta must be a number > 0"),
    ({"initial": {"kind": "perturbed_uniform"}}, "initial.kind = 'perturbed_uniform' is a density"),
    ({"initial": {"kind": "gaussian", "std": -1.0}}, "initial.std"),
    ({"initial": {"kind": "file", "path": "none.npy"}}, "initial.path: no file"),
    ({"method": {"kind": "particles", "d": 1}, "initial": {"kind": "uniform"}}, "needs method.d >= 2"),
    ({"model": {"beta": 1.0, "value": [[1.0, 0.0], [0.0, 1.0]]}}, "model.value must have shape \\(3, 3\\)"),
])
def test_a_bad_pure_attention_config_is_refused_naming_the_key(tmp_path, edit, message):
    from validation.app import ConfigError
    from validation.app.experiment import prepare

    with pytest.raises(ConfigError, match=message):
        prepare({**PURE_CONFIG, "output": str(tmp_path / "run"), **edit})


def test_sphere_and_circle_configs_refuse_the_euclidean_keys(tmp_path):
    from validation.app import ConfigError, check_config

    circle = {"geometry": "circle", "output": str(tmp_path), "times": {"stop": 1.0, "count": 2}, "model": {"beta": 1.0},
              "method": {"kind": "particles", "n": 4}, "initial": {"kind": "uniform"}}
    with pytest.raises(ConfigError, match="model.rescaled applies to geometry = 'euclidean'"):
        check_config({**circle, "model": {"beta": 1.0, "rescaled": True}})
    with pytest.raises(ConfigError, match="initial.kind = 'gaussian' draws tokens in R\\^d"):
        check_config({**circle, "initial": {"kind": "gaussian"}})


@pytest.mark.parametrize("device", ["numpy", "array_api_strict"])
def test_a_sweep_of_pure_attention_reads_its_statistics_on_the_directions(tmp_path, device):
    """Each chunk's tokens come from the generator seeded [method.seed, chunk] (the sweep's documented
    rule); the statistics, recomputed here with numpy from simulate_particles of the same tokens, agree,
    on the host and on the array API path (array_api_strict stands in for a GPU library)."""
    from validation.app.sweep import run_sweep
    from validation.app.sweep_config import check_sweep_config

    config = {**PURE_CONFIG, "output": str(tmp_path / "sweep"), "times": {"stop": 10.0, "count": 3},
              "method": {"kind": "particles", "n": 8, "d": 2, "dt": 0.1, "seed": 5},
              "sweep": {"realisations": 16, "batch": 8, "cluster_tolerance": 1e-3, "device": device,
                        "grid": {"beta": [1.0, 4.0]}}}
    ds = run_sweep(check_sweep_config(config), workers=1, progress=False)
    assert "u_1" in ds.inner_product.attrs["long_name"]
    for beta in (1.0, 4.0):
        x0 = np.concatenate([0.5 * np.random.default_rng([5, chunk]).standard_normal((8, 8, 2)) for chunk in (0, 1)])
        x = mf.simulate_particles(mf.PureAttention(beta=beta, rescaled=True), x0, [0.0, 5.0, 10.0], method="rk4",
                                  dt=0.1).x.values  # (system, time, token, component)
        first, second = x[:, :, 0], x[:, :, 1]
        norm_1, norm_2 = np.linalg.norm(first, axis=-1), np.linalg.norm(second, axis=-1)
        together = np.linalg.norm(first - second, axis=-1) <= 1e-3 * np.maximum(norm_1, norm_2)
        cosine = np.sum(first * second, axis=-1) / (norm_1 * norm_2)
        row = ds.sel(beta=beta)
        np.testing.assert_allclose(row.clustered_probability.values, together.mean(axis=0), rtol=0, atol=1e-12)
        np.testing.assert_allclose(row.inner_product.values, cosine.mean(axis=0), rtol=0, atol=1e-12)
    assert 0 < float(ds.clustered_probability.isel(time=-1).min()) < 1  # some pairs share a vertex, not all
