"""Property: any config is either refused with one line naming a key (exit 2), or it runs.

Random configs are valid bases with random edits: a key set to a value of any TOML type
(including NaN, infinities, huge and negative numbers), a key removed, an unknown key added.
"""

import json
import math

import pytest
from hypothesis import HealthCheck, event, given, settings, strategies as st

from validation.app import ConfigError, check_config
import dataclasses

from validation.app.config import SECTIONS as SECTION_RECORDS, ExperimentConfig, TimesConfig
from validation.app.experiment import run_experiment

BASES = [
    {"geometry": "circle", "times": {"stop": 1.0, "count": 3}, "model": {"beta": 2.0},
     "method": {"kind": "CircleFV", "cells": 32}, "initial": {"kind": "perturbed_uniform"}},
    {"geometry": "circle", "times": [0.0, 0.5, 1.0], "model": {"beta": 2.0, "diffusion": 0.1},
     "method": {"kind": "particles", "n": 8, "dt": 0.1}, "initial": {"kind": "uniform"}},
    {"geometry": "sphere", "times": {"stop": 0.5, "count": 2}, "model": {"beta": 1.0, "normalized": False},
     "method": {"kind": "SphereSpectral", "lmax": 12}, "initial": {"kind": "perturbed_uniform", "mode": 2}},
    {"geometry": "sphere", "times": {"stop": 0.5, "count": 2}, "model": {"beta": 1.0},
     "method": {"kind": "particles", "n": 6, "scheme": "layer"},
     "initial": {"kind": "von_mises_fisher", "means": [[0.0, 0.0, 1.0]]}},
    {"geometry": "euclidean", "times": {"stop": 0.5, "count": 2}, "model": {"beta": 1.0, "rescaled": True},
     "method": {"kind": "particles", "n": 6, "d": 2}, "initial": {"kind": "gaussian"}},
]

SECTIONS = ("model", "method", "initial", "times")
KEYS = sorted({spec.name for cls in (*SECTION_RECORDS.values(), TimesConfig, ExperimentConfig)
               for spec in dataclasses.fields(cls)} - {"listed"})

scalars = st.one_of(
    st.integers(min_value=-3, max_value=70), st.sampled_from([0, 1, 2, 10**9, -(10**9)]),
    st.floats(allow_nan=True, allow_infinity=True), st.sampled_from([0.0, 1e-300, 1e300, 0.5, 3.0]),
    st.booleans(), st.text(max_size=6), st.sampled_from(["rk4", "layer", "uniform", "file", "CircleFV"]))
#: Values a key plausibly takes (most edits then keep the config valid and it runs).
plausible = st.sampled_from([0, 1, 2, 3, 4, 16, 0.0, 0.05, 0.5, 1.0, 2.0, 1e-3, True, False, "rk4", "euler", "layer",
                             [0.0, 0.25], [[1.0, 0.0, 0.0]], {"stop": 0.3, "count": 2}])
values = st.one_of(plausible, plausible, scalars, st.lists(scalars, max_size=4), st.dictionaries(st.sampled_from(KEYS), scalars,
                                                                          max_size=3))
edits = st.lists(st.tuples(st.sampled_from(["set", "remove", "unknown"]), st.sampled_from(("",) + SECTIONS),
                           st.sampled_from(KEYS), values), min_size=1, max_size=3)


def apply(config: dict, edits) -> dict:
    for action, section, key, value in edits:
        table = config if not section else config.get(section)
        if not isinstance(table, dict):
            continue
        if action == "set":
            table[key] = value
        elif action == "remove":
            table.pop(key, None)
        else:
            table[f"{key}_extra"] = value
    return config


def named_keys(message: str) -> bool:
    return any(key in message for key in KEYS + list(SECTIONS) + ["output", "initial.path"])


@settings(max_examples=150, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(base=st.sampled_from(range(len(BASES))), edits=edits)
def test_a_config_is_refused_in_one_line_naming_a_key_or_runs(base, edits, tmp_path):
    config = apply(json.loads(json.dumps({**BASES[base], "output": str(tmp_path / "out")})), edits)
    try:
        checked = check_config(config)
        checked = dataclasses.replace(checked, checkpoint_every=0)
        ds = run_experiment(checked, progress=False)
    except ConfigError as error:
        message = str(error)
        assert "\n" not in message and named_keys(message), message
        event("refused")
        return
    event("ran")
    assert ds.sizes["time"] >= 2
    for name in ("x", "rho"):
        if name in ds:
            assert all(math.isfinite(v) for v in ds[name].values.ravel()[:100])


@pytest.mark.parametrize("config", BASES, ids=["CircleFV", "noisy-particles", "SphereSpectral", "layer", "euclidean"])
def test_every_base_of_the_property_runs(config, tmp_path):
    assert run_experiment(check_config({**config, "output": str(tmp_path)}), progress=False).sizes["time"] >= 2
