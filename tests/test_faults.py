"""The faults a long run meets: each case a user or a fault tester hit, with the behaviour it must have.

Damaged files (truncated, empty, random bytes) in every position, runs interrupted and resumed,
two writers on one folder, signals, inputs that used to hang or be accepted silently.
"""

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import xarray as xr

import meanfield as mf
from meanfield.errors import StepSizeCollapse
from solvers import CircleFV
from meanfield.integration import Pace
from validation.app import ConfigError, check_config
from validation.app import experiment
from validation.app.cli import main
from validation.app.files import locked_output
from validation.app.sweep import run_sweep
from validation.app.sweep_config import check_sweep_config

from test_experiment import _to_toml

ROOT = Path(__file__).parents[1]

toml = _to_toml


def meanfield(*arguments, timeout=300):
    return subprocess.run([sys.executable, "-m", "validation.app.cli", *map(str, arguments)],
                          capture_output=True, text=True, timeout=timeout)


def circle_config(output, **changes) -> dict:
    config = {"geometry": "circle", "output": str(output), "times": {"stop": 1.0, "count": 6},
              "checkpoint_every": 1, "model": {"beta": 4.0},
              "method": {"kind": "CircleFV", "cells": 64},
              "initial": {"kind": "perturbed_uniform", "amplitude": 0.1, "mode": 2}}
    config.update(changes)
    return config


def noisy_particles_config(output) -> dict:
    return circle_config(output, model={"beta": 4.0, "diffusion": 0.05},
                         method={"kind": "particles", "n": 32, "seed": 5, "dt": 0.05})


# ----------------------------------------------------------------------------------------------
# A run's state is checked as a state: the outcome does not depend on checkpoint_every.

SPHERE_UNDERSHOOT = {"geometry": "sphere", "times": {"stop": 1.2, "count": 7},
                     "model": {"beta": 1.5, "normalized": False, "diffusion": 0.05},
                     # on past its first under-resolved output (the default ends there): the
                     # checkpoints must not change what follows
                     "method": {"kind": "SphereSpectral", "lmax": 23, "underresolved": "continue"},
                     "initial": {"kind": "von_mises_fisher", "means": [[0.0, 0.0, 1.0], [1.0, 0.0, 0.0]],
                                 "kappa": 8.0}}


def test_a_sphere_run_whose_density_undershoots_ends_the_same_with_and_without_checkpoints(tmp_path):
    """The density dips below zero at t = 0.4, a segment boundary: a state the next segment takes as
    it is, never a bad input (exit 2, which the old code gave at the boundary); the run's
    resolution diagnosis (exit 3, from t = 0.6 where its estimated error passes 1e-3 of max rho)
    is the same with and without checkpoints."""
    results = {}
    for every in (0, 2):
        path = tmp_path / f"every{every}.toml"
        path.write_text(toml({**SPHERE_UNDERSHOOT, "output": str(tmp_path / f"out{every}"),
                              "checkpoint_every": every}))
        run = meanfield("run", path, "--quiet", "--no-animation")
        assert run.returncode == 3, run.stderr
        assert "UNTRUSTWORTHY: under-resolved from t=0.6 on: the estimated error" in run.stderr
        results[every] = xr.open_dataset(tmp_path / f"out{every}" / "dataset.nc")
    assert results[2].min_density.values[2] < 0  # the undershoot sits on the boundary
    since = [results[every].attrs["underresolved_since"] for every in (0, 2)]
    assert since[0] == since[1] == pytest.approx(0.6)
    # the same steps from the same state, to the round-off of re-analysing the grid values at the
    # boundary (a few eps of max rho, carried through the steps after it)
    scale = np.abs(results[0].rho.values).max()
    np.testing.assert_allclose(results[2].rho.values, results[0].rho.values, rtol=0,
                               atol=64 * np.finfo(float).eps * scale)


# ----------------------------------------------------------------------------------------------
# Nothing spins without progress.

