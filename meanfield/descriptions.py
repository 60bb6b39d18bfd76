"""A model rebuilt from its description (``to_dict``, as recorded in a dataset's attributes).

Apart from :mod:`meanfield.models` because it knows every model class, causal attention
included, which builds on that module.
"""

from __future__ import annotations

import json

from .causal import CausalAttention
from .euclidean import PureAttention
from .models import SelfAttention


def model_from_dict(description: dict):
    """Rebuild a :class:`SelfAttention`, :class:`~meanfield.causal.CausalAttention` or :class:`~meanfield.PureAttention` from its ``to_dict`` (or JSON)."""
    if isinstance(description, str):
        description = json.loads(description)
    fields = dict(description)
    kind = fields.pop("model", None)
    if kind == "CausalAttention":
        return CausalAttention(**fields)
    if kind == "PureAttention":
        return PureAttention(**{**fields, "beta": float(fields.get("beta", 1.0))})  # "inf": hardmax
    if kind != "SelfAttention":
        raise ValueError(f"description['model'] must be 'SelfAttention', 'CausalAttention' or 'PureAttention' to be rebuilt, "
                         f"got {kind!r} (a ZonalAggregation holds user callables and must be rebuilt by hand)")
    return SelfAttention(**fields)
