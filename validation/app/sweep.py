r"""Parameter sweeps on Dask (``meanfield sweep CONFIG.toml``): grids of particle ensembles or PDE runs.

A particle grid point is ``realisations`` independent systems of ``n`` tokens, split into
tasks of ``batch`` systems that run together on the batch axis of
:func:`meanfield.observe_particles`. Chunk ``c`` of a point draws its initial tokens (and
its noise) from the generator seeded ``[method.seed, c]``: the same initial tokens at
every ``beta`` (common random numbers, so curves over ``beta`` are not blurred by
resampling), and a point's numbers do not depend on the grid around it or on which
worker ran it. Each task returns sums over its systems, at every output time, of

- ``[<x_1, x_2> >= 1 - cluster_tolerance]``, giving ``clustered_probability``,
- ``<x_1, x_2>``, giving ``inner_product`` (the mean),
- the order parameter :math:`|\frac1n \sum_i x_i|`, giving ``order_parameter`` (the mean),

and a point adds its chunks in chunk order. Pure attention in :math:`\mathbb{R}^d`
(``geometry = "euclidean"``) reads the same statistics on the tokens' directions
:math:`u_i = x_i/|x_i|` (``<u_1, u_2>``, :math:`|\frac1n\sum_i u_i|`), and tokens 1 and 2
count as clustered when :math:`|x_1 - x_2| \le` ``cluster_tolerance`` :math:`\max(|x_1|, |x_2|)`
(the same limit point; on the sphere this is close to the inner-product test). A PDE grid point is one task: the solver's
time series (``mass``, ``energy``, ...) and whether the run stayed resolved.

Tasks run in batches (:func:`plan_batches`), each task's result still its own (and stored
under its own key): on the CPU the chunks of a point (noiseless, of equal size) run as one
batch of up to :data:`CPU_BATCH_ELEMENTS` token coordinates, so the scheduler handles fewer, larger
units of work; with ``device`` set (``"torch:cuda"``, ``"cupy"``, ``"jax"``) the tasks of
one chunk whose points differ only in ``beta`` run as one batch with a beta per system, so
a GPU is kept busy by a whole row of the phase diagram, not by one beta's systems.

Every finished task is written at once to ``output/parts/<key>.npz`` (the key hashes the
point's full config and the chunk), so an interrupted sweep loses only the tasks in flight;
``resume=True`` skips finished tasks. A worker that dies has its tasks rerun elsewhere by
the Dask scheduler; a task that raises is retried twice.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import signal
import sys
import threading
import time
import warnings
from contextlib import contextmanager
import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import dask
import numba
import numpy as np
from array_api_compat import array_namespace, device as device_of, is_numpy_array
from tqdm.auto import tqdm

import meanfield as mf
from meanfield.engines.kernels import to_numpy
from meanfield.records import SWEEP, package_version
from solvers.threads import usable_cpus

from .builders import (build_model, build_run, frequency_model, graph_model, initial_density, initial_particles,
                       particle_method, solve_keywords)
from .config import ExperimentConfig
from .errors import ConfigError, SweepTaskError
from .files import locked_output, signals_deferred, write_atomically
from .sweep_config import SweepConfig, load_sweep_config

if TYPE_CHECKING:
    import xarray as xr

PARTS = "parts"

#: Seconds to wait for a Dask scheduler given by address.
CONNECT_TIMEOUT = 10


@dataclass(frozen=True)
class Task:
    """One unit of work: a chunk of ``systems`` particle systems of a point, or a whole PDE run."""

    index: tuple[int, ...]
    config: ExperimentConfig
    chunk: int
    systems: int
    tolerance: float
    device: str = "numpy"

    @property
    def key(self) -> str:
        """Hash of everything the result depends on (not of where it is written)."""
        computed = {name: value for name, value in self.config.to_dict().items() if name != "output"}
        # Another device gives the same numbers up to round-off: its parts are kept apart.
        on_device = [] if self.device == "numpy" else [self.device]
        text = json.dumps([computed, self.chunk, self.systems, self.tolerance] + on_device, sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()[:24]


def plan_tasks(sweep: SweepConfig) -> list[Task]:
    """All tasks of the sweep, point by point (C order of the grid), chunk by chunk."""
    tasks = []
    realisations, batch = sweep.settings.realisations, sweep.settings.batch
    for index, config in sweep.points():
        if sweep.particles:
            for chunk, start in enumerate(range(0, realisations, batch)):
                systems = min(batch, realisations - start)
                tasks.append(Task(index, config, chunk, systems, sweep.settings.cluster_tolerance,
                                  sweep.settings.device))
        else:
            tasks.append(Task(index, config, 0, 0, sweep.settings.cluster_tolerance))
    return tasks


#: Token coordinates in one batch of device tasks at most (2^26 doubles: 512 MiB per copy).
DEVICE_BATCH_ELEMENTS = 2**26

#: Token coordinates in one batch of CPU tasks at most (2^17 doubles, 1 MiB: the state of a
#: step stays in half the L2 cache). Larger batches leave the scheduler less to do at d = 2
#: and make a step at d = 128 leave the cache (``benchmarks/bench_sweep.py`` times both).
CPU_BATCH_ELEMENTS = 2**17

#: Batches per worker at least where chunks are grouped on the CPU: no worker idles at the end.
BATCHES_PER_WORKER = 4


def plan_batches(tasks: list[Task], workers: int = 1) -> list[list[Task]]:
    """The tasks grouped into units of work, in order; each task keeps its numbers and its result.

    On the CPU, consecutive chunks of a point run as one batch of up to
    :data:`CPU_BATCH_ELEMENTS` token coordinates (chunks of equal size, noiseless models: each system's
    run is the same in any batch), with at least :data:`BATCHES_PER_WORKER` batches per
    worker where there are enough tasks, and the last ``workers`` batches split into their tasks
    again: the workers then run out of work within one chunk of each other instead of one
    batch (the paper's diagram on 2 workers: one idled 0.06-0.7 s at the end, its last
    batches taking 0.5-1.3 s). On a device (``device`` other than numpy) the same
    chunk of the points that differ only in ``beta`` (a row of a phase diagram) runs as one
    batch with a beta per system (:func:`meanfield.observe_particles`' ``betas``): a GPU step
    over one beta's systems is launch-bound, and over a whole row costs about the same. The
    initial tokens of a chunk are the same at every beta, so each task gets the numbers it
    gets alone, to round-off. Noisy models keep one task per batch (a batch draws its noise
    as a whole).
    """
    batches, rows = [], {}
    most = max(1, len(tasks) // (BATCHES_PER_WORKER * workers))
    for task in tasks:
        row = _row_key(task)
        if row is not None:
            rows.setdefault(row, []).append(task)
        elif batches and _joins(batches[-1], task, most):
            batches[-1].append(task)
        else:
            batches.append([task])
    tail = max(0, len(batches) - workers)
    batches[tail:] = [[task] for batch in batches[tail:] for task in batch]
    for row in rows.values():
        size = max(1, DEVICE_BATCH_ELEMENTS // _coordinates(row[0]))
        batches.extend(row[start:start + size] for start in range(0, len(row), size))
    return batches


def _joins(batch: list[Task], task: Task, most: int) -> bool:
    """Whether ``task`` runs in the CPU batch ``batch`` (at most ``most`` tasks)."""
    first = batch[0]
    if task.device != "numpy" or not task.systems or task.index != first.index or task.systems != first.systems:
        return False
    return len(batch) < min(most, CPU_BATCH_ELEMENTS // _coordinates(task)) and task.config.model.diffusion == 0


def _coordinates(task: Task) -> int:
    """The token coordinates of a task's systems (what a batch's size is bounded by)."""
    return task.systems * task.config.method.n * task.config.dimension


def _row_key(task: Task) -> str | None:
    """What a task shares with the other betas of its row and chunk; ``None``: it runs alone."""
    if task.device == "numpy" or not task.systems:
        return None
    model = build_model(task.config)
    if not isinstance(model, mf.SelfAttention) or model.external is not None or model.diffusion > 0:
        return None
    config = task.config.to_dict()
    config["model"]["beta"] = None
    return json.dumps([config, task.chunk, task.systems, task.tolerance, task.device], sort_keys=True, default=str)


def run_tasks(tasks: list[Task]) -> list[dict[str, np.ndarray]]:
    """Compute a batch of :func:`plan_batches` (on a worker): one result per task, in order.

    numba's parallel loops (the circle's series) run on this thread alone: the sweep runs a
    worker per core, and workers whose threads each took every core would oversubscribe them.
    (Not ``NUMBA_NUM_THREADS`` in the workers'
    environment: Dask sets that environment in the calling process too, where numba then
    refuses to compile once its threads run.)
    """
    threads = numba.get_num_threads()
    numba.set_num_threads(1)
    try:
        return _particle_chunks(tasks) if len(tasks) > 1 else [run_task(tasks[0])]
    finally:
        numba.set_num_threads(threads)


def run_task(task: Task) -> dict[str, np.ndarray]:
    """Compute one task; returns sums over its systems, or a PDE run's time series."""
    return _particle_chunks([task])[0] if task.systems else _pde_point(task.config)


