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
import time
import warnings
from pathlib import Path

import numpy as np
import xarray as xr
import meanfield as mf
from meanfield.progress import time_progress
from meanfield.records import PARTICLES, dataset_kind, dataset_settings, package_version
from solvers import UnderResolvedWarning

from .builders import build_model, build_solver, initial_density, initial_particles, output_times, particle_method
from .config import check_config, load_config
from .errors import ConfigError
from .files import write_atomically, write_text
from .preflight import preflight

CHECKPOINTS = "checkpoint"
DATASET = "dataset.nc"

#: Attributes that only a checkpoint segment carries.
CHECKPOINT_ATTRS = ("config", "checkpoint_segment", "next_step", "rng_state", "wall_time")


def prepare(config: dict | str | Path) -> dict:
    """Check the config, what it builds and the output folder; everything that can fail before computing fails here."""
    config = load_config(config) if isinstance(config, (str, Path)) else check_config(config)
    if (config["method"].get("d") or 3) > 3:
        raise ConfigError(f"method.d = {config['method']['d']}: meanfield run draws particles on S^2 "
                          f"(d <= 3); particles in higher dimension run in sweeps (meanfield sweep)")
    preflight(config)
    output = Path(config["output"])
    try:
        output.mkdir(parents=True, exist_ok=True)
        probe = output / ".write-test"
        probe.write_text("")
        probe.unlink()
    except OSError as error:
        raise ConfigError(f"output: cannot write to {str(output)!r} ({error.strerror})") from None
    return config


def run_experiment(config: dict | str | Path, *, resume: bool = False, progress: bool | None = None) -> xr.Dataset:
    """Run an experiment; returns the dataset also written to ``output/dataset.nc``."""
    config = prepare(config)
    output = Path(config["output"])
    times = output_times(config)
    model = build_model(config)
    rho0 = initial_density(config)
    solver = build_solver(config, model)
    every = config["checkpoint_every"] or times.size
    boundaries = list(range(0, times.size - 1, every)) + [times.size - 1]
    generator = np.random.default_rng(config["method"]["seed"])
    started = time.perf_counter()
    parts, state, next_step, segment, elapsed = [], None, None, 0, 0.0

    if resume:
        parts, state, next_step, segment, elapsed = _load_checkpoint(output, config, generator)
    else:
        shutil.rmtree(output / CHECKPOINTS, ignore_errors=True)  # segments of an earlier run must not be resumed
        state = rho0 if solver is not None else initial_particles(config, rho0, generator)

    # One bar for the whole run, advanced by every segment (a resumed run starts where it stopped).
    with warnings.catch_warnings(), time_progress(times[0], times[-1], progress, "run") as bar:
        bar.update(times[boundaries[segment]] - times[0])
        while segment < len(boundaries) - 1:
            if parts and not _trustworthy(parts):
                # Once a run is untrustworthy, later segments would only repeat the warning.
                warnings.filterwarnings("ignore", category=UnderResolvedWarning)
            segment_times = times[boundaries[segment]: boundaries[segment + 1] + 1]
            if solver is None:
                part = mf.simulate_particles(model, state, segment_times, method=particle_method(config),
                                             dt=config["method"]["dt"], rng=generator, progress=bar)
                state = part.x.values[-1]
            else:
                part = solver.solve(state, segment_times, progress=bar, first_step=next_step)
                state = part.rho.values[-1]
                next_step = dataset_settings(part)["next_step"]
            parts.append(part if not parts else part.isel(time=slice(1, None)))
            segment += 1
            if segment < len(boundaries) - 1:
                _write_checkpoint(output, config, parts[-1], next_step, generator, segment,
                                  elapsed + time.perf_counter() - started)

    ds = _combine(parts, config, elapsed + time.perf_counter() - started)
    write_atomically(output / DATASET, ds.to_netcdf)
    shutil.rmtree(output / CHECKPOINTS, ignore_errors=True)
    return ds


