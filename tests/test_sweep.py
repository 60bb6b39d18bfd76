"""Parameter sweeps on Dask: same numbers as point by point, resume, dying workers, bad configs."""

import os
import shutil
import signal
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import xarray as xr

import meanfield as mf
from solvers import CircleFV
from validation import orthogonal_token_clustering_time, orthogonal_token_inner_product
from validation.app.cli import main
from validation.app import ConfigError
from validation.app.sweep import plan_tasks, run_point, run_sweep
from validation.app.config import tomllib
from validation.app.sweep_config import check_sweep_config, load_sweep_config

PARTICLE_SWEEP = """
output = "{output}"
geometry = "circle"
times = {{ stop = 2.0, count = 21 }}
[model]
beta = 1.0
[method]
kind = "particles"
n = 8
dt = 0.1
scheme = "{scheme}"
[initial]
kind = "uniform"
[sweep]
realisations = 40
batch = 16
file = "{file}"
[sweep.grid]
beta = [0.5, 4.0]
d = [2, 5]
"""


def particle_sweep(tmp_path, name="sweep", scheme="euler", file="sweep.nc"):
    path = tmp_path / f"{name}.toml"
    path.write_text(PARTICLE_SWEEP.format(output=tmp_path / name, scheme=scheme, file=file))
    return path


def test_sweep_on_a_local_cluster_equals_its_points_one_by_one(tmp_path):
    sweep = load_sweep_config(particle_sweep(tmp_path))
    ds = run_sweep(sweep, workers=2, progress=False)
    assert ds.clustered_probability.dims == ("beta", "d", "time")
    assert len(plan_tasks(sweep)) == 4 * 3  # 40 systems in chunks of 16, 16, 8 per point
    for index, config in sweep.points():
        point = run_point(sweep, config)
        for name, values in point.items():
            np.testing.assert_array_equal(ds[name].values[index], values, err_msg=name)
    stored = xr.open_dataset(tmp_path / "sweep" / "sweep.nc")
    for name in ds.data_vars:
        np.testing.assert_array_equal(stored[name].values, ds[name].values)


def test_point_observables_are_those_of_the_seeded_systems(tmp_path):
    """An independent recomputation: chunk c draws its tokens from the generator seeded [seed, c]."""
    path = particle_sweep(tmp_path, scheme="rk4")
    path.write_text(path.read_text().replace("batch = 16", "batch = 16\ncluster_tolerance = 0.1"))
    sweep = load_sweep_config(path)
    index, config = sweep.points()[0]  # beta = 0.5, d = 2
    model = mf.SelfAttention(0.5)
    x0 = np.concatenate([mf.sample_uniform(8, 2, np.random.default_rng([0, c]), batch=size)
                         for c, size in enumerate((16, 16, 8))])
    x = mf.simulate_particles(model, x0, np.linspace(0, 2, 21), method="rk4", dt=0.1).x.values
    inner = np.einsum("stk,stk->st", x[:, :, 0], x[:, :, 1])
    point = run_point(sweep, config)
    np.testing.assert_allclose(point["inner_product"], inner.mean(axis=0), rtol=1e-13, atol=1e-15)
    np.testing.assert_array_equal(point["clustered_probability"], (inner >= 0.9).mean(axis=0))
    order = np.linalg.norm(x.mean(axis=2), axis=-1).mean(axis=0)
    np.testing.assert_allclose(point["order_parameter"], order, rtol=1e-13)
    assert 0 < point["clustered_probability"][-1] < 1  # the observable is not trivial here


def test_interrupted_sweep_resumes_skipping_finished_tasks(tmp_path):
    reference = run_sweep(load_sweep_config(particle_sweep(tmp_path, "full")), workers=2, progress=False)
    config = particle_sweep(tmp_path, "interrupted")
    sweep = load_sweep_config(config)
    tasks = plan_tasks(sweep)
    # An interruption leaves some finished parts: copy the first five from the complete run.
    (sweep.output / "parts").mkdir(parents=True)
    for task in tasks[:5]:
        shutil.copy(tmp_path / "full" / "parts" / f"{task.key}.npz", sweep.output / "parts")
    kept = {p.name: p.stat().st_mtime_ns for p in (sweep.output / "parts").iterdir()}
    assert main(["sweep", str(config), "--quiet", "--workers", "2"]) == 2  # no silent reuse
    assert main(["sweep", str(config), "--quiet", "--workers", "2", "--resume"]) == 0
    resumed = xr.open_dataset(sweep.output / "sweep.nc")
    assert resumed.attrs["tasks_computed"] == len(tasks) - 5
    assert all((sweep.output / "parts" / name).stat().st_mtime_ns == mtime for name, mtime in kept.items())
    for name in reference.data_vars:
        np.testing.assert_array_equal(resumed[name].values, reference[name].values)


