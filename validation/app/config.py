"""Experiment configuration: a TOML file checked completely before any computing starts.

Example (see ``examples/``)::

    geometry = "circle"                 # or "sphere"; "euclidean": pure attention in R^d
                                        # (particles, method.d required; initial "gaussian",
                                        # "uniform" or "file" of tokens; model.rescaled; d = 1:
                                        # also the line's solvers)
    output = "output/metastability_circle"
    times = { stop = 20.0, count = 41 }  # or start/stop/count, or an explicit list
    checkpoint_every = 5                # output intervals between checkpoints (0: none)
    max_hours = 24                      # refuse a PDE run estimated to take longer

    [model]                             # SelfAttention parameters
    beta = 9.0
    normalized = true
    diffusion = 0.0
    value = 1.0                         # -1.0: repulsive; or a (d, d) / (heads, d, d) matrix,
                                        # inline or a .npy path, as query and key (optional,
                                        # (heads, k, d) with k the head dimension); every
                                        # solver takes any matrices (their general path)
    # causal = true                     # causal attention: alibi = 0.0, include_self = false;
                                        # a number for value is the prefactor c (particles,
                                        # CausalCircleFV, CausalCircleSpectral, CausalSphereSpectral);
                                        # beta, alibi and value may be lists, one per head (a
                                        # mixture of slopes: particles, CausalCircleFV)
    # attention = "sinkhorn"            # doubly stochastic attention: sinkhorn_iterations
                                        # (unset: to sinkhorn_tolerance = 1e-12); every solver
    # rotary = 4.0                      # the rotary encoding (RoPE), an angle per unit of i/n per
                                        # coordinate plane of the query space: particles, or
                                        # PositionalQuantiles (layers, points, cells)

    # graph = "erdos_renyi"             # attention (or Kuramoto: beta = 0, normalized = false) on a
                                        # graph, particles: "erdos_renyi" (edge_probability), "ring"
                                        # (neighbours), "small_world" (both), "graphon" (graphon =
                                        # "x * y", W(x, y) as an expression; its mean field:
                                        # GraphonCircleFV); a sweep draws one per realisation

    # [model.random]                    # random weights (particles, scheme = "layer", step method.dt):
    # bilinear = "wigner"               # Q^T K: "identity", "gaussian" or "wigner" (meanfield.MatrixWeights)
    # value = "identity"                # V: "identity", "gaussian", "wishart", "bilinear", "-bilinear"
    # heads = 1
    # redraw = "system"                 # drawn once per system (or "layer": at every layer)

    # [model.homogenized]               # the limit of Gaussian weights redrawn at every layer, its
    # value_std = 1.0                   # density driven by common noise: CommonNoiseCircle (points),
    # nodes = 16                        # CommonNoiseSphere (lmax), with method.dt, systems, seed;
                                        # query_std, key_std (unset: Q = K = I)

    # [model.perceptron]                # the perceptron block added to attention
    # weights = [1.0, -0.5]             # w_j
    # directions = [[1.0, 0.0], [0.0, 1.0]]  # a_j, one d-vector per weight

    [method]
    kind = "CircleAuto"                 # a solver of solvers.solve's table (solvers.methods.METHODS:
                                        # CircleAuto, CircleFV, CircleSpectral, CircleLagrangian,
                                        # CircleFVLagrangian, SphereSpectral, SphereWeightedParticles,
                                        # SphereSpectralParticles, the causal ones; on S^{d-1} with
                                        # method.d: ZonalSphereSpectral, ZonalSpectralRings,
                                        # ZonalRings; LineFV, LineLagrangian on the line with
                                        # geometry = "euclidean" and method.interval) or "particles"
    cells = 1024                        # the circle's solvers;  lmax = 63 for SphereSpectral
    underresolved = "stop"              # the grid solvers (CircleAuto: after its hand-over): end at
                                        # the first under-resolved output (exit 3), or "continue"
                                        # CircleFVLagrangian: points = 4096 (mass labels after
                                        # the finite volumes' error passes 1e-3 of max rho)
                                        # SphereSpectralParticles: lmax, quadrature_lmax = lmax
                                        # (the atoms' grid once the harmonics stop resolving)
                                        # particles: n = 512, seed = 0, dt = 0.01,
                                        # scheme = "rk4" | "euler" | "layer" (the paper's
                                        # normalize(x + h a); with diffusion "rk4" becomes
                                        # Euler-Maruyama), d (with initial.kind = "uniform")

    [initial]
    kind = "perturbed_uniform"          # | "von_mises_fisher" | "file" | "uniform"
    amplitude = 0.01
    mode = 4                            # circle: cos(mode theta); sphere: degree-`mode` zonal harmonic
                                        # of the last coordinate (S^{d-1} with method.d: ZonalSphereSpectral,
                                        # ZonalSpectralRings, ZonalRings, particles)
"""

from __future__ import annotations

import dataclasses
import math
import numbers
import sys
from dataclasses import MISSING, dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from meanfield.checks import check_real
from meanfield.docstrings import fill_docstrings
from meanfield.frequencies import sample_frequencies
from meanfield.graphs import draw_graph
from meanfield.homogenized import HomogenizedLimit, output_steps
from meanfield.random_weights import GaussianWeights, MatrixWeights, RandomAttention
from solvers.methods import METHODS, METHODS_BY_NAME

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

from .errors import ConfigError
from .expressions import parse_function


NUMBER = (numbers.Real,)


def option(default: Any = MISSING, *, types: type | tuple, minimum: float | None = None, strict: bool = False,
           choices: tuple[str, ...] | None = None, help: str = "", in_toml: bool = True) -> Any:
    """A config key: its TOML types, its default (none: required), its range or choices, what it means.

    The key's checks are data (``metadata``) read by :func:`check_fields`, so that a reference
    of the keys (the docs' configuration reference) is generated from the same source as the
    checks. ``in_toml=False`` marks a field that is checked but filled from another form of the
    table, never written as a key.
    """
    metadata = {"types": types, "minimum": minimum, "strict": strict, "choices": choices, "help": help,
                "in_toml": in_toml}
    return field(default=default, metadata=metadata)


#: How an error names a TOML type ("must be an integer", not "must be a int").
TYPE_NAMES = {int: "an integer", float: "a number", numbers.Real: "a number", str: "a string", bool: "true or false",
              list: "a list", tuple: "a list", dict: "a table"}


def _type_name(kind: type) -> str:
    """A TOML type as an error names it; a config section is a table."""
    return TYPE_NAMES.get(kind, "a table" if dataclasses.is_dataclass(kind) else f"a {kind.__name__}")


def check_fields(record: Any) -> None:
    """Type, range and choices of every key of a config section (the section's ``PREFIX`` names them)."""
    values = values_of(record)
    for spec in dataclasses.fields(record):
        value, rule, name = values[spec.name], spec.metadata, record.PREFIX + spec.name
        if value is None and spec.default is None:  # an optional key left unset
            continue
        types = rule["types"]
        if (isinstance(value, bool) and types is not bool) or not isinstance(value, types):
            expected = " or ".join(_type_name(t) for t in (types if isinstance(types, tuple) else (types,)))
            raise ConfigError(f"{name} must be {expected}, got {value!r}")
        if isinstance(value, numbers.Real) and not isinstance(value, bool) and not math.isfinite(value):
            raise ConfigError(f"{name} must be a finite number, got {value!r}")
        if rule["choices"] is not None and value not in rule["choices"]:
            raise ConfigError(f"{name} must be one of {', '.join(rule['choices'])}; got {value!r}")
        minimum = rule["minimum"]
        if minimum is None:
            continue
        for entry in value if isinstance(value, (list, tuple)) else (value,):  # a number, or one per head
            if isinstance(entry, bool) or not isinstance(entry, numbers.Real) or not math.isfinite(entry):
                raise ConfigError(f"{name} must hold finite numbers, got {value!r}")
            if not (entry > minimum if rule["strict"] else entry >= minimum):
                raise ConfigError(f"{name} must be {'>' if rule['strict'] else '>='} {minimum:g}, got {value!r}")


