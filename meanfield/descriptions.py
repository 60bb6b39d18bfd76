"""A model rebuilt from its description (``to_dict``, as recorded in a dataset's attributes).

Apart from :mod:`meanfield.models` because it knows every model class, causal attention
included, which builds on that module.
"""

from __future__ import annotations

import json

from .causal import CausalAttention
from .euclidean import PureAttention
from .frequencies import NaturalFrequencies
from .graphs import GraphAttention
from .homogenized import HomogenizedLimit
from .models import SelfAttention
from .rotary import RotaryAttention
from .sinkhorn import SinkhornAttention
from .random_weights import GaussianWeights, MatrixWeights, RandomAttention


def model_from_dict(description: dict):
    """Rebuild a model from its description, as recorded in a dataset's ``attrs["model"]``.

    Parameters
    ----------
    description : dict or str
        The model's ``to_dict()``, or that dict as JSON.

    Returns
    -------
    SelfAttention, CausalAttention, PureAttention, SinkhornAttention, RotaryAttention, NaturalFrequencies,
    GraphAttention, RandomAttention or HomogenizedLimit
        A model equal in every parameter to the one described.

    Raises
    ------
    ValueError
        If the description is of another kind: a :class:`~meanfield.ZonalAggregation`, a
        model with a user field, or a weight law given by a user sampler
        (:class:`~meanfield.SampledWeights`) holds callables and must be rebuilt by hand.

    Examples
    --------
    >>> from meanfield import SelfAttention, model_from_dict
    >>> model_from_dict(SelfAttention(beta=4.0).to_dict()).beta
    4.0
    """
    if isinstance(description, str):
        description = json.loads(description)
    fields = dict(description)
    kind = fields.pop("model", None)
    if kind == "CausalAttention":
        return CausalAttention(**fields)
    if kind == "PureAttention":
        return PureAttention(**{**fields, "beta": float(fields.get("beta", 1.0))})  # "inf": hardmax
    if kind in RANDOM_MODELS:
        return RANDOM_MODELS[kind](**{**fields, "law": _law_from_dict(fields.get("law"))})
    if kind == "SinkhornAttention":
        return SinkhornAttention(**fields)
    if kind == "RotaryAttention":
        return RotaryAttention(**fields)
    if kind == "GraphAttention":
        return GraphAttention(**{**fields, "adjacency": GraphAttention.adjacency_from_dict(fields["adjacency"])})
    if kind == "NaturalFrequencies":
        return NaturalFrequencies(model_from_dict(fields["interaction"]), fields["frequencies"])
    if kind != "SelfAttention":
        raise ValueError(f"description['model'] must be one of {('SelfAttention', 'CausalAttention', 'PureAttention', 'SinkhornAttention', 'RotaryAttention', 'NaturalFrequencies', 'GraphAttention', *RANDOM_MODELS)} "
                         f"to be rebuilt, got {kind!r} (a ZonalAggregation holds user callables and must be rebuilt by hand)")
    return SelfAttention(**fields)


#: The models whose description holds a weight law.
RANDOM_MODELS = {"RandomAttention": RandomAttention, "HomogenizedLimit": HomogenizedLimit}


def _law_from_dict(description) -> GaussianWeights | MatrixWeights:
    fields = dict(description or {})
    kind = fields.pop("law", None)
    laws = {"GaussianWeights": GaussianWeights, "MatrixWeights": MatrixWeights}
    if kind not in laws:
        raise ValueError(f"description['law']['law'] must be 'GaussianWeights' or 'MatrixWeights' to be rebuilt, got "
                         f"{kind!r} (a SampledWeights holds a user sampler and must be rebuilt by hand)")
    return laws[kind](**fields)
