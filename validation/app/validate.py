"""The main job, ``meanfield validate``: a default mean-field convergence study on both geometries."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np
import xarray as xr

import meanfield as mf

from validation.convergence import StudySettings, mean_field_convergence
from validation.figures import density_snapshots, energy_plot, rate_plot
from validation.references import growth_rate

from .files import locked_output, write_atomically, write_text


#: Default particle counts and seeds of the two studies (see :func:`default_specs`).
CIRCLE_SIZES = [64 * 2**k for k in range(9)]  # 64 .. 16384
SPHERE_SIZES = [64 * 2**k for k in range(8)]  # 64 .. 8192
CIRCLE_SEEDS, SPHERE_SEEDS = 112, 96


@dataclass
class StudySpec:
    """One study: geometry, model, initial density (and its formula, for the report), sampling plan."""

    geometry: str
    model: object
    rho0: Callable
    rho0_formula: str
    sizes: list[int]
    seeds: int
    times: list[float]
    settings: StudySettings = field(default_factory=StudySettings)


def default_specs(*, beta_circle: float = 5.0, beta_sphere: float = 1.0, diffusion_sphere: float = 0.05,
                  sizes: list[int] | None = None, seeds: int | None = None) -> dict[str, StudySpec]:
    """The two studies of the default ``meanfield validate`` run.

    Circle: SA, ``beta = 5``, ``D = 0``, perturbed uniform density, until clusters start to form.
    Sphere: USA, ``beta = 1``, small diffusion ``D = 0.05``, perturbed uniform density.

    The circle's last output time is the linear-theory cluster onset: the perturbation
    (relative amplitude 0.2) grown to order one at the fastest rate of the dispersion relation.
    There the slope on small counts is not yet asymptotic, so the counts reach 16384 and the
    report shows the slopes on both the smallest and the largest counts. The seeds are chosen
    so that the 95 % interval of the fitted rate is about 0.03 wide on each side, and the
    particle steps so that their error is far below the distances (the numbers are in
    ``docs/performance.md``).

    Parameters
    ----------
    beta_circle : float
        Inverse temperature of the circle's study.
    beta_sphere : float
        Inverse temperature of the sphere's study.
    diffusion_sphere : float
        Diffusion of the sphere's study.
    sizes : list of int, optional
        Particle counts of both studies (default: each study's own).
    seeds : int, optional
        Independent samples per count (default: each study's own).

    Returns
    -------
    dict
        ``{"circle": StudySpec, "sphere": StudySpec}``, for :func:`run_validation`.
    """
    circle_model = mf.SelfAttention(beta_circle)
    amplitude = 0.2
    fastest = max(growth_rate(circle_model, k, 2) for k in range(1, 4 * int(np.sqrt(beta_circle) + 2)))
    onset = np.log(1 / amplitude) / fastest if fastest > 0 else 3.0
    return {
        "circle": StudySpec(
            "circle", circle_model, lambda th: 1 + amplitude * np.cos(3 * th),
            f"1 + {amplitude} cos(3 theta)", sizes or CIRCLE_SIZES, seeds or CIRCLE_SEEDS,
            [round(float(t), 3) for t in np.linspace(0.0, onset, 5)],
            StudySettings(cells=2048, particle_dt=0.1)),
        "sphere": StudySpec(
            "sphere", mf.SelfAttention(beta_sphere, normalized=False, diffusion=diffusion_sphere),
            lambda p: 1 + 0.5 * p[..., 2] + 0.3 * p[..., 0] * p[..., 1],
            "1 + 0.5 z + 0.3 x y", sizes or SPHERE_SIZES, seeds or SPHERE_SEEDS, [0.0, 0.5, 1.0],
            StudySettings(lmax=47, particle_dt=0.005)),
    }


def summary_rows(name: str, study: xr.Dataset) -> list[dict]:
    rows = []
    for k, t in enumerate(study.time.values):
        low, high = float(study.rate_low[k]), float(study.rate_high[k])
        rows.append({"geometry": name, "time": float(t), "rate": float(study.rate[k]), "low": low, "high": high,
                     "contains": bool(low <= -0.5 <= high), "pde_error": float(study.pde_error[k]),
                     "floor": bool(study.pde_floor_reached[k]),
                     "small_rate": float(study.small_rate[k]), "saturation": float(study.saturation[k]),
                     "saturation_low": float(study.saturation_low[k]),
                     "saturation_high": float(study.saturation_high[k])})
    return rows


def format_table(rows: list[dict]) -> str:
    lines = ["| geometry | time | rate (largest n) | 95% interval | -1/2 inside | slope (smallest n) | "
             "saturation: difference [95%] | PDE error estimate |",
             "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        floor = " (floor)" if r["floor"] else ""
        lines.append(f"| {r['geometry']} | {r['time']:g} | {r['rate']:.3f} | [{r['low']:.3f}, {r['high']:.3f}] | "
                     f"{'yes' if r['contains'] else 'NO'} | {r['small_rate']:.3f} | {r['saturation']:+.3f} "
                     f"[{r['saturation_low']:+.3f}, {r['saturation_high']:+.3f}] | {r['pde_error']:.2g}{floor} |")
    return "\n".join(lines)


def explain_outside(row: dict, study: xr.Dataset) -> str:
    """Why the interval of ``row`` excludes -1/2, from the study's own numbers."""
    k = int(np.argmin(np.abs(study.time.values - row["time"])))
    fitted = study.attrs["fitted_sizes"]
    text = (f"at t={row['time']:g} the rate fitted on n = {fitted[0]}..{fitted[-1]} is {row['rate']:.3f} "
            f"[{row['low']:.3f}, {row['high']:.3f}]. ")
    if row["floor"]:
        return text + (f"The PDE reference error ({row['pde_error']:.2g}) is above a tenth of the smallest mean "
                       f"distance ({float(study.mean_distance.values[-1, k]):.2g}): the fit is limited by the PDE; "
                       "refine cells / lmax.")
    if row["saturation_low"] > 0 and row["rate"] > -0.5:
        return text + (f"The slope on the smallest counts is flatter still ({row['small_rate']:.3f}; difference "
                       f"{row['saturation']:+.3f} [{row['saturation_low']:+.3f}, {row['saturation_high']:+.3f}]): "
                       "the counts are pre-asymptotic; extend --sizes to larger n.")
    return text + ("Neither the PDE error nor a saturation explains it; with 95 % intervals at several times, "
                   "one miss in twenty is expected by chance: rerun with more --seeds to tell.")


def run_validation(specs: dict[str, StudySpec], output: Path, *, progress: bool | None = None,
                   echo: Callable[[str], None] = print) -> list[dict]:
    """Run the studies, write NetCDF, figures and a Markdown report to ``output`` (``meanfield validate``).

    Parameters
    ----------
    specs : dict
        Study name -> ``StudySpec`` (as :func:`default_specs` returns).
    output : pathlib.Path
        Folder of the report (created if needed), locked while the studies run and write
        (``validation.app.files.locked_output``: a second writer is refused).
    progress : bool, optional
        Progress bars (default: when stderr is a terminal).
    echo : callable
        Where the progress lines and the final table go (default ``print``).

    Returns
    -------
    list of dict
        One row per study and output time: the fitted ``rate`` with its interval (``low``,
        ``high``), whether it ``contains`` -1/2, the ``small_rate`` and ``saturation`` test, the
        ``pde_error`` and whether it reached the particle distances (``floor``).
    """
    output = Path(output)
    with locked_output(output, "meanfield validate"):  # until the report, the last file, is written
        return _run_validation_locked(specs, output, progress, echo)


def _run_validation_locked(specs, output: Path, progress, echo) -> list[dict]:
    studies, rows, figures, seconds = {}, [], [], {}
    for name, spec in specs.items():
        echo(f"[{name}] {spec.model!r}: sizes {spec.sizes}, {spec.seeds} seeds, times {spec.times}")
        start = time.perf_counter()
        study = mean_field_convergence(spec.model, spec.rho0, geometry=spec.geometry, sizes=spec.sizes,
                                       seeds=spec.seeds, times=spec.times, settings=spec.settings,
                                       progress=progress)
        seconds[name] = time.perf_counter() - start
        study.attrs["rho0"] = spec.rho0_formula
        studies[name] = study
        write_atomically(output / f"{name}.nc", study.to_netcdf)
        figures += [density_snapshots(study, output / f"{name}_density.png"),
                    rate_plot(study, output / f"{name}_rate.png")]
        rows += summary_rows(name, study)
    figures.append(energy_plot(studies, output / "energy.png"))
    table = format_table(rows)
    write_text(output / "report.md", _report(specs, studies, table, figures, seconds))
    echo(table)
    echo(f"report, datasets and figures written to {output}/")
    return rows


def _report(specs, studies, table, figures, seconds) -> str:
    parts = ["# Mean-field validation report", "",
             "Particles drawn iid from the initial density are evolved and compared with the PDE "
             "solution at each output time (exact W1 on the circle, heat-kernel MMD on S^2). "
             "Mean-field theory (docs/theory/references.md) predicts distance ~ n^(-1/2) as n grows; the slope is fitted on the "
             "largest counts, with a bootstrap interval over seeds. The saturation test compares it "
             "with the slope on the smallest counts: a difference whose interval excludes 0 means "
             "the small counts are pre-asymptotic.", "", table, ""]
    for name, spec in specs.items():
        study = studies[name]
        parts += [f"## {name}", "",
                  f"- model: `{json.dumps(spec.model.to_dict())}`",
                  f"- initial density: proportional to `{spec.rho0_formula}`",
                  f"- particle counts: {spec.sizes}, seeds: {spec.seeds}, times: {spec.times}",
                  f"- settings: `{study.attrs['settings']}`",
                  f"- wall time: {seconds[name]:.1f} s", ""]
        parts += [f"- rate fitted on n = {study.attrs['fitted_sizes']}; saturation test against the slope on "
                  f"n = {study.attrs['small_sizes']}", ""]
        for row in summary_rows(name, study):
            if not row["contains"]:
                parts += [f"**Note**: {explain_outside(row, study)}", ""]
        if bool(study.pde_floor_reached.values[1:].any()):
            parts += ["**Warning**: the PDE reference error is not below a tenth of the smallest particle "
                      "distance at some times; the fitted rates there are limited by the PDE.", ""]
    parts += ["## Figures", ""] + [f"![{path.stem}]({path.name})" for path in figures]
    return "\n".join(parts) + "\n"
