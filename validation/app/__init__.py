"""validation.app: the application built on the library, the ``meanfield`` command.

Experiments and sweeps described by TOML files, their checkpoints, output files, figures and
reports, and the main job (``meanfield validate``). It imports validation proper, the solvers
and the model; nothing below imports it. Public names::

    run_experiment, load_config, check_config       one experiment (meanfield run)
    run_sweep, load_sweep_config, SweepConfig       a parameter grid on Dask (meanfield sweep)
    run_validation, default_specs                   the main job (meanfield validate)
    ConfigError, SweepTaskError, DamagedFile        what they raise (DamagedFile: caught by --resume)
    Terminated                                      SIGTERM, as the command raises it (a KeyboardInterrupt)
"""

__all__ = ["run_experiment", "load_config", "check_config", "run_sweep", "load_sweep_config", "SweepConfig",
           "run_validation", "default_specs", "ConfigError", "SweepTaskError", "DamagedFile", "Terminated"]


def __getattr__(name: str):
    # Loaded on first use: a sweep's worker imports validation.app.sweep only, not the figures
    # and reports (matplotlib) of the other commands.
    if name in ("check_config", "load_config"):
        from . import config as module
    elif name in ("ConfigError", "SweepTaskError", "DamagedFile", "Terminated"):
        from . import errors as module
    elif name == "run_experiment":
        from . import experiment as module
    elif name == "run_sweep":
        from . import sweep as module
    elif name in ("SweepConfig", "load_sweep_config"):
        from . import sweep_config as module
    elif name in ("default_specs", "run_validation"):
        from . import validate as module
    else:
        raise AttributeError(f"module 'validation.app' has no attribute {name!r}")
    return getattr(module, name)


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
