"""Old module paths of the application, kept as aliases that warn (moved to :mod:`validation.app`).

Validation proper never imports the application; these aliases (and the lazy names of
``validation/__init__.py``) are the only exceptions, each resolved when an old path is used.
"""

from __future__ import annotations

import importlib
import warnings

#: Old module path -> new module path.
MODULES = {f"validation.{old}": f"validation.app.{new}" for old, new in [
    ("cli", "cli"), ("config", "config"), ("sweep_config", "sweep_config"), ("experiment", "experiment"),
    ("sweep", "sweep"), ("files", "files"), ("validate", "validate"), ("experiment_figures", "figures")]}

#: Names once exported by ``validation`` that now live in the application.
NAMES = {"run_experiment": "validation.app", "run_sweep": "validation.app"}


def warn_moved(old: str, new: str, stacklevel: int = 3) -> None:
    warnings.warn(f"{old} moved to {new}; the old name will be removed in a later version",
                  DeprecationWarning, stacklevel=stacklevel)


def alias(old_module: str, namespace: dict) -> None:
    """Fill the namespace of a deprecated module with the public names of its new home."""
    new_module = MODULES[old_module]
    warn_moved(old_module, new_module, stacklevel=4)
    module = importlib.import_module(new_module)
    namespace.update({name: getattr(module, name) for name in dir(module) if not name.startswith("__")})


def moved_name(name: str):
    """A name ``validation`` once exported (``run_experiment``, ``run_sweep``), from its new home."""
    if name not in NAMES:
        raise AttributeError(f"module 'validation' has no attribute {name!r}")
    warn_moved(f"validation.{name}", f"{NAMES[name]}.{name}")
    return getattr(importlib.import_module(NAMES[name]), name)
