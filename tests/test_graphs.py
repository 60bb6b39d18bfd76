"""Attention and Kuramoto on graphs: pair weights, the complete graph, the generators."""

import numpy as np
import pytest
import scipy.sparse as sparse

import meanfield as mf


def circle(theta):
    return np.stack([np.cos(theta), np.sin(theta)], axis=-1)


def angular(velocity, theta):
    return np.sum(velocity * np.stack([-np.sin(theta), np.cos(theta)], axis=-1), axis=-1)


def test_usa_at_beta_zero_is_kuramoto_on_the_graph_dense_or_sparse(rng):
    n = 12
    coupling = rng.normal(size=(n, n))  # a signed coupling matrix K_ij
    theta = rng.uniform(-np.pi, np.pi, n)
    expected = [2.0 / n * sum(coupling[i, j] * np.sin(theta[j] - theta[i]) for j in range(n)) for i in range(n)]
    for matrix in (coupling, sparse.csr_array(coupling)):
        model = mf.GraphAttention(0.0, matrix, value=2.0)
        np.testing.assert_allclose(angular(model.velocity(circle(theta)), theta), expected, rtol=0, atol=1e-14)


@pytest.mark.parametrize("normalized", [False, True])
def test_attention_on_a_graph_is_its_definition(normalized, rng):
    n, beta = 10, 3.0
    graph = mf.erdos_renyi(n, 0.4, seed=3).toarray()
    graph[0] = 0.0  # a token without neighbours
    x = mf.sample_uniform(n, 3, rng)
    expected = np.zeros_like(x)
    for i in range(n):
        weights = np.array([graph[i, j] * np.exp(beta * x[i] @ x[j]) for j in range(n)])
        if normalized and weights.sum() == 0:
            continue
        a = (weights @ x) / (weights.sum() if normalized else n)
        expected[i] = a - (a @ x[i]) * x[i]
    model = mf.GraphAttention(beta, graph, normalized=normalized)
    np.testing.assert_allclose(model.velocity(x), expected, rtol=0, atol=1e-14)


@pytest.mark.parametrize("beta,normalized", [(0.0, False), (2.0, True), (2.0, False)])
def test_the_complete_graph_is_todays_all_to_all_model_bit_for_bit_and_its_edge_sum(beta, normalized, rng):
    x = np.stack([mf.sample_uniform(40, 2, rng) for _ in range(3)])
    complete = mf.GraphAttention(beta, np.ones((40, 40)), normalized=normalized, value=1.5)
    today = mf.SelfAttention(beta, normalized=normalized, value=1.5)
    np.testing.assert_array_equal(complete.velocity(x), today.velocity(x))
    # the O(n) mean (Kuramoto) or the all-to-all sum against the O(E) sum over the edges
    np.testing.assert_allclose(complete.edge_attention(x), complete.attention_output(x), rtol=0, atol=1e-14)


def test_generators():
    n = 200
    graph = mf.erdos_renyi(n, 0.05, seed=1)
    edges = graph.nnz / 2
    expected, sd = 0.05 * n * (n - 1) / 2, np.sqrt(0.05 * 0.95 * n * (n - 1) / 2)
    assert abs(edges - expected) < 4 * sd
    assert (graph != graph.T).nnz == 0 and graph.diagonal().sum() == 0 and set(graph.data) == {1.0}
    lattice = mf.ring(n, 3)
    assert np.all(lattice.sum(axis=1) == 6) and (lattice != lattice.T).nnz == 0
    assert (mf.small_world(n, 3, 0.0, seed=2) != lattice).nnz == 0
    rewired = mf.small_world(n, 3, 0.2, seed=2)
    assert rewired.nnz == lattice.nnz and (rewired != rewired.T).nnz == 0 and rewired.diagonal().sum() == 0
    assert (rewired != lattice).nnz > 0
    assert mf.is_connected(lattice) and not mf.is_connected(mf.erdos_renyi(n, 0.001, seed=1))


def test_identical_oscillators_on_a_dense_erdos_renyi_graph_synchronise():
    graph = mf.erdos_renyi(60, 0.5, seed=4)
    assert mf.is_connected(graph)
    theta = np.random.default_rng(5).uniform(-np.pi, np.pi, 60)
    run = mf.simulate_particles(mf.GraphAttention(0.0, graph, value=4.0), circle(theta), [0.0, 50.0])
    x = run.x.values[-1]
    assert np.hypot(*x.mean(axis=0)) > 1 - 1e-6


