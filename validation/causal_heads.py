r"""The retrieval profile of multi-head causal USA on the circle: mixtures of ALiBi slopes with signed weights.

docs/theory/causal.md sec. 3-4 for one head. A :class:`~meanfield.CausalAttention` with heads
``h`` (``beta_h``, slope :math:`\lambda_h`, a signed scalar value :math:`v_h`, the common
prefactor ``c``; no query, key or value matrices) moves token ``i`` on the circle with

.. math:: \dot\theta_i = \sum_h \frac{c\,v_h}{\beta_h}\,\frac{1}{Z^h_i}\sum_{j<i}\pi^h_{ij}\,
          w_h'(\theta_i - \theta_j), \qquad w_h(\theta) = e^{\beta_h\cos\theta}.

Linearised about iid uniform tokens the heads add up: ``n`` times the correlation of Fourier
mode ``k`` between the token at ``s`` and the source at ``s0`` tends to the solution of

.. math:: \partial_t g = \sum_g A_{g,k}\Big(k_{\lambda_g}(s, s_0) + \int_{s_0}^s k_{\lambda_g}(s, s')\,
          g(t, s'; s_0)\,ds'\Big), \qquad g(0) = 0,

with one term per slope :math:`\lambda_g` and :math:`A_{g,k} = \sum_{h \in g} a^h_k`,
:math:`a^h_k = (c v_h/\beta_h)\,k^2 I_k(\beta_h)` (:math:`c v_h/2` for ``k = 1`` and 0 beyond at
:math:`\beta_h = 0`; the paper's :math:`a_k = k^2 I_k(\beta)` is ``c = beta``, ``v = 1``). One
slope has the closed form of :func:`validation.causal.correlation_limit` with :math:`a = A_k`.
Several slopes do not commute: the equation is solved by collocation in :math:`u = \log s` on
``[log s0, 0]`` (Chebyshev points, the Volterra integrals by Gauss-Legendre on each
:math:`[u_0, u_i]` of the interpolant, spectrally accurate since ``g`` is analytic there) and
the exponential of the linear system in ``t``.

Recency. As :math:`s_0 \to 1` only the first two terms of the series of ``g`` in ``t`` vary at
first order, and with :math:`\kappa_g = \lambda_g/(1 - e^{-\lambda_g})` (1 at :math:`\lambda = 0`)

.. math:: \partial_{s_0} S_t(1^-) = t\,P - \frac{t^2}{2}\,Q, \qquad
          P = \sum_k e_k\sum_g A_{g,k}\lambda_g\kappa_g, \quad Q = \sum_k e_k\Big(\sum_g A_{g,k}\kappa_g\Big)^2,

:math:`e_k = e^{-\pi^2k^2/(2M^2)}`: the profile rises towards the end of the prompt until the
critical time :math:`t^* = 2P/Q` and falls there after it. For one head and one mode this is
:math:`t a_k = 2(1 - e^{-\lambda})`, the bound of the paper's U-shape theorem.
"""

from __future__ import annotations

import numpy as np
from scipy.interpolate import BarycentricInterpolator
from scipy.linalg import expm
from scipy.special import iv

from meanfield.causal import CausalAttention
from meanfield.checks import check_int, check_real

from .causal import PROFILE_MODES, _positions, correlation_limit, positional_kernel

#: Chebyshev points in ``u = log s`` of the collocation (the tests hold it to 1e-10 of the closed
#: form of one slope for ``s0 >= 1e-3``, slopes up to 8 and rates ``|A t| <= 10``).
COLLOCATION_POINTS = 33

#: Terms of the profile whose weight times rate is below this fraction of the largest are dropped.
NEGLIGIBLE_TERM = 1e-17


def _profile_weights(words: int) -> np.ndarray:
    k = np.arange(1, PROFILE_MODES + 1)
    return np.exp(-np.pi**2 * k**2 / (2.0 * words**2))


def slope_rates(model: CausalAttention) -> tuple[np.ndarray, np.ndarray]:
    r"""The slopes :math:`\lambda_g` and the rates :math:`A_{g,k}` of their heads, ``k = 1..PROFILE_MODES``.

    Parameters
    ----------
    model : meanfield.CausalAttention
        Causal USA (``normalized=False``) without query, key or value matrices.

    Returns
    -------
    slopes : numpy.ndarray, shape (groups,)
        The distinct ALiBi slopes, in the order their first head comes.
    rates : numpy.ndarray, shape (groups, PROFILE_MODES)
        :math:`A_{g,k}` (module docstring).

    Raises
    ------
    TypeError
        If ``model`` is not a :class:`~meanfield.CausalAttention`.
    ValueError
        For causal SA, or a model with matrices: the profile is derived for causal USA with scalar values.
    """
    if not isinstance(model, CausalAttention):
        raise TypeError(f"model must be a meanfield.CausalAttention, got {model!r}")
    if model.normalized or not model.without_matrices:
        raise ValueError("model: the retrieval profile is derived for causal USA (normalized=False) with scalar "
                         f"values per head and no query or key matrices, got {model!r}")
    k = np.arange(1, PROFILE_MODES + 1, dtype=float)
    rates: dict[float, np.ndarray] = {}
    for beta, alibi, _, _, value in model.head_parameters():
        if beta > 0:
            head = model.prefactor * value / beta * k**2 * iv(k, beta)
        else:  # k^2 I_k(beta) / beta -> 1/2 at k = 1, 0 beyond
            head = np.where(k == 1, 0.5 * model.prefactor * value, 0.0)
        rates[alibi] = rates.get(alibi, 0.0) + head
    return np.array(list(rates)), np.array(list(rates.values()))


