"""Keeping BLAS off the cores shtns is using, and counting the cores a process may use.

OpenBLAS worker threads spin for a while after each call, and so do the OpenMP threads of
shtns after each transform. A right-hand side that alternates the two (the general sphere
path's matrix-vector product, the causal solver's mixing of layers) then has every thread
compete with spinning ones, and a right-hand side costs many times what it costs alone.
Transforms scale with the cores, these small products barely do, so the products run on
the calling thread.
"""

from __future__ import annotations

import os
from contextlib import AbstractContextManager
from functools import cache

from threadpoolctl import ThreadpoolController


@cache
def _controller() -> ThreadpoolController:
    return ThreadpoolController()


def single_threaded_blas() -> AbstractContextManager:
    """Context in which the BLAS libraries loaded so far use the calling thread only."""
    return _controller().limit(limits=1, user_api="blas")


def usable_cpus() -> int:
    """The CPUs this process may run on: its affinity mask (what a batch scheduler grants), else all of them.

    ``os.cpu_count()`` counts the machine's: a sweep that starts one worker per CPU would start
    one per core of the node where a scheduler grants a few.
    """
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # no affinity on this platform
        return os.cpu_count() or 1
