"""From a checked config to the objects that run it: output times, model, solver, initial measure.

Shared by the experiment runner, the sweep and the sweep's up-front checks, so that a config
is checked by building exactly what will run; :func:`build_run` builds them once for a run.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable

import numpy as np
from scipy.special import eval_legendre

import meanfield as mf
from meanfield.protocols import Model
from solvers.methods import METHODS_BY_NAME, chained  # the table only: the solvers' modules load when one is built

from .config import GRAPHON, ExperimentConfig, graphon_function, homogenized_limit
from .errors import ConfigError

if TYPE_CHECKING:
    from solvers.grid_solver import GridSolver


@dataclass(frozen=True, eq=False)
class RunObjects:
    """What one run of a config uses, built once: preflight checks these very objects, the run uses them."""

    config: ExperimentConfig
    times: np.ndarray
    model: Model
    solver: GridSolver | None  # None: particles
    initial: Callable | np.ndarray


def build_run(config: ExperimentConfig) -> RunObjects:
    """The output times, model, solver and initial density of ``config``."""
    model = build_model(config)
    solver, initial = build_solver(config, model), initial_density(config)
    chosen = METHODS_BY_NAME.get(config.method.kind)
    labelled = chosen is not None and (chosen.family in ("frequencies", GRAPHON) or chosen.positional or chosen.causal)
    if solver is not None and labelled and callable(initial):
        density = initial
        # every layer (node, position) starts from it: these solvers take rho0(label, x)
        initial = lambda s, x: density(x)
    return RunObjects(config, config.times.array(), model, solver, initial)


def build_model(config: ExperimentConfig) -> mf.SelfAttention | mf.CausalAttention | mf.PureAttention | \
        mf.RandomAttention:
    spec = config.model
    matrices = {key: (value if value is None or np.ndim(value) == 0 else np.asarray(value, dtype=float))
                for key, value in (("query", spec.query), ("key", spec.key), ("value", spec.value))}
    try:
        if spec.homogenized is not None:
            return homogenized_limit(spec.beta, spec.homogenized)
        if spec.random is not None:
            law = mf.MatrixWeights(spec.random.bilinear, spec.random.value)
            return mf.RandomAttention(spec.beta, heads=spec.random.heads, step=config.method.dt, law=law,
                                      redraw=spec.random.redraw)
        if spec.graph is not None and config.method.kind != "particles":  # the graphon family's interaction
            return mf.SelfAttention(spec.beta, normalized=spec.normalized, value=spec.value, diffusion=spec.diffusion)
        if spec.graph is not None:
            return graph_model(config, graph_generator(config.method.seed))
        if spec.frequencies is not None and config.method.kind != "particles":  # the family's interaction
            return frequency_interaction(config)
        if spec.frequencies is not None:
            return frequency_model(config, frequency_generator(config.method.seed))
        if config.euclidean:
            return mf.PureAttention(beta=spec.beta, rescaled=spec.rescaled, normalization=spec.normalization,
                                    gain=spec.gain, attention=spec.attention,
                                    sinkhorn_iterations=spec.sinkhorn_iterations,
                                    sinkhorn_tolerance=spec.sinkhorn_tolerance, **matrices)
        if spec.causal:  # a number for value is the prefactor c (the paper's convention is c = beta)
            prefactor, value = (spec.value, 1.0) if np.ndim(spec.value) == 0 else (1.0, matrices["value"])
            return mf.CausalAttention(spec.beta, normalized=spec.normalized, alibi=spec.alibi, prefactor=prefactor,
                                      include_self=spec.include_self, diffusion=spec.diffusion,
                                      query=matrices["query"], key=matrices["key"], value=value)
        if spec.attention == "sinkhorn":
            return mf.SinkhornAttention(spec.beta, iterations=spec.sinkhorn_iterations,
                                        tolerance=spec.sinkhorn_tolerance, diffusion=spec.diffusion, **matrices)
        if spec.rotary is not None:
            return mf.RotaryAttention(spec.beta, spec.rotary, normalized=spec.normalized, diffusion=spec.diffusion,
                                      **matrices)
        perceptron = spec.perceptron
        external = None if perceptron is None else mf.Perceptron(perceptron.weights, perceptron.directions)
        return mf.SelfAttention(spec.beta, normalized=spec.normalized, diffusion=spec.diffusion,
                                time_rescaled=spec.time_rescaled, external=external, **matrices)
    except (ValueError, TypeError) as error:
        raise ConfigError(f"model: {error}") from None


#: The spawn key of a run's graph stream (:func:`graph_generator`).
GRAPH_STREAM = 1


def graph_generator(seed: int) -> np.random.Generator:
    """The generator of a run's graph: its own stream of ``method.seed``, apart from the tokens' ``default_rng(seed)``."""
    return np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(GRAPH_STREAM,)))


def graph_model(config: ExperimentConfig, generator: np.random.Generator,
                systems: int | None = None) -> mf.GraphAttention:
    """``model.graph``: a :class:`meanfield.GraphAttention` on a graph drawn from ``generator`` (a batch of
    ``systems`` graphs, drawn in turn, when given)."""
    spec = config.model

    graphon = graphon_function(spec.graphon) if spec.graph == GRAPHON else None

    def draw():
        if graphon is not None:
            return mf.graphon_graph(graphon, config.method.n, generator)
        return mf.draw_graph(spec.graph, config.method.n, edge_probability=spec.edge_probability,
                             neighbours=spec.neighbours, seed=generator)

    adjacency = draw() if systems is None else [draw() for _ in range(systems)]
    return mf.GraphAttention(spec.beta, adjacency, normalized=spec.normalized, value=spec.value,
                             diffusion=spec.diffusion)


#: The spawn key of a run's frequency stream (:func:`frequency_generator`).
FREQUENCY_STREAM = 2


def frequency_generator(seed: int) -> np.random.Generator:
    """The generator of a run's natural frequencies: its own stream of ``method.seed``."""
    return np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(FREQUENCY_STREAM,)))


