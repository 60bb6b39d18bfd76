"""A progress bar that observes a time loop (shown only on a terminal)."""

from __future__ import annotations

import sys

from tqdm.auto import tqdm


def time_progress(t0: float, t1: float, enabled: bool | None | tqdm, description: str):
    """A bar over simulated time ``[t0, t1]``, as a context manager.

    ``enabled=None`` shows it only when stderr is a terminal. An existing bar (one run made of
    several calls, such as checkpoint segments) is advanced instead and left open.
    """
    if isinstance(enabled, (tqdm, _SharedBar)):
        return _SharedBar(enabled)
    if enabled is None:
        enabled = sys.stderr.isatty()
    return tqdm(total=float(t1 - t0), disable=not enabled, desc=description, unit="t",
                bar_format="{desc}: {percentage:3.0f}%|{bar}| t={n:.3g}/{total:.3g} [{elapsed}<{remaining}]")


class _SharedBar:
    """An open bar lent to one call: advanced like its own, left open when the call ends."""

    def __init__(self, bar: tqdm | _SharedBar):
        self.bar = bar

    def __enter__(self) -> _SharedBar:
        return self

    def __exit__(self, *exception) -> None:
        return None

    def update(self, amount: float) -> None:
        self.bar.update(amount)


def count_progress(total: int, enabled: bool | None, description: str, unit: str):
    """A bar over ``total`` items (points of a branch, ...), shown as :func:`time_progress` decides."""
    if enabled is None:
        enabled = sys.stderr.isatty()
    return tqdm(total=total, disable=not enabled, desc=description, unit=unit)
