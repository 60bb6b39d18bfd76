"""Pictures of one experiment: space-time plot, snapshots, diagnostics and an animation."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import matplotlib
import matplotlib.animation
import numpy as np
import xarray as xr
from tqdm.auto import tqdm

from meanfield.records import PARTICLES, dataset_kind, dataset_settings
from meanfield.sphere import circle_angles
from validation.figures import subplots

from .config import EUCLIDEAN
from .files import write_atomically


def _particles(ds: xr.Dataset) -> bool:
    return dataset_kind(ds) == PARTICLES


#: Axis labels, with units, of the diagnostics a run may carry.
DIAGNOSTIC_LABELS = {"energy": "interaction energy E", "min_density": "smallest density value",
                     "cluster_width": "sharpest cluster FWHM (cells)",
                     "spectral_tail": "spectral energy in top 10% of degrees",
                     "error_estimate": "estimated max-norm error of the density",
                     "order_parameter": "order parameter r of all tokens",
                     "norm_error": "max | |x_i| - 1 | (before projection)",
                     "ghost_attention": "attention share on empty cells",
                     "mean_inner_product": "mean ⟨x_i, x_j⟩ (1: collapsed)"}

def _family(ds: xr.Dataset) -> bool:
    """Whether the run's density is a family of labelled densities (frequency nodes, graphon vertices)."""
    return "frequency" in ds.rho.dims or "vertex" in ds.rho.dims


def _density(ds: xr.Dataset) -> np.ndarray:
    """The density of all tokens per output time: causal attention's layers (``position``, each
    of mass one, equally spaced in ``s``) and a graphon's vertex labels averaged; the frequency
    nodes' densities weighted by the law's quadrature weights (recorded in the settings)."""
    rho = ds.rho
    if "position" in rho.dims:
        return rho.mean("position").values
    if "vertex" in rho.dims:  # the graphon's labels, equally weighted
        return rho.mean("vertex").values
    if "frequency" in rho.dims:
        weights = np.asarray(dataset_settings(ds)["weights"])
        return np.einsum("m,tmc->tc", weights, rho.transpose("time", "frequency", ...).values)
    return rho.values


CIRCLE_DENSITY = "density (per radian)"
SPHERE_DENSITY = "density (per unit area)"
ZONAL_PROFILE = "mass with <x, e> <= u"

#: What the figures draw for a zonal run on S^{d-1} (a dataset on ``u``): the distribution function of
#: u, exact for the series and for rings alike (a cluster at the pole is the jump at u = 1).
ZONAL = "zonal"

#: What the figures draw for a pair correlation (a dataset of ``g`` on ``phi``, ``solvers.PairCorrelation``).
PAIR = "pair"
PAIR_AXIS = "relative angle φ = θ_i - θ_j (rad)"
PAIR_VALUE = "pair correlation g (1: independent)"

#: What the figures draw for the line's mean-field equation (a dataset on ``z``): the rescaled tokens' density.
LINE = "line"
LINE_AXIS = "rescaled token z = exp(-t v) x"