def _particle_chunks(tasks: list[Task]) -> list[dict[str, np.ndarray]]:
    """A batch of :func:`plan_batches`: chunks of one point, or one chunk of points that differ in ``beta`` only."""
    task = tasks[0]
    config = task.config
    model = build_model(config)
    if isinstance(model, mf.RandomAttention):
        return [_random_weight_chunk(other) for other in tasks]
    if isinstance(model, mf.GraphAttention):
        return [_graph_chunk(other) for other in tasks]
    if isinstance(model, mf.NaturalFrequencies):
        return [_frequency_chunk(other) for other in tasks]
    generators = [np.random.default_rng([config.method.seed, other.chunk]) for other in tasks]
    density = initial_density(config)
    x0 = np.concatenate([initial_particles(config, density, generator, systems=task.systems)
                         for generator in generators])
    betas = None
    if any(other.config != config for other in tasks):
        betas = np.repeat([build_model(other.config).beta for other in tasks], task.systems)
    x0 = on_device(x0, task.device)
    xp = array_namespace(x0)
    averages = {}
    per_task = (len(tasks), task.systems)

    def observe(x) -> list:
        # Inner products and the norm of the mean: invariant, so the span coordinates do.
        if is_numpy_array(x):
            sums = np.empty((3, len(tasks)))
            _observed_sums(x, task.tolerance, sums)
            return list(sums)
        inner = xp.reshape(xp.vecdot(x[:, 0, :], x[:, 1, :]), per_task)
        mean = token_mean(x, xp, averages)
        order = xp.reshape(xp.sqrt(xp.vecdot(mean, mean)), per_task)
        return [xp.sum(xp.astype(inner >= 1.0 - task.tolerance, xp.float64), axis=1), xp.sum(inner, axis=1),
                xp.sum(order, axis=1)]

    if config.euclidean:
        frames = mf.observe_particles(model, x0, config.times.array(),
                                      lambda x: euclidean_sums(x, task.tolerance, per_task),
                                      method=particle_method(config), dt=config.method.dt)
    else:
        frames = mf.observe_particles(model, x0, config.times.array(), observe, method=particle_method(config),
                                      dt=config.method.dt, rng=generators[0], invariant=True, betas=betas)
    sums = np.array([[to_numpy(value) for value in frame] for frame in frames])  # (time, 3, task)
    return [dict(zip(("clustered", "inner_product", "order_parameter"), sums[:, :, k].T)) for k in range(len(tasks))]


