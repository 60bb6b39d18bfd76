"""Exceptions of the application layer (configs, experiments, sweeps)."""

from __future__ import annotations


class ConfigError(ValueError):
    """A configuration that cannot be run; the message names the key and what is allowed."""


class SweepTaskError(RuntimeError):
    """A sweep task failed on every retry; the finished tasks are kept for ``resume``."""
