"""Run every benchmark and print a table of times and ratios against their baselines."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

import bench_causal  # noqa: E402
import bench_circle  # noqa: E402
import bench_circle_spectral  # noqa: E402
import bench_frequencies  # noqa: E402
import bench_general  # noqa: E402
import bench_particles  # noqa: E402
import bench_pretrained  # noqa: E402
import bench_pure_attention  # noqa: E402
import bench_stationary  # noqa: E402
import bench_lagrangian  # noqa: E402
import bench_metastable  # noqa: E402
import bench_random_weights  # noqa: E402
import bench_reference  # noqa: E402
import bench_sinkhorn  # noqa: E402
import bench_sphere  # noqa: E402
import bench_sweep  # noqa: E402
import bench_velocity  # noqa: E402
import bench_zonal  # noqa: E402

# The sweep suite runs at its small size here (about 6 min); the paper's size:
#   python benchmarks/bench_sweep.py --size paper
SUITES = {"velocity": bench_velocity, "causal": bench_causal, "frequencies": bench_frequencies, "general": bench_general, "particles": bench_particles, "pretrained": bench_pretrained, "pure_attention": bench_pure_attention, "stationary": bench_stationary, "lagrangian": bench_lagrangian, "metastable": bench_metastable, "random_weights": bench_random_weights, "reference": bench_reference, "sinkhorn": bench_sinkhorn, "circle": bench_circle, "circle_spectral": bench_circle_spectral, "sphere": bench_sphere, "sweep": bench_sweep, "zonal": bench_zonal}


def main(selected: list[str]) -> None:
    names = selected or list(SUITES)
    print(f"{'benchmark (times in s)':58} {'ours':>12} {'baseline':>14} {'ratio':>9}")
    for name in names:
        for label, ours, base, ratio in SUITES[name].run():
            print(f"{label:58} {ours:12.4g} {base:14.4g} {ratio:9.3g}")


if __name__ == "__main__":
    main(sys.argv[1:])
