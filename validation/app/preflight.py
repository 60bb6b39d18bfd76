"""Everything a config decides that can be checked before anything is computed or written.

:func:`preflight` builds what the run will use (model, solver, initial density on the grid)
and estimates its memory, so that a run or every point of a sweep is refused up front, with
the key named, instead of failing or grinding later: an unreadable or wrong-shaped initial
file, an initial density the grid cannot resolve, an output larger than the machine.
"""

from __future__ import annotations

import dataclasses
import inspect
import time
import warnings

import numpy as np

import meanfield as mf
from meanfield.checks import check_memory, check_step
from meanfield.interaction import DEFAULT_BLOCK_ELEMENTS
from meanfield.integration.runs import fixed_step_count

from solvers import CommonNoiseSphere, LineFV, UnresolvedStart
from solvers.methods import METHODS_BY_NAME
from solvers.resolution import UnderResolvedWarning
from solvers.sphere.grid import grid_shape

from .builders import RunObjects, build_run, load_initial_file, particle_method
from .config import CIRCLE_SOLVERS, LINE_SOLVERS, ZONAL_SOLVERS, ExperimentConfig
from .errors import ConfigError

#: Grid-sized arrays a PDE step holds besides the stored output (Dormand-Prince stages,
#: velocity and flux fields), a generous count so that the estimate errs on the safe side.
WORKING_FIELDS = {"CircleFV": 16, "FrequencyCircleFV": 16, "GraphonCircleFV": 16, "CircleSpectral": 24,
                  "CircleAuto": 24, "CircleLagrangian": 24, "CircleFVLagrangian": 24, "CausalCircleFV": 16,
                  "CausalCircleSpectral": 24, "SphereSpectral": 48,
                  "SphereWeightedParticles": 48, "SphereSpectralParticles": 48, "CausalSphereSpectral": 48,
                  # the nodes' fields, the basis matrices (about 3 lmax node-sized columns), the rings
                  "ZonalSphereSpectral": 16, "ZonalSpectralRings": 16, "ZonalRings": 16}


def preflight(config: ExperimentConfig) -> RunObjects:
    """Refuse, with a :class:`ConfigError` naming the key, a checked config that cannot run well.

    Returns what the run uses (model, solver, initial density), built once and checked here.
    Every solver is asked the same two questions (``solvers.resolution.UpFrontChecks``): its
    start, refused where its grid does not resolve it, and its cost by its stability limit.
    """
    _check_memory(config)  # first: building a solver at an absurd resolution takes minutes
    run = build_run(config)
    if run.solver is None:
        _check_particle_initial(config, run.initial)
        _check_particle_steps(config)
        return run
    if config.initial.kind == "file":
        _check_file(config, run.initial)
    state = _check_start(config, run.solver, run.initial)
    if isinstance(run.solver, LineFV):
        try:
            run.solver.check_logits(config.times.array())
        except ValueError as error:
            raise ConfigError(str(error)) from None
    if METHODS_BY_NAME[config.method.kind].noise:
        _check_noise_duration(config, run.solver, run.initial)
    else:
        _check_duration(config, run.solver, state)
    return run


def _check_file(config: ExperimentConfig, initial) -> None:
    """An initial file holds a density's values; on the line, one per cell of ``method.interval`` (the labels'
    quantiles read them as piecewise constant). Its shape on a grid is the solver's to check."""
    # the values as built, unless the run reads them through a function (the line's labels)
    values = initial if isinstance(initial, np.ndarray) else load_initial_file(config.initial.path)
    if config.method.kind in LINE_SOLVERS and values.shape != (config.method.cells,):
        raise ConfigError(f"initial.path holds shape {values.shape}; the run needs method.cells = "
                          f"{config.method.cells} density values on the cells of method.interval")
    _check_values(values)


