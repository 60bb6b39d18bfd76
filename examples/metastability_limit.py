r"""The metastability timeline to t = 1e12: particle ensembles next to the mean-field limit, and its staircase.
==============================================================================================================

SA on the circle from the density ``1 + 0.3 cos 3 theta + 0.15 cos(2 theta + 0.7)``: three
clusters form, then merge, one pair at a time, after times exponentially long in ``beta``. The
limit ``n -> infinity`` is ``CircleFVLagrangian`` with ``width = rtol`` (finite volumes while
the density is resolved, then the measure in mass coordinates, each collapsed cluster one
atom); ensembles of ``n`` tokens drawn iid from the same density run with the same reduction
(``meanfield.simulate_clusters``), so that both reach ``t = 1e12`` (the last merge at
``beta = 16``) at the cost of a run to the first merge. Cluster counts: tokens closer than 0.2 rad are one cluster.

For each ``beta`` the script prints the fastest-growing mode of the dispersion relation (the
cluster count predicted for starts near the uniform density: this start's mode 3, of
amplitude 0.3, is beyond the linear regime and sets three clusters at every ``beta``), and
for each ``n`` when the limit and each system settle at the limit's final count (``validation.settling_time``: the last fall of the count to it), with the
systems' median and quartiles. The lower row of the figure is the limit's energy against the
rescaled time :math:`\log t / \beta` (``validation.rescaled_time``): flat while clusters wait,
a step at each merge, at :math:`\tau \to 1 - \cos\varphi \le 2` for clusters at angle
:math:`\varphi` as ``beta`` grows (docs/guide/collapse.md).

Writes ``OUTPUT/metastability_limit.png`` and ``OUTPUT/metastability_limit.csv``.

    python examples/metastability_limit.py      # about 3 minutes on 2 cores (n up to 4096, t = 1e12)
"""

from __future__ import annotations

import argparse
import warnings
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

import meanfield as mf  # noqa: E402
from solvers import CircleFVLagrangian, UnderResolvedWarning  # noqa: E402
from validation import predicted_cluster_count, rescaled_time, settling_time  # noqa: E402
from validation.app.files import write_text  # noqa: E402

#: The limit's reduction width: its rtol (closer atoms are not told apart by its steps).
WIDTH = 1e-6


def initial(theta):
    return 1 + 0.3 * np.cos(3 * theta) + 0.15 * np.cos(2 * theta + 0.7)


def limit_run(beta: float, times: np.ndarray):
    with warnings.catch_warnings():  # the finite volumes' hand-over says they stopped resolving: expected here
        warnings.simplefilter("ignore", UnderResolvedWarning)
        return CircleFVLagrangian(mf.SelfAttention(beta), width=WIDTH).solve(initial, times, progress=False)


def particle_counts(beta: float, n: int, systems: int, times: np.ndarray, seed: int) -> np.ndarray:
    """Cluster counts, shape (time, system), of ``systems`` ensembles of ``n`` iid tokens, tight clusters reduced."""
    generator = np.random.default_rng([seed, n])
    return np.stack([mf.simulate_clusters(mf.SelfAttention(beta), mf.sample_circle(n, initial, generator), times,
                                          progress=False).cluster_count.values for _ in range(systems)], axis=1)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").partition("\n")[0])
    parser.add_argument("--betas", type=float, nargs="+", default=[4.0, 9.0, 16.0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[256, 1024, 4096])
    parser.add_argument("--systems", type=int, default=4)
    parser.add_argument("--t-end", type=float, default=1e12)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--output", type=Path, default=Path("output"))
    args = parser.parse_args()
    args.output.mkdir(parents=True, exist_ok=True)
    times = np.concatenate([[0.0], np.geomspace(0.5, args.t_end, 200)])
    rows = ["beta,n,system,settling_time"]
    fig, axes = plt.subplots(2, len(args.betas), figsize=(5.5 * len(args.betas), 7.5), squeeze=False,
                             layout="constrained")
    for column, beta in enumerate(args.betas):
        ax, stairs = axes[0, column], axes[1, column]
        limit = limit_run(beta, times)
        counts = limit.cluster_count.values
        final = int(counts[-1])
        limit_time = settling_time(times, counts, final)
        print(f"beta = {beta:g}: the dispersion relation's fastest mode {predicted_cluster_count(mf.SelfAttention(beta))} "
              "(for starts near uniform; this one is not)")
        print(f"  the limit's cluster count {int(counts.max())} -> {final}"
              + (f"; it settles at {final} from t = {limit_time:.4g}" if np.isfinite(limit_time) else
                 f", kept to t = {args.t_end:g}"))
        ax.step(times[1:], counts[1:], where="post", color="k", lw=2.5, label="limit (CircleFVLagrangian)")
        for colour, n in enumerate(args.sizes):
            systems = particle_counts(beta, n, args.systems, times, args.seed)
            settled = np.array([settling_time(times, systems[:, s], final) for s in range(args.systems)])
            rows += [f"{beta:g},{n},{s},{value:.6g}" for s, value in enumerate(settled)]
            if np.isfinite(limit_time) and np.isfinite(settled).any():
                low, median, high = np.nanpercentile(settled, [25, 50, 75])
                print(f"  n = {n:5d}: {np.isfinite(settled).sum()} of {args.systems} systems settle at {final} "
                      f"clusters; median t = {median:.4g}, quartiles [{low:.4g}, {high:.4g}]")
            else:
                print(f"  n = {n:5d}: {np.sum(systems[-1] == final)} of {args.systems} systems have {final} clusters "
                      f"at t = {args.t_end:g}, {np.sum(systems[-1] < final)} fewer")
            ax.step(times[1:], np.median(systems, axis=1)[1:], where="post", color=f"C{colour}",
                    label=f"n = {n} (median)")
            ax.fill_between(times[1:], *np.percentile(systems[1:], [25, 75], axis=1), step="post",
                            color=f"C{colour}", alpha=0.15)
        if np.isfinite(limit_time):
            ax.axvline(limit_time, color="k", ls=":", lw=1)
        ax.set(xscale="log", xlabel="time t", ylabel="clusters (gaps > 0.2 rad)", title=f"SA, beta = {beta:g}")
        ax.legend(fontsize=8)
        stairs.plot(rescaled_time(times[1:], beta), limit.energy.values[1:] * 2 * beta / np.exp(beta), color="k")
        stairs.set(xlabel="rescaled time log(t) / beta", ylabel="energy 2 beta E / e^beta",
                   title="the limit's staircase")
    fig.savefig(args.output / "metastability_limit.png", dpi=110)
    write_text(args.output / "metastability_limit.csv", "\n".join(rows) + "\n")
    print(f"figure and settling times written to {args.output}")


if __name__ == "__main__":
    main()
