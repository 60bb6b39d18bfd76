r"""The high-dimensional checks: particles against the zonal equation on :math:`S^{d-1}`, and the limit Gram dynamics.

Two convergences, each measured as a slope with a bootstrap interval over seeds
(:func:`validation.convergence.fit_rates`):

* mean-field, in ``n`` at fixed ``d``: tokens sampled from a zonal density
  (:func:`sample_zonal`) against :class:`~solvers.ZonalSphereSpectral`'s law of
  :math:`u = \langle x, e\rangle`, in the Wasserstein distance of the laws of :math:`u`
  (:func:`zonal_law_w1`); the expected slope is :math:`-1/2` (docs/theory/references.md, "Mean-field convergence");
* in ``d`` at fixed ``n`` ("A mathematical perspective on Transformers", Thm 6.9): iid uniform
  tokens' inner products against the orthogonal-token curve :math:`r(t)`
  (:func:`~validation.orthogonal_token_inner_product`), which is their limit as
  :math:`d\to\infty`: the largest gap over pairs and times falls like
  :math:`\sqrt{\log n / d}`, a slope of :math:`-1/2` in :math:`\log d`.
"""

from __future__ import annotations

import numpy as np

from meanfield.checks import check_int
from meanfield.particles import simulate_particles
from meanfield.sampling import sample_uniform
from solvers.sphere.zonal import ZonalSphereSpectral

from .convergence import fit_rates
from .references import orthogonal_token_inner_product

#: Gauss-Legendre nodes per interval between sorted samples in :func:`zonal_law_w1`.
W1_NODES = 8


def sample_zonal(solver: ZonalSphereSpectral, coefficients: np.ndarray, n: int,
                 generator: np.random.Generator) -> np.ndarray:
    r"""``n`` iid points of :math:`S^{d-1}` from the solver's zonal density.

    :math:`u` by inverting the exact distribution function (:meth:`solvers.ZonalSphereSpectral.mass_profile`,
    bisection to round-off on a fine table), then :math:`x = u e + \sqrt{1-u^2}\,\xi` with
    :math:`\xi` uniform on the sphere orthogonal to the last axis ``e``.

    Parameters
    ----------
    solver : ZonalSphereSpectral
        The solver whose density it is.
    coefficients : numpy.ndarray
        The density's coefficients (``ds.coefficient[k]`` of a run).
    n : int
        Points.
    generator : numpy.random.Generator
        The random stream.

    Returns
    -------
    numpy.ndarray, shape (n, d)
    """
    n, d = check_int(n, "n", minimum=1), solver.d
    table = np.linspace(-1.0, 1.0, 20001)
    profile = np.maximum.accumulate(np.clip(solver.mass_profile(coefficients, table), 0.0, None))
    target = generator.uniform(0.0, profile[-1], n)
    index = np.clip(np.searchsorted(profile, target), 1, table.size - 1)
    low, high = table[index - 1], table[index]
    for _ in range(40):  # bisection inside the table's cell
        middle = 0.5 * (low + high)
        below = solver.mass_profile(coefficients, middle) < target
        low, high = np.where(below, middle, low), np.where(below, high, middle)
    u = 0.5 * (low + high)
    fibre = sample_uniform(n, d - 1, generator)
    return np.concatenate([np.sqrt(1.0 - u * u)[:, None] * fibre, u[:, None]], axis=1)


def zonal_law_w1(u_samples: np.ndarray, solver: ZonalSphereSpectral, coefficients: np.ndarray) -> float:
    r"""The Wasserstein distance :math:`W_1 = \int_{-1}^{1}|F_n(u) - F(u)|\,du` between the empirical law of ``u_samples`` and the solver's.

    :math:`F_n` is constant between sorted samples and :math:`F` (:meth:`solvers.ZonalSphereSpectral.mass_profile`)
    is smooth: each interval takes a Gauss-Legendre rule of ``W1_NODES`` nodes (exact but
    where :math:`F` crosses the step, a kink that costs :math:`O(h^2)` of the interval).

    Parameters
    ----------
    u_samples : numpy.ndarray
        The particles' :math:`u = \langle x_i, e\rangle` (``x[..., -1]``).
    solver : ZonalSphereSpectral
        The solver whose law it is.
    coefficients : numpy.ndarray
        The density's coefficients.

    Returns
    -------
    float
    """
    u = np.sort(np.asarray(u_samples, dtype=float))
    edges = np.concatenate([[-1.0], u, [1.0]])
    steps = np.arange(u.size + 1) / u.size
    x, w = np.polynomial.legendre.leggauss(W1_NODES)
    half = 0.5 * np.diff(edges)
    points = (0.5 * (edges[1:] + edges[:-1]))[:, None] + half[:, None] * x
    profile = solver.mass_profile(coefficients, points.ravel()).reshape(points.shape)
    return float(np.sum(half[:, None] * w * np.abs(profile - steps[:, None])))


