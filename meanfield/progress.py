"""A progress bar that observes a time loop (shown only on a terminal)."""

from __future__ import annotations

import sys
from contextlib import nullcontext

from tqdm.auto import tqdm


class HiddenBar:
    """The bar of a run that shows none: it only takes updates, and is false.

    Cheaper than a disabled ``tqdm``, whose set-up a run of a millisecond would notice.
    """

    def update(self, n: float = 1) -> None:
        pass

    def __bool__(self) -> bool:
        return False


def time_progress(t0: float, t1: float, enabled: bool | None | tqdm | HiddenBar, description: str):
    """A bar over simulated time ``[t0, t1]``, as a context manager.

    ``enabled=None`` shows it only when stderr is a terminal. An existing bar (one run made of
    several calls, such as checkpoint segments) is advanced instead and left open.
    """
    if isinstance(enabled, (tqdm, HiddenBar)):  # lent: advanced directly (a time loop updates it every step), left open
        return nullcontext(enabled)
    if enabled is None:
        enabled = sys.stderr.isatty()
    if not enabled:
        return nullcontext(HiddenBar())
    return tqdm(total=float(t1 - t0), desc=description, unit="t",
                bar_format="{desc}: {percentage:3.0f}%|{bar}| t={n:.3g}/{total:.3g} [{elapsed}<{remaining}]")


def count_progress(total: int, enabled: bool | None, description: str, unit: str):
    """A bar over ``total`` items (points of a branch, ...), shown as :func:`time_progress` decides."""
    if enabled is None:
        enabled = sys.stderr.isatty()
    return tqdm(total=total, disable=not enabled, desc=description, unit=unit)