def _draw_frame(ax, ds: xr.Dataset, k: int, geometry: str, scale: tuple[float, float]):
    """One time of the run: density curve or histogram on the circle, Mollweide map on the sphere.

    ``scale`` is the range of the density colours (its top that of the density axis), shared by
    every frame so that frames can be compared; returns a sphere density's colour mapping.
    """
    ax.clear()
    t = float(ds.time[k])
    mappable = None
    if geometry == EUCLIDEAN:
        _draw_tokens(ax, ds, k)
        return None
    if geometry == ZONAL:
        _draw_profile(ax, ds, k)
        return None
    if geometry == PAIR:
        ax.plot(ds.phi, ds.g.values[k], color="C0")
        ax.set(xlim=(0, 2 * np.pi), ylim=(0, scale[1]), xlabel=PAIR_AXIS, ylabel=PAIR_VALUE, title=f"t = {t:g}")
        return None
    if geometry == LINE:
        ax.plot(ds.z, ds.rho.values[k], color="C0")
        ax.set(xlim=(float(ds.z[0]), float(ds.z[-1])), ylim=(0, scale[1]), xlabel=LINE_AXIS, ylabel="density",
               title=f"t = {t:g}")
        return None
    if geometry == "circle":
        if _particles(ds):
            ax.hist(circle_angles(ds.x.values[k]), bins=128, range=(0, 2 * np.pi), density=True, color="0.5")
        elif "position" in ds.rho.dims:  # causal attention: all tokens, and the first and last positions
            ax.plot(ds.theta, _density(ds)[k], color="C0", label="all positions")
            for index, style in ((0, "--"), (-1, ":")):
                ax.plot(ds.theta, ds.rho.values[k, index], style, color="0.4",
                        label=f"s = {float(ds.position[index]):.2g}")
            ax.legend(fontsize="small")
        elif _family(ds):  # all tokens, whatever their label
            ax.plot(ds.theta, _density(ds)[k], color="C0")
        else:
            ax.plot(ds.theta, ds.rho.values[k], color="C0")
        ax.set(xlim=(0, 2 * np.pi), ylim=(0, scale[1]), xlabel="angle θ (rad)", ylabel=CIRCLE_DENSITY,
               title=f"t = {t:g}")
        return None
    if _particles(ds):
        x = ds.x.values[k]
        ax.scatter(np.arctan2(x[:, 1], x[:, 0]), np.arcsin(np.clip(x[:, 2], -1, 1)), s=2, c="C0")
    else:
        longitude = np.mod(ds.longitude.values + np.pi, 2 * np.pi) - np.pi
        order = np.argsort(longitude)
        mappable = ax.pcolormesh(longitude[order], 0.5 * np.pi - ds.colatitude.values, _density(ds)[k][:, order],
                                 shading="auto", cmap="viridis", vmin=scale[0], vmax=scale[1])
    ax.set_title(f"t = {t:g}", pad=12)
    ax.set_xticklabels([])
    ax.grid(True, alpha=0.3)
    return mappable


def _draw_profile(ax, ds: xr.Dataset, k: int) -> None:
    """A zonal run's distribution function of u: the rings' steps after a hand-over, the series' values before."""
    rings = ds.ring_u.values[k] if "ring_u" in ds else np.array([np.nan])
    if np.any(np.isfinite(rings)):
        kept = np.isfinite(rings)
        u, mass = rings[kept], ds.ring_mass.values[k][kept]
        ax.step(np.concatenate([[-1.0], u, [1.0]]), np.concatenate([[0.0], np.cumsum(mass), [mass.sum()]]),
                where="post", color="C0")
    else:
        ax.plot(np.concatenate([[-1.0], ds.u.values, [1.0]]),
                np.concatenate([[0.0], ds.mass_profile.values[k], [float(ds.mass[k])]]), color="C0")
    ax.set(xlim=(-1, 1), ylim=(0, 1.05), xlabel="u = <x, e>", ylabel=ZONAL_PROFILE, title=f"t = {float(ds.time[k]):g}")


def _variable(ds: xr.Dataset) -> str:
    """``z`` for rescaled tokens (their limits are the paper's theorems), ``x`` otherwise."""
    return "z" if "rescaling" in ds else "x"


def _draw_tokens(ax, ds: xr.Dataset, k: int) -> None:
    """Pure attention in R^d: the first two coordinates of the tokens (d = 1: each token's value)."""
    x, name = ds.x.values[k], _variable(ds)
    if x.shape[-1] == 1:
        ax.plot(np.arange(x.shape[0]), x[:, 0], ".", color="C0")
        ax.set(xlabel="token i", ylabel=f"{name}_i")
    else:
        ax.scatter(x[:, 0], x[:, 1], s=6, c="C0")
        ax.set(xlabel=f"{name}₁", ylabel=f"{name}₂")
    ax.set_title(f"t = {float(ds.time[k]):g}")


def _token_norms(ds: xr.Dataset, output: Path) -> Path:
    """Pure attention: the smallest and largest token norm against time (log scale)."""
    norms = np.linalg.norm(ds.x.values, axis=-1)  # (time, particle): a run of a config is one system
    fig, ax = subplots(figsize=(5, 3.4))
    name = _variable(ds)
    for values, label in ((norms.max(axis=1), f"max |{name}_i|"), (norms.min(axis=1), f"min |{name}_i|")):
        ax.plot(ds.time, values, ".-", label=label)
    if np.all(norms > 0):
        ax.set_yscale("log")
    ax.set(xlabel="time", ylabel="token norm")
    ax.legend()
    return _save(fig, output / "diagnostics.png")