def zonal_convergence(model, rho0, d: int, times, *, sizes=(128, 256, 512, 1024), seeds: int = 8,
                      lmax: int = 32, rtol: float = 1e-9, resamples: int = 2000, confidence: float = 0.95,
                      seed: int = 0) -> dict:
    r"""Particles sampled from a zonal density against :class:`~solvers.ZonalSphereSpectral`, in ``n``.

    Parameters
    ----------
    model : SelfAttention or ZonalAggregation
        A zonal model.
    rho0 : callable
        A zonal density of points ``(..., d)`` (any positive scale).
    d : int
        The dimension.
    times : array_like
        Output times (the first is the start).
    sizes, seeds
        Token counts and independent samples per count (run as one batch of systems).
    lmax, rtol
        The solver's settings.
    resamples, confidence, seed
        The bootstrap of the slope, and the seed of the samples and the bootstrap.

    Returns
    -------
    dict
        ``distance`` (size, seed, time) of :func:`zonal_law_w1`, ``rate`` (time) the slope of
        ``log mean distance`` in ``log n``, ``rate_low`` and ``rate_high`` its interval, and
        ``error_estimate`` (time) the solver's.
    """
    generator = np.random.default_rng(seed)
    solver = ZonalSphereSpectral(model, d=d, lmax=lmax, rtol=rtol)
    pde = solver.solve(rho0, times, progress=False)
    start = pde.coefficient.values[0]
    distances = np.empty((len(sizes), seeds, len(times)))
    for i, n in enumerate(sizes):
        x0 = np.stack([sample_zonal(solver, start, n, generator) for _ in range(seeds)])
        x = simulate_particles(model, x0, times, progress=False).x.values
        for k in range(len(times)):
            coefficients = pde.coefficient.values[k]
            distances[i, :, k] = [zonal_law_w1(x[s, k, :, -1], solver, coefficients) for s in range(seeds)]
    rate, low, high = fit_rates(np.asarray(sizes), distances, resamples, confidence, generator)
    return {"distance": distances, "rate": rate, "rate_low": low, "rate_high": high,
            "error_estimate": pde.error_estimate.values}


def gram_limit_gap(model, n: int, dims, times, *, seeds: int = 8, resamples: int = 2000, confidence: float = 0.95,
                   seed: int = 0) -> dict:
    r"""iid uniform tokens at growing ``d`` against their :math:`d\to\infty` limit, the orthogonal-token curve.

    For each ``d`` and seed, the gap :math:`\max_{i\ne j,\,t}|\langle x_i(t), x_j(t)\rangle - r(t)|`
    over the output times, and its slope in :math:`\log d` (Thm 6.9: :math:`-1/2`).

    Parameters
    ----------
    model : SelfAttention
        SA or USA with identity matrices.
    n : int
        Tokens.
    dims : sequence of int
        The dimensions (each ``>= n`` is the theorem's regime).
    times : array_like
        Output times from 0.
    seeds, resamples, confidence, seed
        Samples per dimension, and the bootstrap of the slope.

    Returns
    -------
    dict
        ``gap`` (dimension, seed), ``curve`` the limit :math:`r(t)`, ``inner_products``
        (dimension, time, pair) of the first seed's tokens, ``rate`` the slope of
        ``log mean gap`` in ``log d`` and ``rate_low``, ``rate_high`` its interval.
    """
    generator = np.random.default_rng(seed)
    curve = orthogonal_token_inner_product(model, n, times)
    off_diagonal = ~np.eye(n, dtype=bool)
    gaps = np.empty((len(dims), seeds))
    first = np.empty((len(dims), len(curve), n * (n - 1)))
    for i, d in enumerate(dims):
        x0 = sample_uniform(n, d, generator, batch=seeds)
        x = simulate_particles(model, x0, times, progress=False).x.values
        gram = np.einsum("stid,stjd->stij", x, x)[..., off_diagonal]
        gaps[i] = np.abs(gram - curve[None, :, None]).max(axis=(1, 2))
        first[i] = gram[0]
    rate, low, high = fit_rates(np.asarray(dims), gaps[..., None], resamples, confidence, generator)
    return {"gap": gaps, "curve": curve, "inner_products": first, "rate": float(rate[0]), "rate_low": float(low[0]),
            "rate_high": float(high[0])}