def section_from_table(cls: type, table: Any, name: str) -> Any:
    """A section record from its TOML table: unknown and missing keys named, defaults filled in, keys checked."""
    if not isinstance(table, dict):
        raise ConfigError(f"{name} must be a dict, got {table!r}")
    specs = dataclasses.fields(cls)
    unknown = sorted(set(table) - {spec.name for spec in specs})
    if unknown:
        raise ConfigError(f"unknown key {cls.PREFIX}{unknown[0]}; allowed keys: "
                          f"{', '.join(cls.PREFIX + spec.name for spec in specs)}")
    for spec in specs:
        if spec.name not in table and spec.default is MISSING:
            raise ConfigError(f"missing key {cls.PREFIX}{spec.name}")
    return cls(**table)


def values_of(record: Any) -> dict:
    """A section record's keys and values (not recursive, unlike :func:`dataclasses.asdict`)."""
    return {spec.name: getattr(record, spec.name) for spec in dataclasses.fields(record)}


def table_of(record: Any) -> dict:
    """The TOML table of a section record (tuples as lists): what :func:`section_from_table` reads back."""
    return {name: _plain(value) for name, value in values_of(record).items()}


def _plain(value: Any) -> Any:
    if isinstance(value, tuple):
        return [_plain(item) for item in value]
    if dataclasses.is_dataclass(value):
        return table_of(value)
    return value


class ConfigSection:
    """A table of the config: its keys are the dataclass fields (:func:`option`), checked on construction."""

    PREFIX: ClassVar[str] = ""

    def __post_init__(self) -> None:
        check_fields(self)


#: The ``[method]`` keys a family's labels take (``Method.family``), besides the solver's settings.
FAMILY_KEYS = {"frequencies": ("nodes",)}

#: The PDE solvers of ``method.kind`` on the circle and on the sphere: the table of ``solvers.methods``.
CIRCLE_SOLVERS = tuple(method.name for method in METHODS if method.geometry == "circle")
SPHERE_SOLVERS = tuple(method.name for method in METHODS if method.geometry == "sphere")
#: The PDE solvers of pure attention's rescaled tokens on the line (``geometry = "euclidean"``, ``d = 1``).
LINE_SOLVERS = tuple(method.name for method in METHODS if method.geometry == "line")
#: The solvers of zonal densities on S^{d-1}, any d (``method.d``).
ZONAL_SOLVERS = tuple(method.name for method in METHODS if "d" in method.settings)

#: ``model.graph``'s graphs drawn from a graphon, and the family of its mean field (``Method.family``).
GRAPHON = "graphon"

#: Tokens in R^d without layer normalization: pure attention (particles only).
EUCLIDEAN = "euclidean"
GEOMETRIES = ("circle", "sphere", EUCLIDEAN)


@dataclass(frozen=True)
class PerceptronConfig:
    """``[model.perceptron]``: the weights ``w_j`` and the directions ``a_j`` (one ``d``-vector each)."""

    weights: tuple
    directions: tuple


@dataclass(frozen=True)
class RandomWeightsConfig:
    """``[model.random]``: the law of random weights (:class:`meanfield.MatrixWeights`), heads, and when to redraw."""

    bilinear: str = "wigner"
    value: str = "identity"
    heads: int = 1
    redraw: str = "system"


@dataclass(frozen=True)
class FrequenciesConfig:
    """``[model.frequencies]``: the law the tokens' natural frequencies are drawn from (:func:`meanfield.sample_frequencies`)."""

    law: str = "lorentzian"
    width: float = 1.0
    center: float = 0.0
    phase_lag: float = 0.0


@dataclass(frozen=True)
class HomogenizedConfig:
    """``[model.homogenized]``: the homogenized limit of Gaussian random weights redrawn at every layer
    (:class:`meanfield.HomogenizedLimit`, :class:`meanfield.GaussianWeights` with centred values)."""

    value_std: float = 1.0
    query_std: float | None = None
    key_std: float | None = None
    nodes: int = 16


@dataclass(frozen=True, kw_only=True)
class ModelConfig(ConfigSection):
    """``[model]``: the :class:`~meanfield.SelfAttention` (or causal attention) to run."""

    PREFIX: ClassVar[str] = "model."
    beta: Any = option(types=NUMBER + (list,), minimum=0,
                       help="inverse temperature (causal attention: a list gives one per head)")
    normalized: bool = option(True, types=bool, help="SA (true) or USA (false)")
    diffusion: float = option(0.0, types=NUMBER, minimum=0, help="diffusion coefficient D")
    value: Any = option(1.0, types=NUMBER + (list, str, tuple),
                        help="V = value I, or a (d, d) / (heads, d, d) matrix, inline or a .npy path (causal "
                             "attention: a number is the prefactor c, a list one signed value per head)")
    query: Any = option(None, types=(list, str, tuple), help="Q: a (k, d) / (heads, k, d) matrix (k the head dimension, as the key's) or a .npy path")
    key: Any = option(None, types=(list, str, tuple), help="K: a (k, d) / (heads, k, d) matrix (k as the query's) or a .npy path")
    perceptron: Any = option(None, types=(dict, PerceptronConfig),
                             help="the perceptron block: weights (J numbers), directions (J d-vectors)")
    graph: str = option(None, types=str, choices=("erdos_renyi", "ring", "small_world", GRAPHON),
                        help="attention on a graph (particles; meanfield.GraphAttention): a run draws one "
                             "graph from method.seed, a sweep one per realisation; 'graphon': graphs drawn from "
                             "model.graphon, whose mean field is method.kind = 'GraphonCircleFV'")
    graphon: str = option(None, types=str,
                          help="graph = 'graphon': W(x, y) on [0, 1]^2, symmetric, in [0, 1], as an expression in x "
                               "and y (numbers, + - * / **, comparisons, pi, e, exp, log, sqrt, abs, sin, cos, "
                               "minimum, maximum), such as \"x * y\" or \"exp(-abs(x - y) / 0.2)\"")
    edge_probability: float = option(None, types=NUMBER, minimum=0,
                                     help="graph: the Erdos-Renyi edge probability, or the small world's "
                                          "rewiring probability")
    neighbours: int = option(None, types=int, minimum=1,
                             help="graph: the ring's (and the small world's) neighbours on each side")
    frequencies: Any = option(None, types=(dict, FrequenciesConfig),
                              help="natural frequencies (particles on the circle): law ('lorentzian' or 'gaussian'), "
                                   "width (its half-width or standard deviation), center, and the Sakaguchi "
                                   "phase_lag alpha (value K turns into K R(-alpha)); a run draws them from its own "
                                   "stream of method.seed, a sweep per system")
    homogenized: Any = option(None, types=(dict, HomogenizedConfig),
                              help="the homogenized limit of random weights, its density driven by common noise "
                                   "(method.kind = 'CommonNoiseCircle' or 'CommonNoiseSphere'): value_std (sigma_V), "
                                   "query_std and key_std (unset: Q = K = I), nodes (the weight law's quadrature)")
    random: Any = option(None, types=(dict, RandomWeightsConfig),
                         help="random weights per system or layer: bilinear ('identity', 'gaussian', 'wigner'), "
                              "value ('identity', 'gaussian', 'wishart', 'bilinear', '-bilinear'), heads, redraw "
                              "('system' or 'layer'); particles with scheme = 'layer', step method.dt")
    time_rescaled: bool = option(False, types=bool, help="multiply the velocity by exp(-beta B)")
    rescaled: bool = option(False, types=bool, help="geometry = 'euclidean': evolve the rescaled tokens "
                                                    "z = exp(-tV) x (pure attention)")
    normalization: str = option("none", types=str, choices=("none", "pre", "post"),
                                help="geometry = 'euclidean': where layer normalisation sits, nowhere (pure "
                                     "attention), before attention (pre-LN), or after the residual sum (post-LN, "
                                     "scheme = 'layer': tokens on the ellipsoid of the gain); on the sphere it is "
                                     "post-LN without gain")
    gain: Any = option(None, types=(list, tuple), help="normalization = 'pre' or 'post': the RMS normalisation's "
                                                       "diagonal gain, d nonzero numbers (default ones)")
    causal: bool = option(False, types=bool, help="causal attention (particles, or the causal solvers of its "
                                                   "layered equation)")
    alibi: Any = option(0.0, types=NUMBER + (list,), minimum=0,
                        help="ALiBi slope of causal attention (a list gives one per head)")
    include_self: bool = option(False, types=bool, help="causal attention sums over j <= i")
    attention: str = option("softmax", types=str, choices=("softmax", "sinkhorn"),
                            help="the attention matrix: softmax rows, or its doubly stochastic Sinkhorn scaling "
                                 "(normalized = true)")
    sinkhorn_iterations: int = option(None, types=int, minimum=1,
                                      help="attention = 'sinkhorn': the normalisations (1 is softmax); unset: "
                                           "to sinkhorn_tolerance")
    sinkhorn_tolerance: float = option(1e-12, types=NUMBER, minimum=0, strict=True,
                                       help="attention = 'sinkhorn': the row sums' tolerance")
    rotary: Any = option(None, types=NUMBER + (list,),
                         help="the rotary positional encoding: the angle per unit of relative position i/n, a "
                              "number or one per coordinate plane of the query space (method.kind = 'particles' or "
                              "'PositionalQuantiles')")