def test_a_dying_worker_has_its_tasks_rerun(tmp_path):
    from dask.distributed import Client, LocalCluster

    text = PARTICLE_SWEEP.format(output=tmp_path / "out", scheme="rk4", file="sweep.nc")
    text = text.replace("realisations = 40", "realisations = 320").replace("stop = 2.0", "stop = 4.0")
    (tmp_path / "sweep.toml").write_text(text)
    sweep = load_sweep_config(tmp_path / "sweep.toml")
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0") as cluster, \
            Client(cluster) as client:
        pids = list(client.run(os.getpid).values())
        victim = threading.Thread(target=_kill_after_first_part, args=(sweep.output / "parts", pids[0]))
        victim.start()
        ds = run_sweep(sweep, scheduler=cluster.scheduler_address, progress=False)
        victim.join()
        assert pids[0] not in client.run(os.getpid).values()  # the worker was really replaced
    for index, config in sweep.points()[:1]:
        np.testing.assert_array_equal(ds.inner_product.values[index], run_point(sweep, config)["inner_product"])
    assert np.all(np.isfinite(ds.inner_product.values))


def _kill_after_first_part(parts, pid):
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not (parts.is_dir() and any(parts.glob("*.npz"))):
        time.sleep(0.01)
    os.kill(pid, signal.SIGKILL)


def pde_sweep(tmp_path, *, stop: float, count: int, mode: int, betas: list[float]):
    """A sweep over beta of CircleFV on 64 cells from a perturbed uniform density, written as Zarr."""
    config = tmp_path / "pde.toml"
    config.write_text(f"""
output = "{tmp_path / 'pde'}"
geometry = "circle"
times = {{ stop = {stop}, count = {count} }}
[model]
beta = 1.0
[method]
kind = "CircleFV"
cells = 64
[initial]
kind = "perturbed_uniform"
amplitude = 0.1
mode = {mode}
[sweep]
file = "sweep.zarr"
[sweep.grid]
beta = {betas}
""")
    return config


def test_pde_sweep_records_time_series_and_trust(tmp_path):
    config = pde_sweep(tmp_path, stop=1.0, count=5, mode=2, betas=[1.0, 3.0])
    assert main(["sweep", str(config), "--quiet", "--workers", "1"]) == 0
    ds = xr.open_zarr(tmp_path / "pde" / "sweep.zarr").load()
    assert ds.energy.dims == ("beta", "time") and ds.trustworthy.dims == ("beta",)
    assert bool(ds.trustworthy.all())
    direct = CircleFV(mf.SelfAttention(3.0), cells=64).solve(lambda t: 1 + 0.1 * np.cos(2 * t), ds.time.values)
    np.testing.assert_allclose(ds.energy.sel(beta=3.0).values, direct.energy.values, rtol=1e-12)


def test_a_pde_point_that_stops_resolving_ends_there_untrusted_with_nan_after(tmp_path):
    """SA beta = 9 on 64 cells clusters past what the grid resolves: the point stops at its first
    under-resolved output (method.underresolved's default), as `meanfield run` does; the sweep keeps
    the outputs up to there and NaN after, and the other point runs to the end."""
    config = pde_sweep(tmp_path, stop=20.0, count=11, mode=4, betas=[0.0, 9.0])
    assert main(["sweep", str(config), "--quiet", "--workers", "1"]) == 3
    ds = xr.open_zarr(tmp_path / "pde" / "sweep.zarr").load()
    assert ds.trustworthy.values.tolist() == [1.0, 0.0]  # Kuramoto does not move a mode-4 density
    assert np.all(np.isfinite(ds.energy.sel(beta=0.0).values))
    computed = np.isfinite(ds.energy.sel(beta=9.0).values)
    assert computed[0] and not computed[-1] and np.all(np.diff(computed.astype(int)) <= 0), computed


def test_unknown_sweep_parameter_exits_2_naming_it(tmp_path, capsys):
    config = particle_sweep(tmp_path)
    config.write_text(config.read_text().replace("d = [2, 5]", "temperature = [1.0]"))
    assert main(["sweep", str(config), "--quiet"]) == 2
    assert "unknown parameter 'temperature'" in capsys.readouterr().err


