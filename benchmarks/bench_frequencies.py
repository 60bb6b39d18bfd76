"""Oscillators with natural frequencies at 10^4 and 10^5 tokens (issue 68): the interaction's series engine.

Kuramoto (USA at beta = 0, coupling K = 2) with Lorentzian frequencies of half-width 0.5, one
velocity evaluation of ``NaturalFrequencies`` through ``select_kernel``:

- at n = 10^4, the series engine (``"auto"``: one Fourier harmonic, ``O(n)``) against the pair sum
  (``"numpy"``, ``O(n^2)``);
- at n = 10^4 and 10^5, against a plain numpy Kuramoto velocity through the order parameter,
  :math:`\\omega_i + K\\,\\mathrm{Im}(r e^{i(\\psi - \\theta_i)})`, the floor of any implementation.
"""

from __future__ import annotations

import numpy as np

import meanfield as mf
from common import compare
from meanfield.engines.kernels import select_kernel

COUPLING, WIDTH = 2.0, 0.5


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
    return rows


if __name__ == "__main__":
    for name, seconds, baseline, ratio in run():
        print(f"{name}: {seconds:.4g} s (baseline {baseline:.4g} s, ratio {ratio:.3g})")
