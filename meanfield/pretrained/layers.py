r"""The blocks of a trained Transformer in numpy: normalisation, multi-head attention, feed-forward.

Tokens are rows (``x`` of shape ``(..., n, d)``) and linear maps act on the right, as in the
checkpoints: head ``h`` of attention reads

.. math::
    q_i = x_i W^h_Q + b^h_Q,\quad k_j = x_j W^h_K + b^h_K,\quad v_j = x_j W^h_V + b^h_V,\qquad
    P^h_{ij} = \operatorname{softmax}_j \frac{\langle q_i, k_j\rangle}{\sqrt{d_h}},

and the sub-layer returns :math:`\sum_h \sum_j P^h_{ij} v_j W^h_O + b_O` (:math:`W_O` split
into the heads' row blocks). The papers fold the output projection into the value and the
key into the query: per head the bilinear form and the value matrix (column convention,
:math:`\dot x = V x`) are

.. math:: B_h = \frac{W^h_Q (W^h_K)^T}{\sqrt{d_h}} = Q_h^T K_h, \qquad V_h = (W^h_V W^h_O)^T.

The biases are an affine part that the papers drop; in the homogeneous coordinates
:math:`\tilde x = (x, 1)` they are exact (:meth:`MultiHeadAttention.as_pure_attention`):
``b_Q`` adds :math:`\langle W_K b_Q, x_j\rangle/\sqrt{d_h}`, a per-key offset; ``b_K`` adds a
per-query constant, which the softmax cancels; ``b_V`` and ``b_O`` add a constant drift
(the attention weights of a row sum to one).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
from scipy.special import erf, softmax

from ..euclidean import PureAttention


def _gelu(x: np.ndarray) -> np.ndarray:
    return 0.5 * x * (1.0 + erf(x / math.sqrt(2.0)))


def _gelu_tanh(x: np.ndarray) -> np.ndarray:
    r""":math:`\frac x2(1 + \tanh(\sqrt{2/\pi}(x + 0.044715x^3)))`, in place on one temporary (no ``pow``)."""
    value = x * x
    value *= 0.044715
    value += 1.0
    value *= x
    value *= math.sqrt(2.0 / math.pi)
    np.tanh(value, out=value)
    value += 1.0
    value *= x
    value *= 0.5
    return value


def _silu(x: np.ndarray) -> np.ndarray:
    return x / (1.0 + np.exp(-x))


#: The feed-forward activations by their ``config.json`` names (GELU exact with ``erf``; the
#: ``_new``/``pytorch_tanh`` names are its tanh approximation).
ACTIVATIONS = {"gelu": _gelu, "gelu_new": _gelu_tanh, "gelu_pytorch_tanh": _gelu_tanh,
               "relu": lambda x: np.maximum(x, 0.0), "silu": _silu, "swish": _silu}


def _frozen(array: np.ndarray) -> np.ndarray:
    array = np.array(array, dtype=float)
    array.setflags(write=False)
    return array


@dataclass(frozen=True, eq=False)
class LayerNorm:
    r"""Layer normalisation :math:`N(x) = g\odot\frac{x - \bar x}{\sqrt{\mathrm{var}(x) + \epsilon}} + b`.

    The mean and the (biased) variance are over the components of each token. The library's
    idealisation, :math:`x/|x|` (the unit sphere), drops the centring, ``eps``, ``g`` and ``b``.

    Parameters
    ----------
    gain, bias : numpy.ndarray, shape (d,)
    eps : float
    """

    gain: np.ndarray
    bias: np.ndarray
    eps: float

    def __post_init__(self) -> None:
        object.__setattr__(self, "gain", _frozen(self.gain))
        object.__setattr__(self, "bias", _frozen(self.bias))

    def __call__(self, x: np.ndarray) -> np.ndarray:
        centred = x - x.mean(axis=-1, keepdims=True)
        scale = np.sqrt((centred ** 2).mean(axis=-1, keepdims=True) + self.eps)
        return centred / scale * self.gain + self.bias


@dataclass(frozen=True, eq=False)
class MultiHeadAttention:
    r"""Multi-head softmax attention with its biases (module docstring).

    Parameters
    ----------
    query, key, value : numpy.ndarray, shape (heads, d, d_h)
        :math:`W^h_Q, W^h_K, W^h_V` (tokens are rows).
    query_bias, key_bias, value_bias : numpy.ndarray, shape (heads, d_h)
    output : numpy.ndarray, shape (heads, d_h, d)
        The row blocks :math:`W^h_O` of the output projection.
    output_bias : numpy.ndarray, shape (d,)
    causal : bool
        Token ``i`` attends to the tokens ``j <= i`` only (decoders).
    """

    query: np.ndarray
    query_bias: np.ndarray
    key: np.ndarray
    key_bias: np.ndarray
    value: np.ndarray
    value_bias: np.ndarray
    output: np.ndarray
    output_bias: np.ndarray
    causal: bool = False
    _side_by_side: dict = field(init=False, repr=False)

    def __post_init__(self) -> None:
        for name in ("query", "query_bias", "key", "key_bias", "value", "value_bias", "output", "output_bias"):
            object.__setattr__(self, name, _frozen(getattr(self, name)))
        # the heads' maps side by side, (d, heads d_h), and the output's row blocks stacked: one
        # matrix product per weight at every call
        d = self.query.shape[1]
        object.__setattr__(self, "_side_by_side", {
            name: np.ascontiguousarray(np.moveaxis(getattr(self, name), 0, 1).reshape(d, -1))
            for name in ("query", "key", "value")} | {"output": self.output.reshape(-1, self.output.shape[-1])})

    @property
    def heads(self) -> int:
        return self.query.shape[0]

    @property
    def head_dimension(self) -> int:
        return self.query.shape[-1]

    def _heads(self, x: np.ndarray, name: str) -> np.ndarray:
        """``x W^h + b^h`` of every head for the weight ``name``, one matrix product: ``(..., heads, n, d_h)``."""
        bias = getattr(self, name + "_bias")
        projected = (x @ self._side_by_side[name] + bias.reshape(-1)).reshape(x.shape[:-1] + bias.shape)
        return np.swapaxes(projected, -2, -3)

    def probabilities(self, x: np.ndarray) -> np.ndarray:
        """The attention matrices :math:`P^h`.

        Parameters
        ----------
        x : numpy.ndarray, shape (..., n, d)
            Tokens.

        Returns
        -------
        numpy.ndarray, shape (..., heads, n, n)
            Rows summing to one (zero above the diagonal when causal).
        """
        queries = self._heads(x, "query")
        keys = self._heads(x, "key")
        logits = queries @ np.swapaxes(keys, -1, -2) / math.sqrt(self.head_dimension)
        if self.causal:
            n = x.shape[-2]
            logits = np.where(np.triu(np.ones((n, n), dtype=bool), 1), -np.inf, logits)
        return softmax(logits, axis=-1)

    def __call__(self, x: np.ndarray) -> np.ndarray:
        """The sub-layer's output (before the residual sum) for tokens ``x`` of shape ``(..., n, d)``."""
        heads = self.probabilities(x) @ self._heads(x, "value")  # (..., heads, n, d_h)
        joined = np.swapaxes(heads, -2, -3).reshape(x.shape[:-1] + (-1,))  # (..., n, heads d_h)
        return joined @ self._side_by_side["output"] + self.output_bias

    def folded(self) -> tuple[np.ndarray, np.ndarray]:
        r"""The papers' matrices per head: :math:`B_h = Q_h^TK_h` and :math:`V_h` (module docstring; biases dropped).

        Returns
        -------
        bilinear : numpy.ndarray, shape (heads, d, d)
            :math:`B_h = W^h_Q (W^h_K)^T/\sqrt{d_h}`: the logit of tokens ``x``, ``y`` is :math:`x^T B_h y`.
        value : numpy.ndarray, shape (heads, d, d)
            :math:`V_h = (W^h_V W^h_O)^T`, acting on column vectors.
        """
        bilinear = self.query @ np.swapaxes(self.key, -1, -2) / math.sqrt(self.head_dimension)
        value = np.swapaxes(self.value @ self.output, -1, -2)
        return bilinear, value

    def as_pure_attention(self):
        r"""This sub-layer as the library's :class:`~meanfield.PureAttention` on :math:`\tilde x = (x, 1) \in \mathbb{R}^{d+1}`.

        One explicit Euler step of length one of that model from :math:`\tilde x` moves the
        first ``d`` coordinates by exactly this sub-layer's output and keeps the last at one:
        its velocity is :math:`(\mathrm{attention}(x), 0)`.

        Returns
        -------
        meanfield.PureAttention
            ``beta = 1``, ``key = I``, ``query`` and ``value`` per head built from the weights
            and biases, and ``mask="causal"`` for a causal sub-layer.
        """
        d = self.query.shape[1]
        scale = math.sqrt(self.head_dimension)
        extended_query = np.concatenate([self.query, self.query_bias[:, None, :]], axis=1)  # (heads, d+1, k)
        extended_key = np.concatenate([self.key, self.key_bias[:, None, :]], axis=1)
        bilinear = extended_query @ np.swapaxes(extended_key, -1, -2) / scale
        extended_value = np.concatenate([self.value, self.value_bias[:, None, :]], axis=1)
        rows = np.zeros((self.heads, d + 1, d + 1))
        rows[:, :, :d] = extended_value @ self.output
        rows[0, d, :d] += self.output_bias  # the rows of P sum to one: the bias rides on the constant coordinate
        return PureAttention(query=np.swapaxes(bilinear, -1, -2), value=np.swapaxes(rows, -1, -2), beta=1.0,
                             mask="causal" if self.causal else "none")


