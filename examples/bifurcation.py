"""Stationary states and their bifurcations on the circle and on S², and the energy landscape of a few tokens.
=============================================================================================================

- Noisy Kuramoto (SA at beta = 0): the uniform state loses stability at D = 1/2 and a stable
  branch of one smooth cluster bifurcates from it; its order parameter is checked against the
  self-consistency I_1(r/D) / I_0(r/D) = r solved by scipy.
- SA with beta = 4 over D: the bifurcations of modes 1-4 at the zeros of the dispersion relation;
  only the mode-1 branch (one cluster) is stable, the others (two, three, four clusters) are
  saddles that would merge.
- USA with beta = 3 on S^2 over D (axisymmetric states): the zonal harmonic of degree 1 bifurcates
  subcritically (unstable toward larger D), folds and gains stability; degrees 2 and 3 follow at
  the zeros of the sphere's dispersion relation.
- Tokens: the repulsive dynamics (V = -I) of 4, 6 and 12 tokens on S^2 ends at the Platonic
  solids, which Newton refines to critical configurations of index 0 and design strength 2, 3, 5.

Writes ``OUTPUT/bifurcation.png``.

    python examples/bifurcation.py        # about a minute
"""

from __future__ import annotations

import argparse
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from scipy.optimize import brentq  # noqa: E402
from scipy.special import ive  # noqa: E402

import meanfield as mf  # noqa: E402
from meanfield.landscape import critical_configuration, design_strength  # noqa: E402
from solvers.stationary.bifurcation import bifurcation_diagram  # noqa: E402
from validation.stationary_figures import bifurcation_figure  # noqa: E402


def kuramoto_order(diffusion: float) -> float:
    return brentq(lambda r: ive(1, r / diffusion) / ive(0, r / diffusion) - r, 1e-12, 1.0, xtol=1e-15)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").partition("\n")[0])
    parser.add_argument("--output", type=Path, default=Path("output"))
    parser.add_argument("--cells", type=int, default=256)
    parser.add_argument("--lmax", type=int, default=31, help="highest degree on S^2")
    args = parser.parse_args()
    args.output.mkdir(parents=True, exist_ok=True)

    kuramoto = bifurcation_diagram(mf.SelfAttention(0.0, diffusion=0.3), "diffusion", (0.05, 0.7),
                                   cells=args.cells, modes=[1, 2], progress=False)
    branch = kuramoto.where(kuramoto.on_branch == 1, drop=True)
    error = max(abs(r - kuramoto_order(d)) for d, r in
                zip(branch.diffusion.values, branch.order_parameter.sel(wavenumber=1).values))
    print(f"noisy Kuramoto: bifurcation at D = {float(kuramoto.bifurcation_value[1]):.12f} (exact 1/2); "
          f"order parameter against the Bessel self-consistency: max error {error:.1e} over {branch.point.size} states")

    attention = bifurcation_diagram(mf.SelfAttention(4.0, diffusion=0.1), "diffusion", (0.02, 0.4),
                                    cells=args.cells, modes=range(1, 5), progress=False)
    for b in attention.branch.values[1:]:
        on = attention.where(attention.on_branch == b, drop=True)
        print(f"SA beta = 4: mode {int(attention.mode[b])} bifurcates at D = {float(attention.bifurcation_value[b]):.8f}; "
              f"{'stable' if on.stable.all() else 'unstable' if not on.stable.any() else 'changes stability'}")

    sphere = bifurcation_diagram(mf.SelfAttention(3.0, normalized=False, diffusion=0.1), "diffusion", (0.3, 1.0),
                                 geometry="sphere", lmax=args.lmax, modes=[1, 2, 3], max_points=40, progress=False)
    for b in sphere.branch.values[1:]:
        on = sphere.where(sphere.on_branch == b, drop=True)
        print(f"USA beta = 3 on S^2: degree {int(sphere.mode[b])} bifurcates at D = "
              f"{float(sphere.bifurcation_value[b]):.8f}; {int(on.fold.sum())} fold(s); "
              f"{int(on.stable.sum())} of {on.point.size} states stable; {sphere.end.values[b]}")

    fig, axes = plt.subplots(1, 4, figsize=(22, 4.6), layout="constrained")
    for ax, diagram, measure in ((axes[0], kuramoto, "order_parameter"), (axes[1], attention, "norm"),
                                 (axes[2], sphere, "norm")):
        panel = bifurcation_figure(diagram, measure=measure).axes[0]
        for line in panel.get_lines():
            ax.plot(*line.get_data(), color=line.get_color(), ls=line.get_linestyle(), marker=line.get_marker(),
                    ms=line.get_markersize(), label=line.get_label())
        ax.set(xlabel=panel.get_xlabel(), ylabel=panel.get_ylabel())
        ax.legend(fontsize=8)
    d = np.linspace(0.06, 0.5, 200)
    axes[0].plot(d, [kuramoto_order(v) for v in d], ":", color="k", lw=3, alpha=0.4, label="I1(r/D)/I0(r/D) = r")
    axes[0].legend(fontsize=8)
    axes[0].set_title("noisy Kuramoto (SA, beta = 0)")
    axes[1].set_title("SA, beta = 4")
    axes[2].set_title("USA, beta = 3, on S^2 (axisymmetric)")

    rows = []
    for n in (4, 6, 12):
        model = mf.SelfAttention(3.0, normalized=False, value=-1.0)
        end = mf.simulate_particles(model, mf.sample_uniform(n, 3, rng=1), [0.0, 50.0], progress=False).x.values[-1]
        critical = critical_configuration(model, end)
        rows.append((n, critical.index, critical.zero_modes, design_strength(critical.x)))
        inner = np.unique(np.round(critical.x @ critical.x.T, 10))
        print(f"repulsive USA, n = {n}: index {critical.index}, {critical.zero_modes} zero modes (rotations "
              f"{critical.rotation_modes}), {design_strength(critical.x)}-design, inner products {inner}")
    axes[3].axis("off")
    axes[3].table(cellText=[[str(v) for v in row] for row in rows],
                  colLabels=["tokens", "index", "zero modes", "design strength"], loc="center")
    axes[3].set_title("repulsive USA on S^2: critical configurations")
    fig.savefig(args.output / "bifurcation.png", dpi=110)
    print(f"figure written to {args.output / 'bifurcation.png'}")


if __name__ == "__main__":
    main()
