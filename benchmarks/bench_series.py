"""Fast summation (the kernel's series) against the direct blocked pair sum, and the default validate run.

- Velocity of one system of ``n = 10^5`` tokens on the circle (SA, beta = 5, the validation
  model) and on S^2 (USA, beta = 1): series against the row-blocked direct sum
  (:class:`meanfield.engines.kernels.NumpyKernel`). The direct sum's cost is linear in its query
  rows (each row block is independent), so it is timed on 10^4 of the 10^5 rows against all
  10^5 keys and scaled by 10; the candidate is timed whole.
- The crossover: the smallest power of two ``n`` where the series beats the best direct
  kernel (fused up to 256 tokens, then the blocked sum), per geometry.
- ``--validate``: the wall time of the default ``meanfield validate`` (a few minutes).

    python benchmarks/bench_series.py [--validate]
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))

import meanfield as mf  # noqa: E402
from common import compare  # noqa: E402
from meanfield.engines.kernels import NumpyKernel, select_kernel  # noqa: E402
from meanfield.engines.series import SeriesAttention  # noqa: E402

LARGE = 100_000
DIRECT_ROWS = 10_000
MODELS = {"circle": (mf.SelfAttention(5.0), 2), "sphere": (mf.SelfAttention(1.0, normalized=False), 3)}


def _tokens(n: int, d: int) -> np.ndarray:
    return mf.sample_uniform(n, d, 0)[None]


def velocity_rows() -> list[tuple[str, float, float, float]]:
    rows = []
    for name, (model, d) in MODELS.items():
        x = _tokens(LARGE, d)
        series, direct = SeriesAttention(model, d), NumpyKernel(model)
        # Direct: the first DIRECT_ROWS queries against all keys, through the same blocked pair sum.
        queries = x[:, :DIRECT_ROWS]

        def direct_rows():
            from meanfield.interaction import pair_sums
            weight = _softmax_weight(model.beta) if model.normalized else _kernel_weight(model.beta)
            values = np.concatenate([x, np.ones(x.shape[:-1] + (1,))], axis=-1)
            return pair_sums(queries, x, values, weight)

        ours, base, _ = compare(lambda: series.attention_output(x), direct_rows, rounds=2, repeats=1)
        base *= LARGE / DIRECT_ROWS
        rows.append((f"velocity n=1e5 {name} (L={series.degree}): series vs direct", ours, base, ours / base))
        del direct
    return rows


def _softmax_weight(beta):
    def weight(block):
        block *= beta
        block -= beta
        np.exp(block, out=block)
    return weight


def _kernel_weight(beta):
    def weight(block):
        block *= beta
        np.exp(block, out=block)
    return weight


def crossover_rows() -> list[tuple[str, float, float, float]]:
    rows = []
    for name, (model, d) in MODELS.items():
        series = SeriesAttention(model, d)
        for n in [2**k for k in range(4, 14)]:
            x = mf.sample_uniform(n, d, 1)[None]
            direct = select_kernel(model, x, "fused" if n <= 256 else "numpy")
            ours, base, ratio = compare(lambda: series.attention_output(x), lambda: direct.attention_output(x),
                                        rounds=3, repeats=3)
            if ratio < 1:
                rows.append((f"crossover {name}: first n = {n} where series < direct ({direct.name})",
                             ours, base, ratio))
                break
    return rows


def validate_rows() -> list[tuple[str, float, float, float]]:
    from validation.app.cli import main
    with tempfile.TemporaryDirectory() as folder:
        start = time.perf_counter()
        main(["validate", "--quiet", "--output", folder])
        seconds = time.perf_counter() - start
    return [("default meanfield validate wall (target 300 s)", seconds, 300.0, seconds / 300.0)]


def run() -> list[tuple[str, float, float, float]]:
    return velocity_rows() + crossover_rows()


def main(argv: list[str]) -> None:
    rows = run() + (validate_rows() if "--validate" in argv else [])
    for label, ours, base, ratio in rows:
        print(f"{label:64} {ours:10.4g} {base:10.4g} {ratio:8.3g}")


if __name__ == "__main__":
    main(sys.argv[1:])