def frequency_model(config: ExperimentConfig, generator: np.random.Generator,
                    systems: int | None = None) -> mf.NaturalFrequencies:
    """``model.frequencies``: the zonal interaction with ``method.n`` frequencies drawn from the law (per system)."""
    law = config.model.frequencies
    shape = (config.method.n,) if systems is None else (systems, config.method.n)
    return mf.NaturalFrequencies(frequency_interaction(config),
                                 mf.sample_frequencies(law.law, law.width, shape, generator, center=law.center))


def frequency_interaction(config: ExperimentConfig) -> mf.SelfAttention:
    """The interaction of oscillators with ``model.frequencies`` (their coupling, with the Sakaguchi phase lag)."""
    spec, law = config.model, config.model.frequencies
    value = spec.value
    if law.phase_lag != 0:  # Sakaguchi: sin(theta_j - theta_i - alpha), the mean turned by -alpha
        c, s = np.cos(law.phase_lag), np.sin(law.phase_lag)
        value = spec.value * np.array([[c, s], [-s, c]])
    return mf.SelfAttention(spec.beta, normalized=spec.normalized, value=value, diffusion=spec.diffusion)


#: The quadrature of each frequency law by name (``model.frequencies.law``).
FREQUENCY_QUADRATURES = {"lorentzian": mf.lorentzian_nodes, "gaussian": mf.gaussian_nodes}


def family_labels(config: ExperimentConfig) -> dict:
    """The labels of a family solver's densities, as its constructor takes them (``Method.family``): the law's
    nodes and weights, the Lorentzian law itself, or the graphon."""
    family = METHODS_BY_NAME[config.method.kind].family
    if family == GRAPHON:
        return {"graphon": graphon_function(config.model.graphon)}
    law = config.model.frequencies
    if family == "lorentzian":
        return {"width": law.width, "center": law.center}
    nodes, weights = FREQUENCY_QUADRATURES[law.law](law.width, config.method.nodes, center=law.center)
    return {"frequencies": nodes, "weights": weights}


def initial_density(config: ExperimentConfig):
    """A callable (of angles or of points) or an array of grid values, as the config says.

    Pure attention (``geometry = "euclidean"``) has no density on a grid: ``None``, or the
    tokens of ``initial.kind = "file"``.
    """
    initial, circle = config.initial, config.geometry == "circle"
    if config.euclidean and config.method.kind != "particles":
        return line_density(config)
    if config.euclidean:
        return load_initial_file(initial.path) if initial.kind == "file" else None
    if initial.kind == "uniform":
        return (lambda theta: np.ones_like(theta)) if circle else (lambda points: np.ones(points.shape[:-1]))
    if initial.kind == "file":
        return load_initial_file(initial.path)
    if initial.kind == "perturbed_uniform":
        a, k = initial.amplitude, initial.mode
        if circle:
            return lambda theta: 1 + a * np.cos(k * theta)
        if config.dimension == 3:
            return lambda points: 1 + a * eval_legendre(k, points[..., 2])
        d = config.dimension  # the zonal polynomial of the last coordinate, 1 at the pole
        return lambda points: 1 + a * mf.zonal_polynomial(k, d, points[..., -1])
    means = [np.asarray(m, float) / np.linalg.norm(m) for m in initial.means]
    kappa = initial.kappa

    def mixture(points):
        return sum(np.exp(kappa * (points @ mu - 1.0)) for mu in means)

    return (lambda theta: mixture(mf.circle_points(theta))) if circle else mixture


