"""One experiment from a config (``meanfield run CONFIG.toml``): run, checkpoint, resume, record.

The run advances in segments of ``checkpoint_every`` output intervals. After each
segment its new outputs, the solver's next step size and the noise generator's state
are written atomically to ``checkpoint/segment_NNNNNN.nc``, so a checkpoint costs the
same whatever the length of the history before it; ``resume=True`` reads the segments
back and ends with the result of an uninterrupted run (the same steps are taken).
"""

from __future__ import annotations

import json
import shutil
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import xarray as xr
import meanfield as mf
from meanfield.progress import time_progress
from meanfield.records import PARTICLES, dataset_kind, dataset_settings, package_version
from meanfield.errors import StepSizeCollapse
from solvers import UnderResolvedWarning
from solvers.grid_solver import padded_to_longest
from meanfield.integration import Pace
from solvers.methods import METHODS_BY_NAME

from .builders import RunObjects, initial_particles, particle_method, solve_keywords
from .config import ExperimentConfig, check_config, load_config
from .errors import ConfigError, DamagedFile
from .files import check_output_folder, locked_output, write_atomically, write_text
from .preflight import check_particle_duration, preflight

CHECKPOINTS = "checkpoint"
DATASET = "dataset.nc"

#: Attributes that only a checkpoint segment carries.
CHECKPOINT_ATTRS = ("config", "checkpoint_segment", "next_step", "rng_state", "wall_time")


def prepare(config: ExperimentConfig | dict | str | Path) -> RunObjects:
    """Check the config, what it builds and the output folder; everything that can fail before computing fails here.

    ``config`` is a checked config, a table to check or a TOML file's path; returns what the
    run uses, built once (:func:`~validation.app.preflight.preflight`).
    """
    if isinstance(config, (str, Path)):
        config = load_config(config)
    elif not isinstance(config, ExperimentConfig):
        config = check_config(config)
    if config.model.random is not None:
        raise ConfigError("model.random (weights drawn per system) runs in sweeps (meanfield sweep), or from "
                          "Python with meanfield.simulate_random_layers")
    if config.particles and config.method.d is not None and config.method.d > 3 and not config.euclidean:
        raise ConfigError(f"method.d = {config.method.d}: meanfield run draws particles on S^2 "
                          f"(d <= 3); particles in higher dimension run in sweeps (meanfield sweep)")
    run = preflight(config)
    if config.particles:
        check_particle_duration(run)
    check_output_folder(Path(config.output))
    return run


def run_experiment(config: RunObjects | ExperimentConfig | dict | str | Path, *, resume: bool = False,
                   progress: bool | None = None, locked: bool = False) -> xr.Dataset:
    """Run an experiment (``meanfield run``); returns the dataset also written to ``output/dataset.nc``.

    The output folder is locked for the run (``validation.app.files.locked_output``), unless
    ``locked`` says that the caller holds its lock (``meanfield run`` holds it until its
    figures and report are written too).
    With ``resume``, every stored checkpoint segment is checked as it is read: a good one is
    used, a damaged or missing one is named on stderr and computed again from the segment
    before it (the same steps, so the result is that of an uninterrupted run).

    Parameters
    ----------
    config : RunObjects, ExperimentConfig, dict or path
        A TOML file, its tables, a checked config, or what ``prepare`` returned (used as it is).
    resume : bool
        Go on from the checkpoints of an interrupted run of the same config.
    progress : bool, optional
        Progress bar (default: when stderr is a terminal).
    locked : bool
        The caller holds the output folder's lock (``locked_output``) and keeps it past the run.

    Returns
    -------
    xarray.Dataset
        The run's dataset (particles, PDE, or both with their distance), with the config in
        ``attrs``.

    Raises
    ------
    ConfigError
        A bad config; another process writing the output folder; checkpoints of an
        interrupted run without ``resume`` (they would be lost); ``resume`` with no checkpoint
        or with checkpoints of another config.
    """
    run = config if isinstance(config, RunObjects) else prepare(config)
    output = Path(run.config.output)
    if locked:
        return _run_locked(run, output, resume, progress)
    with locked_output(output, "meanfield run"):
        return _run_locked(run, output, resume, progress)