def _check_start(config: ExperimentConfig, solver, initial):
    """The solver's initial state (its ``resolved_start``), refused as the config's initial density or file."""
    try:
        return solver.resolved_start(initial, name="the initial density")
    except UnresolvedStart as unresolved:
        key = f"method.{unresolved.resolution}"
        raise ConfigError(f"initial: the initial density is not resolved by {key} = {unresolved.value}: "
                          f"{unresolved.reason}; raise {key} or widen the peaks") from None
    except ValueError as error:  # a density that vanishes or is negative on the grid, a file of the wrong shape
        key = "initial.path" if config.initial.kind == "file" else "initial"
        raise ConfigError(f"{key}: {error}") from None


#: The sphere's common-noise probe runs on the smallest grid (of any lmax up to 21): a step at lmax 63 takes minutes.
NOISE_PROBE_LMAX = 15


def _check_noise_duration(config: ExperimentConfig, solver, initial) -> None:
    """Refuse a common-noise run estimated longer than ``max_hours``: one step of the noise on one path is timed
    and scaled by the steps and the paths. Its fields are attentions over all pairs of grid nodes, so on the
    sphere the step is timed on the smallest grid and scaled by the square of the ratio of the nodes."""
    method, times = config.method, config.times.array()
    probe = solver
    if isinstance(solver, CommonNoiseSphere) and solver.lmax > NOISE_PROBE_LMAX:
        probe = dataclasses.replace(solver, lmax=NOISE_PROBE_LMAX)
    started = time.perf_counter()
    with warnings.catch_warnings():  # the probe's resolution is the run's to report
        warnings.simplefilter("ignore", UnderResolvedWarning)
        probe.solve(initial, [0.0, method.dt], dt=method.dt, systems=1, seed=0, progress=False)
    per_step = (time.perf_counter() - started) * (solver.quadrature.size / probe.quadrature.size) ** 2
    steps = round((times[-1] - times[0]) / method.dt) * method.systems
    hours = steps * per_step / 3600
    if hours > config.max_hours:
        grid = "method.points" if config.geometry == "circle" else "method.lmax"
        raise ConfigError(f"the run would take about {hours:.3g} h ({steps:.3g} path-steps of {per_step:.3g} s): "
                          f"lower {grid}, method.systems or the final time, raise method.dt, or raise max_hours "
                          f"(now {config.max_hours:g}) to run it anyway")


def _check_particle_initial(config: ExperimentConfig, initial) -> None:
    if callable(initial) or initial is None:
        return
    if config.euclidean:  # the tokens themselves
        n, d = config.method.n, config.method.d
        if initial.shape != (n, d):
            raise ConfigError(f"initial.path must hold the tokens, shape (method.n, method.d) = ({n}, {d}), "
                              f"got shape {initial.shape}")
        if not np.all(np.isfinite(initial)):
            raise ConfigError("initial.path holds NaN or infinite tokens")
        return
    if config.geometry != "circle":
        raise ConfigError("initial.kind = 'file' is not supported for particles on the sphere "
                          "(give a callable density from Python, or use a PDE method)")
    if initial.ndim != 1 or initial.size < 1:
        raise ConfigError(f"initial.path must hold a 1-d array of cell values on the circle (any number "
                          f"of equal cells), got shape {initial.shape}")
    _check_values(initial)


def _check_duration(config: ExperimentConfig, solver, state: np.ndarray) -> None:
    """Refuse a PDE run whose estimated duration exceeds ``max_hours``: the solver's ``cost_estimate``
    (the steps its stability limit allows at least, times one step timed here); a solver without a
    stability limit (implicit steps with diffusion) is not estimated."""
    estimate = solver.cost_estimate(state, float(config.times.stop - config.times.start))
    if estimate is not None and estimate.hours > config.max_hours:
        raise ConfigError(f"the run would take about {estimate.hours:.3g} h ({estimate.steps:.3g} steps of "
                          f"{1e3 * estimate.seconds_per_step:.3g} ms at least, from its stability limit): lower "
                          f"method.{estimate.resolution} = {estimate.value} or the final time, or raise max_hours "
                          f"(now {config.max_hours:g}) to run it anyway")


