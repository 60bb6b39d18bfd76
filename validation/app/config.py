"""Experiment configuration: a TOML file checked completely before any computing starts.

Example (see ``examples/``)::

    geometry = "circle"                 # or "sphere"
    output = "output/metastability_circle"
    times = { stop = 20.0, count = 41 }  # or start/stop/count, or an explicit list
    checkpoint_every = 5                # output intervals between checkpoints (0: none)
    max_hours = 24                      # refuse a PDE run estimated to take longer

    [model]                             # SelfAttention parameters
    beta = 9.0
    normalized = true
    diffusion = 0.0
    value = 1.0                         # -1.0: repulsive; or a (d, d) / (heads, d, d) matrix,
                                        # inline or a .npy path, as query and key (optional;
                                        # sphere PDE: Q = K = I, V = cI only)
    # causal = true                     # causal attention (particles only): alibi = 0.0,
                                        # include_self = false; value is the prefactor c

    # [model.perceptron]                # the perceptron block added to attention
    # weights = [1.0, -0.5]             # w_j
    # directions = [[1.0, 0.0], [0.0, 1.0]]  # a_j, one d-vector per weight

    [method]
    kind = "CircleFV"                   # "CircleFV" | "SphereSpectral" | "particles"
    cells = 1024                        # CircleFV;  lmax = 63 for SphereSpectral
                                        # particles: n = 512, seed = 0, dt = 0.01,
                                        # scheme = "rk4" | "euler" | "layer" (the paper's
                                        # normalize(x + h a); with diffusion "rk4" becomes
                                        # Euler-Maruyama), d (with initial.kind = "uniform")

    [initial]
    kind = "perturbed_uniform"          # | "von_mises_fisher" | "file" | "uniform"
    amplitude = 0.01
    mode = 4                            # circle: cos(mode theta); sphere: degree-`mode` zonal harmonic
"""

from __future__ import annotations

import copy
import numbers
import sys
from pathlib import Path

import numpy as np

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

from .builders import particle_dimension
from .errors import ConfigError


NUMBER = (numbers.Real,)

# key: (types, required, default, check description or None)
SCHEMA = {
    "": {
        "geometry": (str, True, None, ("circle", "sphere")),
        "output": (str, True, None, None),
        "times": ((dict, list), True, None, None),
        "checkpoint_every": (int, False, 0, ">= 0"),
        "max_hours": (NUMBER, False, 24.0, "> 0"),
        "model": (dict, True, None, None),
        "method": (dict, True, None, None),
        "initial": (dict, True, None, None),
    },
    "model": {
        "beta": (NUMBER, True, None, ">= 0"),
        "normalized": (bool, False, True, None),
        "diffusion": (NUMBER, False, 0.0, ">= 0"),
        "value": (NUMBER + (list, str), False, 1.0, None),
        "query": ((list, str), False, None, None),
        "key": ((list, str), False, None, None),
        "perceptron": (dict, False, None, None),
        "time_rescaled": (bool, False, False, None),
        "causal": (bool, False, False, None),
        "alibi": (NUMBER, False, 0.0, ">= 0"),
        "include_self": (bool, False, False, None),
    },
    "times": {
        "start": (NUMBER, False, 0.0, None),
        "stop": (NUMBER, True, None, None),
        "count": (int, True, None, ">= 2"),
    },
    "method": {
        "kind": (str, True, None, ("CircleFV", "SphereSpectral", "particles")),
        "cells": (int, False, 1024, ">= 8"),
        "lmax": (int, False, 63, ">= 2"),
        "rtol": (NUMBER, False, None, "> 0"),
        "n": (int, False, 512, ">= 1"),
        "seed": (int, False, 0, ">= 0"),
        "dt": (NUMBER, False, 0.01, "> 0"),
        "scheme": (str, False, "rk4", ("rk4", "euler", "layer")),
        "d": (int, False, None, ">= 2"),
    },
    "initial": {
        "kind": (str, True, None, ("perturbed_uniform", "von_mises_fisher", "file", "uniform")),
        "amplitude": (NUMBER, False, 0.01, ">= 0"),
        "mode": (int, False, 4, ">= 1"),
        "means": (list, False, None, None),
        "kappa": (NUMBER, False, 10.0, "> 0"),
        "path": (str, False, None, None),
    },
}

METHOD_KEYS = {"CircleFV": {"kind", "cells", "rtol"}, "SphereSpectral": {"kind", "lmax", "rtol"},
               "particles": {"kind", "n", "seed", "dt", "scheme", "d"}}
