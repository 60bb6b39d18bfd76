r"""Causal self-attention (decoder Transformers): token ``i`` attends to earlier tokens only.

docs/theory/causal.md. Tokens keep their place ``i = 1..n`` in the prompt (the axis of
``n`` is the order), with ALiBi positional weights
:math:`\pi_{ij} = e^{-\lambda (i - j)/n}`, :math:`\lambda \ge 0`:

.. math::
    \text{causal USA:}\quad \dot x_i = c\,P_{x_i}\Big(\frac{\sum_{j<i}\pi_{ij}\,e^{\beta\langle x_i,x_j\rangle} x_j}
                                                      {\sum_{j<i}\pi_{ij}}\Big),
    \qquad
    \text{causal SA:}\quad \dot x_i = c\,P_{x_i}\Big(\frac{\sum_{j<i}\pi_{ij}\,e^{\beta\langle x_i,x_j\rangle} x_j}
                                                      {\sum_{j<i}\pi_{ij}\,e^{\beta\langle x_i,x_j\rangle}}\Big),

plus noise :math:`\sqrt{2D}\,dB` with ``diffusion = D``. Token 1 sees nothing and never moves
(with ``include_self=True`` the sums run over :math:`j \le i`, as in many implementations).
With query, key and value matrices (docs/theory/causal.md sec. 1) the logits are
:math:`\beta\langle Q x_i, K x_j\rangle` and the averaged vectors :math:`V x_j`; with heads
the outputs of the heads add up, and each head may carry its own :math:`\beta_h`,
:math:`\lambda_h` and a signed scalar value :math:`v_h` (a mixture of ALiBi slopes).

Prefactor convention: ``prefactor = c``. ``c = 1`` is the library's time (causal USA then is
the library's USA with causal positional weights); the paper (Duerinckx, Geshkovski,
Rossi) takes ``c = beta``, i.e. its time is the library's time multiplied by ``beta``, and
on the circle :math:`\dot\theta_i = Z_i^{-1}\sum_{j<i}\pi_{ij} w'(\theta_i - \theta_j)`,
:math:`w(\theta) = e^{\beta\cos\theta}`.

Mean field: as ``n`` grows, position ``s = i/n`` becomes a label and each layer ``s`` follows
the continuity equation whose velocity is that of the non-causal model (:attr:`CausalAttention.mixed_model`)
at the mixed density :math:`\int_0^s k_\lambda(s, s')\rho(s', \cdot)\,ds'`
(:func:`positional_cell_weights`, :mod:`solvers.causal`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .checks import EXP_OVERFLOW, check_points, check_real
from .models import SelfAttention, TangentVelocity, WithoutEnergy, as_head_matrices

#: Pair entries of the direct causal sum held at once (8 MiB).
DIRECT_BLOCK_ELEMENTS = 2**20


@dataclass(frozen=True, eq=False)
class CausalAttention(WithoutEnergy, TangentVelocity):
    r"""Causal SA or USA with ALiBi positional weights, queries, keys, values and heads (module docstring).

    .. math:: \dot x_i = c\,P_{x_i}\sum_h V_h\,
              \frac{\sum_{j<i}\pi^h_{ij}\,e^{\beta_h\langle Q_h x_i, K_h x_j\rangle} x_j}{Z^h_i},
              \qquad \pi^h_{ij} = e^{-\lambda_h (i-j)/n},

    with :math:`Z^h_i = \sum_{j<i}\pi^h_{ij} e^{\beta_h\langle Q_h x_i, K_h x_j\rangle}` (SA) or
    :math:`\sum_{j<i}\pi^h_{ij}` (USA).

    Parameters
    ----------
    beta : float or array_like, shape (heads,)
        Inverse temperature, ``>= 0``, common or one per head.
    normalized : bool
        ``True``: causal SA (softmax over earlier tokens); ``False``: causal USA, the paper's
        model (normalized by the positional weights only).
    alibi : float or array_like, shape (heads,)
        The ALiBi slope :math:`\lambda \ge 0` of :math:`\pi_{ij} = e^{-\lambda(i-j)/n}`
        (``0``: a plain causal average; larger favours recent tokens), common or one per head.
    prefactor : float
        The constant ``c`` in front of the velocity: ``1`` for the library's time, ``beta``
        for the paper's.
    include_self : bool
        Sum over :math:`j \le i` instead of :math:`j < i` (default: strict, as the paper).
    diffusion : float
        Diffusion coefficient ``D >= 0``.
    query, key : array_like, shape (k, d) or (heads, k, d), optional
        Query and key matrices (identity when omitted); only :math:`Q_h^T K_h` enters.
    value : float, array_like of shape (heads,), or array_like of shape (d, d) or (heads, d, d)
        Value: a number ``v`` (``v I`` in every head), a signed number per head (the mixture
        weights of a multi-head mixture), or matrices.

    Attributes
    ----------
    logit_bound : float
        :math:`\max_h \|Q_h^T K_h\|_2` (1 without matrices): the logits' bound over unit vectors.
    """

    beta: float | np.ndarray
    normalized: bool
    alibi: float | np.ndarray = 0.0
    prefactor: float = 1.0
    include_self: bool = False
    diffusion: float = 0.0
    query: np.ndarray | None = None
    key: np.ndarray | None = None
    value: float | np.ndarray = 1.0
    logit_bound: float = field(init=False, repr=False)

    def __post_init__(self) -> None:
        set_ = object.__setattr__
        set_(self, "beta", _per_head(self.beta, "beta", minimum=0.0))
        set_(self, "alibi", _per_head(self.alibi, "alibi", minimum=0.0))
        set_(self, "prefactor", check_real(self.prefactor, "prefactor"))
        set_(self, "diffusion", check_real(self.diffusion, "diffusion", minimum=0.0))
        for name, value in (("normalized", self.normalized), ("include_self", self.include_self)):
            if not isinstance(value, (bool, np.bool_)):
                raise TypeError(f"{name} must be True or False, got {value!r}")
        set_(self, "query", as_head_matrices(self.query, "query", square=False))
        set_(self, "key", as_head_matrices(self.key, "key", square=False))
        set_(self, "value", _per_head(self.value, "value") if np.ndim(self.value) <= 1
             else as_head_matrices(self.value, "value"))
        counts = {name: len(getattr(self, name)) for name in ("beta", "alibi", "query", "key", "value")
                  if np.ndim(getattr(self, name)) > 0}
        if len(set(counts.values())) > 1:
            raise ValueError(f"beta, alibi, query, key and value must give the same number of heads, got {counts}")
        dimensions = {name: m.shape[-1] for name, m in (("query", self.query), ("key", self.key),
                                                       ("value", self.value)) if np.ndim(m) == 3}
        if len(set(dimensions.values())) > 1:
            raise ValueError(f"query, key and value must act on the same R^d, got {dimensions}")
        if self.query is not None and self.key is not None and self.query.shape != self.key.shape:
            raise ValueError(f"query and key must have the same shape (heads, k, d), got {self.query.shape} and "
                             f"{self.key.shape}")
        for name, m in (("query", self.query), ("key", self.key)):
            other = self.key if name == "query" else self.query
            if m is not None and other is None and m.shape[1] != m.shape[2]:
                raise ValueError(f"{name} alone must be square (the other is the identity), got shape {m.shape}")
        set_(self, "logit_bound", max(bound for bound in self._head_logit_bounds()))
        if not self.normalized:
            exponent = max(b * bound for b, bound in zip(self._head_values(self.beta), self._head_logit_bounds()))
            if exponent > EXP_OVERFLOW:
                raise ValueError(f"causal USA with beta={_plain(self.beta)!r}: exp(beta <Qx, Ky>) reaches "
                                 f"exp({exponent:.4g}), which overflows double precision beyond exp({EXP_OVERFLOW:g})")

    # What the particle integrators and records ask of a model.
    #: The velocity depends on the tokens' places as well as on their inner products.
    is_zonal = False
    causal = True
    external = None
    time_rescaled = False

    # ------------------------------------------------------------------ structure
    @property
    def heads(self) -> int:
        """Number of heads: the length of any per-head parameter, else 1."""
        return next((len(m) for m in (self.beta, self.alibi, self.query, self.key, self.value) if np.ndim(m) > 0), 1)

    @property
    def dimension(self) -> int | None:
        """Ambient dimension fixed by the matrices, or ``None`` (any ``d``)."""
        return next((m.shape[-1] for m in (self.query, self.key, self.value) if np.ndim(m) == 3), None)

    @property
    def without_matrices(self) -> bool:
        r"""Whether no head has query, key or value matrices: a token's velocity then reads only
        the inner products :math:`\langle x_i, x_j\rangle` and the places."""
        return self.query is None and self.key is None and np.ndim(self.value) <= 1

    def _head_values(self, parameter) -> list:
        """``parameter`` per head: its entries, or the common value repeated."""
        return list(parameter) if np.ndim(parameter) > 0 else [parameter] * self.heads

    def _head_logit_bounds(self) -> list[float]:
        if self.query is None and self.key is None:
            return [1.0] * self.heads
        d = self.dimension
        q = self.query if self.query is not None else np.broadcast_to(np.eye(d), (self.heads, d, d))
        k = self.key if self.key is not None else np.broadcast_to(np.eye(d), (self.heads, d, d))
        return [float(np.linalg.norm(qh.T @ kh, 2)) for qh, kh in zip(q, k)]

    def head_parameters(self):
        """Yield ``(beta, alibi, Q, K, V)`` per head, ``None`` standing for the identity, ``V`` a number or a matrix."""
        matrices = [self._head_values(m) if m is not None else [None] * self.heads for m in (self.query, self.key)]
        for beta, alibi, q, k, v in zip(self._head_values(self.beta), self._head_values(self.alibi), *matrices,
                                        self._head_values(self.value)):
            yield float(beta), float(alibi), q, k, v

    @property
    def velocity_is_linear(self) -> bool:
        """Whether the velocity is linear in the (mixed) density: USA, or SA at ``beta = 0``."""
        return not (self.normalized and np.any(np.asarray(self.beta) > 0))

    @property
    def mixed_groups(self) -> tuple[tuple[float, SelfAttention], ...]:
        r"""Per ALiBi slope and ``beta``: the slope and the non-causal model of its heads (layered mean field).

        Layer :math:`s` of the layered mean-field equation (docs/theory/causal.md) moves with
        :math:`\sum_g v_g[\tilde\rho^g_s]`, the velocity of group ``g``'s
        :class:`~meanfield.SelfAttention` (its heads, ``value`` times ``prefactor``) at the
        mixed density :math:`\tilde\rho^g_s = \int_0^s k_{\lambda_g}(s, s')\,\rho_t(s', \cdot)\,ds'`
        of its slope, a probability density (the SA normalisation of :math:`k_\lambda` cancels
        in the softmax). Groups in the order their first head comes; the diffusion rides on each.
        """
        groups: dict[tuple[float, float], list] = {}
        for beta, alibi, q, k, v in self.head_parameters():
            groups.setdefault((beta, alibi), []).append((q, k, v))
        return tuple((alibi, self._group_model(beta, heads)) for (beta, alibi), heads in groups.items())

    def _group_model(self, beta: float, heads: list) -> SelfAttention:
        """The non-causal model of heads sharing ``beta`` and a slope, with the prefactor folded into V."""
        if self.without_matrices:  # identical heads: their outputs add up, weighted by their values
            value = self.prefactor * (heads[0][2] if len(heads) == 1 else sum(v for _, _, v in heads))
            return SelfAttention(beta, normalized=self.normalized, diffusion=self.diffusion, value=value)
        identity = np.eye(self.dimension)

        def stacked(index: int):
            return np.stack([identity if head[index] is None else head[index] for head in heads])

        values = [self.prefactor * (v * identity if np.ndim(v) == 0 else v) for _, _, v in heads]
        return SelfAttention(beta, normalized=self.normalized, diffusion=self.diffusion,
                             query=None if self.query is None else stacked(0),
                             key=None if self.key is None else stacked(1), value=np.stack(values))

    @property
    def mixed_model(self) -> SelfAttention:
        r"""The non-causal model whose velocity at the mixed density is the causal one (layered mean field).

        :math:`V_t(s, x)` of docs/theory/causal.md is its velocity at
        :math:`\tilde\rho_s = \int_0^s k_\lambda(s, s')\,\rho_t(s', \cdot)\,ds'`, a probability
        density (the SA normalisation of :math:`k_\lambda` cancels in the softmax). Defined when
        every head has the same ``beta`` and slope (:attr:`mixed_groups` otherwise).

        Raises
        ------
        ValueError
            If the heads have different ``beta`` or ALiBi slopes.
        """
        groups = self.mixed_groups
        if len(groups) > 1:
            raise ValueError(f"the heads have different beta or alibi (beta={_plain(self.beta)!r}, "
                             f"alibi={_plain(self.alibi)!r}): no single mixed model; use mixed_groups")
        return groups[0][1]

    # ------------------------------------------------------------------ velocity
    def velocity(self, x: np.ndarray) -> np.ndarray:
        """The velocity field of the causal particle system at the tokens ``x``.

        Parameters
        ----------
        x : numpy.ndarray, shape (..., n, d)
            Tokens on the unit sphere in prompt order (token ``i`` attends to ``j < i``, or
            ``j <= i`` with ``include_self``).

        Returns
        -------
        numpy.ndarray, shape (..., n, d)
            The velocities, tangent to the sphere (zero for the first token when it sees none).

        Raises
        ------
        ValueError
            If ``x`` is not on the unit sphere, holds fewer than two tokens, or lives in another
            ``R^d`` than the matrices.
        """
        x = check_points(x, "x")
        if x.shape[-2] < 2:
            raise ValueError(f"x must hold n >= 2 tokens along its second-to-last axis, got n={x.shape[-2]}")
        if self.dimension is not None and x.shape[-1] != self.dimension:
            raise ValueError(f"x has points in R^{x.shape[-1]} but the model's matrices act on R^{self.dimension}")
        return self.velocity_unchecked(x)

    def positional_totals(self, n: int, alibi: float | None = None) -> np.ndarray:
        r"""The positional totals :math:`Z_i = \sum_{j<i}\pi_{ij}` (or :math:`j \le i`), ``i = 1..n``.

        Summed in closed form (a geometric sum of the ALiBi weights
        :math:`\pi_{ij} = e^{-\lambda (i-j)/n}`); they normalise the unnormalized causal attention.

        Parameters
        ----------
        n : int
            Number of tokens.
        alibi : float, optional
            The slope :math:`\lambda`; by default the model's, when all its heads share one.

        Returns
        -------
        numpy.ndarray, shape (n,)
            :math:`Z_1, \dots, Z_n`.
        """
        if alibi is None:
            if np.ndim(self.alibi) > 0:
                raise ValueError(f"the heads have different slopes alibi={_plain(self.alibi)!r}: pass alibi")
            alibi = self.alibi
        rate = alibi / n
        count = np.arange(n, dtype=float)  # terms j < i: i - 1 of them
        if rate == 0.0:
            totals = count
        else:
            # sum_{k=1}^{m} e^{-rate k} = e^{-rate} (1 - e^{-rate m}) / (1 - e^{-rate})
            totals = np.exp(-rate) * np.expm1(-rate * count) / np.expm1(-rate)
        return totals + 1.0 if self.include_self else totals

    def weighted_velocity(self, x: np.ndarray, masses: np.ndarray):
        """Refused: causal attention reads the tokens' order, which a weighted measure does not have.

        Parameters
        ----------
        x : numpy.ndarray, shape (..., n, d)
            The atoms.
        masses : numpy.ndarray, shape (..., n)
            Their masses.

        Raises
        ------
        TypeError
            Always.
        """
        raise TypeError("CausalAttention has no velocity of a weighted measure: token i attends to the tokens "
                        "before it, an order a measure does not carry")

    def _attention(self, flat: np.ndarray) -> np.ndarray:
        """The heads' outputs, each weighted by its value, added up."""
        total = None
        for beta, alibi, q, k, v in self.head_parameters():
            head = self._head_attention(flat, beta, alibi, q, k)
            head = v * head if np.ndim(v) == 0 else head @ v.T
            total = head if total is None else total + head
        return total

    def _head_attention(self, flat: np.ndarray, beta: float, alibi: float, q, k) -> np.ndarray:
        """One head's direct ``O(n^2)`` causal sums of unit vectors ``(b, n, d)``, before V, in blocks."""
        b, n, d = flat.shape
        out = np.zeros_like(flat)
        if n * n <= DIRECT_BLOCK_ELEMENTS:
            system_step, row_step = max(1, DIRECT_BLOCK_ELEMENTS // (n * n)), n
        else:
            system_step, row_step = 1, max(1, DIRECT_BLOCK_ELEMENTS // n)
        offset = 0 if self.include_self else 1
        totals = None if self.normalized else self.positional_totals(n, alibi)
        queries = flat if q is None else flat @ q.T
        keys_of = flat if k is None else flat @ k.T
        for s0 in range(0, b, system_step):
            systems = slice(s0, min(b, s0 + system_step))
            for r0 in range(0, n, row_step):
                r1 = min(n, r0 + row_step)
                rows = np.arange(r0, r1)[:, None]
                keys = np.arange(r1)[None, :]
                logits = beta * (queries[systems, r0:r1] @ np.swapaxes(keys_of[systems, :r1], -1, -2))
                logits -= (alibi / n) * (rows - keys)
                visible = keys <= rows - offset
                if self.normalized:
                    # The softmax is shift-invariant: the row maximum keeps every exp finite.
                    logits -= np.max(np.where(visible, logits, -np.inf), axis=-1, keepdims=True, initial=0.0)
                weights = np.where(visible, np.exp(np.where(visible, logits, 0.0)), 0.0)
                sums = weights @ flat[systems, :r1]
                denominators = weights.sum(axis=-1) if self.normalized else np.broadcast_to(totals[r0:r1],
                                                                                             weights.shape[:-1])
                seen = denominators > 0  # token 1 (strict) sees nothing: no velocity
                block = out[systems, r0:r1]
                block[seen] = self.prefactor * sums[seen] / denominators[seen][:, None]
        return out

    # ------------------------------------------------------------------ records
    def to_dict(self) -> dict:
        """A JSON-serializable description of the model.

        Returns
        -------
        dict
            Plain values; :func:`meanfield.model_from_dict` rebuilds the model.
        """
        return {"model": "CausalAttention", "beta": _plain(self.beta), "normalized": bool(self.normalized),
                "alibi": _plain(self.alibi), "prefactor": self.prefactor, "include_self": bool(self.include_self),
                "diffusion": self.diffusion, "query": _plain(self.query), "key": _plain(self.key),
                "value": _plain(self.value)}


def _plain(parameter):
    """A parameter as a JSON value: a number, or nested lists."""
    return parameter.tolist() if isinstance(parameter, np.ndarray) else parameter


def _per_head(value, name: str, *, minimum: float | None = None) -> float | np.ndarray:
    """A number, or a read-only 1-d array of one finite number per head (at least ``minimum``)."""
    if np.ndim(value) == 0:
        return check_real(value, name, minimum=minimum)
    try:
        array = np.asarray(value, dtype=float)
    except (TypeError, ValueError):
        raise TypeError(f"{name} must be a number or one number per head, got {value!r}") from None
    if array.ndim != 1 or array.size == 0:
        raise ValueError(f"{name} must be a number or one number per head, got shape {np.shape(value)}")
    for entry in array:
        check_real(entry, name, minimum=minimum)
    array.setflags(write=False)
    return array


def positional_cell_weights(alibi: float, layers: int) -> np.ndarray:
    r"""Quadrature weights of the mixed density :math:`\int_0^{s_l} k_\lambda(s_l, s')\rho(s')\,ds'`, shape ``(L, L)``.

    Layers ``l = 1..L`` sit at the centres :math:`s_l = (l - 1/2)/L` of the cells
    :math:`((m-1)/L, m/L]`, with the limiting positional kernel

    .. math:: k_\lambda(s, s') = \frac{\lambda e^{-\lambda(s-s')}}{1 - e^{-\lambda s}}, \qquad
              k_0(s, s') = \frac1s \qquad (s' < s).

    Earlier cells ``m < l``: the cell integral of :math:`k_\lambda` times :math:`\rho_m`
    (midpoint in ``s'``, second order; :math:`k_0` is constant in ``s'``, :math:`k_\lambda`
    smooth). The own half cell :math:`(s_l - h/2, s_l)`: :math:`\rho` is reconstructed as
    :math:`\rho_l + \sigma_l (s' - s_l)` with the causal slope
    :math:`\sigma_l = (\rho_l - \rho_{l-1})/h`, so the row gets
    :math:`\int k\,(s'-s_l)\,ds' / h` moved from ``l - 1`` to ``l`` (a piecewise constant
    would be first order there, the own cell's weight being :math:`O(1/l)`). The first layer
    has no earlier layer to take a slope from: it sees only itself (the non-causal equation),
    and the scheme is first order in ``1/L`` in the first few layers, where the error falls
    like ``1/l``. All cell integrals are exact; every row sums to one, and every weight is
    nonnegative (the correction is at most a quarter of the own half cell's weight), so
    the mixed densities are convex combinations of the layers.

    Parameters
    ----------
    alibi : float
        The ALiBi slope :math:`\lambda \ge 0` (``0``: plain causal averaging).
    layers : int
        Number ``L`` of cells of the position ``s`` in ``[0, 1]``.

    Returns
    -------
    numpy.ndarray, shape (L, L)
        Row ``l`` holds the weights of the layers ``m <= l`` in the mixed density of layer ``l``.
    """
    alibi = check_real(alibi, "alibi", minimum=0.0)
    edges = np.arange(layers + 1) / layers
    s = 0.5 * (edges[:-1] + edges[1:])
    lower = np.minimum(edges[None, :-1], s[:, None])
    upper = np.minimum(edges[None, 1:], s[:, None])
    half = 0.5 / layers
    if alibi == 0.0:
        weights = (upper - lower) / s[:, None]
        moment = -0.5 * half * half / s  # int_{s-w}^{s} (s' - s) ds' / s
    else:
        # int_a^b lambda e^{-lambda (s - s')} ds' = e^{-lambda (s - b)} - e^{-lambda (s - a)}
        scale = -np.expm1(-alibi * s)
        weights = (np.exp(-alibi * (s[:, None] - upper)) - np.exp(-alibi * (s[:, None] - lower))) / scale[:, None]
        x = alibi * half  # int_0^w lambda u e^{-lambda u} du = (1 - e^{-x} (1 + x)) / lambda
        moment = -(-np.expm1(-x) - x * np.exp(-x)) / alibi / scale
    later = np.arange(1, layers)
    shift = moment[later] / (2 * half)
    weights[later, later] += shift
    weights[later, later - 1] -= shift
    return weights
