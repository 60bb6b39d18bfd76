"""Doubly stochastic (Sinkhorn) attention: against a Sinkhorn written here, its matrix, its mean field."""

from __future__ import annotations

import numpy as np
import pytest

import meanfield as mf
import solvers
from validation import mean_field_convergence
from validation.convergence import StudySettings


def plain_sinkhorn_velocity(x, beta, q, k, v, normalisations=None, tol=1e-15):
    """Sinkhorn by alternating plain row and column normalisations of exp(beta <Q x_i, K x_j>).

    ``normalisations=None``: until the matrix is doubly stochastic to ``tol``; else that many, the
    last of the rows. No library code: the velocity is P_x (sum_j A_ij V x_j).
    """
    n = len(x)
    matrix = np.empty((n, n))
    for i in range(n):
        for j in range(n):
            matrix[i, j] = np.exp(beta * (q @ x[i]) @ (k @ x[j]))
    if normalisations is None:
        for _ in range(100_000):
            matrix /= matrix.sum(axis=1, keepdims=True)
            matrix /= matrix.sum(axis=0, keepdims=True)
            if np.abs(matrix.sum(axis=1) - 1).max() < tol:
                break
        matrix /= matrix.sum(axis=1, keepdims=True)
    else:
        for step in range(normalisations):
            rows = (normalisations - step) % 2 == 1  # the last one normalises the rows
            matrix /= matrix.sum(axis=1 if rows else 0, keepdims=True)
    velocity = np.empty_like(x)
    for i in range(n):
        output = v @ (matrix[i] @ x)
        velocity[i] = output - (output @ x[i]) * x[i]
    return velocity, matrix


@pytest.fixture
def tokens_and_matrices():
    rng = np.random.default_rng(4)
    x = mf.sample_uniform(50, 3, rng=rng)
    q, k, v = (np.eye(3) + 0.4 * rng.standard_normal((3, 3)) for _ in range(3))
    return x, q, k, v


def test_the_velocity_matches_a_plain_sinkhorn_to_1e_12(tokens_and_matrices):
    x, q, k, v = tokens_and_matrices
    symmetric = np.linalg.cholesky(q @ q.T).T  # Q = K: symmetric scores, the averaged iteration
    for query, key in ((q, k), (symmetric, symmetric)):
        model = mf.SinkhornAttention(2.0, query=query, key=key, value=v, tolerance=1e-14)
        expected, _ = plain_sinkhorn_velocity(x, 2.0, query, key, v)
        np.testing.assert_allclose(model.velocity(x), expected, rtol=0, atol=1e-12)


@pytest.mark.parametrize("normalisations", [2, 3, 6])
def test_a_fixed_number_of_iterations_matches_as_many_plain_normalisations(tokens_and_matrices, normalisations):
    x, q, k, v = tokens_and_matrices
    model = mf.SinkhornAttention(2.0, query=q, key=k, value=v, iterations=normalisations)
    expected, _ = plain_sinkhorn_velocity(x, 2.0, q, k, v, normalisations)
    np.testing.assert_allclose(model.velocity(x), expected, rtol=0, atol=1e-13)


def test_the_matrix_is_doubly_stochastic_to_the_tolerance(tokens_and_matrices):
    x, q, k, _ = tokens_and_matrices
    for tolerance in (1e-6, 1e-12):
        matrix = mf.SinkhornAttention(3.0, query=q, key=k, tolerance=tolerance).attention_matrix(x)[0]
        np.testing.assert_allclose(matrix.sum(axis=1), 1.0, rtol=0, atol=1e-14)
        assert np.abs(matrix.sum(axis=0) - 1).max() <= 1.01 * tolerance