def _trustworthy(parts: list[xr.Dataset]) -> bool:
    return not any(np.isfinite(p.attrs.get("underresolved_since", np.nan)) for p in parts)


def _combine(parts: list[xr.Dataset], config: dict, wall_time: float) -> xr.Dataset:
    ds = xr.concat(parts, dim="time", data_vars="minimal", coords="minimal", compat="override",
                   combine_attrs="override")
    ds.attrs = dict(parts[-1].attrs)
    since = [p.attrs.get("underresolved_since", np.nan) for p in parts]
    since = [s for s in since if np.isfinite(s)]
    ds.attrs.update(config=json.dumps(config), version=package_version(), wall_time=wall_time,
                    underresolved_since=min(since) if since else np.nan,
                    trustworthy=int(not since), segments=len(parts))
    return ds


def _write_checkpoint(output: Path, config: dict, part: xr.Dataset, next_step, generator, segment, elapsed) -> None:
    """The newest segment only, with what continuing after it needs."""
    ds = part.copy()
    ds.attrs.update(config=json.dumps(config), checkpoint_segment=segment, wall_time=elapsed,
                    next_step=np.nan if next_step is None else next_step,
                    rng_state=json.dumps(generator.bit_generator.state))
    folder = output / CHECKPOINTS
    folder.mkdir(exist_ok=True)
    write_atomically(folder / f"segment_{segment:06d}.nc", ds.to_netcdf)


def _load_checkpoint(output: Path, config: dict, generator: np.random.Generator):
    paths = sorted((output / CHECKPOINTS).glob("segment_*.nc"))
    if not paths:
        raise ConfigError(f"--resume: no checkpoint in {str(output)!r} (the run finished or never started)")
    parts = []
    for path in paths:
        with xr.open_dataset(path) as stored:
            parts.append(stored.load())
    last = parts[-1]
    if json.loads(last.attrs["config"]) != json.loads(json.dumps(config)):
        raise ConfigError(f"--resume: {paths[-1]} was written by a different config")
    if [int(p.attrs["checkpoint_segment"]) for p in parts] != list(range(1, len(parts) + 1)):
        raise ConfigError(f"--resume: the segments in {output / CHECKPOINTS} are not consecutive; "
                          "delete the folder and start over")
    generator.bit_generator.state = json.loads(last.attrs["rng_state"])
    state = last.x.values[-1] if dataset_kind(last) == PARTICLES else last.rho.values[-1]
    next_step = None if not np.isfinite(last.attrs["next_step"]) else float(last.attrs["next_step"])
    segment, elapsed = int(last.attrs["checkpoint_segment"]), float(last.attrs["wall_time"])
    for part in parts:
        for key in CHECKPOINT_ATTRS:
            del part.attrs[key]
    return parts, state, next_step, segment, elapsed


def write_report(ds: xr.Dataset, config: dict, output: Path, figures: list[Path], untrustworthy: str | None) -> Path:
    """A Markdown record of the run: config, trust, figures."""
    status = f"**UNTRUSTWORTHY**: {untrustworthy}" if untrustworthy else "Resolved throughout (trustworthy)."
    lines = ["# Experiment report", "", status, "",
             f"- geometry: {config['geometry']}, method: `{json.dumps(config['method'])}`",
             f"- model: `{json.dumps(config['model'])}`", f"- initial: `{json.dumps(config['initial'])}`",
             f"- output times: {ds.sizes['time']} from {float(ds.time[0]):g} to {float(ds.time[-1]):g}",
             f"- wall time: {ds.attrs['wall_time']:.1f} s, package version {ds.attrs['version']}",
             f"- solver settings (last segment): `{ds.attrs.get('settings', '')}`", "",
             "## Figures", ""] + [f"![{path.stem}]({path.name})" for path in figures]
    return write_text(output / "report.md", "\n".join(lines) + "\n")