@dataclass(frozen=True, kw_only=True)
class MethodConfig(ConfigSection):
    """``[method]``: the PDE solver or the particle system, and its resolution."""

    PREFIX: ClassVar[str] = "method."
    #: The keys each kind takes: a solver's settings in the table of ``solvers.methods``.
    KEYS: ClassVar[dict] = {**{method.name: {"kind", *method.settings, *FAMILY_KEYS.get(method.family, ()),
                                             *(("then",) if method.hands_to else ())}
                               for method in METHODS if method.name in CIRCLE_SOLVERS + SPHERE_SOLVERS},
                            **{name: {"kind", "d", *METHODS_BY_NAME[name].settings} for name in LINE_SOLVERS},
                            "particles": {"kind", "n", "seed", "dt", "scheme", "d"}}
    kind: str = option(types=str, choices=CIRCLE_SOLVERS + SPHERE_SOLVERS + LINE_SOLVERS + ("particles",),
                       help="a PDE solver of the geometry (solvers.solve's table; geometry = 'euclidean': LineFV "
                            "or LineLagrangian, d = 1), or the particle system")
    then: Any = option(None, types=(list, tuple),
                       help="the solvers a run hands over to, in order, each where the one before stops resolving "
                            "the density (solvers.Chain): method.kind values, each a hand-over of the one before "
                            "(CircleSpectral -> CircleFV -> CircleLagrangian, CausalCircleSpectral -> "
                            "CausalCircleFV, SphereSpectral -> SphereWeightedParticles, ZonalSphereSpectral -> "
                            "ZonalRings); every solver takes the keys it has")
    cells: int = option(1024, types=int, minimum=8,
                        help="the circle's and the line's solvers: cells (CircleSpectral: modes |k| < cells/2; "
                             "CircleAuto: those of its finite volumes; CircleLagrangian, LineLagrangian: those of "
                             "the recorded averages)")
    points: int = option(None, types=int, minimum=8,
                         help="CircleLagrangian, CircleFVLagrangian: mass labels of the measure; PositionalQuantiles: "
                              "quantile particles per position; CommonNoiseCircle: equispaced angles, even (default: "
                              "the solver's)")
    interval: Any = option(None, types=(list, tuple),
                           help="LineFV, LineLagrangian: the interval [lo, hi] of the rescaled tokens, holding the "
                                "initial support (a Gaussian is restricted to it); required")
    labels: int = option(512, types=int, minimum=2, help="LineLagrangian: mass labels of the measure")
    lmax: int = option(63, types=int, minimum=2, help="the sphere's solvers: highest degree (the zonal ones: "
                                                      "of the Gegenbauer series, and the recording nodes)")
    threads: int = option(1, types=int, minimum=1,
                          help="SphereSpectral, SphereSpectralParticles, CausalSphereSpectral: OpenMP threads of "
                               "the shtns transforms "
                               "(more only on idle cores)")
    outputs: str = option("stepped", types=str, choices=("stepped", "interpolated"),
                          help="the spectral solvers (and the spectral part of a chain), without diffusion: "
                               "'interpolated' takes the outputs from the pair's dense output, so that outputs "
                               "closer than the steps cost none (checkpointed segments then join within the "
                               "tolerance, not bit for bit)")
    quadrature_lmax: int = option(None, types=int, minimum=2,
                                  help="SphereWeightedParticles, SphereSpectralParticles: the Gauss grid of the "
                                       "atoms (default lmax)")
    layers: int = option(None, types=int, minimum=1,
                         help="the causal solvers and PositionalQuantiles: layers in the token position s (default: "
                              "the solver's)")
    vertices: int = option(32, types=int, minimum=1,
                           help="GraphonCircleFV: vertex labels of the midpoint rule of [0, 1], one density each")
    modes: int = option(64, types=int, minimum=2,
                        help="LorentzianKuramoto: moments a_1 .. a_K of the marginal kept; PairCorrelation: Fourier "
                             "modes of g (2 modes angles)")
    closure: str = option("chaos", types=str, choices=("chaos", "kirkwood"),
                          help="PairCorrelation: the ansatz for the three-token law (molecular chaos, or Kirkwood's "
                               "superposition)")
    nodes: int = option(64, types=int, minimum=1,
                        help="FrequencyCircleFV: nodes of the quadrature of model.frequencies' law, one density "
                             "each (Lorentzian: midpoints in omega = width tan(phi); Gaussian: Gauss-Hermite)")
    interaction: str = option("auto", types=str, choices=("auto", "zonal", "general", "reference"),
                              help="the grid solvers' velocity path: the fastest that serves the model, the "
                                   "convolution, the general-head path, or the model's own velocity field")
    rtol: float = option(None, types=NUMBER, minimum=0, strict=True,
                         help="PDE: local error per step relative to the deviation from uniform (< 1)")
    underresolved: str = option("stop", types=str, choices=("stop", "continue"),
                                help="the grid solvers (CircleAuto's finite volumes after its hand-over): once an "
                                     "output is under-resolved, end "
                                     "the run there (exit 3, the outputs so far kept) or continue (the later "
                                     "outputs flagged)")
    n: int = option(512, types=int, minimum=1, help="particles, PairCorrelation: tokens")
    seed: int = option(0, types=int, minimum=0, help="particles: random seed; the common-noise solvers: the noise "
                                                     "paths' seed")
    dt: float = option(0.01, types=NUMBER, minimum=0, strict=True,
                       help="particles: step; the common-noise solvers: the noise's step (the output times on its "
                            "grid)")
    systems: int = option(1, types=int, minimum=1, help="CommonNoiseCircle, CommonNoiseSphere: noise paths, one "
                                                        "density path each")
    scheme: str = option("rk4", types=str, choices=("rk4", "euler", "layer"), help="particles: scheme")
    d: int = option(None, types=int, minimum=1, help="particles: dimension (geometry = 'euclidean': R^d, "
                                                     "required); the zonal solvers (ZonalSphereSpectral, "
                                                     "ZonalSpectralRings, ZonalRings): S^{d-1}, d >= 3, required")