@pytest.mark.parametrize("change, message", [
    (("beta = [0.5, 4.0]", "beta = [0.5, -4.0]"), "beta = -4.0"),
    (("beta = [0.5, 4.0]", "beta = []"), "non-empty"),
    (("beta = [0.5, 4.0]", "beta = [1.0, 1.0]"), "repeats"),
    (('file = "sweep.nc"', 'file = "sweep.csv"'), "sweep.file"),
    (("batch = 16", "batch = 0"), "sweep.batch"),
    (("d = [2, 5]", "d = [1]"), "method.d"),
    (("n = 8", "n = 1"), "method.n"),
])
def test_bad_sweep_configs_are_refused_before_running(change, message, tmp_path):
    path = particle_sweep(tmp_path)
    text = path.read_text().replace(*change)
    with pytest.raises(ConfigError, match=message):
        check_sweep_config(tomllib.loads(text))
    assert not (tmp_path / "sweep").exists()


@pytest.mark.parametrize("beta", [0.5, 3.0])
def test_orthogonal_token_clustering_time_is_where_the_curve_reaches_the_level(beta):
    model = mf.SelfAttention(beta)
    t_star = orthogonal_token_clustering_time(model, 32, 1 - 1e-3, horizon=100.0)
    assert 0 < t_star < 100
    before, at = orthogonal_token_inner_product(model, 32, [0.0, 0.99 * t_star, t_star])[1:]
    assert before < 1 - 1e-3
    assert at == pytest.approx(1 - 1e-3, abs=1e-10)
    assert orthogonal_token_clustering_time(model, 32, 1 - 1e-3, horizon=0.5 * t_star) == np.inf


def test_the_phase_diagram_example_in_a_tiny_version_matches_known_probabilities(tmp_path):
    """At t = 0 the tokens are iid uniform: P(<x_1, x_2> >= 1 - tau) is arccos(1 - tau) / pi on the
    circle and tau / 2 on S^2, and <x_1, x_2> has mean 0 and variance 1/d. Every beta sees the same
    initial tokens. At beta = 1 SA clusters within t = 3 (at beta = 9 it is metastable, far slower)."""
    raw = tomllib.loads((Path(__file__).parents[1] / "examples" / "phase_diagram.toml").read_text())
    raw["output"] = str(tmp_path)
    raw["times"] = {"stop": 3.0, "count": 4}
    realisations, tolerance = 1024, 0.5
    raw["sweep"].update(realisations=realisations, batch=256, cluster_tolerance=tolerance,
                        grid={"beta": [1.0, 9.0], "d": [2, 3]})
    ds = run_sweep(check_sweep_config(raw), workers=1, progress=False)
    assert ds.clustered_probability.dims == ("beta", "d", "time")
    start = ds.isel(time=0)
    for d, exact in ((2, np.arccos(1 - tolerance) / np.pi), (3, tolerance / 2)):
        probability = start.clustered_probability.sel(d=d).values
        sigma = np.sqrt(exact * (1 - exact) / realisations)
        np.testing.assert_array_equal(probability[0], probability[1])  # same tokens for every beta
        assert abs(probability[0] - exact) <= 4 * sigma, (d, probability, exact, sigma)
        inner = start.inner_product.sel(d=d).values
        assert abs(inner[0]) <= 4 * np.sqrt(1 / d / realisations), (d, inner)
    late = ds.clustered_probability.isel(time=-1).sel(beta=1.0)
    assert np.all(late > start.clustered_probability.sel(beta=1.0) + 0.1)


