"""Deprecated alias of :mod:`validation.app.config` (importing it warns)."""

from ._moved import alias

alias(__name__, globals())