def _density_scale(ds: xr.Dataset, geometry: str) -> tuple[float, float]:
    """The smallest and largest density of the run (every frame's scale)."""
    if geometry == ZONAL:
        return 0.0, 1.05
    if geometry == PAIR:
        return float(ds.g.min()), 1.05 * float(ds.g.max())
    if not _particles(ds):
        rho = _density(ds) if _family(ds) else ds.rho.values  # causal: every layer's curve fits; a family: its marginal
        return float(rho.min()), 1.05 * float(rho.max())
    if geometry != "circle":
        return 0.0, 1.0
    counts = [np.histogram(circle_angles(x), bins=128, range=(0, 2 * np.pi), density=True)[0].max()
              for x in ds.x.values]
    return 0.0, 1.05 * float(max(counts))


def _subplot_kw(geometry: str) -> dict:
    return {"projection": "mollweide"} if geometry == "sphere" else {}


def _save(fig, path: Path) -> Path:
    write_atomically(path, lambda temporary: fig.savefig(temporary, dpi=110, format="png"))
    return path


def experiment_figures(ds: xr.Dataset, output: Path, geometry: str, *, animation: bool = True,
                       progress: bool | None = None) -> list[Path]:
    """Write the PNG figures and (unless ``animation=False``) the animation; returns their paths.

    The animation, one drawing per output time, is often the longest part: it shows a
    progress bar (by default when stderr is a terminal).
    """
    output = Path(output)
    if "system" in ds.dims and not _particles(ds):  # the common noise's density paths: the first one is drawn
        ds = ds.isel(system=0)
    if not _particles(ds) and "u" in ds.dims:
        geometry = ZONAL
    if not _particles(ds) and "z" in ds.dims:
        geometry = LINE
    if "g" in ds and "phi" in ds.dims:
        geometry = PAIR
    paths = []
    picks = np.unique(np.linspace(0, ds.time.size - 1, 4).round().astype(int))
    scale = _density_scale(ds, geometry)
    fig, axes = subplots(1, picks.size, figsize=(4 * picks.size, 3.4),
                         squeeze=False, subplot_kw=_subplot_kw(geometry))
    mappables = [_draw_frame(ax, ds, k, geometry, scale) for ax, k in zip(axes[0], picks)]
    if mappables[0] is not None:
        fig.colorbar(mappables[0], ax=list(axes[0]), orientation="horizontal", shrink=0.5, label=SPHERE_DENSITY)
    paths.append(_save(fig, output / "snapshots.png"))

    if geometry in ("circle", LINE, PAIR):
        fig, ax = subplots(figsize=(7, 4.5))
        if geometry == PAIR:
            mesh = ax.pcolormesh(ds.phi, ds.time, ds.g.values, shading="auto", cmap="magma")
            fig.colorbar(mesh, ax=ax, label=PAIR_VALUE)
        elif _particles(ds):
            angles = circle_angles(ds.x.values)
            # one artist for all points (one line per particle costs seconds per thousand particles)
            ax.plot(angles.ravel(), np.repeat(ds.time.values, angles.shape[1]), ",", color="k")
        else:
            rho = _density(ds)
            # Log colours: the early, nearly uniform phase and the sharp clusters both stay visible.
            floor = max(rho.max() * 1e-3, rho[rho > 0].min()) if np.any(rho > 0) else 1e-300
            mesh = ax.pcolormesh(ds.z if geometry == LINE else ds.theta, ds.time, np.maximum(rho, floor),
                                 shading="auto", cmap="magma",
                                 norm=matplotlib.colors.LogNorm(vmin=floor, vmax=rho.max()))
            fig.colorbar(mesh, ax=ax, label=f"{'density' if geometry == LINE else CIRCLE_DENSITY}, log scale")
        axis = {LINE: LINE_AXIS, PAIR: PAIR_AXIS}.get(geometry, "angle θ (rad)")
        ax.set(xlabel=axis, ylabel="time", title="space-time" + (
            ", all positions" if "position" in ds.dims else ""))
        paths.append(_save(fig, output / "spacetime.png"))
        if "position" in ds.dims:
            paths.append(_positions(ds, output))

    if geometry == EUCLIDEAN:
        paths.append(_token_norms(ds, output))
        if animation:
            paths.append(_animation(ds, output, geometry, progress))
        return paths
    # a diagnostic no output has (a hand-over's placeholder for the solver that never ran) gets no panel
    names = [name for name in DIAGNOSTIC_LABELS if name in ds and np.isfinite(ds[name].values).any()]
    if not names:  # nothing to watch (LineLagrangian's measure is exact)
        return paths + ([_animation(ds, output, geometry, progress)] if animation else [])
    fig, axes = subplots(1, len(names), figsize=(3.6 * len(names), 3.2), squeeze=False)
    for ax, name in zip(axes[0], names):
        values = ds[name].values if ds[name].ndim == 1 else ds[name].values.mean(axis=0)
        ax.plot(ds.time, values, ".-")
        finite = values[np.isfinite(values)]  # a run that hands over has NaN where the other solver ran
        logarithmic = name in ("spectral_tail", "norm_error", "error_estimate", "ghost_attention")
        if logarithmic and finite.size and np.all(finite > 0):
            ax.set_yscale("log")
        ax.set(xlabel="time", ylabel=DIAGNOSTIC_LABELS[name])
        if ds.time.size > 1:  # every panel over the whole run, whichever solver computed its points
            ax.set_xlim(float(ds.time[0]), float(ds.time[-1]))
    titles = []
    handovers = handover_times(ds)
    for when in handovers:
        for ax in axes[0]:
            ax.axvline(when, color="0.5", ls=":", lw=1)
    if handovers:
        titles.append(f"hand-over at t = {', '.join(f'{when:.4g}' for when in handovers)} (dotted)")
    since = ds.attrs.get("underresolved_since", np.nan)
    if np.isfinite(since):
        for ax in axes[0]:
            ax.axvline(since, color="C3", ls="--", lw=1)
        titles.append(f"under-resolved from t = {since:g} (dashed)")
    if titles:
        fig.suptitle("; ".join(titles))
    paths.append(_save(fig, output / "diagnostics.png"))
    if animation:
        paths.append(_animation(ds, output, geometry, progress))
    return paths