@dataclass(frozen=True, kw_only=True)
class InitialConfig(ConfigSection):
    """``[initial]``: the initial measure."""

    PREFIX: ClassVar[str] = "initial."
    KEYS: ClassVar[dict] = {"perturbed_uniform": {"kind", "amplitude", "mode"},
                            "von_mises_fisher": {"kind", "means", "kappa"}, "file": {"kind", "path"},
                            "uniform": {"kind"}, "gaussian": {"kind", "std"}}
    kind: str = option(types=str, choices=("perturbed_uniform", "von_mises_fisher", "file", "uniform", "gaussian"),
                       help="rho_0 (1 + amplitude Y_mode), a von Mises-Fisher mixture, grid values from a file "
                            "(euclidean: the tokens), uniform (euclidean: on the unit sphere), or gaussian "
                            "(euclidean)")
    amplitude: float = option(0.01, types=NUMBER, minimum=0, help="perturbed_uniform: amplitude")
    mode: int = option(4, types=int, minimum=1, help="perturbed_uniform: circle mode / sphere degree")
    means: Any = option(None, types=(list, tuple), help="von_mises_fisher: the mixture's mean directions")
    kappa: float = option(10.0, types=NUMBER, minimum=0, strict=True, help="von_mises_fisher: concentration")
    path: str = option(None, types=str, help="file: a .npy file of density values on the grid (euclidean: "
                                             "the tokens, shape (n, d))")
    std: float = option(1.0, types=NUMBER, minimum=0, strict=True,
                        help="gaussian: each coordinate's standard deviation (mean 0)")


@dataclass(frozen=True, kw_only=True)
class TimesConfig(ConfigSection):
    """``times``: ``{start, stop, count}`` (evenly spaced) or an explicit increasing list (``listed``)."""

    PREFIX: ClassVar[str] = "times."
    start: float = option(0.0, types=NUMBER, help="the first output time")
    stop: float = option(types=NUMBER, help="the last output time (> start)")
    count: int = option(types=int, minimum=2, help="output times, evenly spaced from start to stop")
    listed: tuple | None = option(None, types=tuple, help="the explicit list, when one was given", in_toml=False)

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.listed is None and self.stop <= self.start:
            raise ConfigError(f"times.stop must be > times.start, got {self.toml()}")

    @classmethod
    def from_toml(cls, times: Any) -> TimesConfig:
        if isinstance(times, dict):
            if "listed" in times:
                raise ConfigError("unknown key times.listed; allowed keys: times.start, times.stop, times.count")
            return section_from_table(cls, times, "times")
        if not isinstance(times, (list, tuple)) or len(times) < 2 or not all(
                isinstance(t, NUMBER) and not isinstance(t, bool) for t in times) \
                or any(b <= a for a, b in zip(times, times[1:])):
            raise ConfigError(f"times must be a strictly increasing list of at least two numbers, got {times}")
        return cls(start=times[0], stop=times[-1], count=len(times), listed=tuple(times))

    def toml(self) -> dict | list:
        """The form the config gave: the list, or ``{start, stop, count}``."""
        if self.listed is not None:
            return list(self.listed)
        return {"start": self.start, "stop": self.stop, "count": self.count}

    def array(self) -> np.ndarray:
        """The output times."""
        if self.listed is not None:
            return np.asarray(self.listed, dtype=float)
        return np.linspace(self.start, self.stop, self.count)


@dataclass(frozen=True, kw_only=True)
class ExperimentConfig(ConfigSection):
    """A checked experiment (``meanfield run``): what :func:`~validation.app.check_config` returns, frozen.

    Build one with :func:`~validation.app.check_config` or :func:`~validation.app.load_config`
    (they also check the keys against each other and resolve paths); ``to_dict`` gives the TOML
    tables back.
    """

    PREFIX: ClassVar[str] = ""
    geometry: str = option(types=str, choices=GEOMETRIES,
                           help="S¹ or S² (particles: Sᵈ⁻¹), or ℝᵈ without layer normalization")
    output: str = option(types=str, help="output folder (relative paths: from the config's folder)")
    times: TimesConfig = option(types=TimesConfig, help="output times: a table {start, stop, count} "
                                                        "(below) or a strictly increasing array")
    checkpoint_every: int = option(0, types=int, minimum=0, help="output intervals between checkpoints (0: none)")
    max_hours: float = option(24.0, types=NUMBER, minimum=0, strict=True, help="refuse a run estimated longer")
    model: ModelConfig = option(types=ModelConfig)
    method: MethodConfig = option(types=MethodConfig)
    initial: InitialConfig = option(types=InitialConfig)

    @property
    def particles(self) -> bool:
        return self.method.kind == "particles"

    @property
    def euclidean(self) -> bool:
        """Tokens in R^d without layer normalization (pure attention, ``meanfield.PureAttention``)."""
        return self.geometry == EUCLIDEAN

    @property
    def dimension(self) -> int:
        """The particles' ``d``: ``method.d``, or the geometry's own (2 on the circle, 3 on the sphere)."""
        return self.method.d or (2 if self.geometry == "circle" else 3)

    def to_dict(self) -> dict:
        """The config as TOML tables (JSON-serializable); :func:`check_config` reads it back unchanged."""
        return {**table_of(self), "times": self.times.toml()}


#: The sections of an experiment config, by table name.
SECTIONS = {"model": ModelConfig, "method": MethodConfig, "initial": InitialConfig}


def read_toml(path: Path) -> dict:
    """The raw table of a TOML file; a missing or malformed file is a :class:`ConfigError`."""
    try:
        return tomllib.loads(path.read_text())
    except FileNotFoundError:
        raise ConfigError(f"config file {str(path)!r} does not exist") from None
    except IsADirectoryError:
        raise ConfigError(f"config file {str(path)!r} is a directory, not a TOML file") from None
    except UnicodeDecodeError:
        raise ConfigError(f"config file {str(path)!r} is not text (a TOML file is UTF-8 text)") from None
    except OSError as error:
        raise ConfigError(f"config file {str(path)!r} cannot be read ({error.strerror})") from None
    except tomllib.TOMLDecodeError as error:
        raise ConfigError(f"{path}: not valid TOML: {error}") from None


#: The Parameters section of the functions that read a TOML file (``{toml_path_parameters}``).
TOML_PATH_PARAMETERS = """
Parameters
----------
path : str or pathlib.Path
    The TOML file; relative paths inside it are taken from its folder.
"""


@fill_docstrings(toml_path_parameters=TOML_PATH_PARAMETERS)
def load_config(path: str | Path) -> ExperimentConfig:
    """Read and check a TOML experiment file (the input of ``meanfield run``).

    {toml_path_parameters}

    Returns
    -------
    ExperimentConfig
        The complete config, defaults filled in (see the configuration reference).

    Raises
    ------
    ConfigError
        If the file cannot be read, is not TOML, or any key is unknown, missing, of the wrong
        type or out of range; the message names the key and the value.
    """
    path = Path(path)
    return check_config(read_toml(path), base=path.parent)


