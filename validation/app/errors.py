"""Exceptions of the application layer (configs, experiments, sweeps)."""

from __future__ import annotations


class ConfigError(ValueError):
    """A configuration that cannot be run; the message names the key and what is allowed."""


class SweepTaskError(RuntimeError):
    """A sweep task failed on every retry; the finished tasks are kept for ``resume``."""


class DamagedFile(Exception):
    """A file an earlier run wrote (checkpoint segment, sweep part) that cannot be used: truncated,
    empty, corrupt or not what it should hold. ``--resume`` names it and computes it again."""


class Terminated(KeyboardInterrupt):
    """SIGTERM (what a batch scheduler sends before it kills a job), handled like Ctrl-C."""
