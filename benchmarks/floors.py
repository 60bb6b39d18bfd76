"""The floors the performance page states ratios against, measured on this host (not assumed).

- ``exp``: numpy's float64 ``exp`` per element, in place on 10^6 values (the pair kernels take
  one per pair).
- ``GEMM``: float64 matrix products, 1024 x 1024 (the host's BLAS at its best) and the particle
  step's own shapes, a batch of (32 x 33) by (33 x 32) (what the fused kernel multiplies).
- ``FFT``: an ``rfft``/``irfft`` pair of 64 and 1024 real values (a circle right-hand side's unit).
- ``shtns``: one scalar analysis and synthesis at lmax 127 on one thread (a sphere right-hand
  side's unit).

From them, the floor of a particle system-step (the fused kernel, one system of n tokens in d
dimensions): the two products, ``4 n^2 d`` flops at the large-GEMM rate, plus ``n^2``
exponentials. One thread throughout, as the particle benchmarks run.

    python benchmarks/floors.py
"""

from __future__ import annotations

import time

import numpy as np
from threadpoolctl import threadpool_limits

TOKENS = 32


def best(function, repeats: int = 7, number: int = 1) -> float:
    """Best time of ``number`` calls, over ``repeats`` tries, per call."""
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(number):
            function()
        times.append((time.perf_counter() - start) / number)
    return min(times)


def exp_ns() -> float:
    values = np.random.default_rng(0).uniform(-5.0, 0.0, 10**6)
    out = np.empty_like(values)
    return best(lambda: np.exp(values, out=out)) / values.size * 1e9


def gemm_gflops(shape: tuple[int, int, int], batch: int = 1) -> float:
    """Rate of (batch x m x k) @ (batch x k x n) products, in GFlop/s."""
    m, k, n = shape
    rng = np.random.default_rng(1)
    a, b = rng.normal(size=(batch, m, k)), rng.normal(size=(batch, k, n))
    seconds = best(lambda: np.matmul(a, b), number=3)
    return 2 * batch * m * k * n / seconds / 1e9


def fft_us(size: int) -> float:
    values = np.random.default_rng(2).normal(size=size)
    return best(lambda: np.fft.irfft(np.fft.rfft(values), size), number=200) * 1e6


def shtns_ms(lmax: int = 127) -> float:
    import meanfield as mf
    from solvers import SphereSpectral

    grid = SphereSpectral(mf.SelfAttention(1.0), lmax=lmax).grid
    values = np.random.default_rng(3).normal(size=grid.shape) + 1.0
    return best(lambda: grid.synthesise(grid.analyse(values)), number=10) * 1e3


def particle_floor_us(d: int, exp: float, gflops: float, tokens: int = TOKENS) -> float:
    """Floor of one system-step of the fused kernel: ``4 n^2 d`` flops at ``gflops`` plus ``n^2`` exponentials."""
    return 4 * tokens**2 * d / (gflops * 1e3) + tokens**2 * exp / 1e3


def run() -> dict[str, float]:
    with threadpool_limits(1):
        floors = {"exp [ns]": exp_ns(),
                  "GEMM 1024^3 [GFlop/s]": gemm_gflops((1024, 1024, 1024)),
                  "GEMM 512 x (32x33)(33x32) [GFlop/s]": gemm_gflops((TOKENS, TOKENS + 1, TOKENS), batch=512),
                  "rfft+irfft 64 [us]": fft_us(64), "rfft+irfft 1024 [us]": fft_us(1024),
                  "shtns analysis+synthesis lmax 127 [ms]": shtns_ms()}
    for d in (2, 32, 128):
        floors[f"particle system-step floor d={d}, n={TOKENS} [us]"] = particle_floor_us(
            d, floors["exp [ns]"], floors["GEMM 1024^3 [GFlop/s]"])
    return floors


if __name__ == "__main__":
    for name, value in run().items():
        print(f"{name:55} {value:10.4g}")
