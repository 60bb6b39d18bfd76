"""Experiments from config files: round trip, examples, kill-and-resume, bad input, figures."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import xarray as xr

from validation.app import ConfigError, check_config, load_config
from validation.app.config import ExperimentConfig
from validation.app.experiment import run_experiment

# sweep configs: tests/test_sweep.py; stationary configs: tests/test_stationary.py; configs without
# [model] belong to their example script
EXAMPLES = sorted(p for p in Path(__file__).parent.parent.joinpath("examples").glob("*.toml")
                  if "[sweep]" not in p.read_text() and "[continuation]" not in p.read_text()
                  and "[model]" in p.read_text())


def meanfield(*arguments, **kwargs):
    return subprocess.run([sys.executable, "-m", "validation.app.cli", *map(str, arguments)],
                          capture_output=True, text=True, timeout=300, **kwargs)


def write_config(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def short(config: ExperimentConfig | dict, output: Path, stop: float = 0.5, count: int = 3) -> ExperimentConfig:
    tables = config.to_dict() if isinstance(config, ExperimentConfig) else config
    tables = dict(tables, output=str(output), times={"start": 0.0, "stop": stop, "count": count})
    return check_config(tables)


@pytest.mark.parametrize("example", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_each_example_runs_in_a_short_version(example, tmp_path):
    ds = run_experiment(short(load_config(example), tmp_path), progress=False)
    assert ds.sizes["time"] == 3
    assert (tmp_path / "dataset.nc").stat().st_size > 0
    assert not (tmp_path / "checkpoint").exists()


def test_config_round_trip_reruns_the_same_experiment(tmp_path):
    config = short(load_config(EXAMPLES[0]), tmp_path / "first")
    first = run_experiment(config, progress=False)
    reopened = xr.open_dataset(tmp_path / "first" / "dataset.nc")
    recovered = json.loads(reopened.attrs["config"])
    assert recovered == json.loads(json.dumps(config.to_dict()))
    recovered["output"] = str(tmp_path / "second")
    second = run_experiment(check_config(recovered), progress=False)
    variable = "x" if "x" in first else "rho"
    np.testing.assert_array_equal(second[variable].values, first[variable].values)
    assert reopened.attrs["version"] and reopened.attrs["wall_time"] > 0


RESUMABLE = """
geometry = "circle"
output = "{output}"
times = {{ stop = 6.0, count = 31 }}
checkpoint_every = 1
[model]
beta = 4.0
diffusion = {diffusion}
[method]
kind = "{kind}"
{method}
[initial]
kind = "perturbed_uniform"
amplitude = 0.1
mode = 3
"""


@pytest.mark.parametrize("kind, method, diffusion", [
    # n large enough that the run outlasts the kill (the series kernel makes a step cost ~n K)
    ("particles", "n = 20000\nseed = 3\ndt = 0.01", 0.05),
    # 12 s: with the slow tests (CircleFV's interrupted and resumed runs are checked by default in
    # test_faults, in process; this one kills a real process)
    pytest.param("CircleFV", "cells = 2048", 0.0, marks=pytest.mark.slow),
], ids=["noisy-particles", "CircleFV"])
def test_kill_and_resume_gives_the_uninterrupted_result(kind, method, diffusion, tmp_path):
    reference = tmp_path / "reference.toml"
    write_config(reference, RESUMABLE.format(output=tmp_path / "reference", kind=kind, method=method,
                                             diffusion=diffusion))
    assert meanfield("run", reference, "--quiet", "--no-animation").returncode in (0, 3)
    killed = tmp_path / "killed.toml"
    write_config(killed, RESUMABLE.format(output=tmp_path / "killed", kind=kind, method=method, diffusion=diffusion))
    process = subprocess.Popen([sys.executable, "-m", "validation.app.cli", "run", str(killed), "--quiet",
                                "--no-animation"],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    checkpoints = tmp_path / "killed" / "checkpoint"
    deadline = time.time() + 120
    while not list(checkpoints.glob("segment_*.nc")) and time.time() < deadline and process.poll() is None:
        time.sleep(0.05)
    time.sleep(0.3)
    if process.poll() is not None:
        pytest.fail("the run finished before it could be killed: make it longer")
    os.kill(process.pid, signal.SIGKILL)
    process.wait()
    assert not (tmp_path / "killed" / "dataset.nc").exists()
    assert meanfield("run", killed, "--resume", "--quiet", "--no-animation").returncode in (0, 3)
    expected = xr.open_dataset(tmp_path / "reference" / "dataset.nc")
    resumed = xr.open_dataset(tmp_path / "killed" / "dataset.nc")
    variable = "x" if kind == "particles" else "rho"
    np.testing.assert_allclose(resumed[variable].values, expected[variable].values, rtol=1e-12, atol=1e-14)
    np.testing.assert_array_equal(resumed.time.values, expected.time.values)


BASE = {"geometry": "circle", "output": "OUT", "times": [0.0, 1.0],
        "model": {"beta": 1.0}, "method": {"kind": "CircleFV", "cells": 64},
        "initial": {"kind": "perturbed_uniform"}}


@pytest.mark.parametrize("change, message", [
    (lambda c: c.update(colour="red"), "unknown key colour"),
    (lambda c: c["model"].update(temperature=1.0), "unknown key model.temperature"),
    (lambda c: c.pop("geometry"), "missing key geometry"),
    (lambda c: c["model"].pop("beta"), "missing key model.beta"),
    (lambda c: c["model"].update(beta="hot"), "model.beta must be a number"),
    (lambda c: c["method"].update(cells=2.5), "method.cells must be an integer"),
    (lambda c: c["model"].update(beta=-1.0), "model.beta must be >= 0"),
    (lambda c: c.update(geometry="torus"), "geometry must be one of circle, sphere"),
    (lambda c: c["method"].update(kind="SphereSpectral"), "does not solve on the circle"),
    (lambda c: c["method"].update(lmax=31), "method.lmax does not apply"),
    (lambda c: c.update(times=[1.0, 0.0]), "times must be a strictly increasing"),
    (lambda c: c["initial"].update(kind="file"), "missing key initial.path"),
    (lambda c: c["method"].update(scheme="leapfrog"), "method.scheme must be one of rk4, euler"),
    (lambda c: c["method"].update(kind="particles", cells=1024, d=3),
     "method.d = 3 does not fit geometry = 'circle'"),
    (lambda c: c["method"].update(kind="CircleFV", d=2), "method.d does not apply"),
    (lambda c: c["method"].update(outputs="interpolated"), "method.outputs does not apply"),
    (lambda c: c["method"].update(kind="CircleSpectral", outputs="dense"),
     "method.outputs must be one of stepped, interpolated"),
])
def test_bad_configs_exit_2_naming_the_key(change, message, tmp_path):
    config = json.loads(json.dumps(BASE))
    config["output"] = str(tmp_path / "out")
    change(config)
    with pytest.raises(ConfigError, match=message):
        check_config(config)
    path = tmp_path / "bad.toml"
    path.write_text(_to_toml(config))
    result = meanfield("run", path)
    assert result.returncode == 2 and message in result.stderr
    assert not (tmp_path / "out").exists()  # refused before any computing


def test_unwritable_output_exits_2(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    config = dict(BASE, output=str(blocker / "inside"))
    path = tmp_path / "unwritable.toml"
    path.write_text(_to_toml(config))
    result = meanfield("run", path)
    assert result.returncode == 2 and "output: cannot write" in result.stderr


def test_figures_are_produced_and_untrustworthy_runs_exit_3(tmp_path):
    config = dict(BASE, output=str(tmp_path), times={"stop": 20.0, "count": 11},
                  model={"beta": 9.0}, initial={"kind": "perturbed_uniform", "amplitude": 0.05, "mode": 4})
    path = tmp_path / "sharp.toml"
    path.write_text(_to_toml(config))
    result = meanfield("run", path, "--quiet")
    assert result.returncode == 3 and "UNTRUSTWORTHY" in result.stderr
    for name in ("snapshots.png", "spacetime.png", "diagnostics.png"):
        assert (tmp_path / name).stat().st_size > 10_000
    assert any((tmp_path / name).exists() and (tmp_path / name).stat().st_size > 10_000
               for name in ("animation.gif", "animation.mp4"))
    assert np.isfinite(xr.open_dataset(tmp_path / "dataset.nc").attrs["underresolved_since"])
    assert "UNTRUSTWORTHY" in (tmp_path / "report.md").read_text()


def _to_toml(config: dict) -> str:
    def value(v):
        if isinstance(v, bool):
            return "true" if v else "false"
        if isinstance(v, str):
            return json.dumps(v)
        if isinstance(v, list):
            return "[" + ", ".join(value(x) for x in v) + "]"
        if isinstance(v, dict):
            return "{ " + ", ".join(f"{k} = {value(x)}" for k, x in v.items()) + " }"
        return repr(v)
    sections = ("model", "method", "initial", "sweep")
    top = [f"{k} = {value(v)}" for k, v in config.items() if k not in sections]
    tables = [f"[{k}]\n" + "\n".join(f"{key} = {value(x)}" for key, x in config[k].items())
              for k in sections if k in config]
    return "\n".join(top) + "\n" + "\n".join(tables) + "\n"


def test_uniform_particles_in_higher_dimension_belong_to_sweeps(tmp_path):
    config = json.loads(json.dumps(BASE))
    config.update(geometry="sphere", output=str(tmp_path / "out"))
    config["method"] = {"kind": "particles", "n": 16, "d": 5}
    config["initial"] = {"kind": "uniform"}
    with pytest.raises(ConfigError, match="method.d = 5: meanfield run draws particles on S.2"):
        run_experiment(check_config(config))
    config["method"].update(d=3, scheme="euler")
    ds = run_experiment(short(config, tmp_path / "out"), progress=False)
    assert ds.x.shape[-1] == 3 and json.loads(ds.attrs["settings"])["scheme"] == "projected Euler"


def test_a_checkpoint_costs_the_same_whatever_the_history_before_it(tmp_path, monkeypatch):
    """Bytes written per checkpoint, not seconds: the 40th must not be larger than the 2nd."""
    import validation.app.experiment as experiment

    written = []

    def recording(path, write):
        result = experiment_write(path, write)
        if path.parent.name == "checkpoint":
            written.append(path.stat().st_size)
        return result

    experiment_write = experiment.write_atomically
    monkeypatch.setattr(experiment, "write_atomically", recording)
    config = check_config({**BASE, "output": str(tmp_path), "checkpoint_every": 1,
                           "times": {"start": 0.0, "stop": 4.0, "count": 41}})
    run_experiment(config, progress=False)
    assert len(written) == 39  # after every segment but the last
    assert max(written[1:]) <= 1.05 * min(written[1:])
    assert not (tmp_path / "checkpoint").exists()


SPHERE_HANDOVER = """
geometry = "sphere"
output = "{output}"
times = {{ stop = 4.0, count = 5 }}
checkpoint_every = {every}
[model]
beta = 4.0
[method]
kind = "SphereSpectralParticles"
lmax = 15
rtol = 1e-8
[initial]
kind = "von_mises_fisher"
means = [[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]]
kappa = 3.0
"""


def test_sphere_config_hands_over_to_atoms_across_checkpoints(tmp_path):
    """method.kind = "SphereSpectralParticles": segments before and after the hand-over join into one run."""
    runs = {}
    for every in (1, 5):
        config = load_config(write_config(tmp_path / f"c{every}.toml",
                                          SPHERE_HANDOVER.format(output=tmp_path / f"out{every}", every=every)))
        runs[every] = run_experiment(config, progress=False)
    segmented, whole = runs[1], runs[5]
    assert bool(whole.particles.values[-1]) and not bool(whole.particles.values[0])
    np.testing.assert_array_equal(segmented.particles.values, whole.particles.values)
    np.testing.assert_allclose(segmented.mass.values, 1.0, atol=1e-12)
    # a segment boundary restarts the steps (clipped at the boundary): equal within the step error
    np.testing.assert_allclose(segmented.energy.values, whole.energy.values, rtol=1e-7)
    assert whole.attrs["trustworthy"] == 1


def test_a_film_config_interpolates_its_outputs(tmp_path):
    """``method.outputs = "interpolated"``: 61 outputs of SphereSpectral in fewer steps, each recorded."""
    config = check_config({"geometry": "sphere", "output": str(tmp_path / "film"),
                           "times": {"start": 0.0, "stop": 3.0, "count": 61}, "model": {"beta": 4.0},
                           "method": {"kind": "SphereSpectral", "lmax": 31, "outputs": "interpolated"},
                           "initial": {"kind": "perturbed_uniform", "amplitude": 0.1}})
    ds = run_experiment(config, progress=False)
    settings = json.loads(ds.attrs["settings"])
    assert ds.time.size == 61 and settings["outputs"] == "interpolated" and settings["steps"] < 60