def test_one_iteration_is_softmax_attention_bit_for_bit(tokens_and_matrices):
    x, q, k, v = tokens_and_matrices
    nodes, weights = mf.sample_uniform(30, 3, rng=1), np.random.default_rng(2).uniform(0.1, 1, 30)
    sinkhorn = mf.SinkhornAttention(2.0, query=q, key=k, value=v, iterations=1)
    softmax = mf.SelfAttention(2.0, query=q, key=k, value=v)
    np.testing.assert_array_equal(sinkhorn.velocity_field(x, nodes, weights), softmax.velocity_field(x, nodes, weights))
    run = mf.simulate_particles(sinkhorn, x, [0, 0.5], method="rk4", dt=0.05, progress=False)
    reference = mf.simulate_particles(softmax, x, [0, 0.5], method="rk4", dt=0.05, kernel="numpy", progress=False)
    np.testing.assert_allclose(run.x.values, reference.x.values, rtol=0, atol=1e-14)


def test_large_beta_does_not_overflow():
    x = mf.sample_uniform(40, 3, rng=5)
    velocity = mf.SinkhornAttention(800.0, tolerance=1e-9, max_iterations=100_000).velocity(x)
    assert np.all(np.isfinite(velocity))


@pytest.mark.parametrize("arguments, message", [
    (dict(beta=30.0, tolerance=1e-14, max_iterations=3), r"did not reach tolerance=1e-14 in max_iterations=3"),
    (dict(beta=1.0, iterations=0), "iterations must be"),
    (dict(beta=1.0, tolerance=0.0), "tolerance must be"),
    (dict(beta=-1.0), "beta must be"),
])
def test_bad_settings_are_one_line_naming_the_argument(arguments, message):
    with pytest.raises(ValueError, match=message):
        mf.SinkhornAttention(**arguments).velocity(mf.sample_uniform(20, 3, rng=0))


def test_negative_weights_are_refused():
    x = mf.sample_uniform(5, 3, rng=0)
    with pytest.raises(ValueError, match="weights must be nonnegative for SinkhornAttention"):
        mf.SinkhornAttention(1.0).velocity_field(x, x, np.array([0.5, 0.6, -0.1, 0.0, 0.0]))


def test_the_circle_solvers_run_it_through_its_field():
    """No solver code knows the model: the finite volumes take its field (the reference path) and converge
    at second order to the Fourier solution of the same field; it differs from softmax's flow."""
    model = mf.SinkhornAttention(3.0, tolerance=1e-12)
    rho0 = lambda theta: 1 + 0.4 * np.cos(2 * theta) + 0.2 * np.sin(3 * theta)
    times = [0.0, 0.5]
    fourier = solvers.solve(model, rho0, times, method="fourier", cells=128, rtol=1e-9, progress=False)
    errors = []
    for cells in (64, 128):
        finite = solvers.solve(model, rho0, times, method="finite_volumes", cells=cells, error_level=None,
                               progress=False)  # the error measured here, not estimated
        averages = fourier.rho.values[-1].reshape(cells, -1).mean(axis=1)
        errors.append(np.abs(finite.rho.values[-1] - averages).max())
    assert 3.0 < errors[0] / errors[1] < 5.5, errors  # second order in the cell width
    softmax = solvers.solve(mf.SelfAttention(3.0), rho0, times, method="fourier", cells=128, progress=False)
    assert np.abs(softmax.rho.values[-1] - fourier.rho.values[-1]).max() > 100 * errors[1]


@pytest.mark.parametrize("largest", [512, pytest.param(1024, marks=pytest.mark.slow)])
def test_particles_converge_to_its_pde_on_the_circle_at_the_half_rate(assert_half_rate, largest):
    """Particles of Sinkhorn attention against CircleAuto on its field; RK4 at 0.05 (error far below).

    The largest count sets the interval's width; n = 1024 alone takes three quarters of the study.
    """
    sizes = [size for size in (64, 128, 256, 512, 1024) if size <= largest]
    study = mean_field_convergence(mf.SinkhornAttention(1.5, tolerance=1e-9), lambda theta: 1 + 0.4 * np.cos(2 * theta),
                                   geometry="circle", sizes=sizes, seeds=16,
                                   times=[0.0, 0.3, 0.6], rng=3, settings=StudySettings(cells=128, particle_dt=0.05),
                                   progress=False)
    assert_half_rate(study, (0.3, 0.6))