def check_config(raw: dict, base: Path = Path(".")) -> ExperimentConfig:
    """Check every key of ``raw`` (unknown, missing, type, range, and against each other) and fill in defaults.

    Paths (``output``, ``initial.path``, matrix files) are taken from ``base`` and resolved;
    matrices are read and stored as nested tuples, so the result holds everything the run needs.

    Parameters
    ----------
    raw : dict
        The tables of a TOML experiment file, as ``tomllib`` reads them.
    base : pathlib.Path
        The folder relative paths are taken from.

    Returns
    -------
    ExperimentConfig
        The complete config.

    Raises
    ------
    ConfigError
        Naming the first bad key and its value.
    """
    if not isinstance(raw, dict):
        raise ConfigError(f"a config is a table of keys, got {type(raw).__name__}")
    if "script" in raw:  # an example script's settings (examples/lost_in_the_middle.toml)
        raise ConfigError(f"this file holds the settings of the example script {raw['script']!r}, not a run or "
                          f"sweep config: run python examples/{raw['script']} --config FILE")
    if "continuation" in raw:  # examples/bifurcation.toml
        raise ConfigError("this file is a stationary-state config ([continuation]): run meanfield stationary FILE")
    tables = dict(raw)
    if "times" in tables:
        tables["times"] = TimesConfig.from_toml(tables["times"])
    for name, cls in SECTIONS.items():
        if name in tables:
            tables[name] = section_from_table(cls, tables[name], name)
    config = section_from_table(ExperimentConfig, tables, "config")
    return _checked_combination(config, base)


def _checked_combination(config: ExperimentConfig, base: Path) -> ExperimentConfig:
    """The checks across keys; returns the config with its paths resolved and its matrices read."""
    geometry, method, initial = config.geometry, config.method, config.initial
    if not config.output.strip():
        raise ConfigError("output must name a folder (relative paths are taken from the config's folder), got ''")
    try:
        output = str((base / config.output).resolve())
    except RuntimeError:  # pathlib's loop detection (Python < 3.13)
        raise ConfigError(f"output: {config.output!r} cannot be resolved (a symbolic link loop)") from None
    except OSError as error:
        raise ConfigError(f"output: {config.output!r} cannot be resolved ({error.strerror})") from None
    if method.rtol is not None and method.rtol >= 1:
        raise ConfigError(f"method.rtol must be < 1 (a local error relative to the deviation from the uniform "
                          f"density; the default is 1e-6), got {method.rtol!r}")
    if config.euclidean:
        return _checked_euclidean(config, output, base)
    for key in ("rescaled", "normalization", "gain"):
        if values_of(config.model)[key] != _default(ModelConfig, key):
            raise ConfigError(f"model.{key} applies to geometry = 'euclidean' (attention in R^d; on the "
                              f"{geometry} layer normalisation is post-LN), got geometry = {geometry!r}")
    if initial.kind == "gaussian":
        raise ConfigError(f"initial.kind = 'gaussian' draws tokens in R^d (geometry = 'euclidean'), "
                          f"got geometry = {geometry!r}")
    _check_mode_resolved(config)
    config = _checked_random(config)
    config = _checked_frequencies(config)
    config = _checked_homogenized(config)
    _check_graph(config)
    model = read_matrices(config, base)
    _check_causal(config)
    _check_attention_variant(config)
    expected = {"circle": CIRCLE_SOLVERS, "sphere": SPHERE_SOLVERS}[geometry]
    if method.kind not in (*expected, "particles"):
        raise ConfigError(f"method.kind {method.kind!r} does not solve on the {geometry}; "
                          f"use {' or '.join(map(repr, expected))} or 'particles'")
    chain = _checked_chain(method, expected)
    _no_foreign_keys(method, set().union(*(MethodConfig.KEYS[kind] for kind in chain)))
    _no_foreign_keys(initial, InitialConfig.KEYS[initial.kind])
    for kind in chain:
        if config.checkpoint_every and kind in METHODS_BY_NAME and not METHODS_BY_NAME[kind].resumable:
            raise ConfigError(f"method.kind = {kind!r} runs in one piece: it cannot go on from a checkpoint "
                              f"(checkpoint_every must be 0, got {config.checkpoint_every})")
    d, native = method.d, 2 if geometry == "circle" else 3
    if d is not None and (d < native or (geometry == "circle" and d != 2)):
        raise ConfigError(f"method.d = {d} does not fit geometry = {geometry!r} (use 'circle' for d = 2, "
                          f"'sphere' for d >= 3)")
    if method.kind in ZONAL_SOLVERS and d is None:
        raise ConfigError(f"method.kind = {method.kind!r} needs method.d, the dimension of S^(d-1) (>= 3)")
    if d is not None and d != native and initial.kind == "file":
        raise ConfigError(f"method.d = {d} takes initial.kind = 'uniform', 'perturbed_uniform' or "
                          f"'von_mises_fisher' (a file holds values on the grid of S^{native - 1})")
    dimension = d or native
    if initial.kind == "von_mises_fisher":
        means = initial.means
        if not means or not all(isinstance(m, (list, tuple)) and len(m) == dimension
                                and all(isinstance(c, NUMBER) for c in m) and any(c != 0 for c in m) for m in means):
            raise ConfigError(f"initial.means must be a non-empty list of nonzero {dimension}-vectors, got {means!r}")
        if method.kind in ZONAL_SOLVERS and any(any(c != 0 for c in m[:-1]) for m in means):
            raise ConfigError(f"method.kind = {method.kind!r} evolves densities of <x, e>, e the last axis: "
                              f"initial.means must lie on it (zeros but the last coordinate), got {means!r}")
        initial = dataclasses.replace(initial, means=tuple(tuple(m) for m in means))
    if initial.kind == "file":
        if initial.path is None:
            raise ConfigError("missing key initial.path (a .npy file of density values on the grid)")
        path = (base / initial.path).resolve()
        if not path.is_file():
            raise ConfigError(f"initial.path: no file {str(path)!r}")
        initial = dataclasses.replace(initial, path=str(path))
    return dataclasses.replace(config, output=output, model=model, initial=initial)


#: What pure attention takes from ``[model]``; every other key must keep its default.
EUCLIDEAN_MODEL_KEYS = {"beta", "value", "query", "key", "rescaled", "normalization", "gain", "attention",
                        "sinkhorn_iterations", "sinkhorn_tolerance"}


def _checked_euclidean(config: ExperimentConfig, output: str, base: Path) -> ExperimentConfig:
    """Pure attention in R^d: particles only, ``method.d`` given, the model's sphere-only keys left out."""
    method, initial = config.method, config.initial
    if method.kind in LINE_SOLVERS:
        return _checked_line(config, output, base)
    if method.kind != "particles":
        raise ConfigError(f"geometry = 'euclidean' runs with method.kind = 'particles', or the d = 1 mean-field "
                          f"equation's {' or '.join(map(repr, LINE_SOLVERS))}, got method.kind = {method.kind!r}")
    if method.d is None:
        raise ConfigError("geometry = 'euclidean' needs method.d, the dimension of the tokens (>= 1)")
    _only_model_keys(config, EUCLIDEAN_MODEL_KEYS, "to pure attention (geometry = 'euclidean')")
    if initial.kind not in ("gaussian", "uniform", "file"):
        raise ConfigError(f"initial.kind = {initial.kind!r} is a density on the circle or the sphere; "
                          "geometry = 'euclidean' takes 'gaussian', 'uniform' (on the unit sphere) or 'file' "
                          "(the tokens)")
    if initial.kind == "uniform" and method.d < 2:
        raise ConfigError("initial.kind = 'uniform' draws tokens on the unit sphere S^{d-1}: it needs method.d >= 2 "
                          "(use 'gaussian' or 'file' for d = 1)")
    _no_foreign_keys(method, MethodConfig.KEYS["particles"])
    _no_foreign_keys(initial, InitialConfig.KEYS[initial.kind])
    if config.model.normalization == "post" and method.scheme != "layer":
        raise ConfigError(f"model.normalization = 'post' is the discrete layer x <- N_g(x + dt a(x)): it runs with "
                          f"method.scheme = 'layer', got scheme = {method.scheme!r}")
    model = read_matrices(config, base)
    if initial.kind == "file":
        if initial.path is None:
            raise ConfigError(f"missing key initial.path (a .npy file of the tokens, shape ({method.n}, {method.d}))")
        path = (base / initial.path).resolve()
        if not path.is_file():
            raise ConfigError(f"initial.path: no file {str(path)!r}")
        initial = dataclasses.replace(initial, path=str(path))
    return dataclasses.replace(config, output=output, model=model, initial=initial)