def _random_weight_chunk(task: Task) -> dict[str, np.ndarray]:
    """A chunk of random-weight systems: tokens, then each system's weights, from the chunk's generator.

    The weights' seed is the chunk generator's next draw after the tokens (recorded by the
    chunk's key): the same tokens and weights at every ``beta``.
    """
    config = task.config
    model = build_model(config)
    generator = np.random.default_rng([config.method.seed, task.chunk])
    x0 = initial_particles(config, initial_density(config), generator, systems=task.systems)
    layers = np.round(config.times.array() / config.method.dt).astype(int)

    def observe(x) -> np.ndarray:
        sums = np.empty((3, 1))
        _observed_sums(x, task.tolerance, sums)
        return np.append(sums[:, 0], mf.span_dimension(x).sum())

    frames, _ = mf.observe_random_layers(model, x0, layers[1:].tolist(), observe, seed=generator, progress=False)
    sums = np.array(frames)  # (time, 4)
    return dict(zip(("clustered", "inner_product", "order_parameter", "span_dimension"), sums.T))


def _graph_chunk(task: Task) -> dict[str, np.ndarray]:
    """A chunk of systems on graphs: tokens, then one graph per system, from the chunk's generator; the systems
    run together, each on its own graph (a batch of graphs), the noise after the graphs from the same generator.

    Besides the pair and the order parameter, each system counts as synchronised at a time
    when its order parameter is at least ``1 - cluster_tolerance`` (every token in one
    cluster), and as connected when its graph is.
    """
    config = task.config
    generator = np.random.default_rng([config.method.seed, task.chunk])
    x0 = initial_particles(config, initial_density(config), generator, systems=task.systems)
    model = graph_model(config, generator, systems=task.systems)

    def observe(x) -> np.ndarray:
        per_system = np.empty((3, task.systems))
        _observed_sums(x, task.tolerance, per_system)
        synchronised = np.sum(per_system[2] >= 1.0 - task.tolerance, dtype=float)
        return np.append(per_system.sum(axis=1), synchronised)

    frames = mf.observe_particles(model, x0, config.times.array(), observe, method=particle_method(config),
                                  dt=config.method.dt, rng=generator)
    sums = np.array(frames)
    connected = sum(mf.is_connected(graph) for graph in model.adjacency)
    return {**dict(zip(("clustered", "inner_product", "order_parameter", "synchronised"), sums.T)),
            "connected": np.array(float(connected))}