def line_density(config: ExperimentConfig):
    """The line's initial density (``LineFV``, ``LineLagrangian``): a centred Gaussian of ``initial.std``
    (the solvers restrict it to ``method.interval``), or the file's values on the ``method.cells`` cells of
    the interval (as they are for ``LineFV``, piecewise constant for the labels' quantiles)."""
    initial = config.initial
    if initial.kind == "gaussian":
        std = initial.std
        return lambda z: np.exp(-0.5 * (z / std) ** 2)
    values = load_initial_file(initial.path)
    if config.method.kind == "LineFV":
        return values
    lo, hi = config.method.interval  # the preflight checks the file's shape, (method.cells,)

    def piecewise_constant(z):
        cell = np.floor((np.asarray(z) - lo) / (hi - lo) * values.size).astype(int)
        return values[np.clip(cell, 0, values.size - 1)]

    return piecewise_constant


def load_initial_file(path: str) -> np.ndarray:
    """The array of a ``.npy`` file (never unpickled); anything else is a :class:`ConfigError`."""
    try:
        values = np.load(path, allow_pickle=False)
    except (ValueError, OSError, EOFError) as error:
        raise ConfigError(f"initial.path: {path!r} is not a NumPy .npy file of numbers ({error})") from None
    if not isinstance(values, np.ndarray) or not np.issubdtype(values.dtype, np.number):
        raise ConfigError(f"initial.path: {path!r} must hold an array of numbers, got {type(values).__name__}")
    if np.iscomplexobj(values):
        raise ConfigError(f"initial.path: {path!r} holds complex numbers ({values.dtype}); a density is real")
    return values.astype(float)


def build_solver(config: ExperimentConfig, model):
    """The PDE solver the config names (its entry of ``solvers.methods.METHODS``), or None for particles."""
    method = config.method
    if method.kind == "particles":
        return None
    entries = [METHODS_BY_NAME[kind] for kind in (method.kind, *(method.then or ()))]
    # the constructors' settings (underresolved and the others of solve are the run's: solve_keywords); an unset key
    # keeps the default
    settings = {key: getattr(method, key) for entry in entries for key in entry.settings if key in entry.options}
    settings = {key: value for key, value in settings.items() if value is not None}
    chosen = entries[0]
    if chosen.family is not None:
        settings.update(family_labels(config))
    try:
        return chained(model, entries, settings) if method.then else chosen.solver(model, **settings)
    except (ValueError, NotImplementedError, TypeError) as error:
        raise ConfigError(f"method: {error}") from None


def initial_particles(config: ExperimentConfig, rho0, generator: np.random.Generator,
                      systems: int | None = None) -> np.ndarray:
    """``n`` particles drawn from the initial density, shape ``(n, d)`` (``(systems, n, d)`` if given)."""
    n = config.method.n
    if config.euclidean:
        return _euclidean_tokens(config, rho0, generator, systems)
    if config.initial.kind == "uniform":
        return mf.sample_uniform(n, config.dimension, generator, batch=systems)
    if config.geometry == "sphere" and not callable(rho0):
        raise ConfigError("initial.kind = 'file' is not supported for particles on the sphere")

    def draw():
        if config.geometry == "circle":
            return mf.sample_circle(n, rho0, generator)
        return mf.sample_sphere(n, rho0, config.dimension, generator)

    return draw() if systems is None else np.stack([draw() for _ in range(systems)])


def _euclidean_tokens(config: ExperimentConfig, tokens, generator: np.random.Generator,
                      systems: int | None) -> np.ndarray:
    """Pure attention's tokens: Gaussian, uniform on the unit sphere, or the file's (every system the same)."""
    n, d, kind = config.method.n, config.method.d, config.initial.kind
    shape = (n, d) if systems is None else (systems, n, d)
    if kind == "gaussian":
        return config.initial.std * generator.standard_normal(shape)
    if kind == "uniform":
        return mf.sample_uniform(n, d, generator, batch=systems)
    if tokens.shape != (n, d):
        raise ConfigError(f"initial.path must hold the tokens, shape (method.n, method.d) = ({n}, {d}), "
                          f"got shape {tokens.shape}")
    return np.array(np.broadcast_to(tokens, shape))


def particle_method(config: ExperimentConfig) -> str:
    """The fixed-step scheme of :func:`meanfield.simulate_particles` the config names.

    With diffusion ``rk4`` becomes Euler-Maruyama (RK4 integrates the ODE only).
    """
    scheme = config.method.scheme
    if scheme == "rk4" and config.model.diffusion > 0:
        return "euler"
    return scheme


def solve_keywords(config: ExperimentConfig) -> dict:
    """The keywords of the solver's ``solve`` the config sets: the solver's settings that are its ``solve``'s, such
    as ``underresolved`` (the solvers that end on weighted atoms or mass labels are never under-resolved: they have
    none) and the common-noise solvers' ``dt``, ``systems`` and ``seed``."""
    chosen = METHODS_BY_NAME[(config.method.kind, *(config.method.then or ()))[-1]]  # a chain's last solver takes them
    keywords = {key: getattr(config.method, key) for key in chosen.settings if key in chosen.solve_options}
    return {key: value for key, value in keywords.items() if value is not None}