#: What the line's mean-field equation takes from ``[model]`` (one head, ``d = 1``, rescaled tokens).
LINE_MODEL_KEYS = {"beta", "value", "query", "key", "rescaled"}


def _checked_line(config: ExperimentConfig, output: str, base: Path) -> ExperimentConfig:
    """Pure attention's ``d = 1`` mean-field equation (``LineFV``, ``LineLagrangian``): rescaled tokens, an
    interval that holds the initial density, a Gaussian or a file of cell values."""
    method, initial = config.method, config.initial
    if method.d not in (None, 1):
        raise ConfigError(f"method.kind = {method.kind!r} solves the d = 1 equation: method.d must be 1 (or left "
                          f"out), got {method.d}")
    _only_model_keys(config, LINE_MODEL_KEYS, f"to the line's mean-field equation (method.kind = {method.kind!r})")
    if not config.model.rescaled:
        raise ConfigError(f"method.kind = {method.kind!r} evolves the rescaled tokens z = exp(-t v) x: it needs "
                          f"model.rescaled = true")
    interval = method.interval
    if interval is None:
        raise ConfigError(f"method.kind = {method.kind!r} needs method.interval = [lo, hi], an interval that holds "
                          f"the initial density")
    if len(interval) != 2 or not all(isinstance(end, NUMBER) and not isinstance(end, bool) and math.isfinite(end)
                                     for end in interval) or not interval[1] > interval[0]:
        raise ConfigError(f"method.interval must be two finite numbers [lo, hi] with hi > lo, got {list(interval)!r}")
    if initial.kind not in ("gaussian", "file"):
        raise ConfigError(f"method.kind = {method.kind!r} takes initial.kind = 'gaussian' (restricted to "
                          f"method.interval) or 'file' (method.cells density values on its cells), got "
                          f"{initial.kind!r}")
    _no_foreign_keys(method, MethodConfig.KEYS[method.kind])
    _no_foreign_keys(initial, InitialConfig.KEYS[initial.kind])
    method = dataclasses.replace(method, d=1, interval=tuple(float(end) for end in interval))
    config = dataclasses.replace(config, method=method)
    model = read_matrices(config, base)
    if initial.kind == "file":
        if initial.path is None:
            raise ConfigError(f"missing key initial.path (a .npy file of {method.cells} density values on the cells "
                              f"of method.interval)")
        path = (base / initial.path).resolve()
        if not path.is_file():
            raise ConfigError(f"initial.path: no file {str(path)!r}")
        initial = dataclasses.replace(initial, path=str(path))
    return dataclasses.replace(config, output=output, model=model, initial=initial)


def read_matrices(config: ExperimentConfig, base: Path) -> ModelConfig:
    """Query, key and value matrices (inline lists or ``.npy`` paths) and the perceptron's weights, read and shaped."""
    model, d = config.model, config.dimension
    matrices = {}
    for key, given in (("query", model.query), ("key", model.key), ("value", model.value)):
        if given is None or isinstance(given, NUMBER):
            continue
        if isinstance(given, str):
            path = (base / given).resolve()
            if not path.is_file():
                raise ConfigError(f"model.{key}: no file {str(path)!r} (a .npy array of shape (d, d) or (heads, d, d))")
            try:
                given = np.load(path, allow_pickle=False).tolist()
            except (ValueError, OSError) as error:
                raise ConfigError(f"model.{key}: {str(path)!r} is not a numeric .npy array ({error})") from None
        try:
            array = np.asarray(given, dtype=float)
        except (TypeError, ValueError):
            raise ConfigError(f"model.{key} must be numbers in a (d, d) or (heads, d, d) array, got {given!r}") from None
        projection = key in ("query", "key")  # (heads, k, d): k the head dimension
        if key == "value" and array.ndim == 1 and model.causal:  # causal attention: a signed number per head
            matrices[key] = tuple(array.tolist())
            continue
        if array.ndim not in (2, 3) or array.shape[-1] != d or (not projection and array.shape[-2] != d):
            shapes = f"(k, {d}) or (heads, k, {d})" if projection else f"({d}, {d}) or (heads, {d}, {d})"
            raise ConfigError(f"model.{key} must have shape {shapes} for geometry = {config.geometry!r}, "
                              f"got shape {array.shape}")
        matrices[key] = _nested_tuple(array.tolist())
    perceptron = model.perceptron
    if isinstance(perceptron, dict):
        if set(perceptron) != {"weights", "directions"}:
            raise ConfigError(f"model.perceptron takes exactly weights (J numbers) and directions (J vectors of "
                              f"length {d}), got keys {sorted(perceptron)}")
        try:
            weights = np.asarray(perceptron["weights"], dtype=float)
            directions = np.asarray(perceptron["directions"], dtype=float)
        except (TypeError, ValueError):
            raise ConfigError(f"model.perceptron must hold numbers, got {perceptron!r}") from None
        if weights.ndim != 1 or directions.shape != (weights.size, d):
            raise ConfigError(f"model.perceptron: weights must have shape (J,) and directions (J, {d}), got "
                              f"{weights.shape} and {directions.shape}")
        matrices["perceptron"] = PerceptronConfig(_nested_tuple(perceptron["weights"]),
                                                  _nested_tuple(perceptron["directions"]))
    return dataclasses.replace(model, **matrices)


def _nested_tuple(values: Any) -> Any:
    return tuple(_nested_tuple(v) for v in values) if isinstance(values, (list, tuple)) else values


def _check_attention_variant(config: ExperimentConfig) -> None:
    """Sinkhorn attention (SA only) and the rotary encoding (particles, PositionalQuantiles) each stand alone: neither is
    causal, nor takes the perceptron or a rescaled time, and their own keys need them."""
    model, values = config.model, values_of(config.model)
    sinkhorn, rotary = model.attention == "sinkhorn", model.rotary is not None
    for key in ("sinkhorn_iterations", "sinkhorn_tolerance"):
        if not sinkhorn and values[key] != _default(ModelConfig, key):
            raise ConfigError(f"model.{key} applies to attention = 'sinkhorn', got attention = {model.attention!r}")
    chosen = METHODS_BY_NAME.get(config.method.kind)
    if chosen is not None and chosen.positional and not rotary:
        raise ConfigError(f"method.kind = {config.method.kind!r} solves the position-indexed equation of a model "
                          f"whose tokens carry positions: it needs model.rotary")
    if not (sinkhorn or rotary):
        return
    variant = "attention = 'sinkhorn'" if sinkhorn else "model.rotary"
    if sinkhorn and rotary:
        raise ConfigError("model.rotary applies to softmax attention, got attention = 'sinkhorn'")
    for key in ("causal", "time_rescaled", "perceptron"):
        if values[key] not in (None, False):
            raise ConfigError(f"model.{key} does not apply with {variant}")
    if sinkhorn and not model.normalized:
        raise ConfigError("attention = 'sinkhorn' scales the softmax matrix: it needs model.normalized = true")
    positional = [m.name for m in METHODS if m.positional]
    if rotary and config.method.kind not in ("particles", *positional):
        raise ConfigError(f"model.rotary runs as particles (method.kind = 'particles') or on its position-indexed "
                          f"mean field (method.kind = {' or '.join(map(repr, positional))}), got method.kind = "
                          f"{config.method.kind!r}")


