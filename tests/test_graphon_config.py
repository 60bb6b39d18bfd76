"""Graphs drawn from a graphon, and their mean field, from a config: the expression of W(x, y), its checks, the
particles' graphs and GraphonCircleFV as the classes run them."""

import numpy as np
import pytest

import meanfield as mf
from validation.app import ConfigError, check_config
from validation.app.expressions import parse_function


@pytest.mark.parametrize("text, expected", [
    ("x * y", lambda x, y: x * y),
    ("0.5", lambda x, y: 0.5 + 0 * x * y),
    ("exp(-abs(x - y) / 0.2)", lambda x, y: np.exp(-np.abs(x - y) / 0.2)),
    ("(x < 0.5) * (y < 0.5) + (x >= 0.5) * (y >= 0.5)", lambda x, y: ((x < 0.5) == (y < 0.5)) * 1.0),
    ("minimum(x, y) ** 2 - -1 + cos(pi * x) * sin(e * y) + sqrt(log(1 + x + y))",
     lambda x, y: np.minimum(x, y) ** 2 + 1 + np.cos(np.pi * x) * np.sin(np.e * y) + np.sqrt(np.log(1 + x + y))),
])
def test_an_expression_is_the_numpy_function_it_writes(text, expected):
    x, y = np.meshgrid(np.linspace(0.01, 0.99, 7), np.linspace(0.02, 0.98, 5), indexing="ij")
    np.testing.assert_allclose(parse_function(text, ("x", "y"), "w")(x, y), expected(x, y), rtol=1e-15, atol=0)


@pytest.mark.parametrize("text, message", [
    ("__import__('os').system('true')", "the call __import__"),
    ("x.real", "Attribute"),
    ("(x, y)[0]", "Subscript"),
    ("lambda: 1", "Lambda"),
    ("x == y", "equality comparison"),
    ("0 < x < 1", "chained"),
    ("z * x", "the name 'z'"),
    ("'a'", "'a'"),
    ("x +", "is not an expression"),
    ("exp(x, out=y)", "the call exp"),
])
def test_anything_beyond_arithmetic_is_refused_naming_the_key(text, message):
    with pytest.raises(ValueError, match=f"^w: .*{message}"):
        parse_function(text, ("x", "y"), "w")


def config(tmp_path, kind="GraphonCircleFV", graphon="x * y", **method):
    settings = {"vertices": 8, "cells": 64} if kind == "GraphonCircleFV" else {"n": 60, "dt": 0.05, "seed": 4}
    return {"geometry": "circle", "output": str(tmp_path / "run"), "times": {"stop": 0.5, "count": 3},
            "model": {"beta": 0.0, "normalized": False, "value": 6.0, "graph": "graphon", "graphon": graphon},
            "method": {"kind": kind, **settings, **method},
            "initial": {"kind": "perturbed_uniform", "amplitude": 0.3, "mode": 1}}


def test_the_graphons_mean_field_runs_from_a_config_as_the_class_does(tmp_path):
    from solvers import GraphonCircleFV
    from validation.app.experiment import run_experiment

    ds = run_experiment(config(tmp_path), progress=False)
    direct = GraphonCircleFV(mf.SelfAttention(0.0, normalized=False, value=6.0), graphon=lambda x, y: x * y,
                             vertices=8, cells=64).solve(lambda s, t: 1 + 0.3 * np.cos(t), [0.0, 0.25, 0.5],
                                                         progress=False)
    np.testing.assert_array_equal(ds.rho.values, direct.rho.values)
    np.testing.assert_array_equal(ds.order_parameter.values, direct.order_parameter.values)


def test_the_particles_graph_is_drawn_from_the_graphon_on_the_runs_graph_stream(tmp_path):
    from validation.app.builders import build_run, graph_generator

    run = build_run(check_config(config(tmp_path, kind="particles")))
    expected = mf.graphon_graph(lambda x, y: x * y, 60, graph_generator(4))
    assert (run.model.adjacency != expected).nnz == 0


@pytest.mark.parametrize("model, method, message", [
    ({"graphon": "2 * x * y"}, {}, "must take finite values in \\[0, 1\\]"),
    ({"graphon": "x"}, {}, "must be symmetric"),
    ({"graphon": "x ** y ** open"}, {}, "the name 'open'"),
    ({"graphon": None}, {}, "needs model.graphon"),
    ({"graph": "ring", "neighbours": 2}, {}, "'GraphonCircleFV'\\), got method.kind = 'GraphonCircleFV'"),
    ({"graph": None, "graphon": None}, {}, "needs model.graph = 'graphon' and model.graphon"),
    ({"edge_probability": 0.5}, {}, "model.edge_probability does not apply to model.graph = 'graphon'"),
    ({}, {"nodes": 4}, "method.nodes does not apply"),
])
def test_a_bad_graphon_config_is_refused_naming_the_key(tmp_path, model, method, message):
    raw = config(tmp_path, **method)
    raw["model"].update(model)
    raw["model"] = {key: value for key, value in raw["model"].items() if value is not None}
    with pytest.raises(ConfigError, match=message):
        check_config(raw)
