r"""The paper's phase diagram: how likely two tokens have clustered, over β and t, for several d.
================================================================================================

SA, :math:`n = 32` tokens iid uniform on :math:`S^{d-1}`, the paper's discrete layer
``x <- normalize(x + 0.1 a(x))`` (the discrete-time Transformer), ``t`` in ``[0, 30]``: the probability that
:math:`\langle x_1(t), x_2(t)\rangle \ge 1 - 10^{-3}`, estimated from ``--realisations`` systems per ``beta``.
Overlaid: the time at which the orthogonal-token curve of docs/theory/references.md reaches
``1 - 1e-3`` (exact for orthonormal tokens, accurate for ``d >> n``).

Each dimension is one ``meanfield sweep`` of ``examples/phase_diagram.toml`` on Dask;
finished tasks are kept, so a second call (or an interrupted one) only computes what is
missing. Writes ``OUTPUT/d{d}/sweep.nc`` (the data), ``OUTPUT/clustering_time.csv``
(the overlaid curve) and ``OUTPUT/phase_diagram.png``.

    python examples/phase_diagram.py     # d = 2 (2048 systems), 32 and 128 (256): ~45 min on 2 cores
    python examples/phase_diagram.py --dimensions 2 32 --realisations 512
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

import meanfield as mf  # noqa: E402
from meanfield.records import dataset_settings  # noqa: E402
from validation import orthogonal_token_clustering_time  # noqa: E402
from validation.app import run_sweep  # noqa: E402
from validation.app.config import tomllib  # noqa: E402
from validation.app.files import write_text  # noqa: E402
from validation.app.sweep_config import check_sweep_config  # noqa: E402

# The docs gallery runs this script without __file__ (it sets sys.argv[0] to the script instead).
CONFIG = Path(globals().get("__file__", sys.argv[0])).with_name("phase_diagram.toml")


def sweep_dimension(d: int, realisations: int, args: argparse.Namespace):
    raw = tomllib.loads(CONFIG.read_text())
    raw["output"] = str(args.output / f"d{d}")
    raw["sweep"]["realisations"] = realisations
    raw["sweep"]["grid"] = {"beta": {"start": 0.1, "stop": 9.0, "count": args.betas}, "d": [d]}
    sweep = check_sweep_config(raw)
    print(f"d = {d}: {args.betas} values of beta x {realisations} systems")
    return run_sweep(sweep, workers=args.workers, resume=True).isel(d=0)


def clustering_times(betas: np.ndarray, n: int, level: float, horizon: float) -> np.ndarray:
    return np.array([orthogonal_token_clustering_time(mf.SelfAttention(b), n, level, horizon) for b in betas])


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").partition("\n")[0])
    parser.add_argument("--dimensions", type=int, nargs="+", default=[2, 32, 128])
    parser.add_argument("--realisations", type=int, nargs="+", default=[2048, 256, 256],
                        help="systems per beta, one value or one per dimension (paper: 2048)")
    parser.add_argument("--betas", type=int, default=90, help="values of beta in [0.1, 9]")
    parser.add_argument("--workers", type=int, default=None, help="Dask workers (default: one per core)")
    parser.add_argument("--output", type=Path, default=Path("output/phase_diagram"))
    args = parser.parse_args()
    if len(args.realisations) not in (1, len(args.dimensions)):
        parser.error(f"--realisations takes one value or one per dimension ({len(args.dimensions)})")
    counts = args.realisations * len(args.dimensions) if len(args.realisations) == 1 else args.realisations

    results = {d: sweep_dimension(d, r, args) for d, r in zip(args.dimensions, counts)}
    first = next(iter(results.values()))
    betas, times = first.beta.values, first.time.values
    tolerance = 1e-3
    n = tomllib.loads(CONFIG.read_text())["method"]["n"]
    curve = clustering_times(betas, n, 1 - tolerance, horizon=float(times[-1]))
    write_text(args.output / "clustering_time.csv",
               "beta,t_orthogonal\n" + "".join(f"{b:.6g},{t:.6g}\n" for b, t in zip(betas, curve)))

    fig, axes = plt.subplots(1, len(results), figsize=(4.2 * len(results), 3.8), squeeze=False,
                             constrained_layout=True, sharey=True)
    for ax, (d, ds) in zip(axes[0], results.items()):
        mesh = ax.pcolormesh(betas, times, ds.clustered_probability.values.T, cmap="Blues", vmin=0, vmax=1,
                             shading="nearest", rasterized=True)
        ax.plot(betas, curve, color="C3", lw=1.8, label="orthogonal tokens: r(t) = 1 - 1e-3")
        realisations = dataset_settings(ds)["realisations"]
        ax.set(xlabel=r"$\beta$", title=f"d = {d}, n = {n}, {realisations} systems per β",
               ylim=(times[0], times[-1]))
    axes[0, 0].set_ylabel("t")
    axes[0, 0].legend(loc="upper left", fontsize=8)
    fig.colorbar(mesh, ax=axes[0, -1], label=r"P($\langle x_1(t), x_2(t)\rangle \geq 1 - 10^{-3}$)")
    path = args.output / "phase_diagram.png"
    fig.savefig(path, dpi=130)
    print(f"figure: {path}; data: {', '.join(str(args.output / f'd{d}' / 'sweep.nc') for d in results)}")


if __name__ == "__main__":
    main()