@pytest.mark.parametrize("device, cpu_batch, message", [
    ("numpy", 1, r"the task for \(beta = 4.0, d = 2\), chunk 0 failed three times: FloatingPointError.*--resume"),
    ("numpy", 2**17, r"the batch of chunks 0 to 1 of \(beta = 4.0, d = 2\) failed three times: FloatingPointError"),
    ("array_api_strict", 2**17, r"the batch of 2 tasks from \(beta = 0.5, d = 2\) to \(beta = 4.0, d = 2\), "
                               r"chunk 0 failed three times: FloatingPointError.*--resume"),
], ids=["one task", "a CPU batch", "a device batch"])
def test_a_failing_task_stops_the_sweep_keeping_finished_tasks(tmp_path, monkeypatch, device, cpu_batch, message):
    from dask.distributed import LocalCluster

    import validation.app.sweep as sweep_module

    def fails_at_beta_4(tasks):
        if any(task.config.model.beta == 4.0 for task in tasks):
            raise FloatingPointError("injected failure")
        return chunks(tasks)

    chunks = sweep_module._particle_chunks
    monkeypatch.setattr(sweep_module, "_particle_chunks", fails_at_beta_4)
    monkeypatch.setattr(sweep_module, "CPU_BATCH_ELEMENTS", cpu_batch)  # one worker: chunks of 16 in pairs
    path = particle_sweep(tmp_path)
    path.write_text(path.read_text().replace('file = "sweep.nc"', f'file = "sweep.nc"\ndevice = "{device}"'))
    sweep = load_sweep_config(path)
    # Threads, not processes: the patched function is seen by the worker.
    with LocalCluster(n_workers=1, threads_per_worker=1, processes=False, dashboard_address=":0") as cluster:
        with pytest.raises(sweep_module.SweepTaskError, match=message):
            run_sweep(sweep, scheduler=cluster.scheduler_address, progress=False)
    finished = {path.stem for path in (sweep.output / "parts").glob("*.npz")}
    assert all(task.config.model.beta == 0.5 for task in plan_tasks(sweep) if task.key in finished)
    assert finished or device != "numpy"  # a device batch holds both betas: nothing of this row finishes


def test_an_unresolvable_pde_point_is_refused_before_running(tmp_path):
    text = f"""
output = "{tmp_path / 'out'}"
geometry = "sphere"
times = [0.0, 0.1]
[model]
beta = 1.0
[method]
kind = "SphereSpectral"
lmax = 16
[initial]
kind = "perturbed_uniform"
[sweep.grid]
beta = [1.0, 200.0]
"""
    with pytest.raises(ConfigError, match=r"beta = 200.0.*lmax"):
        check_sweep_config(tomllib.loads(text))


@pytest.mark.slow
def test_euler_step_of_the_phase_diagram_is_below_its_monte_carlo_error():
    """The phase diagram uses projected Euler with step 0.1; RK4 with the same step and the
    same initial tokens must change the clustered probability by less than the binomial
    standard error of the estimate (the largest, at p = 1/2)."""
    raw = tomllib.loads((Path(__file__).parents[1] / "examples" / "phase_diagram.toml").read_text())
    realisations = 512
    raw["sweep"].update(realisations=realisations, grid={"beta": [1.0, 4.0, 9.0]})
    probabilities = {}
    for scheme in ("euler", "rk4"):
        raw["method"]["scheme"] = scheme
        sweep = check_sweep_config(raw)
        probabilities[scheme] = np.array([run_point(sweep, config)["clustered_probability"]
                                          for _, config in sweep.points()])
    difference = np.abs(probabilities["euler"] - probabilities["rk4"]).max()
    assert difference < np.sqrt(0.25 / realisations)
    assert probabilities["rk4"][:, -1].min() > 0.1  # the comparison is not between zeros


def test_a_sweep_on_another_array_library_is_refused_when_it_is_missing(tmp_path, capsys):
    path = particle_sweep(tmp_path)
    path.write_text(path.read_text().replace('file = "sweep.nc"', 'file = "sweep.nc"\ndevice = "nosuchlib"'))
    assert main(["sweep", str(path), "--quiet"]) == 2
    assert "sweep.device must be 'numpy' or one of" in capsys.readouterr().err
    assert main(["sweep", str(particle_sweep(tmp_path, "other")), "--device", "cupy:0", "--quiet"]) == 2 or \
        pytest.importorskip("cupy")
    assert "--device = 'cupy:0': cupy is not installed" in capsys.readouterr().err