INITIAL_KEYS = {"perturbed_uniform": {"kind", "amplitude", "mode"}, "von_mises_fisher": {"kind", "means", "kappa"},
                "file": {"kind", "path"}, "uniform": {"kind"}}


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


def load_config(path: str | Path) -> dict:
    """Read and check a TOML experiment file; returns the complete config (defaults filled in)."""
    path = Path(path)
    return check_config(read_toml(path), base=path.parent)


def check_config(raw: dict, base: Path = Path(".")) -> dict:
    """Check every key of ``raw`` (unknown, missing, type, range) and fill in defaults."""
    if "script" in raw:  # an example script's settings (examples/lost_in_the_middle.toml)
        raise ConfigError(f"this file holds the settings of the example script {raw['script']!r}, not a run or "
                          f"sweep config: run python examples/{raw['script']} --config FILE")
    config = check_table(raw, SCHEMA[""], "")
    for section in ("model", "method", "initial"):
        config[section] = check_table(config[section], SCHEMA[section], f"{section}.")
    if isinstance(config["times"], dict):
        config["times"] = check_table(config["times"], SCHEMA["times"], "times.")
        if config["times"]["stop"] <= config["times"]["start"]:
            raise ConfigError(f"times.stop must be > times.start, got {config['times']}")
    else:
        times = config["times"]
        if len(times) < 2 or not all(isinstance(t, NUMBER) and not isinstance(t, bool) for t in times) \
                or any(b <= a for a, b in zip(times, times[1:])):
            raise ConfigError(f"times must be a strictly increasing list of at least two numbers, got {times}")
    _check_combination(config, base)
    return config


def check_table(table: dict, schema: dict, prefix: str) -> dict:
    """Check a table's keys against ``schema`` (see ``SCHEMA``); keys are named with ``prefix``."""
    unknown = sorted(set(table) - set(schema))
    if unknown:
        raise ConfigError(f"unknown key {prefix}{unknown[0]}; allowed keys: {', '.join(prefix + k for k in schema)}")
    result = {}
    for key, (types, required, default, check) in schema.items():
        name = prefix + key
        if key not in table:
            if required:
                raise ConfigError(f"missing key {name}")
            result[key] = copy.deepcopy(default)
            continue
        value = table[key]
        if value is None and default is None and not required:  # an optional key left unset
            result[key] = None
            continue
        wrong_bool = isinstance(value, bool) and types is not bool
        if wrong_bool or not isinstance(value, types):
            expected = types.__name__ if isinstance(types, type) else " or ".join(
                t.__name__ if t is not numbers.Real else "number" for t in types)
            raise ConfigError(f"{name} must be a {expected}, got {value!r}")
        if isinstance(check, tuple) and value not in check:
            raise ConfigError(f"{name} must be one of {', '.join(check)}; got {value!r}")
        if isinstance(check, str):
            operator, bound = check.split()
            ok = value >= float(bound) if operator == ">=" else value > float(bound)
            if not ok:
                raise ConfigError(f"{name} must be {check}, got {value!r}")
        result[key] = value
    return result