def _frequency_chunk(task: Task) -> dict[str, np.ndarray]:
    """A chunk of oscillators with natural frequencies: tokens, then each system's frequencies, from the chunk's
    generator (so a point repeats bit for bit); the pair and the order parameter, as for the other particles."""
    config = task.config
    generator = np.random.default_rng([config.method.seed, task.chunk])
    x0 = initial_particles(config, initial_density(config), generator, systems=task.systems)
    model = frequency_model(config, generator, systems=task.systems)
    times = config.times.array()
    run = mf.simulate_particles(model, x0, times, method=particle_method(config), dt=config.method.dt, rng=generator,
                                progress=False)
    x = run.x.values  # (system, time, n, 2)
    sums = np.empty((times.size, 3))
    for k in range(times.size):
        pair = np.empty((3, 1))
        _observed_sums(np.ascontiguousarray(x[:, k]), task.tolerance, pair)
        sums[k] = pair[:, 0]
    return dict(zip(("clustered", "inner_product", "order_parameter"), sums.T))


def euclidean_sums(x, tolerance: float, per_task: tuple[int, int]) -> list:
    """Pure attention's sums per task (module docstring): clustered pairs, ``<u_1, u_2>``, the mean direction's
    norm; in ``x``'s namespace and on its device."""
    xp = array_namespace(x)
    norms = xp.sqrt(xp.sum(x * x, axis=-1))
    directions = x / norms[..., None]
    gap = x[:, 0, :] - x[:, 1, :]
    together = xp.sqrt(xp.sum(gap * gap, axis=-1)) <= tolerance * xp.maximum(norms[:, 0], norms[:, 1])
    cosine = xp.sum(directions[:, 0, :] * directions[:, 1, :], axis=-1)
    mean = xp.mean(directions, axis=1)
    order = xp.sqrt(xp.sum(mean * mean, axis=-1))
    return [xp.sum(xp.reshape(values, per_task), axis=1)
            for values in (xp.astype(together, xp.float64), cosine, order)]


@numba.njit(cache=True)
def _observed_sums(x, tolerance, sums):
    r"""Per task (``sums.shape[1]`` equal groups of systems): the sums of :math:`[\langle x_1, x_2\rangle
    \ge 1 - \text{tolerance}]`, :math:`\langle x_1, x_2\rangle` and :math:`|\frac1n \sum_i x_i|` over its systems.

    One pass per system for numpy arrays: the observer's array API expressions cost a
    noticeable part of a step of the circle's series there.
    """
    b, n, k = x.shape
    systems = b // sums.shape[1]
    for task in range(sums.shape[1]):
        clustered, inner_total, order_total = 0.0, 0.0, 0.0
        for s in range(task * systems, (task + 1) * systems):
            inner, norm = 0.0, 0.0
            for c in range(k):
                inner += x[s, 0, c] * x[s, 1, c]
                mean = 0.0
                for i in range(n):
                    mean += x[s, i, c]
                norm += (mean / n) ** 2
            clustered += 1.0 if inner >= 1.0 - tolerance else 0.0
            inner_total += inner
            order_total += np.sqrt(norm)
        sums[0, task], sums[1, task], sums[2, task] = clustered, inner_total, order_total


