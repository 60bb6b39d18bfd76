"""Old names keep working for a while, with a :class:`DeprecationWarning` that names the new one."""

from __future__ import annotations

import functools
import warnings


def renamed_keyword(old: str, new: str):
    """Decorator: accept the keyword ``old`` as ``new``, warning that it was renamed."""
    def decorate(function):
        @functools.wraps(function)
        def wrapper(*args, **kwargs):
            if old in kwargs:
                if new in kwargs:
                    raise TypeError(f"{function.__name__}() got both {old}= (the old name) and {new}=")
                warnings.warn(f"{function.__name__}({old}=...) is deprecated: the argument is now {new}=",
                              DeprecationWarning, stacklevel=2)
                kwargs[new] = kwargs.pop(old)
            return function(*args, **kwargs)
        return wrapper
    return decorate
