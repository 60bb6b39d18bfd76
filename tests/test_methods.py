"""The front door (``solvers.solve``) and its table, and every solver reachable from a TOML config."""

from __future__ import annotations

import inspect
import json
import subprocess
import sys

import numpy as np
import pytest
import xarray as xr

import meanfield as mf
import solvers
from solvers.methods import DISCRETISATIONS, METHODS, METHODS_BY_NAME, choose_method, solver_for
from solvers.resolution import UpFrontChecks
from validation.app import ConfigError, check_config
from validation.app.builders import build_run
from validation.app.config import CIRCLE_SOLVERS, LINE_SOLVERS, SPHERE_SOLVERS, ZONAL_SOLVERS, MethodConfig
from validation.app.experiment import run_experiment
from validation.app.preflight import preflight


@pytest.mark.parametrize("method", METHODS, ids=lambda m: m.name)
def test_the_table_says_what_each_solver_takes(method):
    """Declared as data (config checks read it without importing the solvers): held to the signatures."""
    solver = method.solver
    assert solver is getattr(solvers, method.name)
    declared = solver.geometry  # the zonal solvers' is S^{d-1} by their d: a property
    declared = "sphere" if not isinstance(declared, str) else "line" if declared == "R^1" else declared
    assert method.geometry == declared
    assert method.discretisation in DISCRETISATIONS and method.then in (None, *DISCRETISATIONS)
    assert set(method.settings) <= method.options | method.solve_options, method.settings
    if "underresolved" in method.settings:  # the run's setting, a keyword of solve
        assert "underresolved" in method.solve_options
    parameters = inspect.signature(solver).parameters
    assert ("layers" in parameters) == (method.causal or method.positional)


@pytest.mark.parametrize("model, geometry, method, then, expected", [
    (mf.SelfAttention(4.0), "circle", "auto", None, "CircleAuto"),
    (mf.SelfAttention(4.0), "circle", "finite_volumes", None, "CircleFV"),
    (mf.SelfAttention(4.0), "circle", "fourier", None, "CircleSpectral"),
    (mf.SelfAttention(4.0), "circle", "fourier", "finite_volumes", "CircleAuto"),
    (mf.SelfAttention(4.0), "circle", "auto", "mass_coordinates", "CircleFVLagrangian"),
    (mf.SelfAttention(4.0), "circle", "mass_coordinates", None, "CircleLagrangian"),
    (mf.SelfAttention(4.0), "sphere", "auto", None, "SphereSpectral"),
    (mf.SelfAttention(4.0), "sphere", "harmonics", "atoms", "SphereSpectralParticles"),
    (mf.SelfAttention(4.0), "sphere", "atoms", None, "SphereWeightedParticles"),
    (mf.CausalAttention(4.0, True), "circle", "auto", None, "CausalCircleFV"),
    (mf.CausalAttention(4.0, True), "circle", "fourier", None, "CausalCircleSpectral"),
    (mf.CausalAttention(4.0, True), "sphere", "auto", None, "CausalSphereSpectral"),
    (mf.SelfAttention(4.0), "sphere", "gegenbauer", None, "ZonalSphereSpectral"),
    (mf.SelfAttention(4.0), "sphere", "gegenbauer", "rings", "ZonalSpectralRings"),
    (mf.SelfAttention(4.0), "sphere", "rings", None, "ZonalRings"),
    (mf.PureAttention(), "line", "auto", None, "LineFV"),
    (mf.PureAttention(), "line", "mass_coordinates", None, "LineLagrangian"),
    (mf.RotaryAttention(1.0, 2.0), "circle", "auto", None, "PositionalQuantiles"),
    (mf.RotaryAttention(1.0, 2.0), "circle", "mass_coordinates", None, "PositionalQuantiles"),
])
def test_the_front_door_picks_the_solver(model, geometry, method, then, expected):
    assert choose_method(model, geometry, method, then).name == expected


