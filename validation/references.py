r"""Exact reference results (docs/theory/references.md) as code.

The tests of the particle system and of the PDE solvers compare against these,
so each formula lives here once.
"""

from __future__ import annotations

import numpy as np
from scipy.integrate import solve_ivp
from scipy.special import comb

from meanfield.checks import check_int, check_times
from meanfield.sphere import sphere_area


def growth_rate(model, degree: int, d: int) -> float:
    r"""Linear growth rate :math:`\gamma_l` of a degree-``l`` perturbation of the uniform state.

    .. math::
        \text{linear } v = \nabla(\Phi*\rho):\ \gamma_l = l(l+d-2)\,(\rho_0 \hat\Phi_l - D),
        \qquad
        \text{SA:}\ \gamma_l = l(l+d-2)\Big(\frac{c\,\lambda_l}{\beta\lambda_0} - D\Big),

    with :math:`\rho_0 = 1/|S^{d-1}|`, :math:`\hat\Phi_l = c\lambda_l/\beta` for USA (``c`` the
    value scalar), the Funk-Hecke spectrum of ``W`` for zonal aggregation.

    Parameters
    ----------
    model : SelfAttention or ZonalAggregation
        A zonal model.
    degree : int
        The degree ``l`` (on the circle: the Fourier mode ``k``).
    d : int
        Ambient dimension; the sphere is :math:`S^{d-1}`.

    Returns
    -------
    float
        :math:`\gamma_l` (``0`` at ``l = 0``).
    """
    degree = check_int(degree, "degree", minimum=0)
    d = check_int(d, "d", minimum=2)
    eigen = degree * (degree + d - 2)
    if eigen == 0:
        return 0.0
    # spectra per unit of uniform measure: rho_0 lambda_l, finite in every dimension
    if not model.velocity_is_linear:
        spectrum = model.kernel_spectrum(degree, d, uniform_measure=True)
        drive = model.value_scale * spectrum[degree] / (model.beta * spectrum[0])
    else:
        drive = model.potential_spectrum(degree, d, uniform_measure=True)[degree]
    return float(eigen * (drive - model.diffusion))


def orthogonal_token_inner_product(model, n: int, times) -> np.ndarray:
    r"""Common pairwise inner product :math:`r(t)` of ``n <= d`` initially orthonormal tokens.

    .. math::
        \text{SA:}\ r' = \frac{2c\,(1-r)(1+(n-1)r)}{e^{\beta(1-r)} + n - 1},\qquad
        \text{USA:}\ r' = \frac{2c}{n} e^{\beta r}(1-r)(1+(n-1)r),

    (the SA form is the library's divided by :math:`e^{\beta r}`, which cannot overflow;
    time-rescaled USA carries :math:`e^{\beta(r-1)}`), solved to ``rtol = 1e-13``.

    Parameters
    ----------
    model : SelfAttention
        Zonal SA or USA (``Q = K = I``, ``V = cI``).
    n : int
        Number of tokens, ``>= 2`` (the tokens must fit: ``n <= d``).
    times : array_like
        Increasing times from the initial one, where :math:`r = 0`.

    Returns
    -------
    numpy.ndarray
        :math:`r(t)` at ``times``.
    """
    n = check_int(n, "n", minimum=2)
    times = check_times(times)
    solution = solve_ivp(_orthogonal_token_rhs(model, n), (times[0], times[-1]), [0.0], t_eval=times,
                         method="DOP853", rtol=1e-13, atol=1e-15)
    return solution.y[0]


def orthogonal_token_clustering_time(model, n: int, level: float, horizon: float) -> float:
    r"""First time :math:`t` with :math:`r(t) = ` ``level`` on the orthogonal-token curve, or ``inf``.

    The curve of :func:`orthogonal_token_inner_product` from :math:`r(0) = 0`; ``inf`` when it
    does not reach ``level`` before ``horizon``. It approximates the boundary
    :math:`\{(\beta, t): \langle x_1(t), x_2(t)\rangle = \text{level}\}` of the phase diagram
    of iid uniform tokens when ``d >> n``.

    Parameters
    ----------
    model : SelfAttention
        Zonal SA or USA.
    n : int
        Number of tokens, ``>= 2``.
    level : float
        The inner product to reach, in ``(0, 1)``.
    horizon : float
        The last time searched.

    Returns
    -------
    float
        The first time, or ``inf``.

    Raises
    ------
    ValueError
        If ``level`` is not in ``(0, 1)``.
    """
    n = check_int(n, "n", minimum=2)
    if not 0.0 < level < 1.0:
        raise ValueError(f"level must lie in (0, 1), got {level!r}")

    def reached(t, r):
        return r[0] - level
    reached.terminal = True
    solution = solve_ivp(_orthogonal_token_rhs(model, n), (0.0, horizon), [0.0], events=reached,
                         method="DOP853", rtol=1e-13, atol=1e-15)
    return float(solution.t_events[0][0]) if solution.t_events[0].size else float("inf")


