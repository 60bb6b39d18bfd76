"""Lost in the middle: the U-shaped retrieval profile of causal attention, particles against the closed form.
==========================================================================================================

Causal USA with ALiBi (docs/theory/causal.md; the paper's time, prefactor ``c = beta``), prompts of
``n`` iid uniform tokens on the circle. For each depth ``t`` and size ``n`` the script
measures the retrieval profile :math:`\\sum_k e^{-\\pi^2k^2/(2M^2)} C_k` binned in the needle's
position ``s0`` (control-variate estimator of sec. 5, standard errors over prompts) and
draws it with the closed form :math:`S_t(s_0)` (sec. 4): primacy (``s0 -> 0``), recency
(``s0 -> 1``) and the minimum in between. The closed form is derived for uniform tokens;
prompts made of the ``M`` codewords start from a discrete measure and are not run here.

Writes ``OUTPUT/profile.csv`` (every bin: estimate, standard error, binned closed form, z)
and ``OUTPUT/lost_in_the_middle.png``.

    python examples/lost_in_the_middle.py                      # examples/lost_in_the_middle.toml: about a minute on 2 cores
    python examples/lost_in_the_middle.py --prompts 2000       # quicker, wider error bars
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

import meanfield as mf  # noqa: E402
from validation.app.config import read_toml  # noqa: E402
from validation.app.files import write_text  # noqa: E402
from validation.causal import (binned_retrieval_profile, retrieval_profile, retrieval_profile_estimate,  # noqa: E402
                               u_shape_condition)

# The docs gallery runs this script without __file__ (it sets sys.argv[0] to the script instead).
CONFIG = Path(globals().get("__file__", sys.argv[0])).with_name("lost_in_the_middle.toml")
KEYS = {"script": str, "output": str, "beta": float, "alibi": float, "words": int, "times": list, "sizes": list,
        "prompts": int, "bins": int, "dt": float, "seed": int}


def read_config(path: Path) -> dict:
    raw = read_toml(path)
    unknown = set(raw) - set(KEYS)
    missing = set(KEYS) - set(raw)
    if unknown or missing:
        raise SystemExit(f"{path}: unknown keys {sorted(unknown)}, missing keys {sorted(missing)}")
    for key, kind in KEYS.items():
        if kind is float and isinstance(raw[key], int):
            raw[key] = float(raw[key])
        if not isinstance(raw[key], kind) or isinstance(raw[key], bool):
            raise SystemExit(f"{path}: {key} must be a {kind.__name__}, got {raw[key]!r}")
    raw["output"] = (path.parent / raw["output"]).resolve()
    return raw


def measure(config: dict, n: int, generator: np.random.Generator) -> dict[float, object]:
    """Retrieval profile estimates at every depth for prompts of ``n`` tokens."""
    model = mf.CausalAttention(config["beta"], normalized=False, alibi=config["alibi"], prefactor=config["beta"])
    theta0 = generator.uniform(0.0, 2 * np.pi, (config["prompts"], n))
    x0 = np.stack([np.cos(theta0), np.sin(theta0)], axis=-1)
    times = [0.0] + list(config["times"])
    angles = mf.observe_particles(model, x0, times, lambda x: np.arctan2(x[..., 1], x[..., 0]),
                                  method="rk4", dt=config["dt"])
    return {t: retrieval_profile_estimate(theta0, theta, words=config["words"], bins=config["bins"])
            for t, theta in zip(times[1:], angles[1:])}


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").partition("\n")[0])
    parser.add_argument("--config", type=Path, default=CONFIG)
    parser.add_argument("--prompts", type=int, default=None, help="prompts per size (overrides the config)")
    args = parser.parse_args()
    config = read_config(args.config)
    if args.prompts is not None:
        config["prompts"] = args.prompts
    beta, alibi, words = config["beta"], config["alibi"], config["words"]
    generator = np.random.default_rng(config["seed"])
    start = time.perf_counter()
    rows, estimates = ["t,n,s0_low,s0_high,estimate,standard_error,closed_form_binned,z\n"], {}
    for n in config["sizes"]:
        estimates[n] = measure(config, n, generator)
        for t, est in estimates[n].items():
            limit = binned_retrieval_profile(est, t, beta=beta, alibi=alibi).values
            z = (est.profile.values - limit) / est.standard_error.values
            rows += [f"{t:g},{n},{lo:.6g},{hi:.6g},{e:.6g},{se:.6g},{g:.6g},{zz:.3f}\n" for lo, hi, e, se, g, zz in
                     zip(est.bin_low.values, est.bin_high.values, est.profile.values, est.standard_error.values,
                         limit, z)]
            print(f"n = {n:4d}, t = {t:g}: largest |z| over bins s0 > 1/8 = {np.abs(z[1:]).max():.2f}")
    write_text(config["output"] / "profile.csv", "".join(rows))

    fig, axes = plt.subplots(1, len(config["times"]), figsize=(5.2 * len(config["times"]), 4.0),
                             constrained_layout=True, squeeze=False)
    s0 = np.linspace(0.01, 0.995, 400)
    for ax, t in zip(axes[0], config["times"]):
        holds, left, bound = u_shape_condition(t, beta=beta, alibi=alibi)
        ax.plot(s0, retrieval_profile(t, s0, beta=beta, alibi=alibi, words=words), color="k", lw=1.6,
                label=r"closed form $S_t(s_0)$")
        width = 1.0 / config["bins"]
        for index, n in enumerate(config["sizes"]):
            est = estimates[n][t]
            offset = (index - (len(config["sizes"]) - 1) / 2) * 0.12 * width
            ax.errorbar(est.bin.values + offset, est.profile.values, yerr=2 * est.standard_error.values, fmt="o",
                        ms=3.5, capsize=2, color=f"C{index}", label=f"particles, n = {n} (±2 s.e.)")
        ax.set(xlabel=r"needle position $s_0 = i^*/n$", title=(
            f"t = {t:g}: t sup a_k = {left:.2f} {'≤' if holds else '>'} {bound:.3f}"), xlim=(0, 1))
    axes[0, 0].set_ylabel(r"retrieval profile: $n\,\times$ accuracy excess $\times\,M/\sqrt{2\pi}$")
    axes[0, 0].legend(fontsize=8)
    fig.suptitle(f"Lost in the middle: causal USA, β = {beta:g}, λ = {alibi:g}, M = {words}, "
                 f"{config['prompts']} uniform prompts per n")
    path = config["output"] / "lost_in_the_middle.png"
    fig.savefig(path, dpi=130)
    print(f"figure: {path}; data: {config['output'] / 'profile.csv'} ({time.perf_counter() - start:.0f} s)")


if __name__ == "__main__":
    main()