@pytest.mark.parametrize("call, message", [
    (lambda: mf.simulate_particles(mf.SelfAttention(1.0), mf.sample_uniform(4, 2, 0), [0.0, 1.0], method="rk4",
                                   dt=1e-300), "dt = 1e-300 would take 1e\\+300 steps"),
    (lambda: mf.observe_particles(mf.SelfAttention(1.0), mf.sample_uniform(4, 2, 0), [0.0, 1.0], len,
                                  dt=1e-300), "dt = 1e-300"),
    (lambda: CircleFV(mf.SelfAttention(1.0), cells=64, rtol=1e-30), "rtol must be >= 1e-14"),
    (lambda: mf.simulate_particles(mf.SelfAttention(1.0), mf.sample_uniform(4, 2, 0), [0.0, 1.0], rtol=1.0),
     "rtol must be < 0.1"),
    (lambda: mf.simulate_particles(mf.SelfAttention(1.0), mf.sample_uniform(4, 2, 0), [0.0]),
     "at least two output times"),
], ids=["particles-dt", "observe-dt", "CircleFV-rtol", "particles-rtol-1", "particles-one-time"])
def test_inputs_that_used_to_hang_or_pass_silently_are_refused_at_once(call, message):
    started = time.perf_counter()
    with pytest.raises(ValueError, match=message):
        call()
    assert time.perf_counter() - started < 5


@pytest.mark.parametrize("change, message", [
    (lambda c: c.update(method={"kind": "particles", "n": 16, "dt": 1e-300}), "method.dt = 1e-300 would take"),
    (lambda c: c.update(method={"kind": "CircleFV", "cells": 64, "rtol": 1e-30}), "rtol must be >= 1e-14"),
    # 1e8 steps against max_hours = 0.01 (36 s): refused on any machine (a step of 4096 tokens
    # costs far more than 0.36 us)
    (lambda c: c.update(method={"kind": "particles", "n": 4096, "dt": 1e-8}, max_hours=0.01),
     "the run would take about"),
], ids=["dt", "rtol", "particle-duration"])
def test_configs_that_used_to_hang_exit_2_at_once(change, message, tmp_path):
    config = circle_config(tmp_path / "out", checkpoint_every=0)
    change(config)
    path = tmp_path / "run.toml"
    path.write_text(toml(config))
    started = time.perf_counter()
    result = meanfield("run", path, "--quiet")
    assert result.returncode == 2 and message in result.stderr, result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert time.perf_counter() - started < 60


def test_a_timing_spike_in_the_duration_probe_never_lets_an_endless_particle_run_through(tmp_path, monkeypatch):
    """The probe times a 1-step and a 3-step run; a spike in the 1-step one (here: both of its
    timings slower than the 3-step run) used to make the difference, and so the estimate, zero."""
    from validation.app import preflight

    config = circle_config(tmp_path / "out", checkpoint_every=0)
    config.update(method={"kind": "particles", "n": 64, "dt": 1e-6})
    # both of the 1-step run's timings slower than the 3-step run's; or only a hair faster, which
    # made the difference, and so the estimate, almost zero (1e6 steps of 0.05 us)
    for spiked in ({1: 1.0, 3: 0.9}, {1: 0.9999999, 3: 1.0}):  # seconds per run of that many steps
        monkeypatch.setattr(preflight, "_timed_steps", lambda model, x, config, steps: spiked[steps])
        with pytest.raises(ConfigError, match="the run would take about"):
            experiment.prepare(config)


def test_a_sweep_grid_of_a_million_points_is_refused_before_checking_them(tmp_path):
    raw = {**circle_config(tmp_path), "sweep": {"grid": {"beta": {"start": 0.1, "stop": 9.0, "count": 1_000_000}}}}
    started = time.perf_counter()
    with pytest.raises(ConfigError, match="count must be an integer from 1 to 100000"):
        check_sweep_config(raw)
    raw["sweep"]["grid"] = {"beta": {"start": 0.1, "stop": 9.0, "count": 1000}, "n": list(range(2, 202))}
    with pytest.raises(ConfigError, match="2e\\+05 points, more than 100000"):
        check_sweep_config(raw)
    assert time.perf_counter() - started < 5


def test_an_adaptive_run_that_cannot_finish_in_its_budget_stops_and_keeps_its_outputs(monkeypatch):
    """The pace guard: after its grace period, a solve extrapolates its pace to the run's end."""
    import meanfield.integration.driver as driver

    monkeypatch.setattr(driver, "PACE_GRACE", 0.0)
    solver = CircleFV(mf.SelfAttention(4.0, diffusion=0.1), cells=64, rtol=1e-14)
    times = np.linspace(0.0, 10.0, 11)
    with pytest.raises(StepSizeCollapse, match="past its time budget") as caught:
        solver.solve(lambda th: 1 + 0.1 * np.cos(th), times, pace=Pace.hours(10.0, 1e-9))
    assert caught.value.partial.sizes["time"] >= 1
    relaxed = CircleFV(mf.SelfAttention(4.0, diffusion=0.1), cells=64)
    ds = relaxed.solve(lambda th: 1 + 0.1 * np.cos(th), times[:2], pace=Pace.hours(1.0, 1.0))
    assert ds.sizes["time"] == 2  # a generous budget changes nothing