@pytest.mark.parametrize("build,match", [
    (lambda: mf.GraphAttention(1.0, np.ones((3, 4))), "adjacency must be a square"),
    (lambda: mf.GraphAttention(1.0, np.array([[0.0, np.nan], [1.0, 0.0]])), "NaN or infinite"),
    (lambda: mf.GraphAttention(1.0, -np.ones((2, 2)), normalized=True), "must be >= 0"),
    (lambda: mf.GraphAttention(1.0, np.ones((2, 2))).velocity(mf.sample_uniform(3, 2, 0)), "2 vertices, got n=3"),
    (lambda: mf.GraphAttention(1.0, "graph"), "adjacency must be an \\(n, n\\) array"),
    (lambda: mf.erdos_renyi(10, 1.5), "p must lie in \\[0, 1\\]"),
    (lambda: mf.ring(6, 3), "k must be below n / 2"),
])
def test_bad_input_is_refused_naming_the_argument(build, match):
    with pytest.raises((ValueError, TypeError), match=match):
        build()


def test_the_model_round_trips():
    model = mf.GraphAttention(1.0, mf.small_world(12, 2, 0.3, seed=1), normalized=True, value=0.5)
    rebuilt = mf.model_from_dict(model.to_dict())
    assert rebuilt.to_dict() == model.to_dict()


@pytest.mark.parametrize("normalized", [True, False])
def test_a_graph_without_edges_leaves_every_token_where_it_is(normalized):
    """G(n, 0): no token has a neighbour (numpy's bincount of no edges used to make SA's division fail)."""
    x = mf.sample_uniform(6, 3, 0)
    model = mf.GraphAttention(1.0, mf.erdos_renyi(6, 0.0, seed=0), normalized=normalized)
    np.testing.assert_array_equal(model.velocity(x), np.zeros_like(x))
    run = mf.simulate_particles(model, x, [0.0, 1.0], method="rk4", dt=0.1)
    np.testing.assert_allclose(run.x.values[-1], x, rtol=0, atol=1e-15)  # the projection's round-off


@pytest.mark.parametrize("normalized", [False, True])
def test_a_batch_of_graphs_runs_each_system_on_its_own_graph(normalized):
    """One edge sum over the block-diagonal graph: each system as its own model, bit for bit; dense or sparse."""
    graphs = [mf.erdos_renyi(15, 0.3, seed=s) for s in range(4)]
    x0 = mf.sample_uniform(15, 3, 5, batch=4)
    batch = mf.GraphAttention(2.0, graphs, normalized=normalized)
    assert batch.systems == 4 and batch.tokens == 15
    alone = np.stack([mf.GraphAttention(2.0, g, normalized=normalized).velocity(x0[s]) for s, g in enumerate(graphs)])
    np.testing.assert_array_equal(batch.velocity(x0), alone)
    dense = mf.GraphAttention(2.0, np.stack([g.toarray() for g in graphs]), normalized=normalized)
    np.testing.assert_array_equal(dense.velocity(x0), alone)
    run = mf.simulate_particles(batch, x0, [0.0, 0.5, 1.0], method="rk4", dt=0.05)
    for s, graph in enumerate(graphs):
        own = mf.simulate_particles(mf.GraphAttention(2.0, graph, normalized=normalized), x0[s], [0.0, 0.5, 1.0],
                                    method="rk4", dt=0.05)
        np.testing.assert_allclose(run.x.values[s], own.x.values, rtol=0, atol=1e-15)
    assert mf.model_from_dict(batch.to_dict()).to_dict() == batch.to_dict()


def test_a_batch_refuses_tokens_of_another_number_of_systems_and_graphs_of_other_sizes():
    batch = mf.GraphAttention(1.0, [mf.ring(8, 1), mf.ring(8, 2)])
    with pytest.raises(ValueError, match="the batch has 2 graphs \\(one per system\\), got tokens of 3 systems"):
        batch.velocity(mf.sample_uniform(8, 2, 0, batch=3))
    with pytest.raises(ValueError, match="the graphs of a batch must have the same vertices, got \\[8, 10\\]"):
        mf.GraphAttention(1.0, [mf.ring(8, 1), mf.ring(10, 1)])
    with pytest.raises(ValueError, match="a batch of graphs needs at least one"):
        mf.GraphAttention(1.0, [])
