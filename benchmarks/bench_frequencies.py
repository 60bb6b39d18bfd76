"""Oscillators with natural frequencies at 10^4 and 10^5 tokens (issue 68): the interaction's series engine.

Kuramoto (USA at beta = 0, coupling K = 2) with Lorentzian frequencies of half-width 0.5, one
velocity evaluation of ``NaturalFrequencies`` through ``select_kernel``:

- at n = 10^4, the series engine (``"auto"``: one Fourier harmonic, ``O(n)``) against the pair sum
  (``"numpy"``, ``O(n^2)``);
- at n = 10^4 and 10^5, against a plain numpy Kuramoto velocity through the order parameter,
  :math:`\\omega_i + K\\,\\mathrm{Im}(r e^{i(\\psi - \\theta_i)})`, the floor of any implementation;
- the mean field (``solvers.FrequencyCircleFV`` on ``M`` midpoint nodes of the law, 128 cells)
  against the particles at the same error in r(t): the largest deviation from the continuum's
  Ott-Antonsen r(t) on [0, 2.5] (from the Poisson kernel of r0 = 0.3; the finite volumes stay
  resolved there). The particles' RMS error over draws is fitted as :math:`a n^{-p}` and their
  cost per draw as :math:`b n` over n = 10^3 to 1.6 10^4; the baseline of each row is the
  particles' cost at the finite volumes' error (their n from the fit, printed).
"""

from __future__ import annotations

import time

import numpy as np

import meanfield as mf
from common import compare
from meanfield.engines.kernels import select_kernel
from solvers import FrequencyCircleFV

COUPLING, WIDTH = 2.0, 0.5
#: The Poisson kernel's first moment at t = 0 (on the Ott-Antonsen manifold) and the times of r(t).
R0, TIMES = 0.3, np.linspace(0.0, 2.5, 26)


def plain_kuramoto(theta: np.ndarray, omega: np.ndarray) -> np.ndarray:
    order = np.exp(1j * theta).mean()
    return omega + COUPLING * np.imag(order * np.exp(-1j * theta))


def run() -> list[tuple[str, float, float, float]]:
    rows = []
    generator = np.random.default_rng(0)
    for n in (10_000, 100_000):
        theta = generator.uniform(0, 2 * np.pi, n)
        x = np.stack([np.cos(theta), np.sin(theta)], axis=-1)[None]
        omega = mf.sample_frequencies("lorentzian", WIDTH, n, generator)
        kuramoto = select_kernel(mf.NaturalFrequencies(mf.SelfAttention(0.0, normalized=False, value=COUPLING), omega),
                                 x, "auto")
        ours, base, ratio = compare(lambda: kuramoto.velocity_unchecked(x), lambda: plain_kuramoto(theta, omega),
                                    rounds=5, repeats=3)
        rows.append((f"Kuramoto with frequencies, velocity, n = {n}: {kuramoto.name} vs plain numpy (O(n))",
                     ours, base, ratio))
        if n <= 10_000:
            model = mf.NaturalFrequencies(mf.SelfAttention(1.0, normalized=False, value=COUPLING), omega)
            series, pairs = select_kernel(model, x, "auto"), select_kernel(model, x, "numpy")
            ours, base, ratio = compare(lambda: series.velocity_unchecked(x), lambda: pairs.velocity_unchecked(x),
                                        rounds=3, repeats=1)
            rows.append((f"USA beta = 1 with frequencies, velocity, n = {n}: {series.name} vs the O(n^2) pair sum",
                         ours, base, ratio))
    return rows + mean_field_against_particles()


def _ott_antonsen() -> np.ndarray:
    return mf.ott_antonsen_radius(TIMES, coupling=COUPLING, width=WIDTH, r0=R0)


def _finite_volumes(nodes: int) -> tuple[float, float]:
    """Wall time and the largest error in r(t) of FrequencyCircleFV on ``nodes`` midpoint nodes."""
    frequencies, weights = mf.lorentzian_nodes(WIDTH, nodes)
    solver = FrequencyCircleFV(mf.SelfAttention(0.0, value=COUPLING), frequencies=frequencies, weights=weights,
                               cells=128)
    start = time.perf_counter()
    run = solver.solve(lambda w, th: (1 - R0**2) / np.abs(np.exp(1j * th) - R0) ** 2 + 0 * w, TIMES, progress=False)
    seconds = time.perf_counter() - start
    return seconds, float(np.abs(np.abs(solver.order_parameter(run.rho.values)) - _ott_antonsen()).max())


def _particles(n: int, draws: int, generator) -> tuple[float, float]:
    """Wall time per draw and the RMS over draws of the largest error in r(t) of ``n`` particles (RK4, dt 0.01)."""
    theta = generator.standard_cauchy((draws, n)) * -np.log(R0)  # the Poisson kernel: wrapped Cauchy
    omega = WIDTH * generator.standard_cauchy((draws, n))
    model = mf.NaturalFrequencies(mf.SelfAttention(0.0, value=COUPLING), omega)
    start = time.perf_counter()
    x = mf.simulate_particles(model, np.stack([np.cos(theta), np.sin(theta)], axis=-1), TIMES, method="rk4",
                              dt=0.01, progress=False).x.values
    seconds = (time.perf_counter() - start) / draws
    r = np.abs(x[..., 0].mean(axis=-1) + 1j * x[..., 1].mean(axis=-1))
    return seconds, float(np.sqrt(np.mean(np.abs(r - _ott_antonsen()).max(axis=1) ** 2)))


def mean_field_against_particles() -> list[tuple[str, float, float, float]]:
    generator = np.random.default_rng(1)
    sizes = np.array([1000, 4000, 16000])
    measured = np.array([_particles(int(n), draws, generator) for n, draws in zip(sizes, (32, 16, 8))])
    rate, log_a = np.polyfit(np.log(sizes), np.log(measured[:, 1]), 1)
    cost_per_token = float(np.mean(measured[:, 0] / sizes))
    print(f"particles: RMS error {np.exp(log_a):.3g} n^{rate:.3f}, {cost_per_token * 1e6:.3g} us per token and draw")
    rows = []
    for nodes in (16, 32, 64):
        seconds, error = _finite_volumes(nodes)
        n = float(np.exp((np.log(error) - log_a) / rate))
        particles = cost_per_token * n
        rows.append((f"FrequencyCircleFV {nodes} nodes x 128 cells (error {error:.3g} in r(t)) vs particles at that "
                     f"error (n = {n:.3g})", seconds, particles, seconds / particles))
    return rows


if __name__ == "__main__":
    for name, seconds, baseline, ratio in run():
        print(f"{name}: {seconds:.4g} s (baseline {baseline:.4g} s, ratio {ratio:.3g})")