@pytest.mark.parametrize("arguments, message", [
    (dict(geometry="torus"), "geometry must be one of circle, sphere, line; got 'torus'"),
    (dict(method="spectral"), "method must be 'auto', a discretisation"),
    (dict(geometry="sphere", method="fourier"), "no solver of this model on the sphere starts with method='fourier'"),
    (dict(method="finite_volumes", then="atoms"), "hands over to then='atoms'"),
    (dict(then="harmonic"), "then must be None or a discretisation"),
    (dict(method="SphereSpectral"), "method='SphereSpectral' solves on the sphere"),
    (dict(method="CircleFV", then="mass_coordinates"), "hands over to None, not to then='mass_coordinates'"),
    (dict(method="CausalCircleFV"), "CausalCircleFV solves the layered equation of causal attention"),
])
def test_the_front_door_names_what_it_cannot_match(arguments, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        choose_method(mf.SelfAttention(1.0), **arguments)


def test_a_causal_model_is_refused_by_the_non_causal_solvers():
    with pytest.raises(ValueError, match="CausalAttention is causal: its layered equation is solved by CausalCircleFV "
                                         "or CausalCircleSpectral, not by CircleAuto"):
        choose_method(mf.CausalAttention(1.0, True), "circle", "CircleAuto")


def test_the_position_indexed_solver_takes_only_models_whose_tokens_carry_positions():
    with pytest.raises(ValueError, match="RotaryAttention's tokens carry positions: its position-indexed equation is "
                                         "solved by PositionalQuantiles, not by CircleFV"):
        choose_method(mf.RotaryAttention(1.0, 2.0), "circle", "CircleFV")
    with pytest.raises(ValueError, match="PositionalQuantiles solves the position-indexed equation"):
        choose_method(mf.SelfAttention(1.0), "circle", "PositionalQuantiles")
    with pytest.raises(ValueError, match="no solver of a model whose tokens carry positions on the circle starts "
                                         "with method='fourier'"):
        choose_method(mf.RotaryAttention(1.0, 2.0), "circle", "fourier")


def test_the_front_door_runs_rotary_attention_as_its_class_does():
    model = mf.RotaryAttention(1.5, 2.0)
    rho0 = lambda s, theta: 1 + 0.3 * np.cos(theta - np.pi * s)
    direct = solvers.PositionalQuantiles(model, layers=4, points=16).solve(rho0, [0.0, 0.2], rtol=1e-8, progress=False)
    front = solvers.solve(model, rho0, [0.0, 0.2], layers=4, points=16, rtol=1e-8, progress=False)
    np.testing.assert_array_equal(front.angle.values, direct.angle.values)


def test_a_setting_the_solver_does_not_take_is_named():
    with pytest.raises(TypeError, match="CircleFV takes no setting 'lmax'; its settings: cells, cfl"):
        solver_for(mf.SelfAttention(1.0), method="finite_volumes", lmax=31)
    with pytest.raises(TypeError, match="SphereSpectral takes no setting 'cells'"):
        solvers.solve(mf.SelfAttention(1.0), lambda p: 1 + 0 * p[..., 0], [0, 1], geometry="sphere", cells=64)


def test_the_front_door_runs_what_the_class_runs():
    """``solve`` splits the settings between the constructor and ``solve``: the same run, bit for bit."""
    model, rho0, times = mf.SelfAttention(4.0), (lambda t: 1 + 0.05 * np.cos(3 * t)), [0.0, 0.5, 1.0]
    direct = solvers.CircleFV(model, cells=96, rtol=1e-7).solve(rho0, times, progress=False, max_steps=10_000)
    front = solvers.solve(model, rho0, times, method="finite_volumes", cells=96, rtol=1e-7, progress=False,
                          max_steps=10_000)
    np.testing.assert_array_equal(front.rho.values, direct.rho.values)
    assert json.loads(front.attrs["settings"])["solver"] == "CircleFV"


def test_reading_the_table_imports_no_solver():
    """The config of ``meanfield run`` and of sweep workers reads the table: it must stay data."""
    script = ("import sys, solvers.methods; "
              "print(' '.join(m for m in sys.modules if m.startswith('solvers.') or m == 'xarray'))")
    loaded = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    assert loaded.stdout.split() == ["solvers.methods"]


# ---------------------------------------------------------------------------- the config

def _config(kind: str, tmp_path, **method) -> dict:
    circle = kind in CIRCLE_SOLVERS
    causal = METHODS_BY_NAME[kind].causal if kind in METHODS_BY_NAME else False
    resolution = {"cells": 64} if circle else {"lmax": 11}
    if kind in ZONAL_SOLVERS:
        resolution["d"] = 5
    model = {"beta": 2.0, "causal": causal}
    if kind in METHODS_BY_NAME and METHODS_BY_NAME[kind].family == "frequencies":
        model.update(frequencies={"law": "gaussian", "width": 0.5}, normalized=False)
        method.setdefault("nodes", 8)
    if kind in METHODS_BY_NAME and METHODS_BY_NAME[kind].hierarchy:  # the pair correlation of USA's tokens
        model.update(normalized=False)
        resolution = {"modes": 16}
        method.setdefault("n", 8)
    if kind in METHODS_BY_NAME and METHODS_BY_NAME[kind].noise:  # the homogenized limit, on the noise's grid of time
        model = {"beta": 1.0, "homogenized": {"value_std": 0.5, "nodes": 2}}
        resolution = {"points": 64} if circle else {"lmax": 5}
        method.setdefault("dt", 0.0625)
    if kind in METHODS_BY_NAME and METHODS_BY_NAME[kind].family == "graphon":
        model.update(graph="graphon", graphon="x * y")
        method.setdefault("vertices", 4)
    if kind in METHODS_BY_NAME and METHODS_BY_NAME[kind].family == "lorentzian":  # Kuramoto: one harmonic
        model.update(beta=0.0, frequencies={"law": "lorentzian", "width": 0.5}, normalized=False)
        resolution = {"modes": 32}
    if kind in METHODS_BY_NAME and METHODS_BY_NAME[kind].positional:
        model.update(rotary=2.0)
        method.update(layers=method.get("layers", 4), points=16)
    return {"geometry": "circle" if circle else "sphere", "output": str(tmp_path / kind),
            "times": {"stop": 0.5, "count": 3}, "model": model,
            "method": {"kind": kind, **resolution, **method},
            "initial": {"kind": "perturbed_uniform", "amplitude": 0.05, "mode": 2}}


def test_every_solver_of_the_table_is_a_config_kind():
    assert set(MethodConfig.KEYS) == set(CIRCLE_SOLVERS + SPHERE_SOLVERS + LINE_SOLVERS) | {"particles"}
    assert set(CIRCLE_SOLVERS + SPHERE_SOLVERS + LINE_SOLVERS) == {m.name for m in METHODS}


def test_every_solver_class_of_the_package_is_in_the_table():
    """What ``solvers`` exports with a ``solve`` is a solver, so an entry of the table, so a config kind; or the
    chain of such solvers (``method.then``, tests/test_chain.py)."""
    classes = {name for name in solvers.__all__ if inspect.isclass(getattr(solvers, name))
               and callable(getattr(getattr(solvers, name), "solve", None))}
    assert classes == set(METHODS_BY_NAME) | {"Chain"}


@pytest.mark.parametrize("kind", CIRCLE_SOLVERS + SPHERE_SOLVERS)
def test_each_config_kind_passes_the_checks_and_builds_its_solver_with_the_keys_given(kind, tmp_path):
    method = METHODS_BY_NAME[kind]
    keys = {"rtol": 1e-5} if "rtol" in method.settings else {}
    if "interaction" in method.settings:
        keys["interaction"] = "reference"
    if method.causal:
        keys["layers"] = 4
    run = preflight(check_config(_config(kind, tmp_path, **keys)))  # what `meanfield run` checks, then runs
    assert type(run.solver).__name__ == kind
    # the two questions the preflight asks every solver alike
    assert isinstance(run.solver, UpFrontChecks)
    state = run.solver.resolved_start(run.initial)
    assert np.all(np.isfinite(state.state if isinstance(state, solvers.ChainState) else state))
    estimate = run.solver.cost_estimate(state, 0.5)
    assert estimate is None or (estimate.steps > 0 and estimate.seconds_per_step > 0)
    for key, value in keys.items():
        assert getattr(run.solver, key) == value


@pytest.mark.parametrize("kind", [method.name for method in METHODS if method.resumable and method.geometry != "line"])
def test_every_resumable_kind_runs_in_checkpointed_segments_as_in_one_call(kind, tmp_path):
    """Each segment goes on from the solver's ``continuation_state`` of the one before: the run is the one-call
    run, to the round-off of a state recorded as densities and read back (a series' coefficients from its grid
    values)."""
    config = _config(kind, tmp_path)
    config["times"] = {"stop": 1.0, "count": 4}
    whole = run_experiment(config, progress=False)
    parts = run_experiment({**config, "output": str(tmp_path / "parts"), "checkpoint_every": 1}, progress=False)
    assert parts.attrs["segments"] == 3
    np.testing.assert_allclose(parts.rho.values, whole.rho.values, rtol=0,
                               atol=1e-12 * np.nanmax(np.abs(whole.rho.values)))


@pytest.mark.parametrize("kind", ["CircleLagrangian", "CausalCircleSpectral", "SphereWeightedParticles",
                                  "CausalSphereSpectral", "ZonalSphereSpectral", "ZonalSpectralRings",
                                  "PositionalQuantiles", "LorentzianKuramoto", "GraphonCircleFV", "PairCorrelation"])
def test_the_kinds_new_to_the_config_run_as_the_class_does(kind, tmp_path):
    config = check_config(_config(kind, tmp_path))
    ds = run_experiment(config, progress=False)
    run = build_run(config)
    direct = run.solver.solve(run.initial, run.times, progress=False)
    variable = "g" if METHODS_BY_NAME[kind].hierarchy else "rho"  # the pair correlation, or the density
    np.testing.assert_array_equal(ds[variable].values, direct[variable].values)
    assert json.loads(ds.attrs["config"])["method"]["kind"] == kind


@pytest.mark.parametrize("kind, causal, message", [
    ("CircleAuto", True, "model.causal = true runs with method.kind = 'CausalCircleFV' or 'CausalCircleSpectral'"),
    ("SphereSpectral", True, "model.causal = true runs with method.kind = 'CausalSphereSpectral'"),
    ("CausalCircleFV", False, "method.kind = 'CausalCircleFV' solves the layered equation of causal attention"),
])
def test_causality_and_the_solver_must_agree(kind, causal, message, tmp_path):
    config = _config(kind, tmp_path)
    config["model"]["causal"] = causal
    with pytest.raises(ConfigError, match=message):
        check_config(config)


@pytest.mark.parametrize("edit, message", [
    ({"model": {"beta": 2.0}}, "method.kind = 'PositionalQuantiles' solves the position-indexed equation"),
    ({"checkpoint_every": 1}, "method.kind = 'PositionalQuantiles' runs in one piece"),
    ({"method": {"kind": "CircleFV", "cells": 64}},
     "model.rotary runs as particles .* or on its position-indexed mean field .*'PositionalQuantiles'"),
])
def test_the_positional_kind_and_rotary_attention_must_agree(edit, message, tmp_path):
    with pytest.raises(ConfigError, match=message):
        check_config({**_config("PositionalQuantiles", tmp_path), **edit})


@pytest.mark.parametrize("edit, message", [
    ({"model": {"beta": 2.0}}, "method: the hierarchy needs a velocity that is a sum over pairs"),
    ({"initial": {"kind": "von_mises_fisher", "means": [[1.0, 1.0]]}}, "initial: rho0 must be even in the relative"),
    ({"initial": {"kind": "perturbed_uniform", "mode": 16}}, "initial.mode = 16 is not resolved: method.modes = 16"),
])
def test_the_pair_correlation_refuses_what_its_equation_does_not_take(edit, message, tmp_path):
    from validation.app.experiment import prepare

    with pytest.raises(ConfigError, match=message):
        prepare({**_config("PairCorrelation", tmp_path), **edit})


def test_the_pair_correlation_is_chosen_by_its_name_only():
    model = mf.SelfAttention(1.0, normalized=False)
    assert choose_method(model, "circle", "fourier").name == "CircleSpectral"
    assert choose_method(model, "circle", "PairCorrelation").name == "PairCorrelation"


def test_keys_of_another_solver_are_refused(tmp_path):
    with pytest.raises(ConfigError, match="method.layers does not apply to method.kind = 'CircleFV'"):
        check_config(_config("CircleFV", tmp_path, layers=4))
    with pytest.raises(ConfigError, match="method.interaction does not apply to method.kind = 'CircleLagrangian'"):
        check_config(_config("CircleLagrangian", tmp_path, interaction="zonal"))


def test_a_causal_run_from_the_command_line_draws_its_positions(tmp_path):
    config = _config("CausalCircleFV", tmp_path, layers=8)
    config["model"]["alibi"] = 1.0
    config["initial"] = {"kind": "von_mises_fisher", "means": [[1.0, 0.0], [0.0, 1.0]], "kappa": 4.0}
    from tests.test_experiment import _to_toml  # the one TOML writer of the tests

    path = tmp_path / "causal.toml"
    path.write_text(_to_toml(config))
    result = subprocess.run([sys.executable, "-m", "validation.app.cli", "run", str(path), "--quiet",
                             "--no-animation"], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    output = tmp_path / "CausalCircleFV"
    for name in ("snapshots.png", "spacetime.png", "positions.png", "diagnostics.png"):
        assert (output / name).stat().st_size > 10_000
    ds = xr.open_dataset(output / "dataset.nc")
    assert ds.rho.dims == ("time", "position", "theta") and ds.sizes["position"] == 8


def test_the_cost_estimate_counts_the_stability_limits_steps_at_the_attention_bound():
    """``cost_estimate`` (what ``meanfield run`` refuses beyond ``max_hours``) against the limits written here: SA's
    speed is at most |c|, reached as clusters form, so from a small perturbation the CFL bound takes
    ``span |c| N / (2 pi cfl)`` steps and the sphere's pair ``span (lmax + 1) |c| / y_I``."""
    model, span = mf.SelfAttention(4.0, value=2.0), 3.0
    start = lambda theta: 1 + 1e-3 * np.cos(3 * theta)  # noqa: E731
    finite = solvers.CircleFV(model, cells=128, cfl=0.4)
    estimate = finite.cost_estimate(finite.initial_density(start), span)
    assert estimate.steps == pytest.approx(span * 2.0 * 128 / (2 * np.pi * 0.4), rel=1e-12)
    assert (estimate.resolution, estimate.value) == ("cells", 128) and estimate.seconds_per_step > 0
    assert estimate.hours == pytest.approx(estimate.steps * estimate.seconds_per_step / 3600)
    auto = solvers.CircleAuto(model, cells=128)
    assert auto.cost_estimate(auto.initial_density(start), span).steps == pytest.approx(
        auto.finite_volumes.cost_estimate(auto.initial_density(start), span).steps, rel=1e-12)
    sphere = solvers.SphereSpectral(model, lmax=15)
    coefficients = sphere.initial_coefficients(lambda x: 1 + 1e-3 * x[..., 2])
    stability = sphere.tableau.imaginary_stability  # the pair's, checked in tests/test_integration.py
    assert sphere.cost_estimate(coefficients, span).steps == pytest.approx(span * 16 * 2.0 / stability, rel=1e-12)
    # no stability limit to count from: implicit steps with diffusion, measures moved as labels
    noisy = solvers.CircleFV(mf.SelfAttention(4.0, diffusion=0.1), cells=128)
    assert noisy.cost_estimate(noisy.initial_density(start), span) is None
    labels = solvers.CircleLagrangian(model, points=64, cells=64)
    assert labels.cost_estimate(labels.initial_quantile(start), span) is None


def test_a_start_the_grid_cannot_resolve_is_refused_by_the_solvers_own_rule():
    """``resolved_start`` (what ``meanfield run`` checks up front): a von Mises bump whose full width at half
    maximum, ``2 arccos(1 + ln(1/2) / kappa)``, spans 3 cells is refused by the finite volumes (they need 4) and
    one spanning 6 is taken; a cosine in the top tenth of the modes is all tail for the Fourier series."""
    model, cells = mf.SelfAttention(4.0), 128

    def bump(fwhm_cells):
        half_width = 0.5 * fwhm_cells * 2 * np.pi / cells
        kappa = np.log(0.5) / (np.cos(half_width) - 1)
        return lambda theta: np.exp(kappa * (np.cos(theta - 1.0) - 1))

    for solver in (solvers.CircleFV(model, cells=cells), solvers.CircleAuto(model, cells=cells)):
        with pytest.raises(solvers.UnresolvedStart, match="cells = 128") as refused:
            solver.resolved_start(bump(3.0))
        assert (refused.value.resolution, refused.value.value) == ("cells", cells)
        assert solver.resolved_start(bump(6.0)).shape == (cells,)
    # a chain starts on the first solver that takes the density: the mass labels take what the cells refuse
    collapse = solvers.CircleFVLagrangian(model, cells=cells, points=256)
    sharp, taken = collapse.resolved_start(bump(3.0)), collapse.resolved_start(bump(6.0))
    assert sharp.stage == 1 and sharp.state.shape == (256,)
    assert taken.stage == 0 and taken.state.shape == (cells,)
    spectral = solvers.CircleSpectral(model, cells=cells)
    with pytest.raises(solvers.UnresolvedStart, match="top 10% of modes"):
        spectral.resolved_start(lambda theta: 1 + 0.1 * np.cos(60 * theta))
    np.testing.assert_allclose(spectral.resolved_start(lambda theta: 1 + 0.1 * np.cos(theta))[1],
                               0.05 / (2 * np.pi), rtol=1e-12)  # c_1 of (1 + 0.1 cos) / (2 pi)