def _only_model_keys(config: ExperimentConfig, allowed: set, where: str) -> None:
    """Refuse a ``[model]`` key outside ``allowed`` that is not at its default, naming the allowed ones."""
    for key, value in values_of(config.model).items():
        if key not in allowed and value != _default(ModelConfig, key):
            raise ConfigError(f"model.{key} does not apply {where}; allowed: "
                              f"{', '.join(f'model.{name}' for name in sorted(allowed))}")


def _table_as(kind: type, table, name: str):
    """A sub-table of ``[model]`` (a dict from TOML, or already the dataclass) as its dataclass; unknown keys named."""
    if not isinstance(table, dict):
        return table
    keys = [f.name for f in dataclasses.fields(kind)]
    unknown = set(table) - set(keys)
    if unknown:
        raise ConfigError(f"{name} takes {', '.join(keys)}, got unknown keys {sorted(unknown)}")
    return kind(**table)


#: The ``[model]`` keys random weights take (the others must keep their defaults).
RANDOM_MODEL_KEYS = {"beta", "random"}


def _checked_random(config: ExperimentConfig) -> ExperimentConfig:
    """``[model.random]``: a known law, particles with the layer scheme, times on the layers, no other model keys."""
    random = config.model.random
    if random is None:
        return config
    random = _table_as(RandomWeightsConfig, random, "model.random")
    try:
        RandomAttention(1.0, heads=random.heads, law=MatrixWeights(random.bilinear, random.value), redraw=random.redraw)
    except (ValueError, TypeError) as error:
        raise ConfigError(f"model.random: {error}") from None
    method = config.method
    if method.kind != "particles" or method.scheme != "layer":
        raise ConfigError(f"model.random runs the layers of particles (method.kind = 'particles', scheme = 'layer', "
                          f"step method.dt), got method.kind = {method.kind!r}, scheme = {method.scheme!r}")
    _only_model_keys(config, RANDOM_MODEL_KEYS, "with model.random (the law draws Q, K and V)")
    layers = config.times.array() / method.dt
    if not np.allclose(layers, np.round(layers), rtol=0, atol=1e-9) or config.times.array()[0] != 0:
        raise ConfigError(f"times must start at 0 and lie on the layers, multiples of method.dt = {method.dt:g} "
                          "(model.random)")
    return dataclasses.replace(config, model=dataclasses.replace(config.model, random=random))


#: The ``[model]`` keys the homogenized limit takes (its law is ``[model.homogenized]``).
HOMOGENIZED_MODEL_KEYS = {"beta", "homogenized"}


def _checked_homogenized(config: ExperimentConfig) -> ExperimentConfig:
    """``[model.homogenized]``: the common-noise solvers, and only they, with a limit that can be built, the output
    times on the grid of ``method.dt``."""
    homogenized, kind = config.model.homogenized, config.method.kind
    noise = kind in METHODS_BY_NAME and METHODS_BY_NAME[kind].noise
    solved_by = " or ".join(repr(m.name) for m in METHODS if m.noise)
    if homogenized is None:
        if noise:
            raise ConfigError(f"method.kind = {kind!r} solves the density equation of the homogenized limit: it needs "
                              f"[model.homogenized] (value_std, query_std, key_std, nodes)")
        return config
    homogenized = _table_as(HomogenizedConfig, homogenized, "model.homogenized")
    if not noise:
        raise ConfigError(f"model.homogenized runs on its stochastic density equation (method.kind = {solved_by}), "
                          f"got method.kind = {kind!r}")
    _only_model_keys(config, HOMOGENIZED_MODEL_KEYS, "with model.homogenized (its law sets Q, K and V)")
    try:
        homogenized_limit(config.model.beta, homogenized)
        output_steps(config.times.array(), config.method.dt)
    except (ValueError, TypeError) as error:
        where = "method.dt" if "grid of dt" in str(error) else "model.homogenized"
        raise ConfigError(f"{where}: {error}") from None
    return dataclasses.replace(config, model=dataclasses.replace(config.model, homogenized=homogenized))


def homogenized_limit(beta: float, spec: HomogenizedConfig) -> HomogenizedLimit:
    """The :class:`meanfield.HomogenizedLimit` of ``[model.homogenized]`` (centred Gaussian values: the diffusive limit)."""
    law = GaussianWeights(value_std=spec.value_std, query_std=spec.query_std, key_std=spec.key_std)
    return HomogenizedLimit(beta, law, nodes=spec.nodes)


#: The ``[model]`` keys attention on a graph takes (the others must keep their defaults).
GRAPH_MODEL_KEYS = {"beta", "normalized", "value", "diffusion", "graph", "edge_probability", "neighbours", "graphon"}

#: Labels on which a config's graphon is checked (the midpoints of [0, 1]): in [0, 1], finite, symmetric.
GRAPHON_CHECK_LABELS = 64

#: The ``[model]`` keys oscillators with natural frequencies take (a zonal interaction on the circle).
FREQUENCY_MODEL_KEYS = {"beta", "normalized", "value", "diffusion", "frequencies"}


def _checked_frequencies(config: ExperimentConfig) -> ExperimentConfig:
    """``[model.frequencies]``: a known law of positive width, on the circle as particles, the family of densities
    of its nodes (``FrequencyCircleFV``) or the exact Lorentzian reduction (``LorentzianKuramoto``), a zonal
    interaction; those solvers need the law."""
    frequencies = config.model.frequencies
    family = METHODS_BY_NAME[config.method.kind].family if config.method.kind in METHODS_BY_NAME else None
    if family == GRAPHON:
        family = None  # its labels are the graphon's (_check_graph)
    if frequencies is None:
        if family is not None:
            raise ConfigError(f"method.kind = {config.method.kind!r} solves the mean field of a frequency law: it needs "
                              "[model.frequencies] (law, width, center, phase_lag)")
        return config
    frequencies = _table_as(FrequenciesConfig, frequencies, "model.frequencies")
    try:
        sample_frequencies(frequencies.law, frequencies.width, 1, 0, center=frequencies.center)
        check_real(frequencies.phase_lag, "phase_lag")
    except (ValueError, TypeError) as error:
        raise ConfigError(f"model.frequencies: {error}") from None
    if family == "lorentzian" and frequencies.law != "lorentzian":
        raise ConfigError(f"method.kind = {config.method.kind!r} is the exact reduction of Lorentzian frequencies: it "
                          f"needs model.frequencies.law = 'lorentzian', got {frequencies.law!r} (FrequencyCircleFV "
                          "solves any law by its nodes)")
    if config.geometry != "circle" or (config.method.kind != "particles" and family is None):
        raise ConfigError(f"model.frequencies turn tokens on the circle (geometry = 'circle'): particles "
                          f"(method.kind = 'particles') or the mean field of the law (method.kind = "
                          f"'FrequencyCircleFV', or 'LorentzianKuramoto' for a Lorentzian law), got geometry = "
                          f"{config.geometry!r}, method.kind = {config.method.kind!r}")
    _only_model_keys(config, FREQUENCY_MODEL_KEYS, "with model.frequencies (oscillators with a zonal interaction)")
    if not isinstance(config.model.value, NUMBER):
        raise ConfigError(f"model.value must be a number with model.frequencies (the coupling K), got "
                          f"{config.model.value!r}")
    return dataclasses.replace(config, model=dataclasses.replace(config.model, frequencies=frequencies))