def _check_particle_steps(config: ExperimentConfig) -> int:
    """The fixed steps of a particle run; refused when ``method.dt`` is negligible against the interval."""
    times = config.times.array()
    try:
        check_step(config.method.dt, times, "method.dt")
    except ValueError as error:
        raise ConfigError(str(error)) from None
    return fixed_step_count(times, config.method.dt)


#: Tokens of the timed probe step of :func:`check_particle_duration` (the cost is scaled up from it).
PROBE_TOKENS = 2048


def check_particle_duration(run: RunObjects) -> None:
    """Refuse a particle run whose estimated duration exceeds ``max_hours``.

    A step of the run's scheme is timed on at most :data:`PROBE_TOKENS` tokens (the difference
    of a 3-step and a 1-step run, each the best of two, after a first call that pays for
    compilation; the 3-step run's time per step where noise leaves no difference) and scaled by
    the pairs, ``(n / probe)^2``: an upper bound where a series kernel (cost ``O(n K)``) takes over.
    """
    config, model = run.config, run.model
    steps = _check_particle_steps(config)
    method = config.method
    probe = min(method.n, PROBE_TOKENS)
    x = (np.random.default_rng(0).standard_normal((probe, config.dimension)) if config.euclidean
         else mf.sample_uniform(probe, config.dimension, 0))
    _timed_steps(model, x, config, 1)  # compiles and fills the caches
    # Noise only adds time: the best of two timings of each run. Should a spike in the 1-step run
    # still leave the difference small against the 3-step run (below a quarter of its time per
    # step), the 3-step run's own time per step (an upper bound) is taken: a difference that noise
    # brought near zero would let a run of any length through.
    one, three = (min(_timed_steps(model, x, config, steps) for _ in range(2)) for steps in (1, 3))
    per_step = (three - one) / 2
    if per_step < three / 12:
        per_step = three / 3
    per_step *= max(1.0, method.n / probe) ** 2
    hours = steps * per_step / 3600
    if hours > config.max_hours:
        raise ConfigError(f"the run would take about {hours:.3g} h ({steps:.3g} steps of {1e3 * per_step:.3g} ms "
                          f"for method.n = {method.n}): raise method.dt, lower method.n or the final time, or "
                          f"raise max_hours (now {config.max_hours:g}) to run it anyway")


def _timed_steps(model, x: np.ndarray, config: ExperimentConfig, steps: int) -> float:
    """Seconds of a run of ``steps`` steps (the difference of two such runs leaves out the call's overhead)."""
    dt = config.method.dt
    started = time.perf_counter()
    mf.simulate_particles(model, x, [0.0, steps * dt], method=particle_method(config), dt=dt, rng=0, progress=False)
    return time.perf_counter() - started


def _check_values(values: np.ndarray) -> None:
    if not np.all(np.isfinite(values)):
        raise ConfigError("initial.path holds NaN or infinite values")
    if np.any(values < 0):
        raise ConfigError(f"initial.path holds negative values (the smallest is {values.min():.3g}); "
                          "a density is nonnegative")
    if not np.any(values > 0):
        raise ConfigError("initial.path holds only zeros: a density needs positive mass")


