"""Datasets of runs, assembled fast: shared indexed coordinates and templates filled with a run's values.

A sweep or a convergence study records the same layout (names, dimensions, shapes,
attributes, coordinates) run after run, and xarray's constructor, which merges and aligns
every variable, costs more than a short run's steps; these helpers build each layout once per
process. (Its own module: the particle engines and sweep workers import :mod:`meanfield`
without xarray.)
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np
import xarray as xr


def indexed_coordinates(arrays: dict[str, np.ndarray]) -> xr.Coordinates:
    """``xarray.Coordinates`` of one-dimensional coordinate arrays, built once per distinct set in a process.

    An index costs more than a step of a small grid, and every run of a sweep or a convergence
    study (a solver built per run) records the same grid at the same times; the arrays' bytes
    are the key. The cached coordinates are shared, read-only, by the datasets built from them.
    """
    return _indexed(_coordinates_key(arrays))


def _coordinates_key(arrays: dict[str, np.ndarray]) -> tuple[tuple[str, str, tuple[int, ...], bytes], ...]:
    return tuple((name, values.dtype.str, values.shape, values.tobytes())
                 for name, values in ((name, np.ascontiguousarray(values)) for name, values in arrays.items()))


@lru_cache(maxsize=64)
def _indexed(key: tuple[tuple[str, str, tuple[int, ...], bytes], ...]) -> xr.Coordinates:
    return xr.Coordinates({name: np.frombuffer(raw, dtype=dtype).reshape(shape) for name, dtype, shape, raw in key})


def assembled_dataset(variables: dict[str, tuple], coordinates: dict[str, np.ndarray]) -> xr.Dataset:
    """``xarray.Dataset(variables, coords=indexed_coordinates(coordinates))``, for variables
    ``name: (dims, values[, attrs])``, built by filling a template of the same layout.

    The constructor merges and aligns every variable with the coordinates, which costs more
    than a short spectral run's steps; a sweep records the same layout (names, dimensions,
    shapes, attributes, coordinates) run after run, so its template, whose values are
    zero-memory broadcasts, is built once and copied with each run's values. Each dataset has
    its own attribute dictionaries; the coordinates are shared, read-only. Attribute values
    are part of the layout: they must be hashable (the library's are strings).
    """
    layout = tuple((name, (dims,) if isinstance(dims, str) else tuple(dims), np.shape(values),
                    tuple(sorted(attrs[0].items())) if attrs else ())
                   for name, (dims, values, *attrs) in variables.items())
    template = _template(layout, _coordinates_key(coordinates))
    return template.copy(deep=False, data={name: np.asarray(values) for name, (_, values, *_) in variables.items()})


@lru_cache(maxsize=64)
def _template(layout: tuple, coordinates_key: tuple) -> xr.Dataset:
    return xr.Dataset({name: (dims, np.broadcast_to(np.float64(0.0), shape), dict(attrs))
                       for name, dims, shape, attrs in layout}, coords=_indexed(coordinates_key))