def _run_locked(run: RunObjects, output: Path, resume: bool, progress: bool | None) -> xr.Dataset:
    config, times, model, solver, rho0 = run.config, run.times, run.model, run.solver, run.initial
    every = config.checkpoint_every or times.size
    boundaries = list(range(0, times.size - 1, every)) + [times.size - 1]
    generator = np.random.default_rng(config.method.seed)
    # Drawn before any segment: a recomputed first segment finds the generator where the run left it.
    state = rho0 if solver is not None else initial_particles(config, rho0, generator)
    stored = _stored_segments(output, config, boundaries, times, resume)
    started = time.perf_counter()
    elapsed = max((float(part.attrs["wall_time"]) for part in stored.values()), default=0.0)
    parts, next_step, continued, stopped = [], None, False, None
    pace = Pace.hours(float(times[-1]), max(config.max_hours - elapsed / 3600, 0.0))

    # One bar for the whole run, advanced by every segment (stored segments count as done).
    with warnings.catch_warnings(), time_progress(times[0], times[-1], progress, "run") as bar:
        for segment in range(1, len(boundaries)):
            if parts and not _trustworthy(parts):
                # Once a run is untrustworthy, later segments would only repeat the warning.
                warnings.filterwarnings("ignore", category=UnderResolvedWarning)
            segment_times = times[boundaries[segment - 1]: boundaries[segment] + 1]
            if segment in stored:
                part = stored[segment]
                next_step = _continue_after(part, generator)
                bar.update(segment_times[-1] - segment_times[0])
            else:
                try:
                    part = _compute_segment(config, model, solver, state, segment_times, generator, bar, next_step,
                                            continued, pace)
                except StepSizeCollapse as collapse:  # keep what was computed, and say why it stopped
                    stopped = str(collapse)
                    part = collapse.partial
                    if part is not None and part.sizes["time"] > (segment > 1):
                        parts.append(part.isel(time=slice(int(segment > 1), None)))
                    if not parts:
                        raise
                    break
                next_step = dataset_settings(part).get("next_step") if solver is not None else None
                if part.sizes["time"] < segment_times.size:  # ended at its first under-resolved output
                    stopped = (f"under-resolved from t={part.attrs['underresolved_since']:.6g}: the run ends at its "
                               f"first under-resolved output (method.underresolved = 'continue' goes on)")
                    parts.append(part.isel(time=slice(int(segment > 1), None)))
                    break
                if segment > 1:
                    part = part.isel(time=slice(1, None))
                if segment < len(boundaries) - 1:
                    _write_checkpoint(output, config, part, next_step, generator, segment,
                                      elapsed + time.perf_counter() - started)
            if segment < len(boundaries) - 1:
                state = part.x.values[-1] if solver is None else solver.continuation_state(part)
            continued = True
            parts.append(part)

    ds = _combine(parts, config, elapsed + time.perf_counter() - started, stopped)
    write_atomically(output / DATASET, ds.to_netcdf)
    shutil.rmtree(output / CHECKPOINTS, ignore_errors=True)
    return ds


def _continue_after(part: xr.Dataset, generator: np.random.Generator) -> float | None:
    """Put the generator where a stored segment left it and return the step to go on with; the
    segment loses its checkpoint attributes (it becomes a part of the run's dataset)."""
    generator.bit_generator.state = json.loads(part.attrs["rng_state"])
    next_step = float(part.attrs["next_step"])
    for key in CHECKPOINT_ATTRS:
        del part.attrs[key]
    return next_step if np.isfinite(next_step) else None


