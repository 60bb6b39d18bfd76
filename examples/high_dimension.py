r"""Where Transformers live: the mean-field equation on :math:`S^{d-1}` at d = 3, 16, 128, 768.
===========================================================================================

Three views of the high-dimensional regime ("A mathematical perspective on Transformers",
sec. 6), each against its exact reference:

1. A zonal density's law of :math:`u = \langle x, e\rangle` under SA (:class:`solvers.ZonalSphereSpectral`),
   from :math:`\rho \propto e^{\sqrt d\,u/2}`: the bump of mass moves toward :math:`u = 1`
   at every ``d``, from a law that concentrates around 0 with width :math:`1/\sqrt d`; the
   larger ``d``, the sooner ``lmax`` stops resolving it (a density relative to the uniform one
   that grows like :math:`e^{c\,d}` as the mass leaves :math:`u \approx 0`), and the run ends
   there (outputs past it are not drawn).
2. Growth rates of small degree-:math:`l` perturbations measured on the solver against the
   dispersion relation (:func:`validation.growth_rate`): the rate of degree 1 tends to 1 as
   ``d`` grows, the higher degrees fall like :math:`(\beta/d)^{l-1}`.
3. The same runs handed over to rings of mass (:class:`solvers.ZonalSpectralRings`) when the
   series stops resolving them: the energy climbs to a Dirac mass's, :math:`e^\beta/(2\beta)`,
   at every ``d`` (at ``d = 3`` a few per cent of the mass settles at the south pole, a
   stationary configuration of the zonal class, and the energy ends below).
4. Thm 6.9: ``n = 8`` iid uniform tokens at ``d = 64, 512, 4096`` against their limit, the
   orthogonal-token curve :math:`r(t)`; the gap falls like :math:`d^{-1/2}`
   (:func:`validation.gram_limit_gap`).

Writes ``OUTPUT/high_dimension.png``.

    python examples/high_dimension.py        # about 10 s
"""

from __future__ import annotations

import argparse
import json
import warnings
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

import meanfield as mf  # noqa: E402
import validation  # noqa: E402
from solvers import UnderResolvedWarning, ZonalSpectralRings, ZonalSphereSpectral  # noqa: E402

DIMENSIONS = (3, 16, 128, 768)


def laws(beta: float, lmax: int, end: float):
    """The law of u at five times per dimension, from exp(sqrt(d) u / 2) (a shift of u by about 1/(2 sqrt d))."""
    runs = {}
    for d in DIMENSIONS:
        solver = ZonalSphereSpectral(mf.SelfAttention(beta), d=d, lmax=lmax)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UnderResolvedWarning)  # the run ends at its first unresolved output
            runs[d] = solver.solve(lambda x, d=d: np.exp(0.5 * np.sqrt(d) * x[..., -1]), np.linspace(0, end, 5),
                                   progress=False)
    return runs


def collapses(beta: float, lmax: int, end: float):
    """The energy through the hand-over to rings, per dimension, and the hand-over times."""
    runs = {}
    for d in DIMENSIONS:
        runs[d] = ZonalSpectralRings(mf.SelfAttention(beta), d=d, lmax=lmax).solve(
            lambda x, d=d: np.exp(0.5 * np.sqrt(d) * x[..., -1]), np.linspace(0, end, 41), progress=False)
    return runs


