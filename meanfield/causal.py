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

from dataclasses import dataclass

import numpy as np

from .checks import EXP_OVERFLOW, check_points, check_real
from .models import SelfAttention, TangentVelocity

#: Pair entries of the direct causal sum held at once (8 MiB).
DIRECT_BLOCK_ELEMENTS = 2**20


@dataclass(frozen=True, eq=False)
class CausalAttention(TangentVelocity):
    r"""Causal SA or USA with ALiBi positional weights (module docstring for the equations).

    Parameters
    ----------
    beta : float
        Inverse temperature, ``>= 0``.
    normalized : bool
        ``True``: causal SA (softmax over earlier tokens); ``False``: causal USA, the paper's
        model (normalized by the positional weights only).
    alibi : float
        The ALiBi slope :math:`\lambda \ge 0` of :math:`\pi_{ij} = e^{-\lambda(i-j)/n}`
        (``0``: a plain causal average; larger favours recent tokens).
    prefactor : float
        The constant ``c`` in front of the velocity: ``1`` for the library's time, ``beta``
        for the paper's.
    include_self : bool
        Sum over :math:`j \le i` instead of :math:`j < i` (default: strict, as the paper).
    diffusion : float
        Diffusion coefficient ``D >= 0``.
    """

    beta: float
    normalized: bool
    alibi: float = 0.0
    prefactor: float = 1.0
    include_self: bool = False
    diffusion: float = 0.0

    def __post_init__(self) -> None:
        set_ = object.__setattr__
        set_(self, "beta", check_real(self.beta, "beta", minimum=0.0))
        set_(self, "alibi", check_real(self.alibi, "alibi", minimum=0.0))
        set_(self, "prefactor", check_real(self.prefactor, "prefactor"))
        set_(self, "diffusion", check_real(self.diffusion, "diffusion", minimum=0.0))
        for name, value in (("normalized", self.normalized), ("include_self", self.include_self)):
            if not isinstance(value, (bool, np.bool_)):
                raise TypeError(f"{name} must be True or False, got {value!r}")
        if not self.normalized and self.beta > EXP_OVERFLOW:
            raise ValueError(f"causal USA with beta={self.beta}: exp(beta <x, y>) overflows double "
                             f"precision beyond beta = {EXP_OVERFLOW:g}")

    # What the particle integrators and records ask of a model.
    heads = 1
    dimension = None
    #: The velocity depends on the tokens' places as well as on their inner products.
    is_zonal = False
    causal = True
    external = None
    time_rescaled = False
    logit_bound = 1.0
    #: No interaction energy is known for causal attention.
    has_energy = False

    @property
    def velocity_is_linear(self) -> bool:
        """Whether the velocity is linear in the (mixed) density: that of :attr:`mixed_model`."""
        return self.mixed_model.velocity_is_linear

    @property
    def mixed_model(self) -> SelfAttention:
        r"""The non-causal model whose velocity at the mixed density is the causal one (layered mean field).

        :math:`V_t(s, x)` of docs/theory/causal.md is the velocity of
        ``SelfAttention(beta, normalized, value=prefactor)`` at
        :math:`\tilde\rho_s = \int_0^s k_\lambda(s, s')\,\rho_t(s', \cdot)\,ds'`, a probability
        density (the SA normalisation of :math:`k_\lambda` cancels in the softmax).
        """
        return SelfAttention(self.beta, normalized=self.normalized, diffusion=self.diffusion,
                             value=self.prefactor)

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
            If ``x`` is not on the unit sphere or holds fewer than two tokens.
        """
        x = check_points(x, "x")
        if x.shape[-2] < 2:
            raise ValueError(f"x must hold n >= 2 tokens along its second-to-last axis, got n={x.shape[-2]}")
        return self.velocity_unchecked(x)

    def positional_totals(self, n: int) -> np.ndarray:
        r"""The positional totals :math:`Z_i = \sum_{j<i}\pi_{ij}` (or :math:`j \le i`), ``i = 1..n``.

        Summed in closed form (a geometric sum of the ALiBi weights
        :math:`\pi_{ij} = e^{-\lambda (i-j)/n}`); they normalise the unnormalized causal attention.

        Parameters
        ----------
        n : int
            Number of tokens.

        Returns
        -------
        numpy.ndarray, shape (n,)
            :math:`Z_1, \dots, Z_n`.
        """
        rate = self.alibi / n
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
        """Direct ``O(n^2)`` causal sums of unit vectors ``(b, n, d)``, in blocks of systems and rows."""
        b, n, d = flat.shape
        out = np.zeros_like(flat)
        if n * n <= DIRECT_BLOCK_ELEMENTS:
            system_step, row_step = max(1, DIRECT_BLOCK_ELEMENTS // (n * n)), n
        else:
            system_step, row_step = 1, max(1, DIRECT_BLOCK_ELEMENTS // n)
        offset = 0 if self.include_self else 1
        totals = None if self.normalized else self.positional_totals(n)
        for s0 in range(0, b, system_step):
            systems = slice(s0, min(b, s0 + system_step))
            for r0 in range(0, n, row_step):
                r1 = min(n, r0 + row_step)
                rows = np.arange(r0, r1)[:, None]
                keys = np.arange(r1)[None, :]
                logits = self.beta * (flat[systems, r0:r1] @ np.swapaxes(flat[systems, :r1], -1, -2))
                logits -= (self.alibi / n) * (rows - keys)
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

    def energy(self, x: np.ndarray) -> np.ndarray:
        """Not defined: no interaction energy is known for causal attention (``has_energy`` is False).

        Parameters
        ----------
        x : numpy.ndarray
            Ignored.

        Raises
        ------
        NotImplementedError
            Always.
        """
        raise NotImplementedError("causal attention has no known interaction energy (has_energy is False)")

    # ------------------------------------------------------------------ records
    def to_dict(self) -> dict:
        """A JSON-serializable description of the model.

        Returns
        -------
        dict
            Plain values; :func:`meanfield.model_from_dict` rebuilds the model.
        """
        return {"model": "CausalAttention", "beta": self.beta, "normalized": bool(self.normalized),
                "alibi": self.alibi, "prefactor": self.prefactor, "include_self": bool(self.include_self),
                "diffusion": self.diffusion}


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