@pytest.mark.slow
def test_particles_converge_to_its_pde_on_the_sphere_at_the_half_rate(assert_half_rate):
    """Particles of Sinkhorn attention on S^2 against SphereSpectral on its field (the general path: no solver
    code knows the model); the PDE's own error far below the distances."""
    study = mean_field_convergence(mf.SinkhornAttention(1.5, tolerance=1e-9), lambda p: 1 + 0.3 * p[..., 2],
                                   geometry="sphere", sizes=[64, 128, 256, 512], seeds=16, times=[0.0, 0.3, 0.6],
                                   rng=3, progress=False)
    assert_half_rate(study, (0.3, 0.6))
    for t in (0.3, 0.6):
        row = study.sel(time=t)
        assert row.pde_error < 1e-3 * row.mean_distance.min()


def test_the_kernel_and_log_domains_agree(tokens_and_matrices, monkeypatch):
    """Below SCALING_RANGE the iterations scale the kernel; above it they run on logarithms: one answer."""
    import meanfield.sinkhorn as sinkhorn

    x, q, k, v = tokens_and_matrices
    for model in (mf.SinkhornAttention(2.0, query=q, key=k, value=v, tolerance=1e-14),  # alternating
                  mf.SinkhornAttention(2.0, query=q, key=k, value=v, iterations=4),
                  mf.SinkhornAttention(2.0, tolerance=1e-14)):  # symmetric scores: the averaged iteration
        kernel_domain = model.velocity(x)
        monkeypatch.setattr(sinkhorn, "SCALING_RANGE", 0.0)
        np.testing.assert_allclose(model.velocity(x), kernel_domain, rtol=0, atol=1e-13)
        monkeypatch.undo()


def _symmetric_head(seed: int = 0):
    """Q = K = L^T with L L^T = W symmetric positive definite, so Q^T K = W."""
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((3, 3))
    w = a @ a.T / 3 + np.eye(3)
    return np.linalg.cholesky(w).T, w


def test_the_energy_is_the_symmetric_potential_of_a_plain_sinkhorn():
    """E = (1/beta) (1/n) sum_i (f_i + g_i)/2, and f_i + g_i = log(n A_ii) - s_ii from the plain matrix's diagonal."""
    q, w = _symmetric_head()
    x = mf.sample_uniform(30, 3, rng=6)
    beta = 1.5
    _, matrix = plain_sinkhorn_velocity(x, beta, q, q, w)
    scores = np.array([beta * (q @ xi) @ (q @ xi) for xi in x])
    expected = np.mean(np.log(len(x) * np.diag(matrix)) - scores) / (2 * beta)
    model = mf.SinkhornAttention(beta, query=q, key=q, value=w, tolerance=1e-14)
    np.testing.assert_allclose(model.energy(x), expected, rtol=1e-12)


def test_the_flow_is_the_gradient_flow_of_its_energy():
    """With V = Q^T K: dE/dt along the velocity is -(1/n) sum_i |v_i|^2 (finite differences on the sphere),
    and E does not increase along a run."""
    q, w = _symmetric_head(1)
    model = mf.SinkhornAttention(2.0, query=q, key=q, value=w, tolerance=1e-14)
    x = mf.sample_uniform(25, 3, rng=7)
    v = model.velocity(x)
    h = 1e-5
    along = lambda s: model.energy((x + s * v) / np.linalg.norm(x + s * v, axis=-1, keepdims=True))
    slope = (along(h) - along(-h)) / (2 * h)
    np.testing.assert_allclose(slope, -1.0 / len(x) * np.sum(v * v), rtol=1e-6)
    run = mf.simulate_particles(model, x, np.linspace(0, 3, 31), method="rk4", dt=0.01, progress=False,
                                observables=["energy"])
    assert np.all(np.diff(run.energy.values) <= 1e-12)
    assert run.energy.values[-1] < run.energy.values[0] - 0.1