def token_mean(x, xp, averages: dict):
    """``mean(x, axis=1)`` of ``(b, n, k)`` tokens as one matrix product.

    numpy reduces a middle axis with a short last axis element by element, where a product
    is one BLAS call; ``averages`` keeps the ``(n k, k)`` averaging matrix per shape.
    """
    b, n, k = x.shape
    if (n, k) not in averages:
        matrix = np.tile(np.eye(k), (n, 1)) / n
        averages[n, k] = xp.asarray(matrix, device=device_of(x)) if not is_numpy_array(x) else matrix
    return xp.reshape(x, (b, n * k)) @ averages[n, k]


def on_device(x: np.ndarray, device: str):
    """``x`` as an array of the library and device ``device`` names (``"torch:cuda"``, ``"cupy"``, ...)."""
    library, _, where = device.partition(":")
    if library == "numpy":
        return x
    if library == "array_api_strict":
        import array_api_strict
        return array_api_strict.asarray(x)
    if library == "torch":
        import torch
        return torch.asarray(x, dtype=torch.float64, device=where or None)
    if library == "cupy":
        import cupy
        with cupy.cuda.Device(int(where or 0)):
            return cupy.asarray(x)
    import jax
    jax.config.update("jax_enable_x64", True)
    return jax.device_put(x, jax.devices(where)[0] if where else None)


def _pde_point(config: ExperimentConfig) -> dict[str, np.ndarray]:
    run = build_run(config)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # recorded as `trustworthy`; a sweep must not flood stderr
        ds = run.solver.solve(run.initial, run.times, progress=False, **solve_keywords(config))
    # a run that stopped at its first under-resolved output has no values past it: NaN there
    missing = run.times.size - ds.sizes["time"]
    # numeric series and flags (a chain's `stage`, the name of each output's solver, is not a number)
    series = {name: np.concatenate([var.values, np.full(missing, np.nan)]) for name, var in ds.data_vars.items()
              if var.dims == ("time",) and (np.issubdtype(var.dtype, np.number) or var.dtype == bool)}
    series["trustworthy"] = np.array(float(not np.isfinite(ds.attrs.get("underresolved_since", np.nan))))
    return series


def combine_point(results: list[dict[str, np.ndarray]], realisations: int) -> dict[str, np.ndarray]:
    """A point's observables from its tasks' results, added in chunk order."""
    if "clustered" not in results[0]:
        return results[0]
    totals = {name: sum(result[name] for result in results) for name in results[0]}
    means = {"clustered_probability": totals["clustered"] / realisations,
             "inner_product": totals["inner_product"] / realisations,
             "order_parameter": totals["order_parameter"] / realisations}
    if "span_dimension" in totals:  # random weights: the rank collapse
        means["span_dimension"] = totals["span_dimension"] / realisations
    if "synchronised" in totals:  # graphs: synchronisation, and how many of the graphs were connected
        means["synchronised_probability"] = totals["synchronised"] / realisations
        means["connected_probability"] = totals["connected"] / realisations
    return means


def run_point(sweep: SweepConfig, config: ExperimentConfig) -> dict[str, np.ndarray]:
    """One grid point computed here, serially, without Dask (the reference for a sweep's numbers)."""
    tasks = [task for task in plan_tasks(sweep) if task.config == config]
    if not tasks:
        raise ValueError("config is not a point of this sweep")
    return combine_point([run_task(task) for task in tasks], sweep.settings.realisations)


