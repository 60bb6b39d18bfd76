"""One experiment from a config (``meanfield run CONFIG.toml``): run, checkpoint, resume, record.

The run advances in segments of ``checkpoint_every`` output intervals. After each
segment the dataset so far, the solver's next step size and the noise generator's
state are written atomically to ``checkpoint.nc``; ``resume=True`` continues from it
and ends with the result of an uninterrupted run (the same steps are taken).
"""

from __future__ import annotations

import json
import time
import warnings
from pathlib import Path

import numpy as np
import xarray as xr
import meanfield as mf
from meanfield.records import PARTICLES, dataset_kind, dataset_settings, package_version
from solvers import UnderResolvedWarning

from .builders import build_model, build_solver, initial_density, initial_particles, output_times, particle_method
from .config import check_config, load_config
from .errors import ConfigError
from .files import write_atomically, write_text
from .preflight import preflight

CHECKPOINT = "checkpoint.nc"
DATASET = "dataset.nc"


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
    elif solver is None:
        state = initial_particles(config, rho0, generator)
    else:
        state = rho0

    with warnings.catch_warnings():  # the filter below stays local to this run
        while segment < len(boundaries) - 1:
            if parts and not _trustworthy(parts):
                # Once a run is untrustworthy, later segments would only repeat the warning.
                warnings.filterwarnings("ignore", category=UnderResolvedWarning)
            segment_times = times[boundaries[segment]: boundaries[segment + 1] + 1]
            if solver is None:
                part = mf.simulate_particles(model, state, segment_times, method=particle_method(config),
                                             dt=config["method"]["dt"], rng=generator, progress=progress)
                state = part.x.values[-1]
            else:
                part = solver.solve(state, segment_times, progress=progress, first_step=next_step)
                state = part.rho.values[-1]
                next_step = dataset_settings(part)["next_step"]
            parts.append(part if not parts else part.isel(time=slice(1, None)))
            segment += 1
            if segment < len(boundaries) - 1:
                _write_checkpoint(output, config, parts, next_step, generator, segment,
                                  elapsed + time.perf_counter() - started)

    ds = _combine(parts, config, elapsed + time.perf_counter() - started)
    write_atomically(output / DATASET, ds.to_netcdf)
    (output / CHECKPOINT).unlink(missing_ok=True)
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


def _write_checkpoint(output: Path, config: dict, parts, next_step, generator, segment, elapsed) -> None:
    ds = _combine(parts, config, elapsed)
    ds.attrs.update(checkpoint_segment=segment, next_step=np.nan if next_step is None else next_step,
                    rng_state=json.dumps(generator.bit_generator.state))
    write_atomically(output / CHECKPOINT, ds.to_netcdf)


def _load_checkpoint(output: Path, config: dict, generator: np.random.Generator):
    path = output / CHECKPOINT
    if not path.is_file():
        raise ConfigError(f"--resume: no checkpoint in {str(output)!r} (the run finished or never started)")
    with xr.open_dataset(path) as stored:
        ds = stored.load()
    if json.loads(ds.attrs["config"]) != json.loads(json.dumps(config)):
        raise ConfigError(f"--resume: {path} was written by a different config")
    generator.bit_generator.state = json.loads(ds.attrs["rng_state"])
    state = ds.x.values[-1] if dataset_kind(ds) == PARTICLES else ds.rho.values[-1]
    next_step = None if not np.isfinite(ds.attrs["next_step"]) else float(ds.attrs["next_step"])
    segment, elapsed = int(ds.attrs["checkpoint_segment"]), float(ds.attrs["wall_time"])
    for key in ("checkpoint_segment", "next_step", "rng_state"):
        del ds.attrs[key]
    return [ds], state, next_step, segment, elapsed


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
