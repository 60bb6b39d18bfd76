"""The command line as a user meets it: bad input refused up front, quiet success, clean Ctrl-C."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from validation.app.cli import main

RUN = """
output = "{output}"
geometry = "{geometry}"
times = {{ stop = {stop}, count = {count} }}
[model]
beta = {beta}
normalized = {normalized}
[method]
{method}
[initial]
{initial}
"""

CIRCLE = dict(geometry="circle", stop=0.5, count=3, beta=1.0, normalized="true", method='kind = "CircleFV"\ncells = 64',
              initial='kind = "perturbed_uniform"')
SPHERE = dict(CIRCLE, geometry="sphere", method='kind = "SphereSpectral"\nlmax = 24')

SWEEP = """
[sweep]
realisations = 4
batch = 4
[sweep.grid]
{grid}
"""


def write(tmp_path, name: str, text: str):
    path = tmp_path / name
    path.write_text(text)
    return path


def run_config(tmp_path, sweep: str | None = None, **changes) -> str:
    fields = {**CIRCLE, **changes, "output": tmp_path / "out"}
    text = RUN.format(**fields)
    if sweep is not None:
        text += SWEEP.format(grid=sweep)
    return text


def npy(tmp_path, values) -> str:
    path = tmp_path / "initial.npy"
    np.save(path, np.asarray(values))
    return f'kind = "file"\npath = "{path}"'


BAD_RUNS = {
    "empty output": (lambda p: run_config(p).replace(f'output = "{p / "out"}"', 'output = ""'), "output"),
    "rtol 10": (lambda p: run_config(p, method='kind = "CircleFV"\ncells = 64\nrtol = 10.0'), "method.rtol"),
    "cells 1e8": (lambda p: run_config(p, method='kind = "CircleFV"\ncells = 100000000', count=401), "method.cells"),
    "count 1e9": (lambda p: run_config(p, count=1000000000), "times.count"),
    "lmax 4000": (lambda p: run_config(p, **{**SPHERE, "method": 'kind = "SphereSpectral"\nlmax = 4000',
                                             "count": 41}), "method.lmax"),
    "unresolved bump": (lambda p: run_config(p, **{**SPHERE, "initial": 'kind = "von_mises_fisher"\n'
                                                   'means = [[0.0, 0.0, 1.0]]\nkappa = 100000.0'}), "method.lmax"),
    "unresolved bump circle": (lambda p: run_config(p, initial='kind = "von_mises_fisher"\nmeans = [[1.0, 0.0]]\n'
                                                    'kappa = 100000.0'), "method.cells"),
    "mode above nyquist": (lambda p: run_config(p, initial='kind = "perturbed_uniform"\nmode = 40'), "initial.mode"),
    "usa beta 1e4": (lambda p: run_config(p, beta=1e4, normalized="false"), "model"),
    "wrong shape file": (lambda p: run_config(p, initial=npy(p, np.ones(10))), "initial.path"),
    "negative file": (lambda p: run_config(p, initial=npy(p, -np.ones(64))), "initial.path"),
    "text file named npy": (lambda p: (p / "text.npy").write_text("1 2 3") and
                            run_config(p, initial=f'kind = "file"\npath = "{p / "text.npy"}"'), "initial.path"),
    "sphere file shape": (lambda p: run_config(p, **{**SPHERE, "initial": npy(p, np.ones(64))}), "colatitudes"),
    "atoms file shape": (lambda p: run_config(p, **{**SPHERE, "initial": npy(p, np.ones(64)),
                                                    "method": 'kind = "SphereWeightedParticles"\nlmax = 24'}),
                         "colatitudes"),
    "labels file shape": (lambda p: run_config(p, method='kind = "CircleLagrangian"\ncells = 64',
                                               initial=npy(p, np.ones(10))), "initial.path"),
    "years of work": (lambda p: run_config(p, **{**SPHERE, "stop": 1e7}), "max_hours"),
    "years of work circle": (lambda p: run_config(p, stop=1e9), "max_hours"),
}


@pytest.mark.parametrize("case", BAD_RUNS, ids=list(BAD_RUNS))
def test_bad_run_configs_are_refused_before_anything_runs(case, tmp_path, capsys):
    make, key = BAD_RUNS[case]
    config = write(tmp_path, "config.toml", make(tmp_path))
    started = time.perf_counter()
    assert main(["run", str(config), "--quiet"]) == 2
    error = capsys.readouterr().err
    assert error.startswith("meanfield run: error:") and key in error, error
    assert error.count("\n") == 1 and "Traceback" not in error and "error: initial: initial" not in error
    assert not (tmp_path / "out").exists()  # nothing written
    assert time.perf_counter() - started < 20  # nothing computed


BAD_SWEEPS = {
    "n 1": (lambda p: run_config(p, method='kind = "particles"', initial='kind = "uniform"', sweep="n = [1, 4]"),
            "method.n"),
    "usa beta 1e4": (lambda p: run_config(p, method='kind = "particles"', initial='kind = "uniform"',
                                          normalized="false", sweep="beta = [1.0, 10000.0]"), "beta = 10000.0"),
    "unresolved point": (lambda p: run_config(p, sweep="mode = [2, 40]"), "initial.mode"),
}


@pytest.mark.parametrize("case", BAD_SWEEPS, ids=list(BAD_SWEEPS))
def test_bad_sweep_points_are_refused_before_anything_runs(case, tmp_path, capsys):
    make, key = BAD_SWEEPS[case]
    config = write(tmp_path, "sweep.toml", make(tmp_path))
    assert main(["sweep", str(config), "--quiet"]) == 2
    error = capsys.readouterr().err
    assert error.startswith("meanfield sweep: error:") and key in error, error
    assert error.count("\n") == 1 and "Traceback" not in error
    assert not (tmp_path / "out").exists()


def test_a_directory_as_config_is_refused(tmp_path, capsys):
    assert main(["run", str(tmp_path)]) == 2
    assert "is a directory" in capsys.readouterr().err


def test_an_unreachable_scheduler_is_refused_quickly(tmp_path, capsys, monkeypatch):
    # The refusal is what is tested, not the wait: a one-second connection timeout instead of ten.
    monkeypatch.setattr("validation.app.sweep.CONNECT_TIMEOUT", 1)
    config = write(tmp_path, "sweep.toml", run_config(tmp_path, method='kind = "particles"\nn = 4',
                                                      initial='kind = "uniform"', sweep="beta = [1.0]"))
    started = time.perf_counter()
    assert main(["sweep", str(config), "--quiet", "--scheduler", "tcp://127.0.0.1:1"]) == 2
    error = capsys.readouterr().err
    assert "--scheduler" in error and "Traceback" not in error and error.count("\n") == 1
    assert time.perf_counter() - started < 30


def test_the_dotted_sweep_key_of_the_readme_works(tmp_path):
    from validation.app import load_sweep_config

    config = write(tmp_path, "sweep.toml", run_config(tmp_path, method='kind = "particles"\nn = 4',
                                                      initial='kind = "uniform"', sweep="model.beta = [1.0, 2.0]"))
    assert load_sweep_config(config).grid == {"beta": [1.0, 2.0]}


def test_relative_paths_are_taken_from_the_config_folder(tmp_path, monkeypatch):
    from validation.app import load_config

    folder = tmp_path / "configs"
    folder.mkdir()
    np.save(folder / "rho.npy", np.ones(64))
    config = write(folder, "run.toml", run_config(tmp_path, initial='kind = "file"\npath = "rho.npy"')
                   .replace(f'output = "{tmp_path / "out"}"', 'output = "results"'))
    monkeypatch.chdir(tmp_path)
    loaded = load_config(config)
    assert loaded.output == str(folder / "results") and loaded.initial.path == str(folder / "rho.npy")


def test_particles_from_a_file_take_any_number_of_cells(tmp_path):
    from validation.app import run_experiment

    config = write(tmp_path, "run.toml", run_config(tmp_path, method='kind = "particles"\nn = 20',
                                                    initial=npy(tmp_path, np.arange(1.0, 11.0))))
    ds = run_experiment(config, progress=False)
    assert ds.x.shape == (3, 20, 2)


def test_quiet_success_prints_nothing(tmp_path):
    config = write(tmp_path, "run.toml", run_config(tmp_path))
    result = subprocess.run([sys.executable, "-m", "validation.app.cli", "run", str(config), "--quiet",
                             "--no-animation"], capture_output=True, text=True, timeout=120)
    assert (result.returncode, result.stdout, result.stderr) == (0, "", "")
    assert (tmp_path / "out" / "dataset.nc").exists() and not list((tmp_path / "out").glob("animation.*"))


def _default_ctrl_c():
    """SIGINT as a terminal gives it: a shell starting the tests in the background (``make test &``)
    makes them ignore it, and an ignored signal stays ignored in every child, so the sweep would
    never see the Ctrl-C this test sends."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def test_ctrl_c_on_a_sweep_stops_cleanly_and_leaves_no_worker(tmp_path):
    config = write(tmp_path, "sweep.toml", run_config(
        tmp_path, stop=200.0, count=11, method='kind = "particles"\nn = 32\ndt = 0.01\nscheme = "euler"',
        initial='kind = "uniform"', sweep="beta = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0]")
        .replace("realisations = 4\nbatch = 4", "realisations = 64\nbatch = 8"))
    process = subprocess.Popen([sys.executable, "-m", "validation.app.cli", "sweep", str(config), "--quiet",
                                "--workers", "2"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               start_new_session=True, preexec_fn=_default_ctrl_c)
    parts = tmp_path / "out" / "parts"
    deadline = time.time() + 120
    while not list(parts.glob("*.npz")) and time.time() < deadline and process.poll() is None:
        time.sleep(0.1)
    assert process.poll() is None, "the sweep ended before it could be interrupted: make it longer"
    os.killpg(process.pid, signal.SIGINT)  # what Ctrl-C in a terminal does: the whole group
    stdout, stderr = process.communicate(timeout=60)
    assert process.returncode == 130
    assert "Traceback" not in stderr and stderr.count("\n") == 1 and "--resume" in stderr, stderr
    deadline = time.time() + 15  # workers exit with the cluster; a dead one may await reaping a moment
    while time.time() < deadline:
        try:
            os.killpg(process.pid, 0)
        except ProcessLookupError:
            return  # no process of the group is left
        time.sleep(0.2)
    pytest.fail("worker processes outlived the interrupted sweep")


def test_a_config_runs_the_papers_layer_scheme(tmp_path):
    from meanfield.records import dataset_settings
    from validation.app import run_experiment

    config = write(tmp_path, "run.toml", run_config(tmp_path, method='kind = "particles"\nn = 8\nscheme = "layer"',
                                                    initial='kind = "uniform"'))
    ds = run_experiment(config, progress=False)
    assert dataset_settings(ds)["scheme"].startswith("Transformer layer")
