"""Random weights per realisation from a config: the sweep's points against the seeded systems recomputed.

Chunk c of a point draws its tokens, then the seed of its systems' weights, from the generator
seeded [method.seed, c]; the reference recomputes them with simulate_random_layers (each system
s of that seed drawing from SeedSequence(seed, spawn_key=(s,))) and its own observables.
"""

from __future__ import annotations

import numpy as np
import pytest

import meanfield as mf
from validation.app.errors import ConfigError
from validation.app.sweep import run_point, run_sweep
from validation.app.sweep_config import load_sweep_config

RANDOM_SWEEP = """
output = "{output}"
geometry = "sphere"
times = {{ stop = 3.0, count = 7 }}
[model]
beta = 1.0
[model.random]
bilinear = "wigner"
value = "bilinear"
[method]
kind = "particles"
n = 6
d = 5
dt = 0.1
scheme = "layer"
[initial]
kind = "uniform"
[sweep]
realisations = 20
batch = 8
cluster_tolerance = 0.05
[sweep.grid]
beta = [0.5, 3.0]
"""


def test_a_random_weight_point_is_its_seeded_systems(config_file):
    sweep = load_sweep_config(config_file(RANDOM_SWEEP))
    index, config = sweep.points()[1]  # beta = 3
    model = mf.RandomAttention(3.0, step=0.1, law=mf.MatrixWeights("wigner", "bilinear"), redraw="system")
    runs = []
    for chunk, size in enumerate((8, 8, 4)):
        generator = np.random.default_rng([0, chunk])
        x0 = mf.sample_uniform(6, 5, generator, batch=size)
        runs.append(mf.simulate_random_layers(model, x0, 30, seed=generator, record_every=5))
    x = np.concatenate([run.x.values for run in runs])  # (system, time, n, d)
    span = np.concatenate([run.span_dimension.values for run in runs])
    inner = np.einsum("stk,stk->st", x[:, :, 0], x[:, :, 1])
    point = run_point(sweep, config)
    np.testing.assert_allclose(point["inner_product"], inner.mean(axis=0), rtol=1e-12, atol=1e-14)
    np.testing.assert_array_equal(point["clustered_probability"], (inner >= 0.95).mean(axis=0))
    np.testing.assert_allclose(point["span_dimension"], span.mean(axis=0), rtol=1e-14)
    assert point["span_dimension"][0] == 5 and point["span_dimension"][-1] < 5  # the rank collapses
    again = run_sweep(sweep, workers=1, progress=False)
    np.testing.assert_array_equal(again.span_dimension.values[index], point["span_dimension"])


@pytest.mark.parametrize("replace, message", [
    ({'scheme = "layer"': 'scheme = "rk4"'}, "model.random runs the layers of particles"),
    ({'value = "bilinear"': 'value = "cauchy"'}, r"model.random: value must be one of"),
    ({'[model.random]': '[model.random]\nsize = 3'}, r"unknown keys \['size'\]"),
    ({'beta = 1.0': 'beta = 1.0\nvalue = 2.0'}, "model.value does not apply with model.random"),
    ({'count = 7': 'count = 8'}, "times must start at 0 and lie on the layers"),
    ({'cluster_tolerance = 0.05': 'cluster_tolerance = 0.05\ndevice = "array_api_strict"'},
     "random weights .model.random. run on numpy only"),
])
def test_bad_random_weight_configs_are_refused_naming_the_key(config_file, replace, message):
    with pytest.raises(ConfigError, match=message):
        load_sweep_config(config_file(RANDOM_SWEEP, **replace))


def test_meanfield_run_sends_random_weights_to_sweeps(config_file):
    from validation.app.experiment import prepare
    from validation.app.config import load_config

    path = config_file(RANDOM_SWEEP)
    path.write_text(path.read_text().split("[sweep]")[0])
    with pytest.raises(ConfigError, match="model.random .* runs in sweeps"):
        prepare(load_config(path))
