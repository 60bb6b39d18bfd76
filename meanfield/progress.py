"""A progress bar that observes a time loop (shown only on a terminal)."""

from __future__ import annotations

import sys

from tqdm.auto import tqdm


def time_progress(t0: float, t1: float, enabled: bool | None, description: str) -> tqdm:
    """A bar over simulated time ``[t0, t1]``; ``enabled=None`` shows it only when stderr is a terminal."""
    if enabled is None:
        enabled = sys.stderr.isatty()
    return tqdm(total=float(t1 - t0), disable=not enabled, desc=description, unit="t",
                bar_format="{desc}: {percentage:3.0f}%|{bar}| t={n:.3g}/{total:.3g} [{elapsed}<{remaining}]")
