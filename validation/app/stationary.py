"""``meanfield stationary CONFIG.toml``: a bifurcation diagram of stationary states, checked up front.

The config::

    geometry = "circle"               # or "sphere" (axisymmetric states of a zonal model)
    output = "bifurcation"            # folder: bifurcation.nc, bifurcation.png

    [model]                           # as for `meanfield run` (diffusion: the value not followed)
    beta = 4.0
    diffusion = 0.1

    [continuation]
    parameter = "diffusion"           # or "beta"
    start = 0.02
    stop = 0.4
    cells = 256                       # sphere: lmax = 31
    modes = [1, 2, 3, 4]
    max_points = 200
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import numpy as np

from meanfield.checks import check_memory

from .builders import build_model
from .config import (NUMBER, ConfigSection, ModelConfig, option, read_matrices, read_toml, section_from_table)
from .errors import ConfigError
from .files import check_output_folder, locked_output, write_atomically

#: The files a stationary run writes into its output folder.
DATASET, FIGURE = "bifurcation.nc", "bifurcation.png"


@dataclass(frozen=True, kw_only=True)
class ContinuationConfig(ConfigSection):
    """``[continuation]``: the parameter followed, its range and the discretisation."""

    PREFIX: ClassVar[str] = "continuation."
    parameter: str = option(types=str, choices=("diffusion", "beta"), help="the parameter the branches follow")
    start: float = option(types=NUMBER, minimum=0, help="one end of the parameter's range")
    stop: float = option(types=NUMBER, minimum=0, help="the other end")
    cells: int = option(256, types=int, minimum=8, help="circle: cells of the finite volumes (even)")
    lmax: int = option(31, types=int, minimum=2, help="sphere: highest degree of the spherical harmonics")
    modes: tuple = option((1, 2, 3, 4, 5, 6, 7, 8), types=(list, tuple),
                          help="wavenumbers (sphere: degrees) whose branches are followed")
    max_points: int = option(200, types=int, minimum=2, help="points per branch at most")
    tol: float = option(1e-10, types=NUMBER, minimum=0, strict=True, help="Newton's tolerance, relative to the uniform density")
    stability: bool = option(True, types=bool, help="the leading eigenvalues of every state on the branches (most of a "
                                                    "point's cost); false: the branches only, drawn without stability")


@dataclass(frozen=True, kw_only=True)
class StationaryConfig(ConfigSection):
    """A checked ``meanfield stationary`` config."""

    PREFIX: ClassVar[str] = ""
    geometry: str = option(types=str, choices=("circle", "sphere"),
                           help="the circle, or S² (axisymmetric states of a zonal model)")
    output: str = option(types=str, help="output folder (relative paths: from the config's folder)")
    model: ModelConfig = option(types=ModelConfig)
    continuation: ContinuationConfig = option(types=ContinuationConfig)
    euclidean: ClassVar[bool] = False

    @property
    def dimension(self) -> int:
        """``d`` of the model's matrices: 2 on the circle, 3 on the sphere."""
        return 2 if self.geometry == "circle" else 3


#: The ``[model]`` keys of models that are families of laws (graphs, frequencies, random weights) or driven by noise.
FAMILY_MODEL_KEYS = ("graph", "graphon", "edge_probability", "neighbours", "frequencies", "random", "homogenized")


def load_stationary_config(path: str | Path) -> StationaryConfig:
    """Read and check the config: keys, types, the model, and the parameter range against the model."""
    path = Path(path)
    tables = dict(read_toml(path))
    for name, cls in (("model", ModelConfig), ("continuation", ContinuationConfig)):
        if name in tables:
            tables[name] = section_from_table(cls, tables[name], name)
    config = section_from_table(StationaryConfig, tables, "config")
    if config.model.rescaled:
        raise ConfigError("model.rescaled applies to geometry = 'euclidean' (pure attention), not to stationary states")
    for key in FAMILY_MODEL_KEYS:  # models of many laws or of noise: not one mean field's states
        if getattr(config.model, key) is not None:
            raise ConfigError(f"model.{key} does not apply to stationary states (meanfield stationary continues those of "
                              f"one model's mean field; model.{key} is for meanfield run and sweep)")
    modes = config.continuation.modes
    if not modes or not all(isinstance(k, int) and not isinstance(k, bool) and k >= 1 for k in modes):
        raise ConfigError(f"continuation.modes must be positive integers, got {list(modes)!r}")
    output = str((path.parent / config.output).resolve())
    config = dataclasses.replace(config, output=output, model=read_matrices(config, path.parent),
                                 continuation=dataclasses.replace(config.continuation, modes=tuple(modes)))
    check_output_folder(Path(output), "output")
    _check_size(config)  # before building anything: a grid of 10^8 cells takes minutes to refuse otherwise
    _problem(config)  # the model, the cells and the whole range, refused before any work
    return config


