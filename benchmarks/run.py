"""Run every benchmark and print a table of times and ratios against their baselines."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

import bench_velocity  # noqa: E402

SUITES = {"velocity": bench_velocity}


def main(selected: list[str]) -> None:
    names = selected or list(SUITES)
    print(f"{'benchmark':48} {'ours [ms]':>10} {'baseline [ms]':>14} {'ratio':>7}")
    for name in names:
        for label, ours, base, ratio in SUITES[name].run():
            print(f"{label:48} {1e3 * ours:10.2f} {1e3 * base:14.2f} {ratio:7.2f}")


if __name__ == "__main__":
    main(sys.argv[1:])
