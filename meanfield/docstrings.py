"""Docstring sections written once and filled into every docstring that shares them.

Many methods take the same argument with the same meaning (a spectral solver's coefficients, a
stationary problem's parameter value): numpydoc wants each documented in full, and one text
kept in one place cannot drift from its copies. A docstring names a shared section by a line
that holds only ``{name}``; :func:`fill_docstrings` puts the section there, indented as that
line, when the module is imported (``help``, Sphinx and numpydoc's checks read the filled
text). Only such lines are replaced, so braces elsewhere (LaTeX, sets) are left alone.
"""

from __future__ import annotations

import re
from functools import cached_property
from types import FunctionType
from typing import TypeVar

__all__ = ["fill_docstrings", "inherit_docstrings", "parameters"]

_PLACEHOLDER = re.compile(r"^([ \t]*)\{(\w+)\}[ \t]*$", re.MULTILINE)

Documented = TypeVar("Documented")


def fill_docstrings(**sections: str):
    """Decorator: fill the ``{name}`` lines of a function's docstring, or of a class's and its members'.

    Parameters
    ----------
    **sections : str
        The text of each section by its placeholder's name, without indentation (its first line
        at column 0, as numpydoc writes a section).

    Returns
    -------
    callable
        The decorator; it returns the function or class it is given, its docstrings filled.

    Raises
    ------
    ValueError
        If a docstring names a section that is not given (at import, not when read).
    """

    def fill(text: str | None, owner: str) -> str | None:
        if not text:
            return text

        def section(match: re.Match) -> str:
            indent, name = match.groups()
            if name not in sections:
                raise ValueError(f"the docstring of {owner} names a section {{{name}}} that "
                                 f"fill_docstrings was not given (given: {sorted(sections)})")
            return "\n".join(indent + line if line else line for line in sections[name].strip("\n").splitlines())

        return _PLACEHOLDER.sub(section, text)

    def decorate(target: Documented) -> Documented:
        target.__doc__ = fill(target.__doc__, target.__qualname__)
        for name, member in (vars(target).items() if isinstance(target, type) else ()):
            function = _documented_function(member)
            if function is not None:
                function.__doc__ = fill(function.__doc__, f"{target.__qualname__}.{name}")
            if isinstance(member, (property, cached_property, staticmethod, classmethod)):  # each keeps a copy
                member.__doc__ = fill(member.__doc__, f"{target.__qualname__}.{name}")
        return target

    return decorate


def inherit_docstrings(cls: type) -> type:
    """Class decorator: a member of ``cls`` without a docstring takes the one of the member it overrides.

    Python's ``inspect.getdoc`` looks an undocumented override's docstring up in the bases, but
    ``__doc__``, which numpydoc's checks and some tools read, stays empty. A template that
    declares its members with their docstrings (:class:`solvers.spectral_solver.SpectralSolver`)
    is then written once: each implementation copies the docstring of the nearest base that
    documents the member (filled already, if that base's own placeholders were).

    Parameters
    ----------
    cls : type
        The class whose undocumented members inherit.

    Returns
    -------
    type
        ``cls``, its members' docstrings set.
    """
    for name, member in vars(cls).items():
        function = _documented_function(member)
        if function is None or function.__doc__:
            continue
        inherited = next((doc for base in cls.__mro__[1:]
                          if (doc := _docstring(vars(base).get(name))) is not None), None)
        if inherited is not None:
            function.__doc__ = inherited
            if isinstance(member, (property, cached_property, staticmethod, classmethod)):  # each keeps a copy
                member.__doc__ = inherited
    return cls


def _docstring(member: object) -> str | None:
    """The docstring a class member shows, or ``None`` (not a documented kind, or none written)."""
    function = _documented_function(member)
    if function is None:
        return None
    return function.__doc__ or None


def _documented_function(member: object):
    """The function whose ``__doc__`` a class member shows (a method, a static or class method, a getter)."""
    if isinstance(member, (staticmethod, classmethod)):
        return member.__func__
    if isinstance(member, property):
        return member.fget
    if isinstance(member, cached_property):
        return member.func
    return member if isinstance(member, FunctionType) else None


def parameters(*entries: str) -> str:
    """A numpydoc Parameters section of these entries (each ``name : type`` and its indented description).

    Parameters
    ----------
    *entries : str
        The entries, without indentation, in their order in the signature.

    Returns
    -------
    str
        The section, its header first.
    """
    return "\n".join(["Parameters", "----------", *(entry.strip("\n") for entry in entries)])