def _check_size(config: StationaryConfig) -> None:
    """Refuse modes the grid cannot hold (they alias onto lower ones) and a diagram beyond the machine's memory."""
    from solvers.sphere.grid import grid_shape  # the command's own modules (cli docstring)

    settings = config.continuation
    if config.geometry == "circle":
        key, highest, points = f"continuation.cells = {settings.cells}", settings.cells // 2, settings.cells
        held = "Fourier modes"
    else:
        key, highest = f"continuation.lmax = {settings.lmax}", settings.lmax
        points, held = int(np.prod(grid_shape(settings.lmax))), "degrees"
    beyond = [k for k in settings.modes if k > highest]
    if beyond:
        raise ConfigError(f"continuation.modes {beyond} are not resolved: {key} holds {held} up to {highest}; "
                          f"raise the resolution or drop those modes")
    states = settings.max_points * (2 * len(settings.modes) + 1)  # every state of every branch is kept
    try:
        check_memory(8.0 * points * (states + 64), f"{key} with {states} states (continuation.max_points x branches)",
                     "lower the resolution or continuation.max_points")
    except ValueError as error:
        raise ConfigError(str(error)) from None


def _problem(config: StationaryConfig):
    from solvers.stationary.circle import CircleStationary  # the command's own modules (cli docstring)
    from solvers.stationary.sphere import SphereStationary

    settings = config.continuation
    try:
        if config.geometry == "circle":
            problem = CircleStationary(build_model(config), settings.cells, parameter=settings.parameter,
                                       tol=settings.tol)
        else:
            problem = SphereStationary(build_model(config), settings.lmax, parameter=settings.parameter,
                                       tol=settings.tol)
        for end in (settings.start, settings.stop):
            problem.check_value(end)
    except ValueError as error:
        raise ConfigError(f"continuation: {error}") from None
    if settings.start == settings.stop:
        raise ConfigError(f"continuation.start and continuation.stop must differ, got {settings.start!r} twice")
    return problem


def run_stationary(config: StationaryConfig, *, progress: bool | None = None):
    """Compute the diagram, write the dataset and the figure; returns ``(dataset, paths)``."""
    from solvers.stationary.bifurcation import bifurcation_diagram  # the command's own modules (cli docstring)
    from validation.stationary_figures import bifurcation_figure

    settings = config.continuation
    interval = tuple(sorted((float(settings.start), float(settings.stop))))
    output = Path(config.output)
    with locked_output(output, "meanfield stationary"):  # until the figure is written
        diagram = bifurcation_diagram(build_model(config), settings.parameter, interval, geometry=config.geometry,
                                      cells=settings.cells, lmax=settings.lmax, modes=settings.modes,
                                      max_points=settings.max_points, tol=settings.tol, stability=settings.stability,
                                      progress=progress)
        dataset = write_atomically(output / DATASET, diagram.to_netcdf)
        figure = output / FIGURE
        bifurcation_figure(diagram, figure)
    return diagram, [dataset, figure]


def summary(diagram) -> list[str]:
    """One line per bifurcating branch: mode, where it starts, how many points, why it ended."""
    parameter = diagram.attrs["parameter"]
    lines = []
    for branch in diagram.branch.values[1:]:
        count = int((diagram.on_branch == branch).sum())
        lines.append(f"mode {int(diagram.mode[branch])}: bifurcates at {parameter} = "
                     f"{float(diagram.bifurcation_value[branch]):.10g}; {count} states; {diagram.end.values[branch]}")
    return lines or [f"no bifurcation of the uniform state in this range of {parameter}"]
