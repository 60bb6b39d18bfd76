r"""Pure self-attention in :math:`\mathbb{R}^d`: tokens without layer normalization, and its hardmax limit.

The system of Geshkovski, Letrouit, Polyanskiy and Rigollet, "The emergence of clusters in
self-attention dynamics" (eq. (1) there), with ``H`` heads:

.. math::
    \dot x_i = \sum_{h=1}^H V_h \sum_{j=1}^n P^h_{ij}(t)\, x_j, \qquad
    P^h_{ij} = \frac{e^{\beta\langle Q_h x_i, K_h x_j\rangle}}{\sum_l e^{\beta\langle Q_h x_i, K_h x_l\rangle}}.

The tokens typically grow like :math:`e^{tV}`; the paper's theorems are stated for the
rescaled tokens :math:`z_i = e^{-tV}x_i` (one value matrix ``V`` shared by the heads; with
``H`` heads the rescaling is :math:`e^{-tHV}`, the linear part of the flow), which solve
(eq. (4) there)

.. math::
    \dot z_i = V \sum_h \sum_j P^h_{ij}(t)\,(z_j - z_i), \qquad
    P^h_{ij} = \mathrm{softmax}_j\big(\beta\langle Q_h M(t) z_i, K_h M(t) z_j\rangle\big),
    \quad M(t) = e^{tHV},

the same attention matrix as the original tokens at the same time. :math:`M(t)` is
:func:`scipy.linalg.expm`. In the paper's discrete layer :math:`x^{[k+1]} = x^{[k]} + \Delta t
\sum_h V P^h x^{[k]}` the rescaling is :math:`z^{[k]} = R^{-k}x^{[k]}`, :math:`R = I + \Delta t\,HV`
(its Remark 4): :math:`z^{[k+1]} = z^{[k]} + \Delta t\, R^{-1}V\sum_h (P^h z^{[k]} - z^{[k]})`, with
the logits taken at :math:`M = R^k`.

Pre-LN (``normalization="pre"``): the layer normalisation of most trained Transformers sits
before attention, on the residual branch, :math:`x \leftarrow x + \Delta t\,a(N_g(x))`, with
:math:`N_g(x) = g \odot x/|x|` (RMS normalisation with the trained diagonal gain ``g``; the
:math:`\sqrt d` of RMSNorm is absorbed in ``g``, ``g = 1`` is the unit sphere of the rest of the
library), so that

.. math:: \dot x_i = \sum_h V_h\sum_j P^h_{ij}\,N_g(x_j), \qquad
          P^h_{ij} = \mathrm{softmax}_j\big(\beta\langle Q_h N_g(x_i), K_h N_g(x_j)\rangle\big).

The tokens leave the sphere and their norms grow (at most like :math:`t\sum_h\|V_h\|\max|g|`),
while attention reads only their directions. ``normalization="none"`` (the default) is the
system above.

Post-LN (``normalization="post"``, the original Transformer's and ALBERT's): the normalisation
closes the layer, :math:`x \leftarrow N_g(x + \Delta t\,a(x))`, :math:`a(x)_i = \sum_h V_h\sum_j
P^h_{ij}x_j`, and the tokens live on the ellipsoid :math:`g\odot S^{d-1}` ("an evolution on an
axis-aligned ellipsoid", sec. 2 of "A mathematical perspective on Transformers"). It is a
discrete layer only (``method="layer"``): at :math:`\Delta t = 0` the layer is
:math:`x \mapsto N_g(x)`, not the identity, unless ``g = 1``. A gain close to one per layer,
:math:`g = e^{\Delta t\,\gamma}`, has a limit: writing :math:`x = g\odot u`, :math:`|u| = 1`,

.. math:: u^{[k+1]} = \frac{g\odot u^{[k]} + \Delta t\, a(g\odot u^{[k]})}{|\cdot|}
          = u^{[k]} + \Delta t\, P_{u}\big(a(u^{[k]}) + \gamma\odot u^{[k]}\big) + O(\Delta t^2),

the projected Euler step of :math:`\dot u = P_u\big(a(u) + \Gamma u\big)`,
:math:`\Gamma = \mathrm{diag}(\gamma)`: :class:`~meanfield.SelfAttention` with the same ``Q``, ``K``,
``V`` and the field :class:`~meanfield.QuadraticField` of :math:`\Gamma`
(:meth:`PureAttention.post_ln_limit`), which the layer follows at order one in :math:`\Delta t`
(:math:`x - u = O(\Delta t)` as well). The gain's field is the gradient of
:math:`\langle u, \Gamma u\rangle`: it drives the tokens toward the axes of the largest gains.
With ``g = 1`` the layer is today's :class:`~meanfield.SelfAttention` ``method="layer"``.

``beta = inf`` is the hardmax limit ("A mathematical perspective on Transformers", sec. 9.3,
eqs. (9.5)-(9.6)): each token moves toward the average of the tokens that maximise
:math:`\langle Q x_i, K x_j\rangle`. The argmax set is taken with a relative tolerance
(``tie_tolerance``), so that ties that the dynamics keeps exactly (Example 9.3 there) are
recognised despite round-off; its solutions need not be unique (Filippov), and the one
computed here is the time discretisation that averages over ties.

The time ``t`` of :math:`M(t)` is the absolute time of the run (the paper's runs start at
``t = 0``); a dataset of rescaled tokens records :math:`M(t)` at every output time
(``rescaling``), so that :math:`x = M z` is exact whatever the scheme.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
from scipy.linalg import expm
from scipy.special import softmax

from .checks import check_real
from .interaction import pair_sums
from .external import QuadraticField
from .models import SelfAttention, as_head_matrices
from .sinkhorn import SinkhornAttention, _symmetric

#: Where layer normalisation may sit in :class:`PureAttention` (post-LN is :class:`~meanfield.SelfAttention`).
NORMALIZATIONS = ("none", "pre", "post")

#: Largest logit magnitude a run may reach: beyond it ``exp`` of logit differences loses every digit.
LOGIT_OVERFLOW = 1e300


def _as_matrices(matrix: object, name: str, *, scalar: bool) -> np.ndarray | float | None:
    """``None`` (identity), a number ``c`` (``c I``, when ``scalar``), or a read-only ``(heads, d, d)`` stack, ``d >= 1``."""
    if scalar and matrix is not None and np.ndim(matrix) == 0:
        return check_real(matrix, name)
    return as_head_matrices(matrix, name, minimum_dimension=1)


def check_tokens(x: object, name: str = "x", dimension: int | None = None) -> np.ndarray:
    """Return ``x`` as a finite float array of tokens in :math:`\\mathbb{R}^d`, shape ``(..., n, d)``, ``d >= 1``."""
    array = np.asarray(x, dtype=float)
    if array.ndim < 2 or array.shape[-1] < 1 or array.shape[-2] < 1:
        raise ValueError(f"{name} must have shape (..., n, d) with n >= 1 and d >= 1, got shape {array.shape}")
    if not np.all(np.isfinite(array)):
        raise ValueError(f"{name} contains NaN or infinite values")
    if dimension is not None and array.shape[-1] != dimension:
        raise ValueError(f"{name} has tokens in R^{array.shape[-1]} but the model's matrices are "
                         f"{dimension} x {dimension}")
    return array


@dataclass(frozen=True, eq=False)
class PureAttention:
    r"""Self-attention without layer normalization, tokens in :math:`\mathbb{R}^d` (module docstring).

    Parameters
    ----------
    query, key : array_like, shape (d, d) or (heads, d, d), optional
        Query and key matrices; identity when omitted (``beta`` is the paper's scale absorbed in them).
        A single ``(d, d)`` matrix serves every head of the others' stacks.
    value : float or array_like, shape (d, d) or (heads, d, d)
        Value matrix; a number ``c`` means ``c I``. The rescaled variables need one ``V``
        shared by every head.
    beta : float
        Inverse temperature ``> 0``; ``math.inf`` is the hardmax limit.
    rescaled : bool
        Evolve the rescaled tokens :math:`z = M(t)^{-1}x` (eq. (4) of the paper) instead of ``x``.
    normalization : {"none", "pre", "post"}
        Where layer normalisation sits: nowhere (pure attention), before attention (pre-LN:
        attention reads :math:`N_g(x) = g \odot x/|x|`), or after the residual sum (post-LN: the
        layer :math:`x \leftarrow N_g(x + \Delta t\,a(x))`, ``method="layer"`` only; module docstring).
    gain : array_like, shape (d,), optional
        Pre- or post-LN: the diagonal gain ``g`` of RMS normalisation, nonzero entries (default:
        ones).
    attention : {"softmax", "sinkhorn"}
        The attention matrix: softmax rows, or its doubly stochastic Sinkhorn scaling (the
        Sinkformers' attention in :math:`\mathbb{R}^d`, :class:`~meanfield.SinkhornAttention`'s
        iteration; the rescaled equation holds for it too, every row summing to one).
    sinkhorn_iterations, sinkhorn_tolerance
        ``attention="sinkhorn"``: as ``iterations`` and ``tolerance`` of
        :class:`~meanfield.SinkhornAttention`.
    mask : {"none", "causal"}
        ``"causal"``: token ``i`` attends to the tokens ``j <= i`` only (a decoder's attention,
        :math:`P^h_{ij} = 0` for :math:`j > i`; softmax attention with a finite ``beta``).
    tie_tolerance : float
        Hardmax only: token ``j`` is in the argmax set of row ``i`` when its logit is within
        ``tie_tolerance * max(1, max_l |logit_il|)`` of the row's largest.

    Raises
    ------
    ValueError
        If ``beta`` is not a number ``> 0``, the matrices' shapes disagree, ``rescaled`` is
        asked with value matrices that differ between heads or with layer normalisation, or
        ``gain`` has a zero entry or is given without layer normalisation.

    Notes
    -----
    The model has no diffusion, no energy and no sphere: its tokens are any finite points of
    :math:`\mathbb{R}^d` (``d >= 1``).
    """

    query: np.ndarray | None = None
    key: np.ndarray | None = None
    value: float | np.ndarray = 1.0
    beta: float = 1.0
    rescaled: bool = False
    tie_tolerance: float = 1e-9
    normalization: str = "none"
    gain: np.ndarray | None = None
    attention: str = "softmax"
    sinkhorn_iterations: int | None = None
    sinkhorn_tolerance: float = 1e-12
    mask: str = "none"
    logit_bound: float = field(init=False, repr=False)
    scaling: object = field(init=False, repr=False)

    # The model protocol's neutral values (meanfield.protocols.EuclideanModel).
    on_sphere = False
    diffusion = 0.0
    causal = False
    external = None
    has_energy = False
    is_zonal = False

    def __post_init__(self) -> None:
        set_ = object.__setattr__
        beta = self.beta
        if not (isinstance(beta, (int, float, np.floating)) and not isinstance(beta, bool)) or not beta > 0:
            raise ValueError(f"beta must be a number > 0 (math.inf: hardmax), got {beta!r}")
        set_(self, "beta", float(beta))
        set_(self, "query", _as_matrices(self.query, "query", scalar=False))
        set_(self, "key", _as_matrices(self.key, "key", scalar=False))
        set_(self, "value", _as_matrices(self.value, "value", scalar=True))
        shapes = {name: m.shape for name, m in (("query", self.query), ("key", self.key), ("value", self.value))
                  if isinstance(m, np.ndarray)}
        if len({s[-1] for s in shapes.values()}) > 1 or len({s[0] for s in shapes.values()} - {1}) > 1:
            raise ValueError(f"query, key and value must be d x d matrices or stacks of the same number of heads, "
                             f"got shapes {shapes}")
        if not isinstance(self.rescaled, (bool, np.bool_)):
            raise TypeError(f"rescaled must be True or False, got {self.rescaled!r}")
        if self.rescaled and self.normalization != "none":
            raise ValueError(f"rescaled=True undoes the growth e^(tHV) of pure attention; with layer normalisation "
                             f"the tokens grow at most linearly (pre-LN) or stay on an ellipsoid (post-LN), so "
                             f"normalization={self.normalization!r} takes rescaled=False")
        if self.rescaled and not self._value_shared():
            raise ValueError("rescaled=True needs one value matrix shared by every head (the rescaling "
                             "e^{-tHV}); the heads' value matrices differ")
        set_(self, "tie_tolerance", check_real(self.tie_tolerance, "tie_tolerance", minimum=0.0))
        self._check_normalization()
        set_(self, "scaling", self._sinkhorn_scaling())
        self._check_mask()
        set_(self, "logit_bound", self._logit_bound())

    def _sinkhorn_scaling(self):
        """The Sinkhorn iteration of ``attention="sinkhorn"`` (a :class:`~meanfield.SinkhornAttention`), or ``None``."""
        if self.attention not in ("softmax", "sinkhorn"):
            raise ValueError(f"attention must be 'softmax' or 'sinkhorn', got {self.attention!r}")
        if self.attention == "softmax":
            if self.sinkhorn_iterations is not None or self.sinkhorn_tolerance != 1e-12:
                raise ValueError("sinkhorn_iterations and sinkhorn_tolerance apply to attention='sinkhorn'")
            return None
        if self.hardmax:
            raise ValueError("attention='sinkhorn' scales the softmax matrix exp(beta <Qx, Ky>): it needs a finite beta")
        return SinkhornAttention(self.beta, iterations=self.sinkhorn_iterations, tolerance=self.sinkhorn_tolerance)

    def _check_mask(self) -> None:
        if self.mask not in ("none", "causal"):
            raise ValueError(f"mask must be 'none' or 'causal', got {self.mask!r}")
        if self.mask == "causal" and (self.hardmax or self.scaling is not None):
            raise ValueError("mask='causal' masks softmax attention: it needs a finite beta and attention='softmax'")

    def _masked(self, logits: np.ndarray) -> np.ndarray:
        """The logits ``(..., n, n)`` with the pairs ``j > i`` at ``-inf`` when causal (in place), else as they are."""
        if self.mask == "causal":
            above = np.triu_indices(logits.shape[-1], 1)
            logits[..., above[0], above[1]] = -np.inf
        return logits

    def _check_normalization(self) -> None:
        if self.normalization not in NORMALIZATIONS:
            raise ValueError(f"normalization must be one of {', '.join(map(repr, NORMALIZATIONS))} (post-LN is "
                             f"SelfAttention, on the sphere), got {self.normalization!r}")
        if self.gain is None:
            return
        if self.normalization == "none":
            raise ValueError("gain is the RMS normalisation's diagonal gain: it needs normalization='pre' or 'post'")
        gain = np.asarray(self.gain, dtype=float)
        if gain.ndim != 1 or not np.all(np.isfinite(gain)):
            raise ValueError(f"gain must be a finite (d,) vector, got {self.gain!r}")
        if np.any(gain == 0):
            raise ValueError(f"gain must have nonzero entries (a zero entry erases that coordinate), got "
                             f"{gain.tolist()}")
        matrix_d = next((m.shape[-1] for m in (self.query, self.key, self.value) if isinstance(m, np.ndarray)), None)
        if matrix_d not in (None, gain.size):
            raise ValueError(f"gain has {gain.size} entries but the matrices are {matrix_d} x {matrix_d}")
        gain.setflags(write=False)
        object.__setattr__(self, "gain", gain)

    # ------------------------------------------------------------------ structure
    @property
    def hardmax(self) -> bool:
        """Whether this is the hardmax limit (``beta = inf``)."""
        return math.isinf(self.beta)

    @property
    def heads(self) -> int:
        return max((m.shape[0] for m in (self.query, self.key, self.value) if isinstance(m, np.ndarray)), default=1)

    @property
    def dimension(self) -> int | None:
        """The ``d`` fixed by the matrices or the gain, or ``None`` (any)."""
        return next((m.shape[-1] for m in (self.query, self.key, self.value, self.gain) if isinstance(m, np.ndarray)),
                    None)

    def attention_inputs(self, x: np.ndarray) -> np.ndarray:
        r"""What attention reads of the tokens: :math:`N_g(x) = g \odot x/|x|` with pre-LN, else ``x``.

        (Post-LN tokens are the normalised output of the previous layer: attention reads them as
        they are.)

        Parameters
        ----------
        x : numpy.ndarray, shape (..., n, d)
            Tokens (nonzero with pre-LN).

        Returns
        -------
        numpy.ndarray, shape (..., n, d)
            The inputs of the attention layer.
        """
        if self.normalization != "pre":
            return x
        return self.normalized(x)

    def normalized(self, x: np.ndarray) -> np.ndarray:
        r"""The RMS normalisation :math:`N_g(x) = g \odot x/|x|` of every token (``g`` the gain, default ones).

        Parameters
        ----------
        x : numpy.ndarray, shape (..., n, d)
            Nonzero tokens.

        Returns
        -------
        numpy.ndarray, shape (..., n, d)
            The tokens on the ellipsoid :math:`g \odot S^{d-1}`.
        """
        unit = x / np.linalg.norm(x, axis=-1, keepdims=True)
        return unit if self.gain is None else unit * self.gain

    def head_matrices(self, d: int):
        """The matrices of each head.

        Parameters
        ----------
        d : int
            Dimension of the tokens (used where a matrix is the identity or a scalar).

        Returns
        -------
        list of tuple of numpy.ndarray
            ``(Q, K, V)`` per head, each ``(d, d)``.
        """
        eye = np.eye(d)

        def of(m, h):
            if m is None:
                return eye
            if isinstance(m, float):
                return m * eye
            return m[h if m.shape[0] > 1 else 0]
        return [(of(self.query, h), of(self.key, h), of(self.value, h)) for h in range(self.heads)]

    def post_ln_limit(self, dt: float):
        r"""The flow on the sphere that the post-LN layer with step ``dt`` follows at order one in ``dt``.

        With the gain read as :math:`g = e^{\Delta t\,\gamma}` per layer, the limit is
        :math:`\dot u = P_u\big(\sum_h V_h\sum_j P^h_{ij} u_j + \Gamma u\big)`,
        :math:`\Gamma = \mathrm{diag}(\log g)/\Delta t` (module docstring).

        Parameters
        ----------
        dt : float
            The layer's step :math:`\Delta t > 0`.

        Returns
        -------
        SelfAttention
            SA with this model's ``beta``, ``query``, ``key`` and ``value``, and the gain's field
            :class:`~meanfield.QuadraticField` of :math:`\Gamma` (none without a gain).

        Raises
        ------
        ValueError
            If the model is not post-LN softmax attention with a finite ``beta`` and no mask, or
            a gain entry is negative (:math:`\log g` undefined: the layer flips that axis).
        """
        dt = check_real(dt, "dt", minimum=0.0)
        if not dt > 0:
            raise ValueError(f"dt must be > 0, got {dt!r}")
        if self.normalization != "post":
            raise ValueError(f"post_ln_limit is the limit of the post-LN layer, got normalization={self.normalization!r}")
        if self.hardmax or self.attention != "softmax" or self.mask != "none":
            raise ValueError("post_ln_limit gives SelfAttention: softmax attention with a finite beta and no mask, got "
                             f"beta={self.beta}, attention={self.attention!r}, mask={self.mask!r}")
        external = None
        if self.gain is not None:
            if np.any(self.gain < 0):
                raise ValueError(f"gain: post_ln_limit reads g = e^(dt gamma) > 0, got {self.gain.tolist()}")
            external = QuadraticField(np.diag(np.log(self.gain) / dt))
        return SelfAttention(self.beta, query=self.query, key=self.key, value=self.value, external=external)

    def linear_part(self, d: int) -> np.ndarray:
        r"""The matrix :math:`HV` whose exponential rescales the tokens (``rescaled`` needs one shared ``V``).

        Parameters
        ----------
        d : int
            Dimension of the tokens.

        Returns
        -------
        numpy.ndarray, shape (d, d)
            ``heads`` times the value matrix.
        """
        return self.heads * self.head_matrices(d)[0][2]

    def rescaling(self, t: float, d: int) -> np.ndarray:
        r"""The rescaling :math:`M(t) = e^{tHV}` with :math:`x = M(t) z` (:func:`scipy.linalg.expm`).

        Parameters
        ----------
        t : float
            Time.
        d : int
            Dimension of the tokens.

        Returns
        -------
        numpy.ndarray, shape (d, d)
            :math:`M(t)`; the identity for original variables (``rescaled=False``).

        Raises
        ------
        OverflowError
            Naming ``t``, when an entry overflows.
        """
        if not self.rescaled:
            return np.eye(d)
        return self._exponential(t, d, "e^(t H V) overflows double precision at t = {t:g}: the rescaled variables "
                                       "cannot be mapped back there; shorten the interval")

    def _growth_bound(self, t: float, d: int) -> np.ndarray:
        r"""The original tokens' growth :math:`x(t) = e^{tHV} z(t)`, :math:`z` in the hull of the start (Thm 3.1).

        With value matrices that differ between heads there is no such map: the identity (the
        run then reports a non-finite state when and if it happens).
        """
        if not self._value_shared():
            return np.eye(d)
        return self._exponential(t, d, "the tokens grow as e^(t H V), which overflows double precision by t = {t:g}; "
                                       "run the rescaled tokens (rescaled=True) or shorten the interval")

    def _exponential(self, t: float, d: int, overflow: str) -> np.ndarray:
        """:math:`e^{tHV}` (:func:`scipy.linalg.expm`), or an ``OverflowError`` with ``overflow`` (``{t}`` filled in)."""
        with np.errstate(over="ignore", invalid="ignore"):
            matrix = expm(t * self.linear_part(d))
        if not np.all(np.isfinite(matrix)):
            raise OverflowError(overflow.format(t=t))
        return matrix

    def _value_shared(self) -> bool:
        """Whether every head has the same value matrix (the rescaling :math:`e^{-tHV}` needs it)."""
        return not (isinstance(self.value, np.ndarray) and self.value.shape[0] > 1
                    and not np.all(self.value == self.value[:1]))

    def _logit_bound(self) -> float:
        r""":math:`\max_h\|Q_h^T K_h\|_2`: the logits are at most this times :math:`|Mx_i||Mx_j|`."""
        if self.query is None and self.key is None:
            return 1.0
        d = self.dimension
        return float(max(np.linalg.norm(q.T @ k, 2) for q, k, _ in self.head_matrices(d)))

    # ------------------------------------------------------------------ velocity
    def velocity(self, x: np.ndarray, t: float = 0.0) -> np.ndarray:
        r"""The velocity of the tokens: :math:`\dot x_i = \sum_h V_h \sum_j P^h_{ij} x_j`, or of ``z``.

        Parameters
        ----------
        x : numpy.ndarray, shape (..., n, d)
            Finite tokens (original variables ``x``, or ``z`` when ``rescaled``).
        t : float
            Time; it matters only for rescaled tokens, whose logits are taken at :math:`M(t) z`.

        Returns
        -------
        numpy.ndarray, shape (..., n, d)
            :math:`\dot x`, or :math:`\dot z = V \sum_h (P^h z - z)` when ``rescaled``.

        Raises
        ------
        ValueError
            If ``x`` is not finite or of the wrong dimension.
        OverflowError
            If :math:`M(t)` overflows.
        """
        x = check_tokens(x, "x", self.dimension)
        t = check_real(t, "t")
        return self.velocity_at(x, self.rescaling(t, x.shape[-1]))

    def velocity_at(self, x: np.ndarray, rescaling: np.ndarray) -> np.ndarray:
        r"""The velocity, unchecked, with the logits taken at :math:`M x` (``rescaling`` = ``M``).

        Original variables: :math:`\sum_h V_h P^h x`; rescaled: :math:`V\sum_h (P^h z - z)`.

        Parameters
        ----------
        x : numpy.ndarray, shape (..., n, d)
            Tokens (not checked: for integrators).
        rescaling : numpy.ndarray, shape (d, d)
            :math:`M(t)` (the identity for original variables).

        Returns
        -------
        numpy.ndarray, shape (..., n, d)
            The velocity.
        """
        flat = self.attention_inputs(x.reshape((-1,) + x.shape[-2:]))
        d = flat.shape[-1]
        total = np.zeros_like(flat)
        for q, k, v in self.head_matrices(d):
            if self.scaling is None:
                average = self._attention_average(flat, q @ rescaling, k @ rescaling)
            else:
                average = self._doubly_stochastic(flat, q @ rescaling, k @ rescaling) @ flat
            if self.rescaled:
                average -= flat
            total += average @ v.T
        return total.reshape(x.shape)

    def _attention_average(self, x: np.ndarray, query: np.ndarray, key: np.ndarray) -> np.ndarray:
        r""":math:`\sum_j P_{ij} x_j` with logits :math:`\langle q x_i, k x_j\rangle`, blocked (:func:`pair_sums`)."""
        d = x.shape[-1]
        if self.mask == "causal":  # a decoder's prompt: the n x n weights at once
            weights = self._masked((x @ query.T) @ np.swapaxes(x @ key.T, -1, -2))
            self._weight(weights)
            return (weights @ x) / weights.sum(axis=-1, keepdims=True)
        values = np.concatenate([x, np.ones(x.shape[:-1] + (1,))], axis=-1)
        sums, _ = pair_sums(x @ query.T, x @ key.T, values, self._weight)
        return sums[..., :d] / sums[..., d:]

    def _doubly_stochastic(self, x: np.ndarray, query: np.ndarray, key: np.ndarray) -> np.ndarray:
        r"""The Sinkhorn scaling of :math:`e^{\beta\langle q x_i, k x_j\rangle}`, ``(b, n, n)``: rows sum to one,
        columns too (to the tolerance, or after the iterations); the log domain past a score range of 500."""
        scores = self.beta * (x @ query.T) @ np.swapaxes(x @ key.T, -1, -2)
        log_weights = np.full(x.shape[:-1], -np.log(x.shape[-2]))
        column = self.scaling.column_potential(scores, log_weights, symmetric=_symmetric(query, key))
        return softmax(scores + (log_weights + column)[:, None, :], axis=-1)

    def _weight(self, block: np.ndarray) -> None:
        """Logits to unnormalised attention weights in place: softmax numerators, or the argmax indicator."""
        row_max = block.max(axis=-1, keepdims=True)
        if self.hardmax:
            scale = np.maximum(1.0, np.abs(block).max(axis=-1, keepdims=True))
            block[...] = block >= row_max - self.tie_tolerance * scale
            return
        block -= row_max
        block *= self.beta
        np.exp(block, out=block)

    def attention_matrix(self, x: np.ndarray, rescaling: np.ndarray | None = None) -> np.ndarray:
        r"""The attention matrices :math:`P^h(t)`, shape ``(..., heads, n, n)``, rows summing to one.

        Parameters
        ----------
        x : numpy.ndarray, shape (..., n, d)
            Finite tokens.
        rescaling : numpy.ndarray, shape (d, d), optional
            The :math:`M(t)` at which rescaled tokens take their logits, as recorded in their
            dataset; omitted, the tokens are taken as original variables.

        Returns
        -------
        numpy.ndarray, shape (..., heads, n, n)
            Softmax (or, for hardmax, the uniform weights on the argmax set) of the logits
            :math:`\langle Q_h x_i, K_h x_j\rangle`.
        """
        x = self.attention_inputs(check_tokens(x, "x", self.dimension))
        d = x.shape[-1]
        mapped = x if rescaling is None else x @ np.asarray(rescaling, dtype=float).T
        heads = []
        for q, k, _ in self.head_matrices(d):
            if self.scaling is not None:
                flat = mapped.reshape((-1,) + mapped.shape[-2:])
                heads.append(self._doubly_stochastic(flat, q, k).reshape(mapped.shape[:-1] + (mapped.shape[-2],)))
                continue
            logits = self._masked((mapped @ q.T) @ np.swapaxes(mapped @ k.T, -1, -2))
            self._weight(logits)
            heads.append(logits / logits.sum(axis=-1, keepdims=True))
        return np.stack(heads, axis=-3)

    def check_interval(self, x0: np.ndarray, start: float, end: float) -> None:
        r"""Refuse a run whose rescaling or logits overflow on ``[start, end]`` (checked at both ends).

        Parameters
        ----------
        x0 : numpy.ndarray, shape (..., n, d)
            Initial tokens (their largest entry bounds the logits).
        start, end : float
            The run's first and last times.

        Raises
        ------
        ValueError
            Naming ``times``, when :math:`M(t)` or the logits overflow at either end.
        """
        if self.normalization != "none":
            if np.any(np.linalg.norm(x0, axis=-1) == 0):
                raise ValueError(f"x0: {self.normalization}-LN normalises every token, and a token is zero")
            return  # attention reads N_g(x), or x on g S^{d-1}: bounded logits; the tokens grow at most linearly
        d = x0.shape[-1]
        radius = float(np.abs(x0).max()) * math.sqrt(d)
        for t in (start, end):
            try:
                m = self.rescaling(t, d) if self.rescaled else self._growth_bound(t, d)
            except OverflowError as error:
                raise ValueError(f"times: {error}") from None
            log_bound = math.log(self.logit_bound or 1.0) + 2.0 * math.log(float(np.linalg.norm(m, 2)) * radius or 1.0)
            if not log_bound < math.log(LOGIT_OVERFLOW):
                raise ValueError(f"times: the logits <Q M(t) z_i, K M(t) z_j> reach 10^{log_bound / math.log(10):.4g} at t = {t:g} "
                                 f"(M(t) = e^(t H V), |x0| up to {radius:.3g}), beyond double precision; "
                                 "shorten the interval")

    def to_dict(self) -> dict:
        def plain(m):
            return m.tolist() if isinstance(m, np.ndarray) else m
        return {"model": "PureAttention", "query": plain(self.query), "key": plain(self.key),
                "value": plain(self.value), "beta": "inf" if self.hardmax else self.beta,
                "rescaled": bool(self.rescaled), "tie_tolerance": self.tie_tolerance,
                "normalization": self.normalization, "gain": plain(self.gain), "attention": self.attention,
                "sinkhorn_iterations": self.sinkhorn_iterations, "sinkhorn_tolerance": self.sinkhorn_tolerance,
                "mask": self.mask}