def _check_combination(config: dict, base: Path) -> None:
    geometry, method, initial = config["geometry"], config["method"], config["initial"]
    if not config["output"].strip():
        raise ConfigError("output must name a folder (relative paths are taken from the config's folder), got ''")
    try:
        config["output"] = str((base / config["output"]).resolve())
    except RuntimeError:  # pathlib's loop detection (Python < 3.13)
        raise ConfigError(f"output: {config['output']!r} cannot be resolved (a symbolic link loop)") from None
    except OSError as error:
        raise ConfigError(f"output: {config['output']!r} cannot be resolved ({error.strerror})") from None
    if method.get("rtol") is not None and method["rtol"] >= 1:
        raise ConfigError(f"method.rtol must be < 1 (a local error relative to the deviation from the uniform "
                          f"density; the default is 1e-6), got {method['rtol']!r}")
    _check_mode_resolved(config)
    _check_matrices(config, base)
    _check_causal(config)
    expected = {"circle": "CircleFV", "sphere": "SphereSpectral"}[geometry]
    if method["kind"] not in (expected, "particles"):
        raise ConfigError(f"method.kind {method['kind']!r} does not solve on the {geometry}; "
                          f"use {expected!r} or 'particles'")
    _no_foreign_keys(method, METHOD_KEYS[method["kind"]], "method", SCHEMA["method"])
    _no_foreign_keys(initial, INITIAL_KEYS[initial["kind"]], "initial", SCHEMA["initial"])
    d, native = method.get("d"), 2 if geometry == "circle" else 3
    if d is not None and (d < native or (geometry == "circle" and d != 2)):
        raise ConfigError(f"method.d = {d} does not fit geometry = {geometry!r} (use 'circle' for d = 2, "
                          f"'sphere' for d >= 3)")
    if d is not None and d != native and initial["kind"] != "uniform":
        raise ConfigError(f"method.d = {d} needs initial.kind = 'uniform' (the other initial "
                          f"measures live on the {geometry} in R^{native})")
    if initial["kind"] == "von_mises_fisher":
        d = 2 if geometry == "circle" else 3
        means = initial["means"]
        if not means or not all(isinstance(m, list) and len(m) == d and all(isinstance(c, NUMBER) for c in m)
                                and any(c != 0 for c in m) for m in means):
            raise ConfigError(f"initial.means must be a non-empty list of nonzero {d}-vectors, got {means!r}")
    if initial["kind"] == "file":
        if initial["path"] is None:
            raise ConfigError("missing key initial.path (a .npy file of density values on the grid)")
        path = (base / initial["path"]).resolve()
        if not path.is_file():
            raise ConfigError(f"initial.path: no file {str(path)!r}")
        initial["path"] = str(path)


def _check_matrices(config: dict, base: Path) -> None:
    """Query, key and value matrices (inline lists or ``.npy`` paths) and the perceptron's weights, read and shaped."""
    model = config["model"]
    d = particle_dimension(config)
    for key in ("query", "key", "value"):
        given = model[key]
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
        if array.ndim not in (2, 3) or array.shape[-2:] != (d, d):
            raise ConfigError(f"model.{key} must have shape ({d}, {d}) or (heads, {d}, {d}) for "
                              f"geometry = {config['geometry']!r}, got shape {array.shape}")
        model[key] = array.tolist()
    perceptron = model["perceptron"]
    if perceptron is not None:
        unknown = sorted(set(perceptron) - {"weights", "directions"})
        if unknown or set(perceptron) != {"weights", "directions"}:
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


def _check_causal(config: dict) -> None:
    """Causal attention (``model.causal = true``: ``value`` is its prefactor) runs as particles here."""
    model = config["model"]
    if not model["causal"]:
        for key in ("alibi", "include_self"):
            if model[key] != SCHEMA["model"][key][2]:
                raise ConfigError(f"model.{key} applies to causal attention only (model.causal = true)")
        return
    for key in ("time_rescaled", "query", "key", "perceptron"):
        if model[key] not in (None, False):
            raise ConfigError(f"model.{key} does not apply to causal attention (model.causal = true)")
    if not isinstance(model["value"], NUMBER):
        raise ConfigError("model.value of causal attention is its prefactor c, a number")
    if config["method"]["kind"] != "particles":
        raise ConfigError(f"model.causal = true runs with method.kind = 'particles'; the layered mean-field "
                          f"equation is solvers.CausalCircleFV / CausalSphereSpectral from Python "
                          f"(got method.kind = {config['method']['kind']!r})")


def _check_mode_resolved(config: dict) -> None:
    """A perturbation mode beyond the grid's highest mode would alias into a lower one."""
    method, initial = config["method"], config["initial"]
    if initial["kind"] != "perturbed_uniform" or method["kind"] == "particles":
        return
    if method["kind"] == "CircleFV":
        highest, grid = method["cells"] // 2, f"method.cells = {method['cells']} holds Fourier modes up to"
    else:
        highest, grid = method["lmax"], f"method.lmax = {method['lmax']} holds degrees up to"
    if initial["mode"] > highest:
        raise ConfigError(f"initial.mode = {initial['mode']} is not resolved: {grid} {highest}; "
                          "raise the resolution or lower the mode")


def _no_foreign_keys(table: dict, allowed: set, section: str, schema: dict) -> None:
    """Keys that belong to another kind were given explicitly: refuse them instead of ignoring them."""
    for key, value in table.items():
        if key not in allowed and value != schema[key][2]:
            raise ConfigError(f"{section}.{key} does not apply to {section}.kind = {table['kind']!r}; "
                              f"allowed: {', '.join(sorted(allowed))}")