def run_sweep(sweep: SweepConfig | str | Path, *, scheduler: str | None = None, workers: int | None = None,
              resume: bool = False, progress: bool | None = None) -> xr.Dataset:
    """Run every unfinished task on Dask and gather the sweep into one dataset (also written to disk).

    Parameters
    ----------
    sweep : SweepConfig or path of a TOML file
    scheduler : str, optional
        Address of a running Dask scheduler (``tcp://host:8786``); by default a local cluster
        of ``workers`` single-threaded worker processes is started.
    workers : int, optional
        Worker processes of the local cluster (default: one per core).
    resume : bool
        Skip tasks whose results ``output/parts`` already holds. Without it, finished parts
        from an earlier run are an error (they would be silently reused otherwise).
    progress : bool, optional
        Progress bar over the tasks (default: when stderr is a terminal).

    Returns
    -------
    xarray.Dataset
        One variable per observable over (grid parameters..., time); ``attrs`` hold the
        config, the settings, the task counts, the workers, the wall time and the version.

    Raises
    ------
    ConfigError
        Bad config or output folder, or finished parts present without ``resume``.
    SweepTaskError
        A task failed three times (the finished ones are kept).
    """
    sweep = load_sweep_config(sweep) if isinstance(sweep, (str, Path)) else sweep
    with locked_output(sweep.output, "meanfield sweep"):
        parts = sweep.output / PARTS
        parts.mkdir(exist_ok=True)
        tasks = plan_tasks(sweep)
        done = {path.stem for path in parts.glob("*.npz")}
        finished = sum(task.key in done for task in tasks)
        if finished and not resume:
            raise ConfigError(f"{parts} already holds {finished} finished tasks of this sweep; pass --resume "
                              f"to skip them, or delete the folder to start over")
        computed = stored_results(tasks, parts)
        todo = [task for task in tasks if task.key not in computed]
        started = time.perf_counter()
        used = _compute(todo, parts, scheduler, workers, progress, sweep, computed) if todo else 0
        ds = gather(sweep, tasks, computed)
        ds.attrs.update(wall_time=time.perf_counter() - started, tasks=len(tasks), tasks_computed=len(todo),
                        workers=used, scheduler=scheduler or "local")
        write_dataset(ds, sweep.output / sweep.settings.file)
    return ds


def stored_results(tasks: list[Task], parts: Path) -> dict[str, dict[str, np.ndarray]]:
    """The results of earlier runs in ``parts``, by task key, each checked as it is read.

    A part that cannot be read, or whose arrays are not a task's (names, shapes, finite
    values), is named on stderr and removed: its task is computed again, the good parts kept.
    """
    results = {}
    for task in tasks:
        path = parts / f"{task.key}.npz"
        if task.key in results or not path.exists():
            continue
        try:
            with np.load(path, allow_pickle=False) as stored:
                result = {name: stored[name] for name in stored.files}
            _check_result(task, result)
        except Exception as error:  # noqa: BLE001 - any reader error means the part is unusable
            print(f"meanfield sweep: part {path} is damaged ({type(error).__name__}: {error}); it is removed "
                  f"and its task computed again", file=sys.stderr)
            path.unlink(missing_ok=True)
            continue
        results[task.key] = result
    return results


def _check_result(task: Task, result: dict[str, np.ndarray]) -> None:
    """Raise ``ValueError`` when ``result`` is not what ``task`` returns (a damaged part).

    A particle task returns three finite sums per output time; a PDE task its time series
    (diagnostics may be infinite or NaN: an unbounded cluster width, no Lyapunov functional)
    and the scalar ``trustworthy``.
    """
    count = task.config.times.count
    required = {"clustered", "inner_product", "order_parameter"} if task.systems else {"mass", "trustworthy"}
    if not required <= set(result) or (task.systems and set(result) != required):
        raise ValueError(f"arrays {sorted(result)}, expected {sorted(required)}{'' if task.systems else ' and more'}")
    for name, value in result.items():
        shape_ok = value.shape == (count,) or (not task.systems and value.shape == ())
        if not shape_ok or value.dtype.kind not in "fb" or (task.systems and not np.all(np.isfinite(value))):
            raise ValueError(f"array {name!r} is not {count} {'finite ' if task.systems else ''}numbers")


def _compute(tasks: list[Task], parts: Path, scheduler: str | None, workers: int | None,
             progress: bool | None, sweep: SweepConfig, computed: dict) -> int:
    """Run ``tasks``, storing each result as it arrives (also in ``computed``, by key); returns the
    number of workers at the start."""
    enabled = os.isatty(2) if progress is None else progress
    with _client(scheduler, workers) as client, \
            tqdm(total=len(tasks), disable=not enabled, desc="sweep", unit="task") as bar:
        if enabled:
            print(f"Dask dashboard: {client.dashboard_link}", file=sys.stderr)
        started_with = len(client.scheduler_info()["workers"])
        futures = {client.submit(run_tasks, batch, key=f"meanfield-{batch[0].key}", retries=2, pure=False): batch
                   for batch in plan_batches(tasks, max(1, started_with))}
        try:
            _store_as_completed(futures, parts, sweep, bar, computed)
        except KeyboardInterrupt:
            # Stop the work before the cluster closes, so that workers end their tasks cleanly.
            client.cancel(list(futures), force=True)
            raise
    return started_with


