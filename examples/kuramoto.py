r"""Kuramoto oscillators with natural frequencies: the synchronisation transition, particles against the mean field.
=====================================================================================================================

Tokens on the circle with Lorentzian natural frequencies of width Delta = 0.5 (``SelfAttention(0,
value=K)`` with :class:`meanfield.NaturalFrequencies`), started from the Poisson kernel of order
parameter r0 = 0.3 (``--n`` tokens, ``--systems`` draws).

Left: the order parameter r(t) at K = 2 for the particles (mean over the draws with its standard
error), the Ott-Antonsen closed form of the continuum, the populations' Ott-Antonsen equations
on 16 quadrature nodes of the law (exact for that discrete law), and the family of densities on
those nodes by :class:`solvers.FrequencyCircleFV` (128 cells; its curve stops where it no longer
resolves the locked oscillators' sharpening densities). Sixteen frequencies keep beating where
a continuum of them dephases: the discrete law's r(t) oscillates about the continuum's, which
the particles (frequencies drawn from the continuum) follow. Right: the transition, the time average
of r over the second half of the run against K, for the particles and the continuum's stationary
:math:`r = \sqrt{1 - 2\Delta/K}` above :math:`K_c = 2\Delta`; the particles' incoherent state
keeps :math:`r \approx n^{-1/2}` below it.

Writes ``OUTPUT/kuramoto.png``.

    python examples/kuramoto.py                                      # about two minutes
    python examples/kuramoto.py --n 200 --systems 2 --end 4          # a few seconds
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
from solvers import FrequencyCircleFV, UnderResolvedWarning  # noqa: E402

WIDTH, R0, COUPLING = 0.5, 0.3, 2.0


def poisson_angles(generator, shape) -> np.ndarray:
    """Angles of the Poisson kernel with first moment R0: the wrapped Cauchy law of scale -log(R0)."""
    return generator.standard_cauchy(shape) * -np.log(R0)


def particle_radius(coupling: float, n: int, systems: int, times: np.ndarray, seed: int) -> np.ndarray:
    """r(t) per system, shape (systems, times)."""
    generator = np.random.default_rng(seed)
    theta = poisson_angles(generator, (systems, n))
    omega = WIDTH * generator.standard_cauchy((systems, n))
    model = mf.NaturalFrequencies(mf.SelfAttention(0.0, value=coupling), omega)
    x = mf.simulate_particles(model, np.stack([np.cos(theta), np.sin(theta)], axis=-1), times, method="rk4",
                              dt=0.01).x.values
    return np.abs(x[..., 0].mean(axis=-1) + 1j * x[..., 1].mean(axis=-1))


def family_radius(times: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """r(t) of the finite volumes on 16 nodes, and the populations' Ott-Antonsen r(t) on the same nodes."""
    nodes, weights = mf.lorentzian_nodes(WIDTH, 16)
    solver = FrequencyCircleFV(mf.SelfAttention(0.0, value=COUPLING), frequencies=nodes, weights=weights, cells=128)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UnderResolvedWarning)  # the curve ends where it stops resolving
        run = solver.solve(lambda w, th: (1 - R0**2) / np.abs(np.exp(1j * th) - R0) ** 2 + 0 * w, times,
                           progress=False)
    finite_volumes = np.full(times.size, np.nan)
    finite_volumes[: run.sizes["time"]] = np.abs(solver.order_parameter(run.rho.values))
    populations = np.abs(mf.ott_antonsen_populations(times, nodes, weights, R0, coupling=COUPLING))
    return finite_volumes, populations


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").partition("\n")[0])
    parser.add_argument("--n", type=int, default=2000, help="tokens per system")
    parser.add_argument("--systems", type=int, default=8, help="independent draws")
    parser.add_argument("--end", type=float, default=20.0, help="the last time")
    parser.add_argument("--output", type=Path, default=Path("output"))
    args = parser.parse_args()
    args.output.mkdir(parents=True, exist_ok=True)
    times = np.linspace(0.0, args.end, 41)
    fig, (ax_time, ax_transition) = plt.subplots(1, 2, figsize=(12, 4.5))

    r = particle_radius(COUPLING, args.n, args.systems, times, seed=1)
    mean, error = r.mean(axis=0), r.std(axis=0, ddof=1) / np.sqrt(args.systems)
    ax_time.plot(times, mean, label=f"particles, n = {args.n}")
    ax_time.fill_between(times, mean - error, mean + error, alpha=0.25)
    ax_time.plot(times, mf.ott_antonsen_radius(times, coupling=COUPLING, width=WIDTH, r0=R0), "k--",
                 label="Ott-Antonsen, continuum")
    finite_volumes, populations = family_radius(times)
    ax_time.plot(times, populations, ":", color="C2", label="Ott-Antonsen, 16 nodes")
    ax_time.plot(times, finite_volumes, color="C3", lw=1, label="FrequencyCircleFV, 16 nodes x 128 cells")
    ax_time.set(xlabel="time", ylabel="order parameter r", title=f"K = {COUPLING:g}, Lorentzian width {WIDTH:g}")
    ax_time.legend(fontsize=8)

    couplings = np.linspace(0.25, 3.0, 12)
    late = times >= times[-1] / 2
    print(f"{'K':>6s} {'particles r':>14s} {'continuum r':>12s}")
    for k, coupling in enumerate(couplings):
        r = particle_radius(coupling, args.n, args.systems, times, seed=10 + k)[:, late].mean(axis=1)
        stationary = np.sqrt(max(0.0, 1 - 2 * WIDTH / coupling))
        ax_transition.errorbar(coupling, r.mean(), yerr=r.std(ddof=1) / np.sqrt(args.systems), fmt="o", color="C0",
                               label="particles" if k == 0 else None)
        print(f"{coupling:6.2f} {r.mean():14.3f} {stationary:12.3f}")
    fine = np.linspace(couplings[0], couplings[-1], 300)
    ax_transition.plot(fine, np.sqrt(np.maximum(0.0, 1 - 2 * WIDTH / fine)), "k--", label=r"$\sqrt{1 - 2\Delta/K}$")
    ax_transition.axvline(2 * WIDTH, color="0.6", lw=0.8)
    ax_transition.set(xlabel="coupling K", ylabel="time-averaged r", title=r"the transition at $K_c = 2\Delta$")
    ax_transition.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(args.output / "kuramoto.png", dpi=110)
    plt.close(fig)


if __name__ == "__main__":
    main()