def _check_memory(config: ExperimentConfig) -> None:
    count = config.times.count  # counted, not built: a billion output times must not be allocated to be refused
    method = config.method
    if method.kind == "particles":
        # frames, integrator stages and copies (~16 arrays of the tokens), the pair sums' bounded blocks
        needed = 8 * (count + 16) * method.n * config.dimension + 2 * 8 * DEFAULT_BLOCK_ELEMENTS
        what = f"method.n = {method.n} particles at times.count = {count} outputs"
    elif METHODS_BY_NAME[method.kind].positional:
        # every position's quantile particles (angles and their two coordinates) and density at every output,
        # the integrator's stages, and the pair sums' bounded blocks
        defaults = inspect.signature(METHODS_BY_NAME[method.kind].solver).parameters
        layers, points = (getattr(method, key) or defaults[key].default for key in ("layers", "points"))
        needed = 8 * layers * (3 * points + method.cells) * (count + 16) + 2 * 8 * DEFAULT_BLOCK_ELEMENTS
        what = (f"method.layers = {layers} positions of method.points = {points} quantile particles and "
                f"method.cells = {method.cells} cells at times.count = {count} outputs")
    elif METHODS_BY_NAME[method.kind].noise:
        # every path's density at every output, and its stages and fields (a few grid-sized arrays per path)
        defaults = inspect.signature(METHODS_BY_NAME[method.kind].solver).parameters
        if method.kind in CIRCLE_SOLVERS:
            nodes = method.points or defaults["points"].default
            key = f"method.points = {nodes}"
        else:
            lmax = method.lmax
            nodes, key = int(np.prod(grid_shape(lmax))), f"method.lmax = {lmax}"
        needed = 8 * method.systems * nodes * (count + 16)
        what = f"{key} ({nodes} grid points) for method.systems = {method.systems} paths at times.count = {count} outputs"
    elif METHODS_BY_NAME[method.kind].family == "lorentzian" or METHODS_BY_NAME[method.kind].hierarchy:
        # the complex moments and the marginal on 4 modes angles, or g on 2 modes angles and its cosines, at every
        # output
        needed = 8 * 6 * method.modes * (count + 16)
        what = f"method.modes = {method.modes} modes at times.count = {count} outputs"
    elif method.kind in LINE_SOLVERS:
        # the recorded cells (and labels) at every output, and a few square arrays of attention weights:
        # LineFV's faces against its cells, LineLagrangian's labels against each other
        labels = method.labels if method.kind == "LineLagrangian" else 0
        square = labels or method.cells
        needed = 8 * (method.cells + labels) * (count + 16) + 8 * 4 * square**2
        what = (f"method.cells = {method.cells}" + (f" and method.labels = {labels}" if labels else "")
                + f" at times.count = {count} outputs")
    else:
        circle, chosen = method.kind in CIRCLE_SOLVERS, METHODS_BY_NAME[method.kind]
        points = method.cells if circle else int(np.prod(grid_shape(method.lmax)))
        if method.kind in ZONAL_SOLVERS:  # nodes of u, not a grid of the sphere (rings: twice as many)
            points = 2 * (3 * (method.lmax + 1) // 2 + 1) * (method.lmax + 3)
        key = f"method.cells = {method.cells}" if circle else f"method.lmax = {method.lmax}"
        what = f"{key} ({points} grid points) at times.count = {count} outputs"
        if chosen.causal:  # one density per layer
            layers = method.layers or inspect.signature(chosen.solver).parameters["layers"].default
            points *= layers
            what += f" in {layers} layers (method.layers)"
        if chosen.family == "frequencies":  # one density per node of the law
            points *= method.nodes
            what += f" for {method.nodes} frequency nodes (method.nodes)"
        if chosen.family == "graphon":  # one density per vertex label
            points *= method.vertices
            what += f" for {method.vertices} vertex labels (method.vertices)"
        needed = 8 * points * (count + WORKING_FIELDS[method.kind])
        if method.kind in ("CircleLagrangian", "CircleFVLagrangian"):  # the labels' positions at every output
            points = method.points or inspect.signature(chosen.solver).parameters["points"].default
            needed += 8 * points * (count + WORKING_FIELDS[method.kind])
        if method.kind in ("SphereWeightedParticles", "SphereSpectralParticles"):  # the atoms at every output
            atoms = int(np.prod(grid_shape(method.quadrature_lmax or method.lmax)))
            needed += 8 * 4 * atoms * (count + WORKING_FIELDS[method.kind])
            if method.quadrature_lmax is not None:
                what += f" and method.quadrature_lmax = {method.quadrature_lmax} ({atoms} atoms)"
    try:
        check_memory(needed, what, "lower the resolution or the number of output times")
    except ValueError as error:
        raise ConfigError(str(error)) from None
