r"""Harmonic spectra of zonal kernels (Funk-Hecke).

A zonal kernel :math:`W(\langle x, y \rangle)` on :math:`S^{d-1}` acts on a
degree-:math:`l` spherical harmonic :math:`Y_l` by a scalar,

.. math:: \int_{S^{d-1}} W(\langle x, y\rangle)\, Y_l(y)\, d\sigma(y) = \lambda_l\, Y_l(x),
   \qquad
   \lambda_l = |S^{d-2}| \int_{-1}^{1} W(s)\, P_l^{(d)}(s)\, (1 - s^2)^{(d-3)/2}\, ds,

with :math:`P_l^{(d)}` the Gegenbauer polynomial normalized by :math:`P_l^{(d)}(1) = 1`
(Chebyshev :math:`T_l` on the circle, Legendre :math:`P_l` on :math:`S^2`).
For the attention kernel :math:`W(s) = e^{\beta s}` this is

.. math:: \lambda_l = (2\pi)^{d/2} \beta^{1 - d/2} I_{l + d/2 - 1}(\beta),

i.e. :math:`2\pi I_k(\beta)` on the circle and :math:`4\pi i_l(\beta)` on :math:`S^2`.
The solvers take their spectra from here; none re-derives them.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Callable

import numpy as np
from scipy.special import eval_gegenbauer, eval_chebyt, gammaln, ive, logsumexp, roots_jacobi

from .checks import EXP_OVERFLOW, check_int, check_real
from .docstrings import fill_docstrings
from .sphere import log_sphere_area, sphere_area

# Below this beta the series I_nu(b) = (b/2)^nu / Gamma(nu+1) (1 + O(b^2)) is exact to
# double precision, and it avoids the underflow of b^{-d/2} I_nu(b) as b -> 0.
_SMALL_BETA = 1e-8


#: Relative bound on the discarded tail of a kernel's expansion (below double round-off).
SERIES_TAIL = 2.0**-56


def truncation_degree(weights: Callable[[int], np.ndarray], guess: int) -> int:
    r"""Smallest ``L`` with :math:`\sum_{l > L} w_l \le` :data:`SERIES_TAIL` :math:`\sum_l w_l`.

    ``weights(top)`` returns the nonnegative :math:`w_0, \dots, w_{top}` (for a kernel: how
    much degree ``l`` can contribute at most); ``top`` starts at ``guess`` and doubles until
    the tail is reached. Shared by the series summation and the general PDE operators.
    """
    top = max(int(guess), 1)
    while True:
        tail = np.cumsum(weights(top)[::-1])[::-1]  # tail[l] = sum over degrees >= l
        if tail[-1] <= SERIES_TAIL * tail[0]:
            kept = np.flatnonzero(tail > SERIES_TAIL * tail[0])
            return int(kept[-1]) if kept.size else 0
        top *= 2


def _log_bessel_over_power(beta: float, degrees: np.ndarray, d: int, power: float) -> np.ndarray:
    """log of beta^{-power} I_{l+d/2-1}(beta) for beta > 0, finite for every order.

    ``ive`` underflows once the order is large against ``beta`` (order 383, ``d = 768``, at
    ``beta = 1``); there the power series is summed in logarithms (:func:`_log_bessel_series`).
    """
    nu = degrees + 0.5 * d - 1.0
    if beta < _SMALL_BETA:
        return nu * np.log(0.5 * beta) - gammaln(nu + 1.0) - power * np.log(beta)
    scaled = ive(nu, beta)
    log_values = np.empty_like(nu)
    direct = scaled > _SMALLEST_DIRECT
    log_values[direct] = np.log(scaled[direct]) + beta
    log_values[~direct] = _log_bessel_series(nu[~direct], beta)
    return log_values - power * np.log(beta)


#: ``ive`` values below this lose digits to subnormal numbers; the series takes over.
_SMALLEST_DIRECT = 1e-280


def _log_bessel_series(nu: np.ndarray, beta: float) -> np.ndarray:
    r""":math:`\log I_\nu(\beta) = \log\sum_k (\beta/2)^{\nu+2k} / (k!\,\Gamma(\nu+k+1))`, in logarithms.

    The terms grow while :math:`k(\nu+k) < (\beta/2)^2` and then fall faster than geometrically;
    summing to twice that peak plus 60 terms leaves a tail below :math:`10^{-17}` of the sum.
    """
    if nu.size == 0:
        return nu
    half = 0.5 * beta
    peak = 0.5 * (np.sqrt(nu.min() ** 2 + 4 * half * half) - nu.min())
    k = np.arange(int(2 * peak) + 60, dtype=float)[:, None]
    terms = (nu + 2 * k) * np.log(half) - gammaln(k + 1.0) - gammaln(nu + k + 1.0)
    return logsumexp(terms, axis=0)


#: The entry of the measure densities are taken against (``{uniform_measure}``).
UNIFORM_MEASURE = r"""
uniform_measure : bool
    Eigenvalues for densities relative to the uniform probability measure of
    :math:`S^{d-1}`: :math:`\lambda_l / |S^{d-1}|`, finite in every dimension (the surface
    measure's :math:`|S^{d-1}|` underflows double precision past ``d = 340``).
"""

#: The entries of the kernel's inverse temperature and the largest degree (``{beta_and_degree}``).
BETA_AND_DEGREE = """
beta : float
    Inverse temperature, ``>= 0``.
max_degree : int
    Largest degree (on the circle: largest Fourier mode ``k``).
"""


@fill_docstrings(beta_and_degree=BETA_AND_DEGREE, uniform_measure=UNIFORM_MEASURE)
def attention_spectrum(beta: float, max_degree: int, d: int, *, scaled: bool = False,
                       uniform_measure: bool = False) -> np.ndarray:
    r"""Eigenvalues :math:`\lambda_l`, ``l = 0..max_degree``, of :math:`\rho \mapsto \int e^{\beta\langle x,y\rangle}\rho(y)\,dy`.

    Parameters
    ----------
    {beta_and_degree}
    d : int
        Ambient dimension; the sphere is :math:`S^{d-1}` (``d = 2`` is the circle).
    scaled : bool
        Return :math:`e^{-\beta}\lambda_l`, finite for any ``beta`` (for ``beta`` up to
        thousands the unscaled values overflow).
    {uniform_measure}

    Returns
    -------
    numpy.ndarray, shape (max_degree + 1,)
    """
    beta, max_degree, d = _check_spectrum_arguments(beta, max_degree, d)
    if beta == 0.0:
        values = np.zeros(max_degree + 1)
        values[0] = 1.0 if uniform_measure else sphere_area(d)
        return values
    return _bessel_spectrum(beta, max_degree, d, 0.5 * d - 1.0, scaled, uniform_measure, "the attention spectrum")


@fill_docstrings(beta_and_degree=BETA_AND_DEGREE, uniform_measure=UNIFORM_MEASURE)
def attention_spectrum_over_beta(beta: float, max_degree: int, d: int, *, scaled: bool = False,
                                 uniform_measure: bool = False) -> np.ndarray:
    r""":math:`\lambda_l / \beta`, with its finite limit at ``beta = 0``.

    This is the symbol of the USA velocity potential :math:`(1/\beta) K * \rho` and of the
    linear growth rates. At ``beta = 0`` only degree 1 survives:
    :math:`\lambda_1/\beta \to |S^{d-1}| / d` (the Kuramoto limit), and degree 0, whose
    value diverges but which carries no gradient, is returned as 0.

    Parameters
    ----------
    {beta_and_degree}
    d : int
        Ambient dimension; the sphere is :math:`S^{d-1}`.
    scaled : bool
        Return :math:`e^{-\beta}\lambda_l/\beta`, finite for any ``beta``.
    {uniform_measure}

    Returns
    -------
    numpy.ndarray, shape (max_degree + 1,)
        :math:`\lambda_l/\beta` for ``l = 0..max_degree`` (``0`` at ``l = 0``).

    Raises
    ------
    OverflowError
        If an unscaled value overflows double precision (use ``scaled=True``).
    """
    beta, max_degree, d = _check_spectrum_arguments(beta, max_degree, d)
    if beta == 0.0:
        values = np.zeros(max_degree + 1)
        if max_degree >= 1:
            values[1] = (1.0 if uniform_measure else sphere_area(d)) / d
        # lambda_0 / beta diverges, but degree 0 is a constant potential with no gradient:
        # it drops out of every velocity and growth rate, so 0 is returned in its place.
        return values
    return _bessel_spectrum(beta, max_degree, d, 0.5 * d, scaled, uniform_measure, "lambda_l / beta")


def _check_spectrum_arguments(beta, max_degree, d) -> tuple[float, int, int]:
    return (check_real(beta, "beta", minimum=0.0), check_int(max_degree, "max_degree", minimum=0),
            check_int(d, "d", minimum=2))


def _bessel_spectrum(beta: float, max_degree: int, d: int, power: float, scaled: bool, uniform_measure: bool,
                     what: str) -> np.ndarray:
    """(2 pi)^{d/2} beta^{-power} I_{l+d/2-1}(beta), l = 0..max_degree (times e^{-beta} if scaled, over
    |S^{d-1}| for the uniform measure), for beta > 0.

    A copy of the values kept per arguments: every solver a run builds (a hand-over's two, a
    shadow grid, a sweep's solver per point) asks for the same few spectra, whose Bessel
    functions cost more than a small grid's step.
    """
    return _kept_bessel_spectrum(beta, max_degree, d, power, scaled, uniform_measure, what).copy()


@lru_cache(maxsize=256)
def _kept_bessel_spectrum(beta: float, max_degree: int, d: int, power: float, scaled: bool, uniform_measure: bool,
                          what: str) -> np.ndarray:
    degrees = np.arange(max_degree + 1, dtype=float)
    log_values = 0.5 * d * np.log(2.0 * np.pi) + _log_bessel_over_power(beta, degrees, d, power)
    if uniform_measure:
        log_values = log_values - log_sphere_area(d)
    if scaled:
        log_values = log_values - beta
    elif np.max(log_values) > EXP_OVERFLOW:
        raise OverflowError(f"{what} at beta={beta} overflows double precision; "
                            "use scaled=True (values times exp(-beta))")
    return np.exp(log_values)


def zonal_polynomial(l: int, d: int, s: np.ndarray) -> np.ndarray:
    r"""Zonal (Gegenbauer) polynomial of degree ``l`` for :math:`S^{d-1}`, normalized to 1 at ``s = 1``.

    :math:`P_l(s) = C_l^{(d-2)/2}(s) / C_l^{(d-2)/2}(1)`, and the Chebyshev polynomial
    :math:`T_l(s) = \cos(l \arccos s)` on the circle (``d = 2``).

    Parameters
    ----------
    l : int
        Degree, ``>= 0``.
    d : int
        Ambient dimension, ``>= 2``.
    s : array_like
        Points of ``[-1, 1]`` (an inner product :math:`\langle x, y \rangle`).

    Returns
    -------
    numpy.ndarray
        :math:`P_l(s)`, of the shape of ``s``.
    """
    if d == 2:
        return eval_chebyt(l, s)
    alpha = 0.5 * (d - 2)
    return eval_gegenbauer(l, alpha, s) / eval_gegenbauer(l, alpha, 1.0)


@fill_docstrings(uniform_measure=UNIFORM_MEASURE)
def funk_hecke_spectrum(potential: Callable[[np.ndarray], np.ndarray], max_degree: int, d: int,
                        *, nodes: int | None = None, uniform_measure: bool = False) -> np.ndarray:
    r"""Eigenvalues :math:`\lambda_l`, ``l = 0..max_degree``, of convolution with a zonal ``potential(s)``.

    Gauss-Jacobi quadrature with weight :math:`(1-s^2)^{(d-3)/2}` integrates the Funk-Hecke
    formula (module docstring); for a smooth potential it is exact to round-off once
    ``nodes`` exceeds ``max_degree`` plus the polynomial degree needed to resolve ``potential``.

    Parameters
    ----------
    potential : callable
        Vectorized ``W(s)`` for ``s`` in ``[-1, 1]``.
    max_degree, d : int
        Largest degree and ambient dimension.
    nodes : int, optional
        Quadrature nodes; default ``max(256, 2 max_degree + 64)``.
    {uniform_measure}

    Returns
    -------
    numpy.ndarray, shape (max_degree + 1,)
        :math:`\lambda_l = |S^{d-2}| \int_{-1}^{1} W(s) P_l(s) (1-s^2)^{(d-3)/2}\,ds`.

    Raises
    ------
    ValueError
        If ``potential`` does not return finite values of the shape of its argument.
    """
    max_degree = check_int(max_degree, "max_degree", minimum=0)
    d = check_int(d, "d", minimum=2)
    nodes = max(256, 2 * max_degree + 64) if nodes is None else check_int(nodes, "nodes", minimum=1)
    alpha = 0.5 * (d - 3)
    s, w = roots_jacobi(nodes, alpha, alpha)
    values = np.asarray(potential(s), dtype=float)
    if values.shape != s.shape or not np.all(np.isfinite(values)):
        raise ValueError("potential must map an array of s in [-1, 1] to finite values of the same shape")
    # |S^{d-2}| int (1 - s^2)^{(d-3)/2} ds = |S^{d-1}|  (|S^0| = 2 on the circle)
    weighted = w * values * (1.0 / w.sum() if uniform_measure else sphere_area(d - 1))
    return np.array([np.sum(weighted * zonal_polynomial(l, d, s)) for l in range(max_degree + 1)])