def _store_as_completed(futures: dict, parts: Path, sweep: SweepConfig, bar, computed: dict) -> None:
    from dask.distributed import as_completed

    for future in as_completed(futures):
        batch = futures[future]
        try:
            results = future.result()
        except Exception as error:
            first, last = batch[0], batch[-1]
            if len(batch) == 1:
                which = f"the task for ({sweep.describe(first.index)}), chunk {first.chunk}"
            elif first.index == last.index:
                which = f"the batch of chunks {first.chunk} to {last.chunk} of ({sweep.describe(first.index)})"
            else:
                which = (f"the batch of {len(batch)} tasks from ({sweep.describe(first.index)}) to "
                         f"({sweep.describe(last.index)}), chunk {first.chunk}")
            raise SweepTaskError(f"{which} failed three times: {error!r}; finished tasks are kept in {parts}, "
                                 f"rerun with --resume") from error
        for task, result in zip(batch, results):
            write_atomically(parts / f"{task.key}.npz", lambda path: np.savez(path, **result))
            computed[task.key] = result
        future.release()
        bar.update(len(batch))


@contextmanager
def _client(scheduler: str | None, workers: int | None):
    from dask.distributed import Client, LocalCluster

    if scheduler is not None:
        try:
            client = Client(scheduler, timeout=f"{CONNECT_TIMEOUT}s")
        except (OSError, TimeoutError) as error:
            raise ConfigError(f"--scheduler: no Dask scheduler answers at {scheduler!r} within "
                              f"{CONNECT_TIMEOUT} s ({type(error).__name__})") from None
        with client:
            yield client
        return
    workers = workers or usable_cpus()
    _quiet_resource_tracker()
    # One thread per worker process: numpy's exp and the small matrix products hold the GIL.
    # Workers' own logs stay off the terminal below CRITICAL: a task's failure reaches the client
    # through its future, while the errors a worker logs when the cluster closes under it (the
    # heartbeat's CommClosedError) say nothing about the sweep.
    with _workers_ignore_ctrl_c(), dask.config.set({PRESPAWN: worker_environment(), **QUIET_LOCAL_CLUSTER}):
        cluster = LocalCluster(n_workers=workers, threads_per_worker=1, processes=True, dashboard_address=":0",
                               silence_logs=logging.CRITICAL)
    with cluster, Client(cluster) as client:
        yield client


PRESPAWN = "distributed.nanny.pre-spawn-environ"

#: Dask settings of the local cluster a sweep starts: no statistical profiler in the workers
#: (it samples the task's stack every 10 ms), the system and memory monitors at 5 s and 1 s
#: instead of 0.5 s and 0.1 s, event-loop health checks every 0.5 s instead of 20 ms. With a
#: worker per core this background work takes the tasks' cores (``benchmarks/bench_sweep.py``).
#: Only the dashboard's profile and its system plots lose detail. A cluster given by address
#: keeps its own.
QUIET_LOCAL_CLUSTER = {"distributed.worker.profile.enabled": False,
                       "distributed.admin.system-monitor.interval": "5s",
                       "distributed.worker.memory.monitor-interval": "1s",
                       "distributed.admin.tick.interval": "500ms"}


def worker_environment() -> dict:
    """Dask's environment for new worker processes, less its ``MALLOC_TRIM_THRESHOLD_``.

    Any explicit malloc threshold turns off glibc's dynamic mmap threshold, so every
    temporary above 128 KiB (a block of weights) is mapped and unmapped at each step: page
    faults at every step that a plain process does not take (``benchmarks/bench_particles.py``
    times both). glibc's own behaviour keeps
    them on the heap once freed. The single-thread BLAS/OpenMP settings stay.
    """
    from distributed.config import defaults  # importing it also puts distributed's defaults in dask's config

    inherited = dask.config.get(PRESPAWN, defaults["distributed"]["nanny"]["pre-spawn-environ"])
    return {name: value for name, value in inherited.items() if name != "MALLOC_TRIM_THRESHOLD_"}


