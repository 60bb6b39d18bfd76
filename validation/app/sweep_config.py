"""Sweep configuration: an experiment config (``config.py``) plus a ``[sweep]`` table with the grid.

Example (``examples/phase_diagram.toml``)::

    output = "output/phase_diagram"        # folder: parts/ (finished tasks) and the sweep file
    geometry = "circle"
    times = { stop = 30.0, count = 301 }

    [model]
    beta = 1.0                             # every model, method and initial key can be swept

    [method]
    kind = "particles"                     # or "CircleFV" / "SphereSpectral": one PDE run per point
    n = 32
    dt = 0.1
    scheme = "euler"

    [initial]
    kind = "uniform"

    [sweep]
    realisations = 2048                    # particle systems per grid point
    batch = 256                            # systems per task (the batch axis of simulate_particles)
    cluster_tolerance = 1e-3               # "clustered" means <x_1, x_2> >= 1 - cluster_tolerance
    file = "sweep.nc"                      # or "sweep.zarr"
    device = "numpy"                       # or "torch:cuda", "cupy", "jax": particles on that library's device

    [sweep.grid]                           # a list of values, or {start, stop, count} (evenly spaced)
    beta = { start = 0.1, stop = 9.0, count = 90 }
    d = [2, 32, 128]

Grid names are the keys of the ``model``, ``method`` and ``initial`` tables (``beta``,
``n``, ``seed``, ``dt``, ``d``, ``amplitude``, ...), with ``D`` for ``diffusion``; the
dotted form ``model.beta`` works too. Sweeping ``d`` sets the geometry of each point
(circle for ``d = 2``, sphere above; pure attention stays in R^d).
"""

from __future__ import annotations

import dataclasses
import importlib.util
import itertools
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import numpy as np

from meanfield.docstrings import fill_docstrings

from .config import NUMBER, SECTIONS, TOML_PATH_PARAMETERS, ExperimentConfig, check_config, check_fields, option, \
    read_toml, section_from_table
from .errors import ConfigError


@dataclass(frozen=True, kw_only=True)
class SweepSettings:
    """``[sweep]`` without its grid: how the points are run and stored."""

    PREFIX: ClassVar[str] = "sweep."
    realisations: int = option(256, types=int, minimum=1, help="particle systems per grid point")
    batch: int = option(256, types=int, minimum=1, help="systems per task")
    cluster_tolerance: float = option(1e-3, types=NUMBER, minimum=0, strict=True,
                                      help='"clustered" means <x_1, x_2> >= 1 - cluster_tolerance')
    file: str = option("sweep.nc", types=str, help="the sweep's file in the output folder (.nc or .zarr)")
    device: str = option("numpy", types=str, help='"numpy", or "LIBRARY[:DEVICE]" (torch, cupy, jax)')

    def __post_init__(self) -> None:
        check_fields(self)


#: Array libraries a particle sweep can compute with (``device = "LIBRARY[:DEVICE]"``);
#: ``array_api_strict`` (CPU) runs the device path where no GPU is, for tests.
ARRAY_LIBRARIES = ("numpy", "torch", "cupy", "jax", "array_api_strict")

#: Grid points a sweep may have at most (each is checked before anything runs).
MAX_POINTS = 100_000

ALIASES = {"D": "diffusion"}
PARAMETERS = {spec.name: (section, spec) for section, cls in SECTIONS.items()
              for spec in dataclasses.fields(cls) if spec.name != "kind"}