def test_a_run_that_collapses_writes_what_it_computed_and_exits_3(tmp_path, monkeypatch):
    import meanfield.integration.driver as driver

    monkeypatch.setattr(driver, "PACE_GRACE", 0.0)
    config = check_config(circle_config(tmp_path, max_hours=1e-9, checkpoint_every=2,
                                        model={"beta": 4.0, "diffusion": 0.1},
                                        method={"kind": "CircleFV", "cells": 64, "rtol": 1e-14}))
    ds = experiment.run_experiment(config, progress=False)
    assert "past its time budget" in ds.attrs["stopped"] and ds.attrs["trustworthy"] == 0
    stored = xr.open_dataset(tmp_path / "dataset.nc")
    assert stored.sizes["time"] == ds.sizes["time"] >= 1


# ----------------------------------------------------------------------------------------------
# Damaged files are named, recomputed, and the good ones kept.

def damage(path: Path, how: str) -> None:
    data = path.read_bytes()
    if how == "truncated":
        path.write_bytes(data[: len(data) // 2])
    elif how == "empty":
        path.write_bytes(b"")
    else:
        path.write_bytes(np.random.default_rng(0).bytes(len(data)))


def interrupted_run(config: dict, monkeypatch) -> Path:
    """Run ``config`` to its end but stop before the dataset is written: every checkpoint is kept."""
    real = experiment.write_atomically

    def interrupt_at_the_dataset(path, write):
        if Path(path).name == experiment.DATASET:
            raise KeyboardInterrupt
        return real(path, write)

    with monkeypatch.context() as patch:
        patch.setattr(experiment, "write_atomically", interrupt_at_the_dataset)
        with pytest.raises(KeyboardInterrupt):
            experiment.run_experiment(config, progress=False)
    return Path(config.output) / experiment.CHECKPOINTS


@pytest.mark.parametrize("make", [circle_config, noisy_particles_config], ids=["CircleFV", "noisy-particles"])
def test_resume_over_damaged_checkpoints_recomputes_only_them_and_equals_the_uninterrupted_run(
        make, tmp_path, monkeypatch, capsys):
    reference = experiment.run_experiment(check_config(make(tmp_path / "reference")), progress=False)
    variable = "x" if "x" in reference else "rho"
    config = check_config(make(tmp_path / "interrupted"))
    pristine = interrupted_run(config, monkeypatch)
    segments = sorted(pristine.glob("segment_*.nc"))
    assert len(segments) == 4
    saved = tmp_path / "pristine"
    shutil.copytree(pristine, saved)
    computed = []
    real_compute = experiment._compute_segment
    monkeypatch.setattr(experiment, "_compute_segment",
                        lambda *args: computed.append(args[4][0]) or real_compute(*args))
    for position in (0, 1, 3):  # first, middle, last
        for how in ("truncated", "empty", "random"):
            shutil.rmtree(pristine, ignore_errors=True)
            shutil.copytree(saved, pristine)
            bad = pristine / segments[position].name
            damage(bad, how)
            computed.clear()
            capsys.readouterr()
            ds = experiment.run_experiment(config, resume=True, progress=False)
            assert f"checkpoint {bad} is damaged" in capsys.readouterr().err, (position, how)
            # the damaged segment and the last one (never checkpointed) are computed, nothing else
            assert computed == pytest.approx([0.2 * position, 0.8], abs=1e-12), (position, how, computed)
            np.testing.assert_array_equal(ds[variable].values, reference[variable].values)
            np.testing.assert_array_equal(ds.time.values, reference.time.values)
            assert not pristine.exists()


def test_a_run_without_resume_refuses_to_drop_an_interrupted_runs_checkpoints(tmp_path, monkeypatch):
    config = check_config(circle_config(tmp_path))
    checkpoints = interrupted_run(config, monkeypatch)
    before = sorted(checkpoints.iterdir())
    with pytest.raises(ConfigError, match="holds 4 checkpoint segment.*--resume"):
        experiment.run_experiment(config, progress=False)
    assert sorted(checkpoints.iterdir()) == before


def test_temporaries_of_a_killed_final_write_are_removed_by_the_next_run(tmp_path, monkeypatch):
    config = check_config(circle_config(tmp_path))
    interrupted_run(config, monkeypatch)
    leftover = tmp_path / ".dataset.nc.partial-k9x2ab.nc"
    leftover.write_bytes(b"half a file")
    (tmp_path / experiment.CHECKPOINTS / ".segment_000002.nc.partial-zz.nc").write_bytes(b"")
    experiment.run_experiment(config, resume=True, progress=False)
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".") and p.name != ".lock") == []