def _compute_segment(config, model, solver, state, segment_times, generator, bar, next_step, continued, pace):
    if solver is None:
        return mf.simulate_particles(model, state, segment_times, method=particle_method(config),
                                     observables=("energy",) if model.has_energy else (),
                                     dt=config.method.dt, rng=generator, progress=bar)
    chosen = METHODS_BY_NAME[config.method.kind]
    if not chosen.resumable:  # one piece (the config refuses checkpoints)
        return solver.solve(state, segment_times, progress=bar, **solve_keywords(config))
    return solver.solve(state, segment_times, progress=bar, first_step=next_step, continued=continued, pace=pace,
                        **solve_keywords(config))


def _trustworthy(parts: list[xr.Dataset]) -> bool:
    return not any(np.isfinite(p.attrs.get("underresolved_since", np.nan)) for p in parts)


def _combine(parts: list[xr.Dataset], config: ExperimentConfig, wall_time: float, stopped: str | None = None) -> xr.Dataset:
    """The run's dataset from its segments; ``stopped``: why it ended before its last output time."""
    ds = xr.concat(padded_to_longest(parts), dim="time", data_vars="minimal", coords="minimal", compat="override",
                   combine_attrs="override")
    ds.attrs = dict(parts[-1].attrs)
    handovers = _handovers_of(parts)
    if handovers:
        ds.attrs["settings"] = json.dumps({**dataset_settings(parts[-1]), **handovers})
    since = [p.attrs.get("underresolved_since", np.nan) for p in parts]
    since = [s for s in since if np.isfinite(s)]
    ds.attrs.update(config=json.dumps(config.to_dict()), version=package_version(), wall_time=wall_time,
                    underresolved_since=min(since) if since else np.nan,
                    trustworthy=int(not since and not stopped), segments=len(parts), stopped=stopped or "")
    return ds


def _handovers_of(parts: list[xr.Dataset]) -> dict:
    """The run's hand-over times and the mass each moved, from its segments' settings (``handover_time`` and
    ``handover_clipped``; as a chain, ``handover_times`` and ``handover_moved``).

    A segment records NaN for a hand-over it did not reach and its own start for one made before
    it (it began with the later solver, and moved nothing): the first segment, in order, with a
    finite time is where the run handed over."""
    settings = [dataset_settings(part) for part in parts]
    merged = {}
    for time_key, mass_key, scalar in (("handover_time", "handover_clipped", True),
                                       ("handover_times", "handover_moved", False)):
        segments = [run for run in settings if time_key in run]
        if not segments:
            continue
        times = [np.atleast_1d(np.asarray(run[time_key], dtype=float)) for run in segments]
        found = [next((k for k, column in enumerate(times) if np.isfinite(column[index])), None)
                 for index in range(times[0].size)]
        when = [np.nan if k is None else float(times[k][index]) for index, k in enumerate(found)]
        merged[time_key] = when[0] if scalar else when
        if all(mass_key in run for run in segments):
            masses = [np.atleast_1d(np.asarray(run[mass_key], dtype=float)) for run in segments]
            moved = [0.0 if k is None else float(masses[k][index]) for index, k in enumerate(found)]
            merged[mass_key] = moved[0] if scalar else moved
    return merged


def _write_checkpoint(output: Path, config: ExperimentConfig, part: xr.Dataset, next_step, generator, segment, elapsed) -> None:
    """The newest segment only, with what continuing after it needs."""
    ds = part.copy()
    ds.attrs.update(config=json.dumps(config.to_dict()), checkpoint_segment=segment, wall_time=elapsed,
                    next_step=np.nan if next_step is None else next_step,
                    rng_state=json.dumps(generator.bit_generator.state))
    folder = output / CHECKPOINTS
    folder.mkdir(exist_ok=True)
    write_atomically(folder / f"segment_{segment:06d}.nc", ds.to_netcdf)


