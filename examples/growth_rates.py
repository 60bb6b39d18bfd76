r"""Measured growth rates of perturbations of the uniform state against the dispersion relation.
============================================================================================

A density :math:`\rho_0 (1 + a Y_l)` with a small :math:`a` evolves linearly at first: the
degree-:math:`l` coefficient grows like :math:`e^{\gamma_l t}` with (docs/theory/references.md)

- circle: :math:`\gamma_k = k^2 \big(I_k(\beta) / (\beta I_0(\beta)) - D\big)` (SA),
- sphere: :math:`\gamma_l = l(l+1) \big(i_l(\beta) / (\beta i_0(\beta)) - D\big)` (SA),
  :math:`l(l+1) \big(i_l(\beta) / \beta - D\big)` (USA).

Each mode is run on its own at the solvers' default settings (CircleFV: 1024 cells,
SphereSpectral: lmax = 63, default ``rtol``) from a perturbation of amplitude ``1e-8``, its
coefficient recorded at 11 times over :math:`1 / \max|\gamma|`, and the rate fitted to
the logarithm of its modulus. Writes ``OUTPUT/growth_rates.png`` and ``OUTPUT/growth_rates.csv``.

    python examples/growth_rates.py        # about 5 s
"""

from __future__ import annotations

import argparse
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from scipy.special import eval_legendre  # noqa: E402

import meanfield as mf  # noqa: E402
from solvers import CircleFV, SphereSpectral  # noqa: E402
from validation import growth_rate  # noqa: E402
from validation.app.files import write_text  # noqa: E402
from validation.measures import harmonic_coefficients  # noqa: E402

# Mode coupling changes a rate by O(amplitude) for even degrees on S^2 (P_l^2 contains P_l) and
# O(amplitude^2) otherwise; the solvers control the error relative to the perturbation itself.
AMPLITUDE = 1e-8
CASES = [  # (geometry, label, model, degrees)
    ("circle", "SA β=4 D=0", mf.SelfAttention(4.0), range(1, 9)),
    ("circle", "SA β=4 D=0.05", mf.SelfAttention(4.0, diffusion=0.05), range(1, 9)),
    ("sphere", "SA β=4 D=0.02", mf.SelfAttention(4.0, diffusion=0.02), range(1, 9)),
    ("sphere", "USA β=2 D=0", mf.SelfAttention(2.0, normalized=False), range(1, 9)),
]


def fitted_rate(times: np.ndarray, coefficients: np.ndarray) -> float:
    return float(np.polyfit(times, np.log(np.abs(coefficients)), 1)[0])


def circle_rate(model, k: int, duration: float) -> float:
    times = np.linspace(0.0, duration, 11)
    ds = CircleFV(model).solve(lambda theta: 1 + AMPLITUDE * np.cos(k * theta), times, progress=False)
    return fitted_rate(times, np.fft.rfft(ds.rho.values, axis=1)[:, k].real)


def sphere_rate(model, l: int, duration: float) -> float:
    times = np.linspace(0.0, duration, 11)
    ds = SphereSpectral(model).solve(lambda points: 1 + AMPLITUDE * eval_legendre(l, points[..., 2]), times,
                                     progress=False)
    # (l, m = 0) sits at position l of the m-major coefficient order.
    return fitted_rate(times, np.array([harmonic_coefficients(ds, k, l)[0][l].real for k in range(times.size)]))


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").partition("\n")[0])
    parser.add_argument("--output", type=Path, default=Path("output/growth_rates"))
    args = parser.parse_args()

    rows = ["geometry,case,degree,measured,dispersion_relation,relative_error"]
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2), constrained_layout=True)
    for geometry, label, model, degrees in CASES:
        d = 2 if geometry == "circle" else 3
        exact = np.array([growth_rate(model, l, d) for l in degrees])
        duration = 1.0 / np.abs(exact).max()
        measure = circle_rate if geometry == "circle" else sphere_rate
        measured = np.array([measure(model, l, duration) for l in degrees])
        ax = axes[0 if geometry == "circle" else 1]
        line, = ax.plot(list(degrees), exact, "-", lw=1, label=f"{label}: dispersion relation")
        ax.plot(list(degrees), measured, "o", color=line.get_color(), mfc="none", label=f"{label}: measured")
        for l, m, e in zip(degrees, measured, exact):
            rows.append(f"{geometry},{label},{l},{m:.10g},{e:.10g},{(m - e) / e:.3g}")
        relative = np.abs(measured - exact) / np.abs(exact)
        print(f"{geometry:6} {label:16} relative error per degree 1..{max(degrees)}: "
              + " ".join(f"{e:.1e}" for e in relative))
    for ax, title in zip(axes, ("circle (CircleFV, default: 1024 cells)", "sphere S² (SphereSpectral, default: lmax = 63)")):
        ax.axhline(0, color="0.6", lw=0.8)
        ax.set(xlabel="degree l (circle: k)", ylabel="growth rate γ", title=title)
        ax.legend(fontsize=8)
    args.output.mkdir(parents=True, exist_ok=True)
    fig.savefig(args.output / "growth_rates.png", dpi=120)
    write_text(args.output / "growth_rates.csv", "\n".join(rows) + "\n")
    print(f"figure and data in {args.output}")


if __name__ == "__main__":
    main()