def test_a_damaged_initial_file_is_named_with_exit_2(tmp_path):
    good = np.ones(64)
    path = tmp_path / "rho0.npy"
    config = circle_config(tmp_path / "out", checkpoint_every=0, initial={"kind": "file", "path": str(path)})
    (tmp_path / "run.toml").write_text(toml(config))
    for how in ("truncated", "empty", "random"):
        np.save(path, good)
        damage(path, how)
        result = meanfield("run", tmp_path / "run.toml", "--quiet")
        assert result.returncode == 2 and f"initial.path: '{path}'" in result.stderr, (how, result.stderr)
        assert len(result.stderr.strip().splitlines()) == 1
    np.save(path, good * (1 + 0.5j))
    result = meanfield("run", tmp_path / "run.toml", "--quiet")
    assert result.returncode == 2 and "complex" in result.stderr


SWEEP = {"geometry": "circle", "times": {"stop": 1.0, "count": 3}, "model": {"beta": 1.0},
         "method": {"kind": "particles", "n": 8, "dt": 0.1, "seed": 1}, "initial": {"kind": "uniform"},
         "sweep": {"realisations": 8, "batch": 2, "grid": {"beta": [1.0, 4.0, 9.0]}}}


def test_resume_over_damaged_sweep_parts_recomputes_them_and_keeps_the_rest(tmp_path, capsys):
    reference = run_sweep(check_sweep_config({**SWEEP, "output": str(tmp_path / "reference")}), workers=1,
                          progress=False)
    sweep = check_sweep_config({**SWEEP, "output": str(tmp_path / "damaged")})
    run_sweep(sweep, workers=1, progress=False)
    parts = sorted((tmp_path / "damaged" / "parts").glob("*.npz"), key=lambda p: p.stat().st_mtime)
    assert len(parts) == 12
    bad = {parts[0]: "truncated", parts[5]: "empty", parts[-1]: "random"}
    for path, how in bad.items():
        damage(path, how)
    kept = {path: path.stat().st_mtime_ns for path in parts if path not in bad}
    capsys.readouterr()
    ds = run_sweep(sweep, workers=1, resume=True, progress=False)
    err = capsys.readouterr().err
    for path in bad:
        assert f"part {path} is damaged" in err
    assert ds.attrs["tasks_computed"] == 3
    assert {path: path.stat().st_mtime_ns for path in kept} == kept
    for name in ("clustered_probability", "inner_product", "order_parameter"):
        np.testing.assert_array_equal(ds[name].values, reference[name].values)


# ----------------------------------------------------------------------------------------------
# One writer per output folder.

def test_a_second_writer_of_an_output_folder_is_refused_naming_the_holder(tmp_path):
    config = check_config(circle_config(tmp_path, checkpoint_every=0))
    with locked_output(tmp_path, "meanfield run"):
        with pytest.raises(ConfigError, match=f"is being written by PID {os.getpid()} \\(meanfield run\\)"):
            experiment.run_experiment(config, progress=False)
        with pytest.raises(ConfigError, match="is being written by PID"):
            run_sweep(check_sweep_config({**SWEEP, "output": str(tmp_path)}), workers=1, progress=False)
    experiment.run_experiment(config, progress=False)  # released: the folder is free again


def long_run(tmp_path) -> Path:
    path = tmp_path / "long.toml"
    path.write_text(toml(circle_config(tmp_path / "out", times={"stop": 40.0, "count": 401},
                                       model={"beta": 4.0, "diffusion": 0.05},
                                       method={"kind": "particles", "n": 4000, "seed": 3, "dt": 0.01})))
    return path


def wait_for_checkpoint(process, folder: Path) -> None:
    deadline = time.time() + 120
    while not list(folder.glob("segment_*.nc")) and time.time() < deadline and process.poll() is None:
        time.sleep(0.05)
    assert process.poll() is None, "the run ended before the test could act on it: make it longer"