def test_a_device_sweep_runs_each_row_of_betas_as_one_batch_with_the_numbers_of_its_points(tmp_path):
    """array_api_strict stands in for a GPU library: the device path with a beta per system."""
    from validation.app.sweep import plan_batches
    path = particle_sweep(tmp_path)
    path.write_text(path.read_text().replace("beta = [0.5, 4.0]", "beta = [0.5, 4.0, 9.0]").replace(
        'file = "sweep.nc"', 'file = "sweep.nc"\ndevice = "array_api_strict"'))
    sweep = load_sweep_config(path)
    batches = plan_batches(plan_tasks(sweep))
    assert sorted(len(batch) for batch in batches) == [3] * 6  # (d, chunk) rows of three betas
    assert all(len({(task.index[1], task.chunk) for task in batch}) == 1 for batch in batches)
    ds = run_sweep(sweep, workers=1, progress=False)
    numpy_sweep = load_sweep_config(particle_sweep(tmp_path, "numpy"))
    assert len(ds.time) == 21 and ds.clustered_probability.values.min() < ds.clustered_probability.values.max()
    for index, config in sweep.points():
        beta, d = sweep.grid["beta"][index[0]], sweep.grid["d"][index[1]]
        numpy_point = [point for numpy_index, point in numpy_sweep.points()
                       if point.model.beta == beta and point.method.d == d]
        if not numpy_point:  # beta = 9 is not in the numpy sweep's grid: its point alone on the device
            point = run_point(sweep, config)
        else:
            point = run_point(numpy_sweep, numpy_point[0])
        for name, values in point.items():
            # Round-off of other kernels: only an inner product within 1e-12 of the threshold could flip.
            np.testing.assert_allclose(ds[name].values[index], values, rtol=0, atol=1e-12, err_msg=name)


def test_device_batches_are_cut_to_their_size_bound(tmp_path, monkeypatch):
    """DEVICE_BATCH_ELEMENTS bounds the token coordinates of a batch: long rows are cut in order."""
    import validation.app.sweep as sweep_module
    path = particle_sweep(tmp_path)
    path.write_text(path.read_text().replace("beta = [0.5, 4.0]", "beta = [0.5, 4.0, 9.0]").replace(
        'file = "sweep.nc"', 'file = "sweep.nc"\ndevice = "array_api_strict"'))
    tasks = plan_tasks(load_sweep_config(path))
    # n = 8; chunks of 16, 16, 8 systems: room for 2 tasks of 16 systems at d = 5, all 3 otherwise
    monkeypatch.setattr(sweep_module, "DEVICE_BATCH_ELEMENTS", 2 * 16 * 8 * 5)
    batches = sweep_module.plan_batches(tasks)
    sizes = {(batch[0].index[1], batch[0].chunk): [] for batch in batches}
    for batch in batches:
        sizes[batch[0].index[1], batch[0].chunk].append([task.index[0] for task in batch])
    assert sizes == {(0, 0): [[0, 1, 2]], (0, 1): [[0, 1, 2]], (0, 2): [[0, 1, 2]],
                     (1, 0): [[0, 1], [2]], (1, 1): [[0, 1], [2]], (1, 2): [[0, 1, 2]]}
    assert sorted(task.key for batch in batches for task in batch) == sorted(task.key for task in tasks)


def test_cpu_batches_group_the_equal_chunks_of_a_point_and_keep_every_worker_busy(tmp_path, monkeypatch):
    import validation.app.sweep as sweep_module
    tasks = plan_tasks(load_sweep_config(particle_sweep(tmp_path)))  # 4 points, chunks of 16, 16, 8 systems
    batches = sweep_module.plan_batches(tasks, workers=1)  # at least 4 batches per worker: 3 tasks each at most
    assert [[(task.index, task.chunk) for task in batch] for batch in batches] == [
        item for index in [(0, 0), (0, 1), (1, 0), (1, 1)] for item in ([(index, 0), (index, 1)], [(index, 2)])]
    assert sweep_module.plan_batches(tasks, workers=2) == [[task] for task in tasks]  # 12 tasks: 6 per worker
    monkeypatch.setattr(sweep_module, "CPU_BATCH_ELEMENTS", 2 * 16 * 8 * 2 - 1)  # not two chunks at d = 2
    assert sweep_module.plan_batches(tasks, workers=1) == [[task] for task in tasks]
    monkeypatch.undo()
    noisy = particle_sweep(tmp_path, "noisy")
    noisy.write_text(noisy.read_text().replace("beta = 1.0", "beta = 1.0\ndiffusion = 0.1"))
    noisy_tasks = plan_tasks(load_sweep_config(noisy))
    assert sweep_module.plan_batches(noisy_tasks, workers=1) == [[task] for task in noisy_tasks]


