"""Attention on graphs from a config: runs draw one graph, sweeps one per realisation.

The reference recomputes a sweep point's systems from the chunk's generator (tokens, then one
graph per system) with GraphAttention and simulate_particles, and its observables by hand.
"""

from __future__ import annotations

import numpy as np
import pytest

import meanfield as mf
from validation.app.errors import ConfigError
from validation.app.sweep import run_point
from validation.app.sweep_config import load_sweep_config

GRAPH_SWEEP = """
output = "{output}"
geometry = "circle"
times = {{ stop = 4.0, count = 5 }}
[model]
beta = 0.0
normalized = false
value = 8.0
graph = "erdos_renyi"
edge_probability = 0.3
[method]
kind = "particles"
n = 12
dt = 0.1
scheme = "rk4"
[initial]
kind = "uniform"
[sweep]
realisations = 10
batch = 6
cluster_tolerance = 0.05
[sweep.grid]
edge_probability = [0.1, 0.5]
"""


def test_a_graph_point_is_its_seeded_systems_each_on_its_own_graph(config_file):
    sweep = load_sweep_config(config_file(GRAPH_SWEEP))
    index, config = sweep.points()[1]  # p = 0.5
    times = np.linspace(0.0, 4.0, 5)
    r, inner, connected, graphs = [], [], [], set()
    for chunk, size in enumerate((6, 4)):
        generator = np.random.default_rng([0, chunk])
        x0 = mf.sample_uniform(12, 2, generator, batch=size)
        for system in range(size):
            adjacency = mf.erdos_renyi(12, 0.5, seed=generator)
            graphs.add(adjacency.toarray().tobytes())
            connected.append(mf.is_connected(adjacency))
            model = mf.GraphAttention(0.0, adjacency, value=8.0)
            x = mf.simulate_particles(model, x0[system], times, method="rk4", dt=0.1).x.values
            r.append(np.linalg.norm(x.mean(axis=1), axis=-1))
            inner.append(np.sum(x[:, 0] * x[:, 1], axis=-1))
    r, inner = np.array(r), np.array(inner)
    assert len(graphs) == 10  # a graph per realisation
    point = run_point(sweep, config)
    np.testing.assert_allclose(point["order_parameter"], r.mean(axis=0), rtol=1e-12)
    np.testing.assert_allclose(point["inner_product"], inner.mean(axis=0), rtol=1e-12, atol=1e-14)
    np.testing.assert_array_equal(point["synchronised_probability"], (r >= 0.95).mean(axis=0))
    assert point["connected_probability"] == np.mean(connected)
    assert point["synchronised_probability"][-1] > 0.5  # Kuramoto on dense connected graphs synchronises


@pytest.mark.parametrize("replace, message", [
    ({'scheme = "rk4"': 'scheme = "rk4"\n', 'kind = "particles"': 'kind = "CircleFV"'}, "model.graph runs as particles"),
    ({'edge_probability = 0.3': 'neighbours = 2'}, "erdos_renyi takes edge_probability; edge_probability is missing"),
    ({'beta = 0.0': 'beta = 0.0\ntime_rescaled = true'}, "model.time_rescaled does not apply with model.graph"),
    ({'graph = "erdos_renyi"': 'graph = "lattice"'}, "model.graph must be one of"),
])
def test_bad_graph_configs_are_refused_naming_the_key(config_file, replace, message):
    with pytest.raises(ConfigError, match=message):
        load_sweep_config(config_file(GRAPH_SWEEP, **replace))


def test_edge_probability_without_a_graph_is_refused(config_file):
    path = config_file(GRAPH_SWEEP, **{'graph = "erdos_renyi"\n': ''})
    with pytest.raises(ConfigError, match="model.edge_probability applies to attention on a graph"):
        load_sweep_config(path)