@dataclass(frozen=True)
class SweepConfig:
    """A checked sweep (what :func:`load_sweep_config` returns).

    Parameters
    ----------
    base : ExperimentConfig
        The experiment every grid point modifies.
    grid : dict
        Parameter name -> list of values, in the order of the dataset's dimensions.
    settings : SweepSettings
        The ``[sweep]`` table: observables, realisations, output file.
    """

    base: ExperimentConfig
    grid: dict[str, list]
    settings: SweepSettings

    @property
    def particles(self) -> bool:
        return self.base.particles

    @property
    def output(self) -> Path:
        return Path(self.base.output)

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(len(values) for values in self.grid.values())

    def describe(self, index: tuple[int, ...]) -> str:
        """A point's parameters in words.

        Parameters
        ----------
        index : tuple of int
            The point's position in the grid.

        Returns
        -------
        str
            For example ``"beta = 4.0, d = 2"``.
        """
        return ", ".join(f"{name} = {values[i]!r}" for (name, values), i in zip(self.grid.items(), index))

    def points(self) -> list[tuple[tuple[int, ...], ExperimentConfig]]:
        """Every grid point with its experiment.

        Returns
        -------
        list of tuple
            ``(index, ExperimentConfig)`` per point, in C order.
        """
        names = list(self.grid)
        result = []
        for index in itertools.product(*(range(size) for size in self.shape)):
            values = {name: self.grid[name][i] for name, i in zip(names, index)}
            result.append((index, point_config(self.base, values)))
        return result


@fill_docstrings(toml_path_parameters=TOML_PATH_PARAMETERS)
def load_sweep_config(path: str | Path) -> SweepConfig:
    """Read and check a TOML sweep file (the input of ``meanfield sweep``).

    The base experiment, the sweep table and every grid point are checked before anything runs.

    {toml_path_parameters}

    Returns
    -------
    SweepConfig
        The checked sweep.

    Raises
    ------
    ConfigError
        Naming the first bad key (or grid point) and its value.
    """
    path = Path(path)
    return check_sweep_config(read_toml(path), base=path.parent)


def check_sweep_config(raw: dict, base: Path = Path(".")) -> SweepConfig:
    """Check the base experiment, the sweep table and every grid point before anything runs."""
    # Imported here: it builds solvers (and xarray), which the sweep's workers, importing this
    # module with the sweep's, never need; their start-up is a serial cost of every sweep.
    from .preflight import preflight

    raw = dict(raw)
    table = _pop_table(raw, "sweep", "sweep", "missing table [sweep] (with sweep.grid: the parameters to vary)")
    grid_table = _pop_table(table, "grid", "sweep.grid", "missing key sweep.grid")
    settings = section_from_table(SweepSettings, table, "sweep")
    if not settings.file.endswith((".nc", ".zarr")):
        raise ConfigError(f"sweep.file must end in .nc (NetCDF) or .zarr, got {settings.file!r}")
    if Path(settings.file).name != settings.file or settings.file.startswith("."):
        raise ConfigError(f"sweep.file must be a file name in the output folder (no folders, not hidden), "
                          f"got {settings.file!r}")
    check_device(settings.device)
    grid = {}
    for name, values in _flatten_sections(grid_table).items():
        key = _parameter_name(name)
        if key in grid:
            raise ConfigError(f"sweep.grid names {key!r} twice (as {name!r} and another spelling); keep one")
        grid[key] = _grid_values(name, values, PARAMETERS[key][1].metadata["types"])
    if not grid:
        raise ConfigError("sweep.grid is empty: name at least one parameter to vary")
    points = int(np.prod([len(values) for values in grid.values()], dtype=float))
    if points > MAX_POINTS:
        raise ConfigError(f"sweep.grid has {points:.3g} points, more than {MAX_POINTS}: each is a run of its own "
                          f"(checked up front, stored as parts); lower the counts or split the sweep")
    config = SweepConfig(check_config(raw, base), grid, settings)
    if config.base.model.random is not None and settings.device != "numpy":
        raise ConfigError(f"sweep.device = {settings.device!r}: random weights (model.random) run on numpy only")
    for index, point in config.points():  # every point is checked as a run would be, before anything runs
        try:
            if config.particles and point.method.n < 2:
                raise ConfigError(f"method.n must be >= 2 (a sweep observes the pair <x_1, x_2>), "
                                  f"got {point.method.n}")
            preflight(point)
        except ConfigError as error:
            raise ConfigError(f"sweep.grid point ({config.describe(index)}): {error}") from None
    return config


def _pop_table(tables: dict, key: str, name: str, missing: str) -> dict:
    """A copy of the table ``tables[key]`` (called ``name``), removed from ``tables``; ``missing``: the error without one."""
    if key not in tables:
        raise ConfigError(missing)
    table = tables.pop(key)
    if not isinstance(table, dict):
        raise ConfigError(f"{name} must be a table, got {table!r}")
    return dict(table)