def _check_graph(config: ExperimentConfig) -> None:
    """``model.graph``: particles (or the graphon's mean field), its parameters and no others, a number for
    ``value``, a graph that can be drawn (a graphon: an expression in [0, 1], symmetric)."""
    model, values = config.model, values_of(config.model)
    family = METHODS_BY_NAME[config.method.kind].family if config.method.kind in METHODS_BY_NAME else None
    if model.graph is None:
        for key in ("edge_probability", "neighbours", "graphon"):
            if values[key] is not None:
                raise ConfigError(f"model.{key} applies to attention on a graph (model.graph)")
        if family == GRAPHON:
            raise ConfigError(f"method.kind = {config.method.kind!r} solves the mean field of graphs drawn from a "
                              f"graphon: it needs model.graph = 'graphon' and model.graphon")
        return
    if config.method.kind != "particles" and not (model.graph == GRAPHON and family == GRAPHON):
        raise ConfigError(f"model.graph runs as particles (method.kind = 'particles'; model.graph = 'graphon' also "
                          f"as its mean field, 'GraphonCircleFV'), got method.kind = {config.method.kind!r}")
    _only_model_keys(config, GRAPH_MODEL_KEYS, "with model.graph")
    if not isinstance(model.value, NUMBER):
        raise ConfigError(f"model.value must be a number with model.graph (the coupling c), got {model.value!r}")
    if model.graph == GRAPHON:
        for key in ("edge_probability", "neighbours"):
            if values[key] is not None:
                raise ConfigError(f"model.{key} does not apply to model.graph = 'graphon' (model.graphon sets the "
                                  f"edges' probabilities)")
        graphon_function(model.graphon)
        return
    if model.graphon is not None:
        raise ConfigError(f"model.graphon applies to model.graph = 'graphon', got model.graph = {model.graph!r}")
    try:
        draw_graph(model.graph, config.method.n, edge_probability=model.edge_probability,
                   neighbours=model.neighbours, seed=0)
    except ValueError as error:
        raise ConfigError(f"model.graph: {error}") from None


def graphon_function(text: str | None):
    """The graphon ``W(x, y)`` of ``model.graphon``, checked on the midpoints of ``[0, 1]``: finite, in
    ``[0, 1]``, symmetric; a :class:`ConfigError` naming the key otherwise."""
    if text is None:
        raise ConfigError("model.graph = 'graphon' needs model.graphon, W(x, y) as an expression in x and y")
    try:
        graphon = parse_function(text, ("x", "y"), "model.graphon")
    except ValueError as error:
        raise ConfigError(str(error)) from None
    labels = (np.arange(GRAPHON_CHECK_LABELS) + 0.5) / GRAPHON_CHECK_LABELS
    with np.errstate(all="ignore"):
        values = graphon(labels[:, None], labels[None, :])
    if not np.all(np.isfinite(values)) or values.min() < 0 or values.max() > 1:
        raise ConfigError(f"model.graphon = {text!r} must take finite values in [0, 1] (edge probabilities), got "
                          f"values from {np.nanmin(values):.3g} to {np.nanmax(values):.3g}")
    if not np.allclose(values, values.T, rtol=1e-12, atol=0):
        raise ConfigError(f"model.graphon = {text!r} must be symmetric, W(x, y) = W(y, x)")
    return graphon


def _check_causal(config: ExperimentConfig) -> None:
    """Causal attention (``model.causal = true``: a number for ``value`` is its prefactor) runs as particles or on
    the solvers of its layered equation, and only there."""
    model, values, kind = config.model, values_of(config.model), config.method.kind
    solver = METHODS_BY_NAME.get(kind)
    if solver is not None and solver.causal != model.causal:
        layered = [m.name for m in METHODS if m.causal and m.geometry == config.geometry]
        if model.causal:
            raise ConfigError(f"model.causal = true runs with method.kind = {' or '.join(map(repr, layered))} (its "
                              f"layered mean-field equation) or 'particles', got method.kind = {kind!r}")
        raise ConfigError(f"method.kind = {kind!r} solves the layered equation of causal attention: it needs "
                          f"model.causal = true")
    if not model.causal:
        for key in ("alibi", "include_self"):
            if values[key] != _default(ModelConfig, key):
                raise ConfigError(f"model.{key} applies to causal attention only (model.causal = true)")
        if isinstance(model.beta, list):
            raise ConfigError(f"model.beta must be a number (one per head is for causal attention), got {model.beta!r}")
        return
    for key in ("time_rescaled", "perceptron"):
        if values[key] not in (None, False):
            raise ConfigError(f"model.{key} does not apply to causal attention (model.causal = true)")


def _check_mode_resolved(config: ExperimentConfig) -> None:
    """A perturbation mode beyond the grid's highest mode would alias into a lower one."""
    method, initial = config.method, config.initial
    if initial.kind != "perturbed_uniform" or method.kind == "particles":
        return
    if METHODS_BY_NAME[method.kind].family == "lorentzian":
        highest, grid = method.modes, f"method.modes = {method.modes} holds the moments up to"
    elif METHODS_BY_NAME[method.kind].hierarchy:
        highest, grid = method.modes - 1, f"method.modes = {method.modes} holds the cosines up to"
    elif method.kind in CIRCLE_SOLVERS:
        highest, grid = method.cells // 2, f"method.cells = {method.cells} holds Fourier modes up to"
    else:
        highest, grid = method.lmax, f"method.lmax = {method.lmax} holds degrees up to"
    if initial.mode > highest:
        raise ConfigError(f"initial.mode = {initial.mode} is not resolved: {grid} {highest}; "
                          "raise the resolution or lower the mode")


def _default(cls: type, key: str) -> Any:
    return next(spec.default for spec in dataclasses.fields(cls) if spec.name == key)


def _checked_chain(method: MethodConfig, kinds: tuple[str, ...]) -> tuple[str, ...]:
    """``method.kind`` and the solvers of ``method.then`` it hands over to, each a hand-over of the one before."""
    chain = (method.kind, *(method.then or ()))
    for before, after in zip(chain, chain[1:]):
        if not isinstance(after, str) or after not in kinds:
            raise ConfigError(f"method.then must list solvers of the geometry ({', '.join(map(repr, kinds))}), "
                              f"got {after!r}")
        hands_to = METHODS_BY_NAME[before].hands_to if before in METHODS_BY_NAME else ()
        if after not in hands_to:
            raise ConfigError(f"method.then: {before} hands a run over to "
                              f"{' or '.join(map(repr, hands_to)) or 'no solver'}, not to {after!r}")
    return chain


def _no_foreign_keys(section: MethodConfig | InitialConfig, allowed: set) -> None:
    """Keys that belong to another kind were given explicitly: refuse them instead of ignoring them."""
    values = values_of(section)
    for spec in dataclasses.fields(section):
        if spec.name not in allowed and values[spec.name] != spec.default:
            raise ConfigError(f"{section.PREFIX[:-1]}.{spec.name} does not apply to {section.PREFIX}kind = "
                              f"{section.kind!r}; allowed: {', '.join(sorted(allowed))}")
