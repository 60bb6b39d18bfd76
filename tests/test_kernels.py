"""Velocity kernels: fused (numba), numpy and array API paths agree; the span reduction is exact.

References here are written out with plain numpy in the test (no library code but sampling),
so a wrong kernel cannot agree with itself.
"""

import array_api_strict as xps
import numpy as np
import pytest

import meanfield as mf
from meanfield.engines.fused import MAX_TOKENS
from meanfield.engines.kernels import ArrayAPIKernel, NumpyKernel, select_kernel

RNG = np.random.default_rng(7)
GENERAL = dict(query=RNG.normal(size=(2, 3, 3)) / 2, key=RNG.normal(size=(2, 3, 3)) / 2,
               value=RNG.normal(size=(2, 3, 3)) / 2)

MODELS = {
    "SA": dict(beta=4.0),
    "USA": dict(beta=2.0, normalized=False),
    "USA time-rescaled": dict(beta=9.0, normalized=False, time_rescaled=True),
    "repulsive": dict(beta=1.0, value=-1.0),
    "Kuramoto": dict(beta=0.0),
    "noisy SA": dict(beta=3.0, diffusion=0.1),
    "general Q K V, two heads": dict(beta=1.5, **GENERAL),
    "general USA": dict(beta=1.0, normalized=False, **GENERAL),
}


def strict(x):
    return xps.asarray(x)


@pytest.mark.parametrize("name", MODELS)
@pytest.mark.parametrize("method", ["euler", "layer", "rk4"])
def test_fused_numpy_and_array_api_paths_agree_after_100_steps(name, method):
    model = mf.SelfAttention(**MODELS[name])
    if method == "rk4" and model.diffusion > 0:
        pytest.skip("RK4 integrates the ODE")
    x0 = mf.sample_uniform(9, 3, 11, batch=4)
    times = [0.0, 1.0]
    runs = {kernel: mf.simulate_particles(model, x0, times, method=method, dt=0.01, rng=5, kernel=kernel)
            for kernel in ("fused", "numpy")}
    runs["array_api"] = mf.simulate_particles(model, strict(x0), times, method=method, dt=0.01, rng=5)
    assert [ds.attrs["settings"].count(kernel) for kernel, ds in runs.items()] == [1, 1, 1]
    reference = runs["numpy"].x.values[:, -1]
    assert np.abs(reference - x0).max() > 1e-3 or model.beta == 0  # the run moved
    for kernel in ("fused", "array_api"):
        np.testing.assert_allclose(runs[kernel].x.values[:, -1], reference, rtol=0, atol=1e-12, err_msg=kernel)


@pytest.mark.parametrize("name", ["SA", "USA time-rescaled", "noisy SA", "repulsive", "general USA"])
@pytest.mark.parametrize("d", [2, 3, 5, 20], ids=["unrolled d=2", "unrolled d=3", "batched products",
                                             "per-system BLAS"])
@pytest.mark.parametrize("method", ["euler", "layer", "rk4"])
def test_fused_kernel_over_many_blocks_agrees_with_numpy(name, d, method):
    """Batches of several blocks with a ragged last one, on every path of the zonal kernel."""
    from meanfield.engines.fused import BLOCK_ELEMENTS, SMALL_DIMENSION, UNROLLED_DIMENSIONS
    model = mf.SelfAttention(**MODELS[name]) if d == 3 or name != "general USA" else mf.SelfAttention(
        beta=1.0, normalized=False, query=RNG.normal(size=(d, d)) / d, key=np.eye(d), value=np.eye(d))
    if method == "rk4" and model.diffusion > 0:
        pytest.skip("RK4 integrates the ODE")
    n = 32
    block = BLOCK_ELEMENTS // (n * n + 5 * n * d)
    systems = 2 * block + block // 3
    assert (d > SMALL_DIMENSION) == (d == 20) and (d in UNROLLED_DIMENSIONS) == (d < 5) and systems % block
    x0 = mf.sample_uniform(n, d, 3, batch=systems)
    runs = {kernel: mf.simulate_particles(model, x0, [0.0, 0.5], method=method, dt=0.05, rng=5, kernel=kernel)
            for kernel in ("fused", "numpy")}
    reference = runs["numpy"].x.values[:, -1]
    assert np.abs(reference - x0).max() > 1e-4  # the run moved (time-rescaled USA moves slowly)
    np.testing.assert_allclose(runs["fused"].x.values[:, -1], reference, rtol=0, atol=1e-12)