def handover_times(ds: xr.Dataset) -> list[float]:
    """The times at which the run passed from one solver to the next, within its outputs' span (a hand-over
    records ``handover_time``, a chain ``handover_times``; NaN: not reached)."""
    settings = dataset_settings(ds)
    recorded = np.atleast_1d(np.asarray(settings.get("handover_times", settings.get("handover_time", [])), float))
    start, end = float(ds.time[0]), float(ds.time[-1])
    return [float(when) for when in recorded if np.isfinite(when) and start < when <= end]


def _positions(ds: xr.Dataset, output: Path) -> Path:
    """Causal attention on the circle: the last output's density against the angle and the position ``s``."""
    fig, ax = subplots(figsize=(7, 4.5))
    mesh = ax.pcolormesh(ds.theta, ds.position, ds.rho.values[-1], shading="auto", cmap="magma")
    fig.colorbar(mesh, ax=ax, label=CIRCLE_DENSITY)
    ax.set(xlabel="angle θ (rad)", ylabel="relative position s of the token",
           title=f"density by token position at t = {float(ds.time[-1]):g}")
    return _save(fig, output / "positions.png")


def _animation(ds: xr.Dataset, output: Path, geometry: str, progress: bool | None) -> Path:
    """MP4 when ffmpeg is present, GIF otherwise."""
    fig, ax = subplots(figsize=(6, 3.6), subplot_kw=_subplot_kw(geometry))
    scale = _density_scale(ds, geometry)
    mappable = _draw_frame(ax, ds, 0, geometry, scale)
    if mappable is not None:
        fig.colorbar(mappable, ax=ax, orientation="horizontal", shrink=0.6, label=SPHERE_DENSITY)
    movie = matplotlib.animation.FuncAnimation(fig, lambda k: _draw_frame(ax, ds, k, geometry, scale),
                                               frames=ds.time.size)
    if shutil.which("ffmpeg"):
        path, writer = output / "animation.mp4", matplotlib.animation.FFMpegWriter(fps=8)
    else:
        path, writer = output / "animation.gif", matplotlib.animation.PillowWriter(fps=8)
    enabled = sys.stderr.isatty() if progress is None else progress
    with tqdm(total=ds.time.size, disable=not enabled, desc="animation", unit="frame") as bar:
        write_atomically(path, lambda temporary: movie.save(temporary, writer=writer,
                                                            progress_callback=lambda *_: bar.update()))
    return path
