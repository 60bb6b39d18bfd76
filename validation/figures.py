"""Figures of a mean-field convergence study (PNG files).

Drawn on :class:`matplotlib.figure.Figure` objects, not through pyplot: writing a figure
needs no screen, and importing this module leaves the caller's backend (a notebook's) alone.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib
import numpy as np
import xarray as xr
from matplotlib.figure import Figure

from meanfield.records import CIRCLE, dataset_geometry, geometry_dimension
from meanfield.sphere import circle_angles
from solvers.sphere.gegenbauer import log_law_of_u


def subplots(rows: int = 1, columns: int = 1, *, figsize: tuple[float, float], squeeze: bool = True,
             subplot_kw: dict | None = None):
    """``(figure, axes)`` like :func:`matplotlib.pyplot.subplots`, outside pyplot (no backend, no state)."""
    fig = Figure(figsize=figsize, layout="constrained")
    return fig, fig.subplots(rows, columns, squeeze=squeeze, subplot_kw=subplot_kw)


def density_snapshots(study: xr.Dataset, path: Path, columns: int = 4) -> Path:
    """PDE density against the particles (largest size, seed 0) at up to ``columns`` times."""
    picks = np.unique(np.linspace(0, study.time.size - 1, min(columns, study.time.size)).round().astype(int))
    n = study.particles_x.sizes["particle"]
    bottom, top = float(study.pde_rho.min()), 1.05 * float(study.pde_rho.max())  # one scale for all panels
    if "u" in study.pde_rho.dims:
        fig, axes = subplots(1, picks.size, figsize=(3.6 * picks.size, 3.4), squeeze=False)
        _zonal_snapshots(study, axes[0], picks, n)
    elif dataset_geometry(study) == CIRCLE:
        fig, axes = subplots(1, picks.size, figsize=(3.6 * picks.size, 3.4), squeeze=False)
        theta = study.theta.values
        for ax, k in zip(axes[0], picks):
            angles = circle_angles(study.particles_x.values[k])
            ax.hist(angles, bins=64, range=(0, 2 * np.pi), density=True, color="0.75", label=f"particles, n={n}")
            ax.plot(theta, study.pde_rho.values[k], color="C3", lw=1.5, label="PDE")
            ax.set(title=f"t = {study.time.values[k]:g}", xlabel="angle θ (rad)", xlim=(0, 2 * np.pi),
                   ylim=(0, max(top, ax.get_ylim()[1])))
        axes[0, 0].set_ylabel("density (per radian)")
        axes[0, 0].legend(fontsize=8)
    else:
        fig, axes = subplots(1, picks.size, figsize=(4.2 * picks.size, 3.4), squeeze=False,
                             subplot_kw={"projection": "mollweide"})
        longitude = np.where(study.longitude.values > np.pi, study.longitude.values - 2 * np.pi,
                             study.longitude.values)
        order = np.argsort(longitude)
        latitude = 0.5 * np.pi - study.colatitude.values
        for ax, k in zip(axes[0], picks):
            rho = study.pde_rho.values[k][:, order]
            mesh = ax.pcolormesh(longitude[order], latitude, rho, shading="auto", cmap="viridis", vmin=bottom, vmax=top)
            x = study.particles_x.values[k]
            ax.scatter(np.arctan2(x[:, 1], x[:, 0]), np.arcsin(np.clip(x[:, 2], -1, 1)), s=1, c="w", alpha=0.5)
            ax.set_title(f"t = {study.time.values[k]:g}", pad=12)
            ax.set_xticklabels([])
        fig.colorbar(mesh, ax=list(axes[0]), orientation="horizontal", shrink=0.5,
                     label="PDE density (per unit area); dots: particles")
    fig.suptitle(f"{dataset_geometry(study)}: PDE density and particles (n = {n})")
    fig.savefig(path, dpi=110)
    return path


def _zonal_snapshots(study: xr.Dataset, axes, picks: np.ndarray, n: int) -> None:
    """On S^{d-1}: the law of u = <x, e> of the PDE against the particles' histogram of their last coordinate."""
    d = geometry_dimension(dataset_geometry(study))
    u = study.u.values
    law = study.pde_rho.values * np.exp(log_law_of_u(d, u))
    for ax, k in zip(axes, picks):
        ax.hist(study.particles_x.values[k][:, -1], bins=48, density=True, color="0.75", label=f"particles, n={n}")
        ax.plot(u, law[k], color="C3", lw=1.5, label="PDE")
        ax.set(title=f"t = {study.time.values[k]:g}", xlabel="u = <x, e>")
    axes[0].set_ylabel("density of u")
    axes[0].legend(fontsize=8)


def rate_plot(study: xr.Dataset, path: Path) -> Path:
    """Distance against n on log axes per time (all counts), with the slope fitted on the largest counts."""
    fig, ax = subplots(figsize=(6.0, 4.6))
    sizes = study["size"].values
    fitted = np.isin(sizes, study.attrs.get("fitted_sizes", sizes))
    for k, t in enumerate(study.time.values):
        mean = study.mean_distance.values[:, k]
        ax.loglog(sizes, study.distance.values[:, :, k], ".", color=f"C{k}", alpha=0.15, ms=2)
        # The fitted line passes through the centroid of the fitted points (least squares in log-log).
        log_n, log_d = np.log(sizes[fitted]).mean(), np.log(mean[fitted]).mean()
        fit = np.exp(log_d + study.rate.values[k] * (np.log(sizes[fitted]) - log_n))
        label = (f"t={t:g}: slope {study.rate.values[k]:.2f} "
                 f"[{study.rate_low.values[k]:.2f}, {study.rate_high.values[k]:.2f}]")
        ax.loglog(sizes, mean, "o", color=f"C{k}", ms=4, label=label)
        ax.loglog(sizes[fitted], fit, "-", color=f"C{k}", lw=1)
    ax.loglog(sizes, study.mean_distance.values[0, 0] * (sizes / sizes[0]) ** -0.5, "k--", lw=1, label="slope -1/2")
    ax.set(xlabel="particles n (lines: fit on the largest counts)", ylabel=study.attrs["distance"],
           title=f"{dataset_geometry(study)}: mean-field convergence")
    ax.legend(fontsize=7)
    fig.savefig(path, dpi=110)
    return path


def energy_plot(studies: dict[str, xr.Dataset], path: Path) -> Path:
    """Energy of the PDE and of the particles (mean over seeds, each size) against time."""
    fig, axes = subplots(1, len(studies), figsize=(5 * len(studies), 3.8), squeeze=False)
    for ax, (name, study) in zip(axes[0], studies.items()):
        for i, n in enumerate(study["size"].values):
            shade = matplotlib.colormaps["Greys"](0.3 + 0.7 * i / study.sizes["size"])
            ax.plot(study.time, study.energy_particles.values[i], color=shade,
                    label=f"particles n={n}")
        ax.plot(study.time, study.energy_pde, "C3", lw=2, label="PDE")
        ax.set(xlabel="time", ylabel="energy E", title=name)
        ax.legend(fontsize=7)
    fig.savefig(path, dpi=110)
    return path