def _stored_segments(output: Path, config: ExperimentConfig, boundaries: list[int], times: np.ndarray,
                     resume: bool) -> dict[int, xr.Dataset]:
    """The good checkpoint segments by number; damaged ones are named on stderr, removed and recomputed."""
    folder = output / CHECKPOINTS
    paths = sorted(folder.glob("segment_*.nc"))
    if not resume:
        if paths:
            raise ConfigError(f"{folder} holds {len(paths)} checkpoint segment(s) of an interrupted run: continue "
                              f"it with --resume, or delete that folder to start over")
        return {}
    if not paths:
        raise ConfigError(f"--resume: no checkpoint in {str(output)!r} (the run finished or never started)")
    stored = {}
    for path in paths:
        try:
            number, part = _read_segment(path, config, boundaries, times)
        except DamagedFile as damage:
            print(f"meanfield run: checkpoint {path} is damaged ({damage}); it is removed and that segment "
                  f"computed again", file=sys.stderr)
            path.unlink(missing_ok=True)
            continue
        stored[number] = part
    return stored


def _read_segment(path: Path, config: ExperimentConfig, boundaries: list[int], times: np.ndarray) -> tuple[int, xr.Dataset]:
    """A checkpoint segment, checked; raises :class:`DamagedFile` saying what is wrong with it."""
    try:
        number = int(path.stem.removeprefix("segment_"))
    except ValueError:
        raise DamagedFile("not a segment name") from None
    try:
        with xr.open_dataset(path) as stored:
            part = stored.load()
    except Exception as error:  # noqa: BLE001 - any reader error means the file is unusable
        raise DamagedFile(f"unreadable: {type(error).__name__}") from None
    missing = [key for key in CHECKPOINT_ATTRS if key not in part.attrs]
    if missing:
        raise DamagedFile(f"attribute {missing[0]} missing")
    try:
        written_by = json.loads(part.attrs["config"])
        json.loads(part.attrs["rng_state"])
    except (TypeError, ValueError):
        raise DamagedFile("its attributes are not valid JSON") from None
    if written_by != json.loads(json.dumps(config.to_dict())):
        raise ConfigError(f"--resume: {path} was written by a different config; delete {path.parent} to "
                          f"start over with this one")
    if not 1 <= number < len(boundaries) - 1 or int(part.attrs["checkpoint_segment"]) != number:
        raise DamagedFile(f"its segment number {part.attrs['checkpoint_segment']} does not fit the run")
    first = boundaries[number - 1] + (0 if number == 1 else 1)
    expected = times[first: boundaries[number] + 1]
    variable = "x" if dataset_kind(part) == PARTICLES else "rho"
    if variable not in part or not np.array_equal(part.time.values, expected) \
            or not np.all(np.isfinite(part[variable].values)):
        raise DamagedFile("its output times or values are not those of that segment")
    return number, part


def write_report(ds: xr.Dataset, config: ExperimentConfig, output: Path, figures: list[Path], untrustworthy: str | None) -> Path:
    """A Markdown record of the run: config, trust, figures."""
    status = f"**UNTRUSTWORTHY**: {untrustworthy}" if untrustworthy else "Resolved throughout (trustworthy)."
    tables = config.to_dict()
    lines = ["# Experiment report", "", status, "",
             f"- geometry: {config.geometry}, method: `{json.dumps(tables['method'])}`",
             f"- model: `{json.dumps(tables['model'])}`", f"- initial: `{json.dumps(tables['initial'])}`",
             f"- output times: {ds.sizes['time']} from {float(ds.time[0]):g} to {float(ds.time[-1]):g}",
             f"- wall time: {ds.attrs['wall_time']:.1f} s, package version {ds.attrs['version']}",
             f"- solver settings (last segment): `{ds.attrs.get('settings', '')}`", "",
             "## Figures", ""] + [f"![{path.stem}]({path.name})" for path in figures]
    return write_text(output / "report.md", "\n".join(lines) + "\n")
