r"""Rotary positional encoding (RoPE): attention whose queries and keys turn with the token's position.

Remark 3.2 of "A mathematical perspective on Transformers" (docs/theory/model.md); the rotary
encoding of current decoders rotates, in each coordinate plane :math:`(x^{2m}, x^{2m+1})` of
the query and key space, the query of token ``i`` and the key of token ``j`` by angles
proportional to their positions:

.. math::
    \dot x_i = P_{x_i}\Big(\sum_j \frac{e^{\beta\langle R(p_i) Q x_i,\ R(p_j) K x_j\rangle}}
                                         {\sum_l e^{\beta\langle R(p_i) Q x_i,\ R(p_l) K x_l\rangle}}\, V x_j\Big),
    \qquad R(p) = \bigoplus_m \begin{pmatrix}\cos\omega_m p & -\sin\omega_m p\\
                                              \sin\omega_m p & \cos\omega_m p\end{pmatrix}

(SA; USA divides by ``n`` instead), with positions :math:`p_i = i/n` relative to the prompt's
length, so that the limit ``n -> infinity`` keeps a position label ``s`` in ``(0, 1]``. The
rotations commute and are orthogonal, so the logits depend on :math:`p_j - p_i` only: shifting
every position leaves the dynamics unchanged, while the tokens are no longer exchangeable.
RoPE's absolute form (angle :math:`\theta_m k` at integer position ``k``,
:math:`\theta_m = b^{-2m/d_k}`) is :math:`\omega_m = n\theta_m` (:func:`rope_frequencies`).

Mean field: one density :math:`\rho_t(s, \cdot)` per position, each moved by the velocity
the whole family induces through the rotated kernel; :class:`solvers.PositionalQuantiles`
solves it on the circle with quantile particles per position.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .checks import EXP_OVERFLOW, check_points, check_real
from .models import NeutralMembers, TangentVelocity, WithoutEnergy, as_head_matrices


def rope_frequencies(head_dimension: int, n: int, base: float = 10000.0) -> np.ndarray:
    r"""RoPE's frequencies per unit of relative position: :math:`\omega_m = n\,b^{-2m/d_k}`, ``m < d_k/2``.

    Parameters
    ----------
    head_dimension : int
        The dimension :math:`d_k` of the query and key space (even).
    n : int
        The prompt length the relative positions :math:`p = i/n` refer to.
    base : float
        RoPE's base ``b``.

    Returns
    -------
    numpy.ndarray, shape (head_dimension // 2,)
        :math:`\omega_m`.
    """
    if head_dimension < 2 or head_dimension % 2:
        raise ValueError(f"head_dimension must be even and >= 2, got {head_dimension!r}")
    base = check_real(base, "base", minimum=1.0)
    return n * base ** (-2.0 * np.arange(head_dimension // 2) / head_dimension)


@dataclass(frozen=True, eq=False)
class RotaryAttention(NeutralMembers, WithoutEnergy, TangentVelocity):
    r"""Self-attention with the rotary positional encoding (module docstring for the equations).

    Parameters
    ----------
    beta : float
        Inverse temperature, ``>= 0``.
    frequencies : float or array_like, shape (k // 2,)
        The angles :math:`\omega_m` per unit of relative position, one per coordinate plane of
        the query and key space (a number: the same in every plane).
    normalized : bool
        ``True`` for SA (softmax), ``False`` for USA.
    query, key : array_like, shape (k, d), optional
        Query and key matrices (identity when omitted; one given alone is square).
    value : float or array_like, shape (d, d)
        Value matrix; a number ``c`` means ``c I``.
    positions : array_like, shape (n,), optional
        The tokens' positions :math:`p_i`; by default :math:`i/n`, ``i = 1..n``.
    diffusion : float
        Diffusion coefficient ``D >= 0``.
    mask : {"none", "causal"}
        ``"causal"``: token ``i`` attends to the tokens ``j <= i`` only (a decoder's RoPE; USA
        then divides by their number ``i``).
    """

    beta: float
    frequencies: float | np.ndarray
    normalized: bool = True
    query: np.ndarray | None = None
    key: np.ndarray | None = None
    value: float | np.ndarray = 1.0
    positions: np.ndarray | None = None
    diffusion: float = 0.0
    mask: str = "none"
    logit_bound: float = field(init=False, repr=False)
    #: The tokens carry positions (not exchangeable): ``solvers.solve`` solves one density per position.
    positional = True

    def __post_init__(self) -> None:
        set_ = object.__setattr__
        set_(self, "beta", check_real(self.beta, "beta", minimum=0.0))
        set_(self, "diffusion", check_real(self.diffusion, "diffusion", minimum=0.0))
        if not isinstance(self.normalized, (bool, np.bool_)):
            raise TypeError(f"normalized must be True (SA) or False (USA), got {self.normalized!r}")
        if np.ndim(self.frequencies) == 0:
            set_(self, "frequencies", check_real(self.frequencies, "frequencies"))
        else:
            set_(self, "frequencies", _finite_vector(self.frequencies, "frequencies"))
        for name in ("query", "key"):
            matrix = as_head_matrices(getattr(self, name), name, square=False)
            if matrix is not None and matrix.shape[0] != 1:
                raise ValueError(f"{name} must be one (k, d) matrix (RotaryAttention has one head), got shape "
                                 f"{matrix.shape}")
            set_(self, name, None if matrix is None else matrix[0])
        if np.ndim(self.value) == 0:
            set_(self, "value", check_real(self.value, "value"))
        else:
            value = as_head_matrices(self.value, "value")
            if value.shape[0] != 1:
                raise ValueError(f"value must be one (d, d) matrix, got shape {value.shape}")
            set_(self, "value", value[0])
        if self.positions is not None:
            set_(self, "positions", _finite_vector(self.positions, "positions"))
        if self.mask not in ("none", "causal"):
            raise ValueError(f"mask must be 'none' or 'causal', got {self.mask!r}")
        self._check_shapes()
        norm = (lambda m: 1.0 if m is None else float(np.linalg.norm(m, 2)))  # noqa: E731
        set_(self, "logit_bound", norm(self.query) * norm(self.key))  # rotations between Q and K: no Q^T K bound
        if not self.normalized and self.beta * self.logit_bound > EXP_OVERFLOW:
            raise ValueError(f"USA with beta={self.beta}: exp(beta <RQx, RKy>) reaches "
                             f"exp({self.beta * self.logit_bound:.4g}), which overflows double precision")

    def _check_shapes(self) -> None:
        q, k = self.query, self.key
        if q is not None and k is not None and q.shape != k.shape:
            raise ValueError(f"query and key must have the same shape (k, d), got {q.shape} and {k.shape}")
        for name, m in (("query", q), ("key", k)):
            if m is not None and (q is None or k is None) and m.shape[0] != m.shape[1]:
                raise ValueError(f"{name} alone must be square (the other is the identity), got shape {m.shape}")
        dimensions = {name: m.shape[-1] for name, m in (("query", q), ("key", k), ("value", self.value))
                      if isinstance(m, np.ndarray)}
        if len(set(dimensions.values())) > 1:
            raise ValueError(f"query, key and value must act on the same R^d, got {dimensions}")
        head = next((m.shape[0] for m in (q, k) if m is not None), None)
        planes = np.size(self.frequencies)
        if np.ndim(self.frequencies) > 0 and head is not None and planes != head // 2:
            raise ValueError(f"frequencies must hold one angle per coordinate plane of the {head}-dimensional "
                             f"query space ({head // 2}), got {planes}")

    @property
    def dimension(self) -> int | None:
        """Ambient dimension fixed by the matrices, or ``None`` (any ``d``)."""
        return next((m.shape[-1] for m in (self.query, self.key, self.value) if isinstance(m, np.ndarray)), None)

    @property
    def velocity_is_linear(self) -> bool:
        """Whether the velocity is linear in the density: USA, and SA at ``beta = 0``."""
        return not (self.normalized and self.beta > 0)

    def token_positions(self, n: int) -> np.ndarray:
        """The positions :math:`p_i` of ``n`` tokens: ``positions``, or :math:`i/n`, ``i = 1..n``.

        Parameters
        ----------
        n : int
            Number of tokens.

        Returns
        -------
        numpy.ndarray, shape (n,)
            The positions.

        Raises
        ------
        ValueError
            If the model's ``positions`` hold another number of tokens.
        """
        if self.positions is None:
            return np.arange(1, n + 1) / n
        if self.positions.size != n:
            raise ValueError(f"the model's positions are those of {self.positions.size} tokens, got n={n}")
        return self.positions

    def rotate(self, y: np.ndarray, positions: np.ndarray) -> np.ndarray:
        r""":math:`R(p_i) y_i`: each coordinate plane ``(2m, 2m+1)`` turned by :math:`\omega_m p_i`.

        Parameters
        ----------
        y : numpy.ndarray, shape (..., n, k)
            Queries or keys (an odd ``k`` leaves its last coordinate unturned).
        positions : numpy.ndarray, shape (n,)
            The positions :math:`p_i`.

        Returns
        -------
        numpy.ndarray, shape (..., n, k)
            The turned vectors.
        """
        planes = y.shape[-1] // 2
        frequencies = np.broadcast_to(self.frequencies, (planes,))
        if np.ndim(self.frequencies) > 0 and np.size(self.frequencies) != planes:
            raise ValueError(f"frequencies hold {np.size(self.frequencies)} angles but the query space has "
                             f"{planes} coordinate planes")
        angle = positions[:, None] * frequencies[None, :]
        cos, sin = np.cos(angle), np.sin(angle)
        even, odd = y[..., 0:2 * planes:2], y[..., 1:2 * planes:2]
        turned = y.copy()
        turned[..., 0:2 * planes:2] = cos * even - sin * odd
        turned[..., 1:2 * planes:2] = sin * even + cos * odd
        return turned

    def velocity(self, x: np.ndarray) -> np.ndarray:
        """The velocity of the tokens ``x`` in prompt order (their positions :meth:`token_positions`).

        Parameters
        ----------
        x : numpy.ndarray, shape (..., n, d)
            Tokens on the unit sphere, in prompt order.

        Returns
        -------
        numpy.ndarray, shape (..., n, d)
            The velocities, tangent to the sphere.

        Raises
        ------
        ValueError
            If ``x`` is not on the unit sphere, lives in another ``R^d`` than the matrices, or
            holds another number of tokens than ``positions``.
        """
        x = check_points(x, "x")
        if self.dimension is not None and x.shape[-1] != self.dimension:
            raise ValueError(f"x has points in R^{x.shape[-1]} but the model's matrices act on R^{self.dimension}")
        return self.velocity_unchecked(x)

    def _attention(self, flat: np.ndarray, masses: np.ndarray | None = None) -> np.ndarray:
        """The attention output of unit tokens ``(b, n, d)`` in prompt order, pair by pair (``O(n^2)``)."""
        if masses is not None:
            raise TypeError("RotaryAttention has no velocity of a weighted measure: its tokens carry positions, "
                            "which a measure on the sphere does not")
        positions = self.token_positions(flat.shape[-2])
        queries = self.rotate(flat if self.query is None else flat @ self.query.T, positions)
        keys = self.rotate(flat if self.key is None else flat @ self.key.T, positions)
        logits = self.beta * (queries @ np.swapaxes(keys, -1, -2))
        n = flat.shape[-2]
        if self.mask == "causal":  # the diagonal stays: every row sees at least itself
            logits[..., np.triu_indices(n, 1)[0], np.triu_indices(n, 1)[1]] = -np.inf
        if self.normalized:
            logits -= logits.max(axis=-1, keepdims=True)
        weights = np.exp(logits)
        values = flat * self.value if np.ndim(self.value) == 0 else flat @ self.value.T
        if self.normalized:
            total = weights.sum(axis=-1, keepdims=True)
        else:
            total = np.arange(1, n + 1)[:, None] if self.mask == "causal" else n
        return (weights @ values) / total

    def to_dict(self) -> dict:
        """A JSON-serializable description of the model.

        Returns
        -------
        dict
            Plain values; :func:`meanfield.model_from_dict` rebuilds the model.
        """
        def plain(m):
            return m.tolist() if isinstance(m, np.ndarray) else m
        return {"model": "RotaryAttention", "beta": self.beta, "frequencies": plain(self.frequencies),
                "normalized": bool(self.normalized), "query": plain(self.query), "key": plain(self.key),
                "value": plain(self.value), "positions": plain(self.positions), "diffusion": self.diffusion,
                "mask": self.mask}


def _finite_vector(values, name: str) -> np.ndarray:
    """A read-only 1-d array of finite numbers."""
    try:
        array = np.array(values, dtype=float)
    except (TypeError, ValueError):
        raise TypeError(f"{name} must be a number or a 1-d array of numbers, got {values!r}") from None
    if array.ndim != 1 or array.size == 0 or not np.all(np.isfinite(array)):
        raise ValueError(f"{name} must be a non-empty 1-d array of finite numbers, got {values!r}")
    array.setflags(write=False)
    return array
