"""Deprecated alias of :mod:`validation.app.files` (importing it warns)."""

from ._moved import alias

alias(__name__, globals())