def test_two_runs_on_one_folder_the_second_is_refused_and_sigterm_keeps_the_checkpoints(tmp_path):
    path = long_run(tmp_path)
    process = subprocess.Popen([sys.executable, "-m", "validation.app.cli", "run", str(path), "--quiet",
                                "--no-animation"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        wait_for_checkpoint(process, tmp_path / "out" / "checkpoint")
        second = meanfield("run", path, "--quiet", "--no-animation")
        assert second.returncode == 2
        assert f"is being written by PID {process.pid} (meanfield run)" in second.stderr
        assert len(second.stderr.strip().splitlines()) == 1
        process.send_signal(signal.SIGTERM)
        _, err = process.communicate(timeout=60)
    finally:
        process.kill()
    assert process.returncode == 143
    assert "meanfield run: terminated; the checkpoints written so far are kept" in err and "--resume" in err
    assert "Traceback" not in err
    assert list((tmp_path / "out" / "checkpoint").glob("segment_*.nc"))


# ----------------------------------------------------------------------------------------------
# One line, not a traceback; nothing accepted silently.

def test_bad_output_folders_are_one_line_with_exit_2(tmp_path):
    loop = tmp_path / "loop"
    loop.symlink_to(loop)
    path = tmp_path / "run.toml"
    path.write_text(toml(circle_config(loop / "out", checkpoint_every=0)))
    result = meanfield("run", path, "--quiet")
    assert result.returncode == 2 and "symbolic link" in result.stderr and "Traceback" not in result.stderr
    existing = tmp_path / "a-file"
    existing.write_text("")
    for command in (["validate", "--output", existing, "--sizes", "64,128", "--seeds", "2"],
                    ["demo", "--output", existing, "--n", "8", "--t-end", "0.1"]):
        started = time.perf_counter()
        result = meanfield(*command, "--quiet")
        assert result.returncode == 2, result.stderr
        assert "--output: " in result.stderr and "is an existing file" in result.stderr
        assert len(result.stderr.strip().splitlines()) == 1
        assert time.perf_counter() - started < 30  # refused before computing


def test_validate_refuses_zero_seeds(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["validate", "--seeds", "0"])
    assert exit_.value.code == 2 and "expected a positive integer, got '0'" in capsys.readouterr().err


@pytest.mark.parametrize("change, message", [
    (lambda s: s["sweep"].update(grid={"beta": [1.0, 2.0], "model.beta": [3.0]}), "names 'beta' twice"),
    (lambda s: s["sweep"].update(file="../../x.nc"), "sweep.file must be a file name in the output folder"),
    (lambda s: s["sweep"].update(grid={"seed": {"start": 0, "stop": 3, "count": 3}}),
     "seed is an integer parameter"),
], ids=["dotted-and-plain", "file-outside", "integer-key-non-integers"])
def test_sweep_configs_accepted_silently_before_are_refused(change, message, tmp_path):
    raw = json.loads(json.dumps({**SWEEP, "output": str(tmp_path)}))
    change(raw)
    with pytest.raises(ConfigError, match=message):
        check_sweep_config(raw)


def test_an_integer_parameter_on_a_range_stays_integer(tmp_path):
    raw = {**SWEEP, "output": str(tmp_path), "sweep": {**SWEEP["sweep"],
                                                       "grid": {"seed": {"start": 0, "stop": 6, "count": 4}}}}
    sweep = check_sweep_config(raw)
    assert sweep.grid["seed"] == [0, 2, 4, 6] and all(type(v) is int for v in sweep.grid["seed"])


def test_a_bug_is_reported_as_one_with_its_traceback(monkeypatch, capsys):
    import validation.app.cli as cli

    def broken(args):
        raise ZeroDivisionError("a deliberate bug")

    monkeypatch.setattr(cli, "_demo", broken)  # the parser binds the handler when main builds it
    assert cli.main(["demo"]) == 70
    err = capsys.readouterr().err
    assert "ZeroDivisionError: a deliberate bug" in err and "internal error: this is a bug in meanfield" in err


# ----------------------------------------------------------------------------------------------
# Shipped material works as shipped.

def test_the_example_scripts_settings_file_is_named_as_such_by_meanfield_run():
    result = meanfield("run", ROOT / "examples" / "lost_in_the_middle.toml")
    assert result.returncode == 2
    assert "settings of the example script 'lost_in_the_middle.py'" in result.stderr


def test_the_phase_diagram_example_runs_the_papers_layer():
    import tomllib

    raw = tomllib.loads((ROOT / "examples" / "phase_diagram.toml").read_text())
    assert raw["method"]["scheme"] == "layer"


RUN_EXAMPLES = sorted(p for p in (ROOT / "examples").glob("*.toml")
                      if "[sweep]" not in p.read_text() and "script =" not in p.read_text()
                      and "[continuation]" not in p.read_text())


@pytest.mark.parametrize("example", RUN_EXAMPLES, ids=[p.stem for p in RUN_EXAMPLES])
def test_each_run_example_runs_clean_at_its_documented_size(example, tmp_path):
    """Every `meanfield run` example, as shipped: exit 0, nothing on stderr."""
    config = (example.read_text().replace('output = "../output/', f'output = "{tmp_path}/'))
    path = tmp_path / example.name
    path.write_text(config)
    result = meanfield("run", path, "--quiet", "--no-animation", timeout=1800)
    assert result.returncode == 0 and not result.stderr.strip(), result.stderr


# The quick size of each example script, shared with the docs gallery (the full sizes take minutes).
sys.path.insert(0, str(ROOT / "docs" / "_ext"))
from gallery import quick_sizes, script_arguments  # noqa: E402

SCRIPTS = quick_sizes()


def test_every_example_script_is_run_by_the_suite():
    assert sorted(SCRIPTS) == sorted(p.name for p in (ROOT / "examples").glob("*.py"))


@pytest.mark.parametrize("script", sorted(SCRIPTS))
def test_each_example_script_runs_clean_at_a_quick_size(script, tmp_path):
    arguments = script_arguments(script, tmp_path)
    result = subprocess.run([sys.executable, str(ROOT / "examples" / script), *arguments], capture_output=True,
                            text=True, timeout=600, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "Warning" not in result.stderr and "Traceback" not in result.stderr, result.stderr
    assert list(tmp_path.rglob("*.png")), "no figure written"


def test_errors_the_workers_log_while_the_local_cluster_closes_do_not_reach_the_terminal():
    """Dask's heartbeat CommClosedError at close (a race: about one successful sweep in four) is
    an ERROR logged by a worker; here a worker logs one, and nothing may reach stderr."""
    code = ("import logging\n"
            "from validation.app.sweep import _client\n"
            "with _client(None, 1) as client:\n"
            "    client.run(lambda: logging.getLogger('distributed.worker').error('heartbeat failed'))\n")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0 and "heartbeat failed" not in result.stderr, result.stderr


def test_a_signal_during_a_write_waits_for_the_write_to_end(tmp_path):
    """SIGTERM or Ctrl-C inside xarray's to_netcdf left its file lock held and the run hung in the
    cleanup (py-spy: CachingFileManager.close waiting on the lock). A write now ends first."""
    from validation.app.cli import _sigterm_as_interrupt
    from validation.app.errors import Terminated
    from validation.app.files import write_atomically

    # Ctrl-C as a terminal gives it: tests started in the background (``make test &``) inherit an
    # ignored SIGINT, and Python then installs no KeyboardInterrupt for it
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        for interrupt, send in ((Terminated, signal.SIGTERM), (KeyboardInterrupt, signal.SIGINT)):
            target = tmp_path / f"{send.name}.txt"
            with _sigterm_as_interrupt(), pytest.raises(interrupt):
                write_atomically(target, lambda path: (os.kill(os.getpid(), send),  # in the middle of the write
                                                       time.sleep(0.05), path.write_text("complete")))
            assert target.read_text() == "complete"
    finally:
        signal.signal(signal.SIGINT, previous)


def test_a_resumed_pde_sweep_keeps_its_good_parts_and_recomputes_a_damaged_one(tmp_path, capsys):
    """A PDE part holds booleans (`resolved`) and diagnostics that may be infinite (`cluster_width`
    of a flat density): they are a run's results, not damage."""
    raw = {**circle_config(tmp_path, checkpoint_every=0, times={"stop": 0.5, "count": 3}),
           "sweep": {"grid": {"beta": [1.0, 2.0, 3.0]}}}
    first = run_sweep(check_sweep_config(raw), workers=1, progress=False)
    parts = sorted((tmp_path / "parts").glob("*.npz"))
    damage(parts[1], "truncated")
    capsys.readouterr()
    resumed = run_sweep(check_sweep_config(raw), workers=1, resume=True, progress=False)
    err = capsys.readouterr().err
    assert err.count("is damaged") == 1 and f"part {parts[1]} is damaged" in err
    assert resumed.attrs["tasks_computed"] == 1
    np.testing.assert_array_equal(resumed.energy.values, first.energy.values)
