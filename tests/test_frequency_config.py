"""Natural frequencies from a config: particles on the circle with a frequency law, in runs and sweeps."""

import tomllib
from pathlib import Path

import numpy as np
import pytest

import meanfield as mf
from validation.app import ConfigError, check_config
from validation.app.builders import build_model, frequency_generator
from validation.app.sweep import run_sweep
from validation.app.sweep_config import check_sweep_config

EXAMPLE = Path(__file__).parents[1] / "examples" / "kuramoto_transition.toml"


def base(tmp_path, **model):
    return {"geometry": "circle", "output": str(tmp_path / "run"), "times": {"stop": 1.0, "count": 3},
            "model": {"beta": 0.0, "normalized": False, "value": 2.0,
                      "frequencies": {"law": "lorentzian", "width": 0.5}, **model},
            "method": {"kind": "particles", "n": 50, "dt": 0.05}, "initial": {"kind": "uniform"}}


@pytest.mark.parametrize("change, message", [
    ({"frequencies": {"law": "uniform", "width": 0.5}}, "law must be one of 'lorentzian', 'gaussian'"),
    ({"frequencies": {"law": "gaussian", "width": 0.0}}, "width must be"),
    ({"frequencies": {"law": "gaussian", "spread": 1.0}}, "unknown keys"),
    ({"value": [[1.0, 0.0], [0.0, 1.0]]}, "model.value must be a number"),
    ({"time_rescaled": True}, "does not apply with model.frequencies"),
])
def test_a_bad_frequency_law_is_one_line_naming_the_key(change, message, tmp_path):
    raw = base(tmp_path)
    raw["model"].update(change)
    with pytest.raises(ConfigError, match=message):
        check_config(raw)


def test_frequencies_need_particles_or_their_family_on_the_circle(tmp_path):
    raw = base(tmp_path)
    raw["method"] = {"kind": "CircleFV", "cells": 64}
    with pytest.raises(ConfigError, match="model.frequencies turn tokens on the circle .* 'FrequencyCircleFV'"):
        check_config(raw)
    raw = base(tmp_path)
    del raw["model"]["frequencies"]
    raw["method"] = {"kind": "FrequencyCircleFV", "cells": 64}
    with pytest.raises(ConfigError, match="the mean field of a frequency law: it needs \\[model.frequencies\\]"):
        check_config(raw)


@pytest.mark.parametrize("lag", [0.0, 0.5])
def test_the_exact_lorentzian_mean_field_runs_from_a_config(tmp_path, lag):
    """method.kind = "LorentzianKuramoto": the run is the class's, bit for bit, and r(t) reaches the locked state's
    closed form sqrt(1 - 2 Delta / (K cos alpha)) (Ott-Antonsen; independent of the moments' equations)."""
    from solvers import LorentzianKuramoto
    from validation.app.builders import frequency_interaction
    from validation.app.experiment import run_experiment

    raw = base(tmp_path, value=3.0)
    raw["model"]["frequencies"]["phase_lag"] = lag
    raw.update(times={"stop": 20.0, "count": 5}, method={"kind": "LorentzianKuramoto", "modes": 160},
               initial={"kind": "perturbed_uniform", "amplitude": 0.2, "mode": 1})
    ds = run_experiment(raw, progress=False)
    direct = LorentzianKuramoto(frequency_interaction(check_config(raw)), 0.5, modes=160).solve(
        lambda t: 1 + 0.2 * np.cos(t), np.linspace(0.0, 20.0, 5))
    np.testing.assert_array_equal(ds.order_parameter.values, direct.order_parameter.values)
    np.testing.assert_array_equal(ds.rho.values, direct.rho.values)
    assert abs(float(ds.order_parameter[-1]) - np.sqrt(1 - 2 * 0.5 / (3.0 * np.cos(lag)))) < 1e-6
    assert ds.attrs["trustworthy"] == 1


@pytest.mark.parametrize("change, message", [
    ({"model": {"frequencies": {"law": "gaussian", "width": 0.5}}}, "needs model.frequencies.law = 'lorentzian'"),
    ({"checkpoint_every": 1}, "runs in one piece"),
    ({"initial": {"kind": "perturbed_uniform", "mode": 70}}, "initial.mode = 70 is not resolved: method.modes = 64"),
    ({"model": {"beta": 2.0, "frequencies": {"law": "lorentzian", "width": 0.5}}}, "pair kernel of one harmonic"),
])
def test_a_bad_lorentzian_config_is_refused_naming_the_key(tmp_path, change, message):
    from validation.app.experiment import prepare

    raw = base(tmp_path)
    raw["method"] = {"kind": "LorentzianKuramoto"}
    raw["initial"] = {"kind": "perturbed_uniform", "amplitude": 0.2, "mode": 1}
    for key, value in change.items():
        raw[key] = {**raw[key], **value} if isinstance(value, dict) else value
    with pytest.raises(ConfigError, match=message):
        prepare(raw)