def growth_rates(beta: float, degrees: int):
    """Measured (a 1e-9 perturbation of one degree at a time, over one unit of time) and exact rates."""
    measured, exact = {}, {}
    for d in DIMENSIONS:
        model = mf.SelfAttention(beta)
        solver = ZonalSphereSpectral(model, d=d, lmax=24, rtol=1e-11)
        rates = []
        for l in range(1, degrees + 1):
            start = np.zeros(25)
            start[0], start[l] = 1.0, 1e-9
            ds = solver.solve(solver.density(start), [0.0, 1.0], progress=False)
            rates.append(np.log(ds.coefficient.values[1, l] / ds.coefficient.values[0, l]))
        measured[d] = np.array(rates)
        exact[d] = np.array([validation.growth_rate(model, l, d) for l in range(1, degrees + 1)])
    return measured, exact


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description="The mean-field equation on S^{d-1} at d = 3, 16, 128, 768.")
    parser.add_argument("--output", type=Path, default=Path("output/high_dimension"))
    parser.add_argument("--beta", type=float, default=6.0)
    parser.add_argument("--lmax", type=int, default=48)
    parser.add_argument("--end", type=float, default=3.0)
    parser.add_argument("--seeds", type=int, default=8)
    parser.add_argument("--collapse-end", type=float, default=12.0)
    args = parser.parse_args(argv)
    args.output.mkdir(parents=True, exist_ok=True)

    runs = laws(args.beta, args.lmax, args.end)
    measured, exact = growth_rates(args.beta, 6)
    collapsed = collapses(args.beta, args.lmax, args.collapse_end)
    times = np.linspace(0.0, 4.0, 17)
    gram = validation.gram_limit_gap(mf.SelfAttention(1.0), 8, [64, 512, 4096], times, seeds=args.seeds)

    fig, axes = plt.subplots(2, 4, figsize=(20, 8.5), layout="constrained")
    for ax, d in zip(axes[0], DIMENSIONS):
        ds = runs[d]
        for k in np.flatnonzero(ds.resolved.values):  # the first unresolved output ends the run: not drawn
            ax.plot(ds.u, ds.law[k], label=f"t = {float(ds.time[k]):.2g}")
        ax.set(title=f"d = {d}: law of u = <x, e> (lmax = {args.lmax})", xlabel="u",
               ylabel="density of u")
        ax.legend(fontsize=8)
    ax = axes[1, 0]
    for d, ds in collapsed.items():
        line, = ax.plot(ds.time, ds.energy, label=f"d = {d}")
        handover = json.loads(ds.attrs["settings"])["handover_time"]
        ax.axvline(handover, color=line.get_color(), ls=":")
    ax.axhline(np.exp(args.beta) / (2 * args.beta), color="k", ls="--", label="Dirac mass: e^beta / (2 beta)")
    ax.set(title="energy, series then rings (dotted: hand-over)", xlabel="t", ylabel="E")
    ax.legend(fontsize=8)
    ax = axes[1, 1]
    for d in DIMENSIONS:
        line, = ax.semilogy(range(1, 7), np.abs(exact[d]), "-", label=f"d = {d}: dispersion relation")
        ax.semilogy(range(1, 7), np.abs(measured[d]), "o", color=line.get_color())
    ax.set(title="growth rates |gamma_l| (dots: measured)", xlabel="degree l", ylabel="|gamma_l|")
    ax.legend(fontsize=8)
    ax = axes[1, 2]
    for d, pairs, color in zip([64, 512, 4096], gram["inner_products"], ["C0", "C1", "C2"]):
        ax.fill_between(times, pairs.min(axis=1), pairs.max(axis=1), color=color, alpha=0.3,
                        label=f"d = {d}: the 56 inner products of one sample")
    ax.plot(times, gram["curve"], "k", label="limit r(t) (orthogonal tokens)")
    ax.set(title="Thm 6.9: the limit Gram dynamics, n = 8, SA beta = 1", xlabel="t", ylabel="<x_i, x_j>")
    ax.legend(fontsize=8)
    ax = axes[1, 3]
    ax.loglog([64, 512, 4096], gram["gap"].mean(axis=1), "o-", label="max |<x_i, x_j> - r(t)|, mean over seeds")
    ax.loglog([64, 512, 4096], gram["gap"].mean(axis=1)[0] * np.sqrt(64 / np.array([64, 512, 4096])), "k--",
              label="d^(-1/2)")
    ax.set(title=f"Thm 6.9, n = 8: slope {gram['rate']:.2f} [{gram['rate_low']:.2f}, {gram['rate_high']:.2f}]",
           xlabel="d", ylabel="gap to the limit")
    ax.legend(fontsize=8)
    fig.savefig(args.output / "high_dimension.png", dpi=110)
    print(f"wrote {args.output / 'high_dimension.png'}; Thm 6.9 slope {gram['rate']:.3f} "
          f"[{gram['rate_low']:.3f}, {gram['rate_high']:.3f}]")


if __name__ == "__main__":
    main()
