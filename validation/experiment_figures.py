"""Deprecated alias of :mod:`validation.app.figures` (importing it warns)."""

from ._moved import alias

alias(__name__, globals())
