"""What a run dataset says about itself: its kind, geometry, model, settings and version.

Every dataset the library returns records, in ``attrs``,

``kind``
    :data:`PARTICLES` (:func:`meanfield.simulate_particles`), :data:`PDE` (the solvers),
    :data:`STUDY` (a mean-field convergence study) or :data:`SWEEP` (a parameter grid);
``geometry``
    :data:`CIRCLE`, :data:`SPHERE` (:math:`S^2`) or ``"S^{d-1}"`` for ``d >= 4``; ``"R^d"`` for
    tokens without layer normalization (:class:`meanfield.PureAttention`);
``model``, ``settings``
    the model's :meth:`to_dict` and the solver or integrator settings, as JSON text
    (NetCDF attributes hold only numbers and text);
``version``
    the package version.

Readers go through :func:`dataset_kind`, :func:`dataset_geometry`, :func:`dataset_model` and
:func:`dataset_settings`, never through string tests or ``json.loads`` of their own.
"""

from __future__ import annotations

import functools
import json
from importlib.metadata import PackageNotFoundError, version

PARTICLES = "particles"
PDE = "pde"
STUDY = "convergence study"
SWEEP = "sweep"
KINDS = (PARTICLES, PDE, STUDY, SWEEP)

CIRCLE = "circle"
SPHERE = "sphere"

#: Geometry names written by earlier versions, read as today's.
_OLD_GEOMETRY_NAMES = {"S^1": CIRCLE, "S^2": SPHERE}


@functools.cache
def package_version() -> str:
    """The installed version of the package (``"unknown"`` in a source tree that is not installed).

    Read once per process: the metadata lookup parses the package's files, a cost every run's record paid.
    """
    try:
        return version("meanfield-attention")
    except PackageNotFoundError:
        return "unknown"


def geometry_name(dimension: int) -> str:
    """The name of :math:`S^{d-1}`: ``"circle"`` (``d = 2``), ``"sphere"`` (``d = 3``), ``"S^{d-1}"``."""
    return {2: CIRCLE, 3: SPHERE}.get(dimension, f"S^{dimension - 1}")


def euclidean_name(dimension: int) -> str:
    """The name of :math:`\\mathbb{R}^d`: ``"R^d"``."""
    return f"R^{dimension}"


def is_euclidean(geometry: str) -> bool:
    """Whether a geometry name is a Euclidean space ``"R^d"`` rather than a sphere."""
    return geometry.startswith("R^")


def geometry_dimension(geometry: str) -> int:
    """The ambient dimension ``d`` of a geometry name (inverse of :func:`geometry_name` and :func:`euclidean_name`)."""
    geometry = _OLD_GEOMETRY_NAMES.get(geometry, geometry)
    if is_euclidean(geometry) and geometry[2:].isdigit() and int(geometry[2:]) >= 1:
        return int(geometry[2:])
    if geometry == CIRCLE:
        return 2
    if geometry == SPHERE:
        return 3
    if geometry.startswith("S^") and geometry[2:].isdigit() and int(geometry[2:]) >= 1:
        return int(geometry[2:]) + 1
    raise ValueError(f"geometry must be 'circle', 'sphere', 'S^k' (k >= 1) or 'R^d' (d >= 1), got {geometry!r}")


def record_attrs(kind: str, geometry: str, model, settings: dict) -> dict:
    """The ``attrs`` that make a dataset a complete record (see the module docstring)."""
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")
    return {"kind": kind, "geometry": geometry, "model": json.dumps(model.to_dict()),
            "settings": json.dumps(settings), "version": package_version()}


def dataset_kind(ds) -> str:
    """:data:`PARTICLES`, :data:`PDE`, :data:`STUDY` or :data:`SWEEP`.

    Files written before ``kind`` was recorded are recognised by their variables.
    """
    kind = ds.attrs.get("kind")
    if kind in KINDS:
        return kind
    if kind is None and "x" in ds.variables:
        return PARTICLES
    if kind is None and "rho" in ds.variables:
        return PDE
    raise ValueError(f"not a dataset of this library: attrs['kind'] is {kind!r} "
                     f"(expected one of {KINDS})")


def dataset_geometry(ds) -> str:
    """The geometry of a dataset, ``"circle"``, ``"sphere"``, ``"S^{d-1}"`` or ``"R^d"`` (older ``"S^2"`` read as ``"sphere"``)."""
    geometry = ds.attrs.get("geometry")
    if not isinstance(geometry, str):
        raise ValueError(f"the dataset records no geometry (attrs['geometry'] is {geometry!r})")
    geometry = _OLD_GEOMETRY_NAMES.get(geometry, geometry)
    geometry_dimension(geometry)  # refuses a name this library does not write
    return geometry


def dataset_model(ds) -> dict:
    """The model description (:meth:`to_dict`) of a dataset; ``{}`` when none is recorded."""
    return _json_attr(ds, "model")


def dataset_settings(ds) -> dict:
    """The solver or integrator settings of a dataset; ``{}`` when none are recorded."""
    return _json_attr(ds, "settings")


def _json_attr(ds, name: str) -> dict:
    text = ds.attrs.get(name)
    if text is None:
        return {}
    return dict(json.loads(text)) if isinstance(text, str) else dict(text)