def test_the_energy_is_refused_where_the_flow_is_not_a_gradient_flow():
    x = mf.sample_uniform(10, 3, rng=0)
    with pytest.raises(ValueError, match="symmetric Q\\^T K .* head 0 is not"):
        mf.SinkhornAttention(1.0, query=np.array([[1.0, 2.0, 0], [0, 1.0, 0], [0, 0, 1.0]])).energy(x)
    with pytest.raises(ValueError, match="iterations=None"):
        mf.SinkhornAttention(1.0, iterations=5).energy(x)
    assert not mf.SinkhornAttention(1.0, iterations=5).has_energy and mf.SinkhornAttention(1.0).has_energy


def test_its_description_rebuilds_it():
    q, w = _symmetric_head()
    model = mf.SinkhornAttention(2.0, query=q, key=q, value=w, iterations=7, tolerance=1e-9, max_iterations=50)
    again = mf.model_from_dict(model.to_dict())
    x = mf.sample_uniform(12, 3, rng=0)
    np.testing.assert_array_equal(again.velocity(x), model.velocity(x))
    assert (again.iterations, again.tolerance, again.max_iterations) == (7, 1e-9, 50)


class FailsOnceClustered(mf.FieldModel):
    """SA's field, refused (ModelFailure, as a Sinkhorn that does not converge) once the tokens cluster."""

    def velocity_field(self, x, nodes, weights):
        if np.sum(np.mean(nodes, axis=-2) ** 2, axis=-1).max() > 0.6:
            raise mf.ModelFailure("the inner iteration did not converge")
        return mf.SelfAttention(1.0).velocity_field(x, nodes, weights)


@pytest.mark.parametrize("method", ["rk4", "dop853"])
def test_a_model_that_fails_mid_run_ends_it_with_the_outputs_so_far(method):
    x0 = mf.sample_uniform(16, 3, rng=2)
    times = np.linspace(0.0, 20.0, 21)
    with pytest.raises(mf.StepSizeCollapse, match="the model cannot evaluate its velocity past t=.*did not converge") as info:
        mf.simulate_particles(FailsOnceClustered(), x0, times, method=method, dt=0.05 if method == "rk4" else None)
    partial = info.value.partial
    assert 1 <= partial.sizes["time"] < times.size and partial.time.values[-1] <= info.value.time
    np.testing.assert_allclose(partial.x.values[0], x0, rtol=0, atol=1e-15)
    assert not isinstance(info.value, mf.NonFiniteState)


CONFIG = """
output = "out"
geometry = "circle"
times = {{ stop = 1.0, count = 3 }}
[model]
beta = 2.0
{model}
[method]
{method}
[initial]
kind = "perturbed_uniform"
amplitude = 0.2
mode = 2
"""


@pytest.mark.parametrize("model,method,expected", [
    ('attention = "sinkhorn"\nsinkhorn_iterations = 3', 'kind = "particles"\nn = 32\ndt = 0.05',
     mf.SinkhornAttention(2.0, iterations=3)),
    ('attention = "sinkhorn"', 'kind = "CircleFV"\ncells = 64', mf.SinkhornAttention(2.0)),
    ("rotary = 3.0", 'kind = "particles"\nn = 32\ndt = 0.05', mf.RotaryAttention(2.0, 3.0)),
])
def test_sinkhorn_and_rotary_configs_run(tmp_path, capsys, model, method, expected):
    import xarray as xr
    from validation.app.cli import main
    config = tmp_path / "run.toml"
    config.write_text(CONFIG.format(model=model, method=method))
    assert main(["run", str(config), "--quiet", "--no-animation"]) in (0, None), capsys.readouterr().err
    with xr.open_dataset(tmp_path / "out" / "dataset.nc") as ds:
        assert mf.model_from_dict(ds.attrs["model"]).to_dict() == expected.to_dict()


