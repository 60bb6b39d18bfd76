"""Deprecated alias of :mod:`validation.app.validate` (importing it warns)."""

from ._moved import alias

alias(__name__, globals())