def test_the_last_cpu_batches_run_chunk_by_chunk_so_workers_finish_together(tmp_path):
    from validation.app.sweep import plan_batches
    path = particle_sweep(tmp_path)
    path.write_text(path.read_text().replace("realisations = 40", "realisations = 256"))
    tasks = plan_tasks(load_sweep_config(path))  # 4 points of 16 chunks
    batches = plan_batches(tasks, workers=2)  # at least 8 batches: 8 chunks each, the last 2 split
    assert [len(batch) for batch in batches] == [8] * 6 + [1] * 16
    assert [task for batch in batches for task in batch] == tasks


@pytest.mark.parametrize("device", ["numpy", "array_api_strict"])
def test_batches_of_a_sweep_without_method_d_take_the_geometry_dimension(tmp_path, device):
    """No ``d`` in the grid or the method: the circle's d = 2 sizes the batches."""
    from validation.app.sweep import plan_batches
    path = particle_sweep(tmp_path)
    path.write_text(path.read_text().replace("d = [2, 5]\n", "").replace(
        'file = "sweep.nc"', f'file = "sweep.nc"\ndevice = "{device}"'))
    tasks = plan_tasks(load_sweep_config(path))
    assert all(task.config.method.d is None for task in tasks)
    batches = plan_batches(tasks, workers=1)
    assert sorted(len(batch) for batch in batches) == ([1] * 6 if device == "numpy" else [2, 2, 2])  # 6 tasks: 1 each


@pytest.mark.parametrize("scheme", ["euler", "rk4"])
def test_a_cpu_batch_gives_each_chunk_the_numbers_it_has_alone(tmp_path, scheme):
    from validation.app.sweep import plan_batches, run_task, run_tasks
    tasks = plan_tasks(load_sweep_config(particle_sweep(tmp_path, scheme=scheme)))
    for batch in plan_batches(tasks, workers=1):
        for task, result in zip(batch, run_tasks(batch)):
            alone = run_task(task)
            for name, values in alone.items():
                np.testing.assert_array_equal(result[name], values, err_msg=name)


def test_noisy_device_sweeps_keep_one_task_per_batch(tmp_path):
    from validation.app.sweep import plan_batches
    path = particle_sweep(tmp_path)
    path.write_text(path.read_text().replace("beta = 1.0", "beta = 1.0\ndiffusion = 0.1").replace(
        'file = "sweep.nc"', 'file = "sweep.nc"\ndevice = "array_api_strict"'))
    tasks = plan_tasks(load_sweep_config(path))
    assert plan_batches(tasks) == [[task] for task in tasks]


def test_sweep_workers_keep_glibc_malloc_thresholds():
    from validation.app.sweep import worker_environment
    environment = worker_environment()
    assert "MALLOC_TRIM_THRESHOLD_" not in environment and environment.get("OPENBLAS_NUM_THREADS") == 1


def test_the_local_cluster_of_a_sweep_keeps_its_background_work_off_the_tasks_cores():
    from validation.app.sweep import _client

    def periods(dask_worker):
        return {name: callback.callback_time for name, callback in dask_worker.periodic_callbacks.items()}

    with _client(None, 1) as client:
        (worker,) = client.run(periods).values()
    assert "profile" not in worker  # the statistical profiler is off
    assert (worker["monitor"], worker["memory_monitor"], worker["tick"]) == (5000, 1000, 500)


def test_sweep_workers_start_without_xarray_or_the_pde_solvers():
    """A worker imports the sweep's modules (to run its tasks, and as a script's main module):
    xarray, pandas, scipy.integrate and the solvers would double its start-up, paid by every sweep."""
    import subprocess
    import sys

    heavy = ("xarray", "pandas", "scipy.integrate", "solvers.grid_solver", "matplotlib")  # solvers.methods is a table
    script = ("import sys, validation.app.sweep, validation.app.sweep_config, validation.app.config; "
              f"print(' '.join(name for name in {heavy!r} if name in sys.modules))")
    loaded = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    assert loaded.stdout.split() == []


def test_sweep_tasks_run_numba_on_one_thread_and_leave_this_process_able_to_compile(tmp_path, monkeypatch,
                                                                                    two_numba_threads):
    """One numba thread per task (a worker per core); Dask copies the workers' environment into
    this process, so it must not hold NUMBA_NUM_THREADS: numba refuses to compile then."""
    import numba

    import validation.app.sweep as sweep_module

    @numba.njit(parallel=True)
    def total(values):
        result = 0.0
        for i in numba.prange(values.size):
            result += values[i]
        return result

    total(np.ones(4))  # numba's threads run from here on
    threads = numba.get_num_threads()  # two where numba has them (the fixture): one in the task is the sweep's doing
    seen = []
    run_task = sweep_module.run_task
    monkeypatch.setattr(sweep_module, "run_task", lambda task: seen.append(numba.get_num_threads()) or run_task(task))
    tasks = plan_tasks(load_sweep_config(particle_sweep(tmp_path)))
    sweep_module.run_tasks(tasks[:1])
    assert seen == [1] and numba.get_num_threads() == threads
    monkeypatch.undo()
    run_sweep(load_sweep_config(particle_sweep(tmp_path)), workers=1, progress=False)

    @numba.njit
    def twice(values):
        return 2.0 * total(values)

    assert twice(np.ones(4)) == 8.0