@pytest.mark.parametrize("model,method,message", [
    ('attention = "sinkhorn"\nnormalized = false', 'kind = "particles"\nn = 8', "needs model.normalized = true"),
    ("sinkhorn_iterations = 2", 'kind = "particles"\nn = 8', "model.sinkhorn_iterations applies to attention"),
    ("rotary = 3.0", 'kind = "CircleFV"\ncells = 64', "model.rotary runs as particles"),
    ('rotary = 3.0\nattention = "sinkhorn"', 'kind = "particles"\nn = 8', "model.rotary applies to softmax"),
    ("rotary = 3.0\ncausal = true", 'kind = "particles"\nn = 8', "model.causal does not apply with model.rotary"),
])
def test_sinkhorn_and_rotary_config_refusals(tmp_path, capsys, model, method, message):
    from validation.app.cli import main
    config = tmp_path / "bad.toml"
    config.write_text(CONFIG.format(model=model, method=method))
    assert main(["run", str(config)]) == 2
    assert message in capsys.readouterr().err


def plain_sinkhorn_in_r_d(x, beta, q, k, v, rounds=5000):
    """Sinkhorn in R^d written out: K = exp(beta <q x_i, k x_j>) scaled by alternating row and column sums
    (uniform weights) until the columns of the row-normalised matrix sum to one; velocity V sum_j P_ij x_j."""
    kernel = np.exp(beta * (x @ q.T) @ (x @ k.T).T)
    n = len(x)
    rows, columns = np.ones(n), np.ones(n)
    for _ in range(rounds):
        rows = 1.0 / (kernel @ columns)
        columns = 1.0 / (kernel.T @ rows)
    matrix = rows[:, None] * kernel * columns[None, :]
    matrix /= matrix.sum(axis=1, keepdims=True)
    return (matrix @ x) @ v.T, matrix


def test_sinkhorn_in_r_d_is_the_plain_iteration_and_one_round_is_softmax(rng):
    d = 3
    q, k, v = (np.eye(d) + 0.3 * rng.normal(size=(d, d)) for _ in range(3))  # Q^T K not symmetric
    x = rng.normal(size=(50, d))
    model = mf.PureAttention(query=q, key=k, value=v, beta=0.7, attention="sinkhorn")
    expected, matrix = plain_sinkhorn_in_r_d(x, 0.7, q, k, v)
    scale = np.abs(expected).max()
    np.testing.assert_allclose(model.velocity(x), expected, rtol=0, atol=1e-12 * scale)
    found = model.attention_matrix(x)[0]
    np.testing.assert_allclose(found, matrix, rtol=0, atol=1e-12)
    np.testing.assert_allclose(found.sum(axis=0), 1.0, atol=1e-11)
    one_round = mf.PureAttention(query=q, key=k, value=v, beta=0.7, attention="sinkhorn", sinkhorn_iterations=1)
    np.testing.assert_allclose(one_round.velocity(x), mf.PureAttention(query=q, key=k, value=v, beta=0.7).velocity(x),
                               rtol=0, atol=1e-14 * scale)


def test_sinkhorn_in_r_d_rescaled_tokens_are_the_original_ones_mapped_back(rng):
    """Every row of the doubly stochastic matrix sums to one, so z = e^{-tHV} x solves the rescaled equation."""
    value = np.diag([0.5, -0.3, 0.2])
    x0 = rng.normal(size=(12, 3))
    times = [0.0, 0.5, 1.0]
    original = mf.simulate_particles(mf.PureAttention(value=value, beta=1.0, attention="sinkhorn"), x0, times,
                                     rtol=1e-12, atol=1e-14)
    rescaled = mf.simulate_particles(mf.PureAttention(value=value, beta=1.0, attention="sinkhorn", rescaled=True),
                                     x0, times, rtol=1e-12, atol=1e-14)
    mapped = np.einsum("tij,tnj->tni", rescaled.rescaling.values, rescaled.x.values)
    np.testing.assert_allclose(mapped, original.x.values, rtol=0, atol=1e-9)


@pytest.mark.parametrize("kwargs,match", [
    (dict(beta=np.inf, attention="sinkhorn"), "needs a finite beta"),
    (dict(sinkhorn_iterations=3), "apply to attention='sinkhorn'"),
    (dict(attention="doubly"), "attention must be 'softmax' or 'sinkhorn'"),
])
def test_sinkhorn_in_r_d_refuses_what_it_does_not_define(kwargs, match):
    with pytest.raises(ValueError, match=match):
        mf.PureAttention(**kwargs)