def check_device(device: str, name: str = "sweep.device") -> str:
    """``"numpy"`` or ``"LIBRARY[:DEVICE]"`` with an installed array library (torch, cupy, jax)."""
    library = device.partition(":")[0]
    if library not in ARRAY_LIBRARIES:
        raise ConfigError(f"{name} must be 'numpy' or one of {ARRAY_LIBRARIES[1:]} with an optional "
                          f"':DEVICE' (e.g. 'torch:cuda'), got {device!r}")
    if importlib.util.find_spec(library) is None:
        raise ConfigError(f"{name} = {device!r}: {library} is not installed")
    return device


def point_config(base: ExperimentConfig, values: dict) -> ExperimentConfig:
    """The experiment config of one grid point, checked; errors name the grid parameter."""
    raw = base.to_dict()
    for name, value in values.items():
        section, _ = PARAMETERS[name]
        raw[section][name] = value
        if name == "d" and not base.euclidean:
            raw["geometry"] = "circle" if value == 2 else "sphere"
    try:
        return check_config(raw)
    except ConfigError as error:
        point = ", ".join(f"{name} = {value!r}" for name, value in values.items())
        raise ConfigError(f"sweep.grid point ({point}): {error}") from None


def _flatten_sections(grid: dict) -> dict:
    """``{"model": {"beta": [...]}}`` as ``{"model.beta": [...]}``.

    TOML reads the dotted key ``model.beta = [...]`` under ``[sweep.grid]`` as a nested table;
    a table whose keys are not ``start``, ``stop``, ``count`` is such a section.
    """
    flat = {}
    for name, values in grid.items():
        if isinstance(values, dict) and name in ("model", "method", "initial") \
                and not set(values) <= {"start", "stop", "count"}:
            flat.update({f"{name}.{key}": inner for key, inner in values.items()})
        else:
            flat[name] = values
    return flat


def _parameter_name(name: str) -> str:
    section, _, key = name.rpartition(".")
    key = ALIASES.get(key, key)
    if key not in PARAMETERS or (section and PARAMETERS[key][0] != section):
        raise ConfigError(f"sweep.grid: unknown parameter {name!r}; known: D, {', '.join(PARAMETERS)} "
                          f"(or section.key, e.g. model.beta)")
    return key


def _grid_values(name: str, values, types) -> list:
    """The values of one grid parameter; ``types`` are its schema's (integers stay integers)."""
    if isinstance(values, dict):
        unknown = set(values) - {"start", "stop", "count"}
        if unknown or not {"start", "stop", "count"} <= set(values):
            raise ConfigError(f"sweep.grid.{name} must be a list or {{start, stop, count}}, got {values!r}")
        count = values["count"]
        if not isinstance(count, int) or isinstance(count, bool) or not 1 <= count <= MAX_POINTS:
            raise ConfigError(f"sweep.grid.{name}.count must be an integer from 1 to {MAX_POINTS}, got {count!r}")
        for end in ("start", "stop"):
            if isinstance(values[end], bool) or not isinstance(values[end], NUMBER):
                raise ConfigError(f"sweep.grid.{name}.{end} must be a number, got {values[end]!r}")
        spaced = np.linspace(values["start"], values["stop"], count)
        if types is not int:
            return [float(v) for v in spaced]
        if not np.all(spaced == np.round(spaced)):
            raise ConfigError(f"sweep.grid.{name} is an integer parameter, but {{start, stop, count}} = {values!r} "
                              f"gives non-integers ({spaced[:4].tolist()}...); give a list of integers instead")
        return [int(v) for v in np.round(spaced)]
    if not isinstance(values, list) or not values:
        raise ConfigError(f"sweep.grid.{name} must be a non-empty list or {{start, stop, count}}, got {values!r}")
    if len(set(map(repr, values))) != len(values):
        raise ConfigError(f"sweep.grid.{name} repeats a value: {values!r}")
    return values