@dataclass(frozen=True, eq=False)
class FeedForward:
    r"""The feed-forward block :math:`f(x) = \sigma(x W_1 + b_1) W_2 + b_2`, a field on tokens.

    It has the interface of the library's external fields (:class:`~meanfield.UserField`:
    ``field(x)``, no potential), so it can be added to a model's velocity.

    Parameters
    ----------
    inner : numpy.ndarray, shape (d, m)
    inner_bias : numpy.ndarray, shape (m,)
    outer : numpy.ndarray, shape (m, d)
    outer_bias : numpy.ndarray, shape (d,)
    activation : str
        A key of :data:`ACTIVATIONS`.
    """

    inner: np.ndarray
    inner_bias: np.ndarray
    outer: np.ndarray
    outer_bias: np.ndarray
    activation: str
    has_potential = False

    def __post_init__(self) -> None:
        for name in ("inner", "inner_bias", "outer", "outer_bias"):
            object.__setattr__(self, name, _frozen(getattr(self, name)))
        if self.activation not in ACTIVATIONS:
            raise ValueError(f"activation must be one of {sorted(ACTIVATIONS)}, got {self.activation!r}")

    @property
    def dimension(self) -> int:
        return self.inner.shape[0]

    def field(self, x: np.ndarray) -> np.ndarray:
        """The block's output :math:`f(x)`.

        Parameters
        ----------
        x : numpy.ndarray, shape (..., d)
            Tokens.

        Returns
        -------
        numpy.ndarray, shape (..., d)
        """
        return ACTIVATIONS[self.activation](x @ self.inner + self.inner_bias) @ self.outer + self.outer_bias

    __call__ = field

    def potential(self, x: np.ndarray) -> None:
        """``None``: a trained feed-forward block is no gradient.

        Parameters
        ----------
        x : numpy.ndarray, shape (..., d)
            Tokens (unused).
        """
        return None

    def to_dict(self) -> dict:
        return {"kind": "feed-forward", "activation": self.activation, "width": int(self.inner.shape[1])}