def _quiet_resource_tracker() -> None:
    """Keep multiprocessing's resource tracker from warning about semaphores it then removes.

    Workers stopped by the cluster's close (after Ctrl-C) leave POSIX semaphores behind; the
    tracker process removes them at exit, with a warning that says only that. Its interpreter
    takes its warning filters from this one's options when it starts (with the first worker).
    """
    option = "ignore:resource_tracker:UserWarning"
    if option not in sys.warnoptions:
        sys.warnoptions.append(option)


@contextmanager
def _workers_ignore_ctrl_c():
    """Start worker processes with SIGINT ignored (an ignored signal stays ignored in a child).

    Ctrl-C reaches every process of the terminal's group: the workers would each die with a
    traceback. Only this process handles it, by closing the cluster.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def gather(sweep: SweepConfig, tasks: list[Task], computed: dict | None = None) -> xr.Dataset:
    """Assemble the dataset from the results of every task: those ``computed`` in this run (by key),
    the others from their stored parts (reading back the paper diagram's 720 parts takes
    0.25-0.3 s, a serial cost of every sweep)."""
    # xarray is imported here, not with the module: workers import this module to run tasks,
    # and xarray with pandas would double their start-up, which every sweep waits for.
    import xarray as xr

    computed = computed or {}
    missing = [task for task in tasks if task.key not in computed]
    computed = {**computed, **stored_results(missing, sweep.output / PARTS)} if missing else computed
    by_point: dict[tuple, list[dict]] = {}
    for task in tasks:
        if task.key not in computed:
            raise ConfigError(f"the result of ({sweep.describe(task.index)}), chunk {task.chunk} is neither "
                              f"computed nor stored in {sweep.output / PARTS}: run the sweep with --resume")
        by_point.setdefault(task.index, []).append(computed[task.key])
    points = {index: combine_point(results, sweep.settings.realisations) for index, results in by_point.items()}
    first = next(iter(points.values()))
    dims = tuple(sweep.grid)
    data = {}
    for name, sample in first.items():
        array = np.empty(sweep.shape + sample.shape)
        for index, values in points.items():
            array[index] = values[name]
        data[name] = (dims + ("time",) * sample.ndim, array)  # time series, or a scalar (`trustworthy`)
    ds = xr.Dataset(data, coords={**sweep.grid, "time": sweep.base.times.array()})
    if sweep.particles:
        tolerance = sweep.settings.cluster_tolerance
        if sweep.base.euclidean:  # the tokens' directions u_i = x_i / |x_i| (module docstring)
            ds["clustered_probability"].attrs["long_name"] = f"P(|x_1 - x_2| <= {tolerance:g} max(|x_1|, |x_2|))"
            ds["inner_product"].attrs["long_name"] = "mean <u_1, u_2>"
            ds["order_parameter"].attrs["long_name"] = "mean |(1/n) sum_i u_i|"
        else:
            ds["clustered_probability"].attrs["long_name"] = f"P(<x_1, x_2> >= 1 - {tolerance:g})"
            ds["inner_product"].attrs["long_name"] = "mean <x_1, x_2>"
            ds["order_parameter"].attrs["long_name"] = "mean |(1/n) sum_i x_i|"
        if "span_dimension" in ds:
            ds["span_dimension"].attrs["long_name"] = "mean number of Gram eigenvalues above 1e-3 (the span)"
        if "synchronised_probability" in ds:
            ds["synchronised_probability"].attrs["long_name"] = f"P(|(1/n) sum_i x_i| >= 1 - {tolerance:g})"
            ds["connected_probability"].attrs["long_name"] = "fraction of the drawn graphs that are connected"
    ds.attrs.update(kind=SWEEP, method=sweep.base.method.kind, config=json.dumps(sweep.base.to_dict()),
                    grid=json.dumps(sweep.grid), settings=json.dumps(dataclasses.asdict(sweep.settings)),
                    version=package_version())
    return ds


def write_dataset(ds: xr.Dataset, path: Path) -> Path:
    """NetCDF (``.nc``) or Zarr (``.zarr``), replaced atomically either way."""
    if path.suffix != ".zarr":
        return write_atomically(path, ds.to_netcdf)
    temporary = path.with_name(f".{path.name}.partial")
    shutil.rmtree(temporary, ignore_errors=True)
    with signals_deferred():
        ds.to_zarr(temporary, mode="w", zarr_format=2)  # format 2: consolidated metadata, read everywhere
    if path.exists():
        shutil.rmtree(path)
    os.replace(temporary, path)
    return path