def mixture_retrieval_profile(model: CausalAttention, t: float, s0, *, words: int) -> np.ndarray:
    r""":math:`S_t(s_0) = \sum_{k\ge1} e^{-\pi^2k^2/(2M^2)}\, g_k(t, 1; s_0)` of a multi-head causal USA.

    Parameters
    ----------
    model : meanfield.CausalAttention
        As for ``validation.causal_heads.slope_rates``: causal USA without matrices.
    t : float
        Depth (time), ``>= 0``, in the model's time (its prefactor).
    s0 : array_like
        Source positions in ``(0, 1]``.
    words : int
        Vocabulary size ``M >= 2``.

    Returns
    -------
    numpy.ndarray, shape of ``s0``
        The profile; one slope takes the closed form, several the collocation (module docstring).
    """
    t = check_real(t, "t", minimum=0.0)
    words = check_int(words, "words", minimum=2)
    s0 = _positions(s0, "s0")
    slopes, rates = slope_rates(model)
    weights = _profile_weights(words)
    terms = np.abs(weights * rates).max(axis=0)
    kept = terms >= NEGLIGIBLE_TERM * max(terms.max(), np.finfo(float).tiny)
    if slopes.size == 1:
        limits = correlation_limit(rates[0, kept][:, None], t, 1.0, s0.reshape(1, -1), slopes[0])
        return (weights[kept] @ limits).reshape(s0.shape)
    profile = [weights[kept] @ _mixture_correlation(slopes, rates[:, kept], t, source) if source < 1 else 0.0
               for source in s0.ravel()]
    return np.array(profile).reshape(s0.shape)


def _mixture_correlation(slopes: np.ndarray, rates: np.ndarray, t: float, s0: float) -> np.ndarray:
    """``g_k(t, 1; s0)`` per mode (column of ``rates``) by collocation in ``u = log s`` (module docstring)."""
    u0 = np.log(s0)
    count = COLLOCATION_POINTS
    u = u0 + 0.5 * (0.0 - u0) * (1.0 - np.cos(np.pi * np.arange(count) / (count - 1)))  # u[0] = u0, u[-1] = 0
    s = np.exp(u)
    gauss, gauss_weights = np.polynomial.legendre.leggauss(count)
    interpolate = BarycentricInterpolator(u, np.eye(count))
    # volterra[g, i, :] @ values: int_{s0}^{s_i} k_g(s_i, s') values(s') ds' of the interpolant
    volterra = np.zeros((slopes.size, count, count))
    for i in range(1, count):
        half = 0.5 * (u[i] - u0)
        nodes = u0 + half * (gauss + 1.0)
        quadrature = half * gauss_weights * np.exp(nodes)  # ds' = s' du'
        at_nodes = interpolate(nodes)
        for g, slope in enumerate(slopes):
            kernel = positional_kernel(np.full(count, s[i]), np.exp(nodes), slope)
            volterra[g, i] = (quadrature * kernel) @ at_nodes
    sources = np.stack([_source_kernel(s, s0, slope) for slope in slopes])  # k_g(s_i, s0), the limit at s_i = s0
    result = []
    for mode_rates in rates.T:
        system = np.zeros((count + 1, count + 1))
        system[:count, :count] = np.tensordot(mode_rates, volterra, axes=1)
        system[:count, count] = mode_rates @ sources
        result.append(expm(t * system)[count - 1, count])  # g' = A g + f, g(0) = 0, at s = 1
    return np.array(result)


def _source_kernel(s: np.ndarray, s0: float, slope: float) -> np.ndarray:
    r""":math:`k_\lambda(s, s_0)` on ``s >= s0``, continued to its limit at ``s = s0``."""
    if slope == 0.0:
        return 1.0 / s
    return slope * np.exp(-slope * (s - s0)) / -np.expm1(-slope * s)


def recency_time(model: CausalAttention, *, words: int) -> float:
    r"""The critical time :math:`t^* = 2P/Q` past which the profile falls towards the end of the prompt.

    Parameters
    ----------
    model : meanfield.CausalAttention
        As for ``validation.causal_heads.slope_rates``: causal USA without matrices.
    words : int
        Vocabulary size ``M >= 2``.

    Returns
    -------
    float
        :math:`t^*` (module docstring): for ``0 < t < t*`` the profile rises as
        :math:`s_0 \to 1` (recency), beyond it falls; ``0.0`` when it never rises
        (:math:`P \le 0`), ``inf`` when every rate vanishes.
    """
    words = check_int(words, "words", minimum=2)
    slopes, rates = slope_rates(model)
    weights = _profile_weights(words)
    kappa = np.array([1.0 if slope == 0 else slope / -np.expm1(-slope) for slope in slopes])
    rise = float(weights @ ((slopes * kappa) @ rates))
    curvature = float(weights @ (kappa @ rates) ** 2)
    if curvature == 0.0:
        return np.inf
    return max(0.0, 2.0 * rise / curvature)