@dataclass(frozen=True, eq=False)
class Block:
    r"""One Transformer block: attention and feed-forward sub-layers with residual sums and norms.

    Post-LN (BERT, ALBERT): :math:`x \leftarrow N_1(x + a(x))`, :math:`x \leftarrow N_2(x + f(x))`.
    Pre-LN (GPT-2): :math:`x \leftarrow x + a(N_1(x))`, :math:`x \leftarrow x + f(N_2(x))`.

    Parameters
    ----------
    attention : MultiHeadAttention
    feed_forward : FeedForward
    attention_norm, feed_forward_norm : LayerNorm
    placement : {"post", "pre"}
    """

    attention: MultiHeadAttention
    feed_forward: FeedForward
    attention_norm: LayerNorm
    feed_forward_norm: LayerNorm
    placement: str

    def __post_init__(self) -> None:
        if self.placement not in ("post", "pre"):
            raise ValueError(f"placement must be 'post' or 'pre', got {self.placement!r}")

    def attention_input(self, x: np.ndarray) -> np.ndarray:
        """What the attention sub-layer reads.

        Parameters
        ----------
        x : numpy.ndarray, shape (..., n, d)
            The block's input.

        Returns
        -------
        numpy.ndarray, shape (..., n, d)
            ``x`` (post-LN) or its norm (pre-LN).
        """
        return self.attention_norm(x) if self.placement == "pre" else x

    def __call__(self, x: np.ndarray) -> np.ndarray:
        """The block's output for tokens ``x`` of shape ``(..., n, d)``."""
        if self.placement == "pre":
            x = x + self.attention(self.attention_norm(x))
            return x + self.feed_forward(self.feed_forward_norm(x))
        x = self.attention_norm(x + self.attention(x))
        return self.feed_forward_norm(x + self.feed_forward(x))
