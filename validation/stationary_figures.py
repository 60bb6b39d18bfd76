"""The bifurcation diagram of :func:`solvers.stationary.bifurcation.bifurcation_diagram`: stable solid, unstable dashed."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import xarray as xr

from .figures import subplots


def bifurcation_figure(diagram: xr.Dataset, path: Path | None = None, *, measure: str = "norm"):
    """Each branch's ``measure`` (``"norm"`` or ``"order_parameter"`` of mode 1) against the parameter.

    Stable stretches solid, unstable dashed (solid where the stability was not computed, the
    title says so); bifurcation points on the uniform branch as dots, folds as crosses. Written to
    ``path`` (PNG) when given; returns the figure.
    """
    computed = bool(np.all(np.isfinite(diagram.stable.values.astype(float))))
    parameter = diagram.attrs["parameter"]
    values = diagram[measure] if measure == "norm" else diagram[measure].sel(wavenumber=1)
    fig, ax = subplots(figsize=(6.4, 4.4))
    for branch in diagram.branch.values:
        on = (diagram.on_branch == branch).values
        x, y = diagram[parameter].values[on], values.values[on]
        stable = np.nan_to_num(diagram.stable.values[on].astype(float), nan=1.0) > 0  # not computed: solid
        colour = "0.3" if branch == 0 else f"C{(branch - 1) % 10}"
        label = "uniform" if branch == 0 else f"mode {int(diagram.mode[branch])}"
        for start, stop in _runs(stable):
            piece = slice(start, min(stop + 1, x.size))  # joined to the next point: no gaps at a change
            ax.plot(x[piece], y[piece], color=colour, ls="-" if stable[start] else "--",
                    label=label if start == 0 else None)
        folds = diagram.fold.values[on]
        if folds.any():
            ax.plot(x[folds], y[folds], "x", color=colour, ms=8)
    starts = diagram.bifurcation_value.values[1:]
    ax.plot(starts, np.zeros_like(starts), "o", color="k", ms=4, label="bifurcation points")
    order = "|∫ρ exp(iθ)|" if diagram.attrs["geometry"] == "circle" else "|∫ρ P₁(cos θ)|"
    ax.set(xlabel=parameter, ylabel="‖ρ − ρ̄‖₂" if measure == "norm" else order,
           title="stationary states (solid: stable, dashed: unstable)" if computed else
           "stationary states (stability not computed)")
    ax.legend(fontsize=8)
    if path is not None:
        fig.savefig(path, dpi=120)
    return fig


def _runs(flags: np.ndarray) -> list[tuple[int, int]]:
    """``(start, stop)`` index pairs of the maximal runs of equal values, ``stop`` exclusive."""
    edges = np.flatnonzero(flags[1:] != flags[:-1]) + 1
    bounds = np.concatenate(([0], edges, [flags.size]))
    return [(int(a), int(b)) for a, b in zip(bounds[:-1], bounds[1:])]
