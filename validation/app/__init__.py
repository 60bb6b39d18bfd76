"""validation.app: the application built on the library, the ``meanfield`` command.

Experiments and sweeps described by TOML files, their checkpoints, output files, figures and
reports, and the main job (``meanfield validate``). It imports validation proper, the solvers
and the model; nothing below imports it. Public names::

    run_experiment, load_config, check_config       one experiment (meanfield run)
    run_sweep, load_sweep_config, SweepConfig       a parameter grid on Dask (meanfield sweep)
    run_validation, default_specs                   the main job (meanfield validate)
    ConfigError, SweepTaskError                     what they raise
"""

from .config import check_config, load_config
from .errors import ConfigError, SweepTaskError
from .experiment import run_experiment
from .sweep import run_sweep
from .sweep_config import SweepConfig, load_sweep_config
from .validate import default_specs, run_validation

__all__ = ["run_experiment", "load_config", "check_config", "run_sweep", "load_sweep_config", "SweepConfig",
           "run_validation", "default_specs", "ConfigError", "SweepTaskError"]