def consensus_rate(model) -> float:
    r"""The exponential rate at which :math:`1 - \langle x_i, x_j\rangle` vanishes once the tokens are close.

    Near one cluster every token moves toward the (weighted) mean at rate :math:`c` (SA; USA:
    :math:`c\,e^{\beta}`, times :math:`e^{-\beta}` when time-rescaled), so distances contract at
    that rate and :math:`1 - \langle x_i, x_j\rangle`, their half square, at twice it: the slope at
    :math:`r = 1` of the orthogonal-token equation, :math:`-f'(1) = 2c` (SA) and
    :math:`2c\,e^{\beta}` (USA), whatever ``n``. With ``d >= n`` iid tokens lie in a common
    hemisphere almost surely (Wendel) and cluster at this rate in the end.

    Parameters
    ----------
    model : SelfAttention
        Zonal SA or USA.

    Returns
    -------
    float
    """
    if not model.normalized:
        return float(2 * model.value_scale * np.exp(model.beta * (0.0 if model.time_rescaled else 1.0)))
    return float(2 * model.value_scale)


def _orthogonal_token_rhs(model, n: int):
    beta, c = model.beta, model.value_scale
    if model.normalized:
        def rhs(t, r):
            return 2 * c * (1 - r) * (1 + (n - 1) * r) / (np.exp(beta * (1 - r)) + n - 1)
        return rhs
    offset = beta if model.time_rescaled else 0.0

    def rhs(t, r):
        return (2 * c / n) * np.exp(beta * r - offset) * (1 - r) * (1 + (n - 1) * r)
    return rhs


def wendel_probability(n: int, d: int) -> float:
    r"""Probability that ``n`` iid uniform points of :math:`S^{d-1}` lie in a common open hemisphere.

    .. math:: p_{n,d} = 2^{-(n-1)} \sum_{k=0}^{d-1} \binom{n-1}{k}

    Parameters
    ----------
    n : int
        Number of points, ``>= 1``.
    d : int
        Ambient dimension, ``>= 1``.

    Returns
    -------
    float
        :math:`p_{n,d}` (``1`` when ``n <= d``).
    """
    n = check_int(n, "n", minimum=1)
    d = check_int(d, "d", minimum=1)
    return float(sum(comb(n - 1, k, exact=True) for k in range(d)) / 2 ** (n - 1))


def circle_stationary_density(model, cells: int, start: np.ndarray, *, tol: float = 1e-13,
                              damping: float = 0.5, max_iterations: int = 20000) -> np.ndarray:
    r"""A stationary density with diffusion on the circle, from its self-consistency (docs/theory/references.md).

    Zero flux gives :math:`\rho \propto e^{\phi[\rho]/D}` with the velocity potential
    :math:`\phi` (USA: :math:`\phi = (1/\beta) K*\rho`, i.e. :math:`\rho\propto e^{K*\rho/(\beta D)}`;
    SA: :math:`\phi = (1/\beta)\log K*\rho`, i.e. :math:`\rho \propto (K*\rho)^{1/(\beta D)}`).
    Solved by damped fixed-point iteration on ``cells`` equispaced points (spectrally exact
    convolution) from ``start``, which selects the branch (the uniform density is always a
    solution). Values are point values at the cell centres, normalized to mass one.

    Parameters
    ----------
    model : SelfAttention or ZonalAggregation
        A zonal model with diffusion ``D > 0``.
    cells : int
        Number of equispaced points, ``>= 8``.
    start : numpy.ndarray, shape (cells,)
        The first iterate (positive; it selects the branch).
    tol : float
        Convergence threshold on the relative max-norm change of an iteration.
    damping : float
        Weight of the new iterate in each update, in ``(0, 1]``.
    max_iterations : int
        Iterations before giving up.

    Returns
    -------
    numpy.ndarray, shape (cells,)
        The stationary density's point values.

    Raises
    ------
    ValueError
        If the model has no diffusion.
    RuntimeError
        If the iteration does not converge to ``tol`` (relative, max norm).
    """
    diffusion = model.diffusion
    if diffusion <= 0:
        raise ValueError(f"a stationary state with diffusion needs diffusion > 0, got {diffusion!r}")
    cells = check_int(cells, "cells", minimum=8)
    kmax = cells // 2
    nonlinear = not model.velocity_is_linear
    symbol = model.kernel_spectrum(kmax, 2) if nonlinear else model.potential_spectrum(kmax, 2)
    width = 2 * np.pi / cells
    rho = np.asarray(start, dtype=float)
    rho = rho / (width * rho.sum())
    for _ in range(max_iterations):
        convolution = np.fft.irfft(symbol * np.fft.rfft(rho), cells)
        if nonlinear:
            phi = model.value_scale * np.log(convolution) / model.beta
        else:
            phi = convolution
        gibbs = np.exp((phi - phi.max()) / diffusion)
        gibbs /= width * gibbs.sum()
        change = np.abs(gibbs - rho).max() / rho.max()
        rho = (1 - damping) * rho + damping * gibbs
        if change < tol:
            return gibbs
    raise RuntimeError(f"the self-consistency iteration did not converge to {tol} in {max_iterations} steps")