@pytest.mark.parametrize("name", ["SA", "SA beyond exp's range", "USA", "USA time-rescaled", "repulsive",
                                  "Kuramoto"])
@pytest.mark.parametrize("d", [2, 3, 5], ids=["unrolled d=2", "unrolled d=3", "batched products"])
@pytest.mark.parametrize("n", [9, 32])
def test_fused_modes_agree_with_the_model_over_many_blocks(name, d, n):
    """Attention output and drift off the sphere, and a noisy step, against the model's numpy
    path and the step written out, for a batch of several blocks with a ragged last one."""
    from meanfield.checks import EXP_OVERFLOW
    from meanfield.engines.fused import BLOCK_ELEMENTS, FusedAttention
    # e^beta overflows: the shift is needed
    params = {"SA beyond exp's range": dict(beta=EXP_OVERFLOW + 50.0)}.get(name) or MODELS[name]
    model = mf.SelfAttention(**params)
    block = BLOCK_ELEMENTS // (n * n + 5 * n * d)
    x = mf.sample_uniform(n, d, 4, batch=2 * block + block // 3)
    off = x * np.random.default_rng(1).uniform(0.5, 2.0, size=x.shape[:-1] + (1,))
    fused = FusedAttention(model)
    a = model.attention_output(x)
    scale = np.abs(a).max()
    np.testing.assert_allclose(fused.attention_output(off), a, rtol=0, atol=1e-13 * scale)
    np.testing.assert_allclose(fused.velocity_unchecked(off), model.velocity_unchecked(x), rtol=0, atol=1e-13 * scale)
    noise = np.random.default_rng(2).normal(size=x.shape)
    h, sigma = 0.1, 0.3
    radial = lambda v: np.sum(v * x, axis=-1, keepdims=True) * x  # noqa: E731
    y = x + h * (a - radial(a)) + sigma * (noise - radial(noise))
    expected = y / np.linalg.norm(y, axis=-1, keepdims=True)
    np.testing.assert_allclose(fused.step(x, h, project=True, noise=noise, noise_scale=sigma), expected, rtol=0,
                               atol=1e-13 * max(scale, 1.0))


def plain_euler(x, beta, h, steps, *, layer=False):
    """SA Euler steps written out: softmax of beta <x_i, x_j>, then x + h v normalized."""
    for _ in range(steps):
        logits = beta * np.einsum("bic,bjc->bij", x, x)
        weights = np.exp(logits - logits.max(axis=-1, keepdims=True))
        a = np.einsum("bij,bjc->bic", weights / weights.sum(axis=-1, keepdims=True), x)
        v = a if layer else a - np.sum(a * x, axis=-1, keepdims=True) * x
        x = x + h * v
        x = x / np.sqrt(np.sum(x * x, axis=-1, keepdims=True))
    return x


@pytest.mark.parametrize("layer", [False, True], ids=["projected Euler", "layer"])
def test_span_reduction_is_exact_and_used_when_d_exceeds_n(layer):
    x0 = mf.sample_uniform(6, 40, 3, batch=5)
    ds = mf.simulate_particles(mf.SelfAttention(2.0), x0, [0.0, 1.0], method="layer" if layer else "euler", dt=0.01)
    assert '"span_dimension": 6' in ds.attrs["settings"]
    np.testing.assert_allclose(ds.x.values[:, -1], plain_euler(x0, 2.0, 0.01, 100, layer=layer), rtol=0, atol=1e-12)


def test_span_reduction_with_rank_deficient_initial_tokens():
    x0 = mf.sample_uniform(6, 40, 4, batch=2)
    x0[:, 3] = x0[:, 0]  # a repeated token: the span has dimension 5 < n
    ds = mf.simulate_particles(mf.SelfAttention(3.0), x0, [0.0, 0.5], method="euler", dt=0.01)
    np.testing.assert_allclose(ds.x.values[:, -1], plain_euler(x0, 3.0, 0.01, 50), rtol=0, atol=1e-12)


@pytest.mark.parametrize("case", ["noise", "general matrices", "d <= n", "adaptive"])
def test_no_span_reduction_where_it_would_not_be_exact_or_would_not_pay(case):
    d = 4 if case == "d <= n" else 12
    model = {"noise": mf.SelfAttention(1.0, diffusion=0.1),
             "general matrices": mf.SelfAttention(1.0, query=np.eye(12) * 0.5)}.get(case, mf.SelfAttention(1.0))
    method = "dop853" if case == "adaptive" else "euler"
    ds = mf.simulate_particles(model, mf.sample_uniform(5, d, 0), [0.0, 0.1], method=method, dt=0.05, rng=1)
    assert "span_dimension" not in ds.attrs["settings"]
    assert ds.x.shape[-1] == d


@pytest.mark.parametrize("invariant", [False, True])
def test_an_invariant_observer_gets_span_coordinates(invariant):
    x0 = mf.sample_uniform(5, 30, 2, batch=3)
    seen = []

    def observe(x):
        seen.append(x.shape)
        return np.einsum("sk,sk->s", x[:, 0], x[:, 1])

    values = mf.observe_particles(mf.SelfAttention(2.0), x0, [0.0, 0.5, 1.0], observe, method="euler", dt=0.1,
                                  invariant=invariant)
    assert seen == [(3, 5, 5 if invariant else 30)] * 3
    full = mf.simulate_particles(mf.SelfAttention(2.0), x0, [0.0, 0.5, 1.0], method="euler", dt=0.1)
    expected = np.einsum("stk,stk->st", full.x.values[:, :, 0], full.x.values[:, :, 1]).T
    np.testing.assert_allclose(np.array(values), expected, rtol=0, atol=1e-13)


def test_array_api_observer_receives_the_namespace_arrays():
    x0 = strict(mf.sample_uniform(5, 3, 2, batch=2))
    kinds = mf.observe_particles(mf.SelfAttention(1.0), x0, [0.0, 0.1], lambda x: type(x).__module__,
                                 method="euler", dt=0.1)
    assert all(kind.startswith("array_api_strict") for kind in kinds)


@pytest.mark.parametrize("name", ["SA", "USA", "USA time-rescaled", "repulsive", "general Q K V, two heads"])
@pytest.mark.parametrize("method", ["euler", "layer", "rk4"])
@pytest.mark.parametrize("namespace", ["numpy", "array_api_strict"])
def test_per_system_betas_follow_each_beta_own_run(name, method, namespace, monkeypatch):
    """One batch with a beta per system = the fused runs of each beta, to 1e-12 after 100 steps,
    also when the batch spans several blocks of the array API path (its per-system slices)."""
    import meanfield.engines.kernels as kernels
    model = mf.SelfAttention(**MODELS[name])
    betas = np.array([0.0, 0.7, model.beta, 5.0])
    x0 = mf.sample_uniform(9, 3, 11, batch=3)
    batch = np.concatenate([x0] * len(betas))
    times = [0.0, 0.5, 1.0]
    expected = np.concatenate([mf.simulate_particles(mf.SelfAttention(**{**MODELS[name], "beta": beta}), x0, times,
                                                     method=method, dt=0.01, kernel="fused").x.values
                               for beta in betas])
    monkeypatch.setattr(kernels, "ARRAY_API_BLOCK_ELEMENTS", 5 * 81)  # blocks of 5 systems: slices cross betas
    frames = mf.observe_particles(model, batch if namespace == "numpy" else strict(batch), times,
                                  lambda x: np.array(kernels.to_numpy(x)), method=method, dt=0.01,
                                  betas=np.repeat(betas, len(x0)))
    got = np.stack(frames, axis=1)
    assert np.abs(expected[:, -1] - expected[:, 0]).max() > 1e-2  # the runs moved
    np.testing.assert_allclose(got, expected, rtol=0, atol=1e-12)


def test_per_system_betas_keep_the_noise_of_the_plain_run():
    """All betas equal to the model's: the same numbers as the plain run, noise included."""
    model = mf.SelfAttention(**MODELS["noisy SA"])
    x0 = mf.sample_uniform(9, 3, 11, batch=4)
    plain = mf.observe_particles(model, x0, [0.0, 1.0], np.copy, method="euler", dt=0.01, rng=5)
    batched = mf.observe_particles(model, x0, [0.0, 1.0], np.copy, method="euler", dt=0.01, rng=5,
                                   betas=np.full(4, model.beta))
    np.testing.assert_allclose(batched[-1], plain[-1], rtol=0, atol=1e-12)


@pytest.mark.parametrize("model, betas, x_shape, kernel, message", [
    (mf.SelfAttention(1.0), [1.0, 2.0], (3, 4, 3), "auto", r"betas must have shape \(3,\)"),
    (mf.SelfAttention(1.0), [1.0, -2.0, 1.0], (3, 4, 3), "auto", "betas: beta must be >= 0"),
    (mf.SelfAttention(1.0), [1.0, np.nan, 1.0], (3, 4, 3), "auto", "betas: beta must be finite"),
    (mf.SelfAttention(1.0, normalized=False), [1.0, 800.0, 1.0], (3, 4, 3), "auto", "betas: USA with beta=800"),
    (mf.SelfAttention(1.0), [1.0, 2.0, 3.0], (3, 4, 3), "fused", "betas run on the array API kernel"),
    (mf.SelfAttention(1.0), [1.0], (4, 3), "auto", r"betas take a batch x0 of shape \(systems, n, d\)"),
    (mf.ZonalAggregation(np.exp, np.exp), [1.0, 2.0, 3.0], (3, 4, 3), "auto", "betas .* take a SelfAttention"),
], ids=["wrong length", "negative", "nan", "USA overflow", "fused kernel", "single system", "zonal aggregation"])
def test_bad_per_system_betas_are_refused(model, betas, x_shape, kernel, message):
    x0 = mf.sample_uniform(x_shape[-2], 3, 0, batch=x_shape[0]) if len(x_shape) == 3 else mf.sample_uniform(4, 3, 0)
    with pytest.raises(ValueError, match=message):
        mf.observe_particles(model, x0, [0.0, 0.1], np.copy, method="euler", dt=0.1, kernel=kernel,
                             betas=np.array(betas))


def test_kernel_choice():
    x = mf.sample_uniform(8, 3, 0, batch=2)
    assert select_kernel(mf.SelfAttention(1.0), x).name == "fused"
    # beyond the fused kernel's size, without a series (S^3): the row-blocked pairs
    assert isinstance(select_kernel(mf.SelfAttention(1.0), mf.sample_uniform(MAX_TOKENS + 1, 4, 0)[None]),
                      NumpyKernel)
    zonal = mf.ZonalAggregation(np.exp, np.exp)
    assert isinstance(select_kernel(zonal, x), NumpyKernel)
    assert isinstance(select_kernel(mf.SelfAttention(1.0), strict(x)), ArrayAPIKernel)


@pytest.mark.parametrize("call, message", [
    (lambda x: select_kernel(mf.SelfAttention(1.0), x, "gpu"), "kernel must be one of"),
    (lambda x: select_kernel(mf.ZonalAggregation(np.exp, np.exp), x, "fused"), "kernel='fused' needs numba"),
    (lambda x: select_kernel(mf.SelfAttention(1.0), strict(x), "numpy"), "take the array API path"),
    (lambda x: select_kernel(mf.ZonalAggregation(np.exp, np.exp), strict(x)), "pass numpy arrays"),
    (lambda x: mf.simulate_particles(mf.SelfAttention(1.0), strict(x), [0, 1]), "method='dop853' integrates numpy"),
    (lambda x: mf.simulate_particles(mf.SelfAttention(1.0), strict(x * 2), [0, 1], method="rk4"), "unit sphere"),
], ids=["unknown kernel", "fused zonal aggregation", "numpy kernel for strict arrays",
        "zonal aggregation on strict arrays", "dop853 on strict arrays", "strict arrays off the sphere"])
def test_bad_kernel_requests_are_refused(call, message):
    with pytest.raises((ValueError, TypeError), match=message):
        call(mf.sample_uniform(4, 3, 0, batch=2))


def test_fused_kernel_keeps_no_state_between_calls():
    """One FusedAttention serves a whole run (it keeps its [x, 1] work array): calls with other shapes,
    normalization or steps in between change nothing, and no returned array shares that work array."""
    from meanfield.engines.fused import FusedAttention
    rng = np.random.default_rng(5)
    model = mf.SelfAttention(2.0, value=np.diag([1.0, 0.5, -0.3]), query=np.eye(3), key=np.eye(3))
    small, large = mf.sample_uniform(8, 3, rng, batch=3), mf.sample_uniform(16, 3, rng, batch=5)
    fresh = [FusedAttention(model).step(small, 0.1, project=True), FusedAttention(model).velocity_unchecked(2.0 * large),
             FusedAttention(model).attention_output(small)]
    kept = FusedAttention(model)
    results = [kept.step(small, 0.1, project=True), kept.velocity_unchecked(2.0 * large), kept.attention_output(small)]
    for got, expected in zip(results, fresh):
        np.testing.assert_array_equal(got, expected)
    assert not any(np.shares_memory(r, work) for work in kept._work
               for r in results)