def test_layer_scheme_phase_diagram_matches_an_independent_simple_implementation(tmp_path):
    """Clustering probabilities of a layer-scheme sweep vs plain numpy layers from other random tokens."""
    realisations, n, steps = 1024, 8, 30
    path = particle_sweep(tmp_path, scheme="layer")
    text = path.read_text().replace("realisations = 40", f"realisations = {realisations}").replace(
        "batch = 16", "batch = 1024").replace("d = [2, 5]", "d = [2]").replace(
        "times = { stop = 2.0, count = 21 }", f"times = {{ stop = {steps / 10}, count = {steps + 1} }}")
    path.write_text(text)
    sweep = load_sweep_config(path)
    rng = np.random.default_rng(2024)
    for index, config in sweep.points():
        beta = config.model.beta
        ours = run_point(sweep, config)["clustered_probability"][-1]
        angles = rng.uniform(0.0, 2.0 * np.pi, size=(realisations, n))
        x = np.stack([np.cos(angles), np.sin(angles)], axis=-1)
        for _ in range(steps):  # x <- (x + h softmax(beta x x^T) x) / |.|
            logits = beta * x @ np.swapaxes(x, 1, 2)
            weights = np.exp(logits - logits.max(axis=-1, keepdims=True))
            x = x + 0.1 * (weights / weights.sum(axis=-1, keepdims=True)) @ x
            x /= np.linalg.norm(x, axis=-1, keepdims=True)
        theirs = np.mean(np.sum(x[:, 0] * x[:, 1], axis=-1) >= 1.0 - 1e-3)
        pooled = (ours + theirs) / 2
        sigma = np.sqrt(2 * pooled * (1 - pooled) / realisations)
        assert 0.0 < pooled < 1.0, "the probability must be informative at this time"
        assert abs(ours - theirs) <= 4 * sigma, (beta, ours, theirs, sigma)


def test_numpy_observables_equal_their_definition():
    """The sweep's one-pass sums on numpy arrays against the definitions, per task of three systems."""
    from validation.app.sweep import _observed_sums
    rng = np.random.default_rng(3)
    x = rng.normal(size=(6, 5, 3))
    x /= np.linalg.norm(x, axis=-1, keepdims=True)
    x[4, 1] = x[4, 0] + 1e-3  # one pair just inside the tolerance
    x[4, 1] /= np.linalg.norm(x[4, 1])
    inner = np.einsum("sc,sc->s", x[:, 0], x[:, 1])
    order = np.linalg.norm(x.mean(axis=1), axis=-1)
    sums = np.empty((3, 2))
    _observed_sums(x, 1e-3, sums)
    np.testing.assert_array_equal(sums[0], [0.0, 1.0])
    np.testing.assert_allclose(sums[1], inner.reshape(2, 3).sum(axis=1), rtol=0, atol=1e-15)
    np.testing.assert_allclose(sums[2], order.reshape(2, 3).sum(axis=1), rtol=0, atol=1e-15)


def test_a_local_sweep_starts_one_worker_per_cpu_the_process_may_use(monkeypatch):
    """The affinity mask (a batch scheduler's grant), not the node's core count: one single-threaded worker each."""
    import dask.distributed

    from solvers.threads import usable_cpus
    from validation.app import sweep

    class Started(Exception):
        pass

    seen = {}

    def cluster(**settings):
        seen.update(settings)
        raise Started

    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 2, 5}, raising=False)
    monkeypatch.setattr(os, "cpu_count", lambda: 64)
    monkeypatch.setattr(dask.distributed, "LocalCluster", cluster)
    assert usable_cpus() == 3
    with pytest.raises(Started), sweep._client(None, None):
        pass
    assert seen["n_workers"] == 3 and seen["threads_per_worker"] == 1