@pytest.mark.parametrize("lag", [0.0, 0.6])
def test_the_mean_field_of_a_frequency_law_runs_from_a_config_and_follows_ott_antonsen(tmp_path, lag):
    """method.kind = "FrequencyCircleFV": the law's nodes and weights, the Sakaguchi coupling and the Poisson kernel
    (a file of cell averages) from the config; the recorded r(t) against the populations' exact Ott-Antonsen
    equations on the same 8 nodes (a second-order scheme at 128 cells: below 5e-4, as from Python)."""
    from validation.app.experiment import run_experiment

    cells, a0 = 128, 0.3
    edges = np.linspace(0.0, 2 * np.pi, cells + 1)
    points, weights = np.polynomial.legendre.leggauss(8)
    theta = 0.5 * (edges[:-1, None] + edges[1:, None]) + 0.5 * (edges[1] - edges[0]) * points
    poisson = (1 - a0**2) / np.abs(np.exp(1j * theta) - a0) ** 2 @ weights / 2  # cell averages
    np.save(tmp_path / "poisson.npy", poisson)
    raw = base(tmp_path)
    raw["model"]["frequencies"]["phase_lag"] = lag
    raw["method"] = {"kind": "FrequencyCircleFV", "cells": cells, "nodes": 8, "rtol": 1e-7}
    raw["initial"] = {"kind": "file", "path": str(tmp_path / "poisson.npy")}
    ds = run_experiment(check_config(raw), progress=False)
    nodes, node_weights = mf.lorentzian_nodes(0.5, 8)
    exact = mf.ott_antonsen_populations(ds.time.values, nodes, node_weights, a0, coupling=2.0, phase_lag=lag)
    assert ds.attrs["trustworthy"] == 1
    np.testing.assert_allclose(ds.order_parameter.values, np.abs(exact), rtol=0, atol=5e-4)
    assert np.abs(ds.order_parameter.values[-1] - ds.order_parameter.values[0]) > 0.02  # it moves, by 40 times the tolerance


def test_a_run_draws_its_frequencies_from_its_own_stream(tmp_path):
    config = check_config(base(tmp_path))
    model = build_model(config)
    assert isinstance(model, mf.NaturalFrequencies) and model.frequencies.shape == (50,)
    expected = 0.5 * frequency_generator(config.method.seed).standard_cauchy(50)
    np.testing.assert_array_equal(model.frequencies, expected)


def test_the_transition_example_checks_and_a_small_sweep_finds_the_ott_antonsen_radius(tmp_path):
    raw = tomllib.loads(EXAMPLE.read_text())
    check_sweep_config(raw, base=EXAMPLE.parent)
    raw["output"] = str(tmp_path / "sweep")
    raw["sweep"]["grid"] = {"value": [0.5, 3.0]}
    ds = run_sweep(check_sweep_config(raw), workers=1, progress=False)
    radius = ds.order_parameter.isel(time=slice(20, None)).mean("time").values
    n = raw["method"]["n"]
    # below K_c = 1 incoherent (r of order n^-1/2); above, sqrt(1 - 2 Delta / K) of the continuum, to the
    # finite-n fluctuations of a time average over four systems (2 / sqrt(n) is several of their standard errors)
    assert radius[0] < 3 / np.sqrt(n)
    assert radius[1] == pytest.approx(np.sqrt(1 - 1.0 / 3.0), abs=2 / np.sqrt(n))


def test_a_phase_lag_turns_the_coupling_and_raises_the_threshold(tmp_path):
    """Sakaguchi: the stationary radius sqrt(1 - 2 Delta / (K cos alpha)) of Ott-Antonsen, through a sweep."""
    raw = tomllib.loads(EXAMPLE.read_text())
    raw["output"] = str(tmp_path / "sweep")
    raw["model"]["frequencies"]["phase_lag"] = 0.8
    raw["sweep"]["grid"] = {"value": [3.0]}
    config = check_sweep_config(raw)
    model = build_model(config.base).model  # the base point: value 1; heads stacked, (1, 2, 2)
    turn = np.array([[np.cos(0.8), np.sin(0.8)], [-np.sin(0.8), np.cos(0.8)]])
    np.testing.assert_allclose(np.reshape(model.value, (2, 2)), turn, rtol=1e-15)
    ds = run_sweep(config, workers=1, progress=False)
    radius = float(ds.order_parameter.isel(time=slice(20, None)).mean("time").values[0])
    assert radius == pytest.approx(np.sqrt(1 - 1.0 / (3.0 * np.cos(0.8))), abs=2 / np.sqrt(raw["method"]["n"]))
