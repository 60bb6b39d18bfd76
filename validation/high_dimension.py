r"""The high-dimensional checks: particles against the zonal equation on :math:`S^{d-1}`, and the limit Gram dynamics.

The mean-field convergence in ``n`` at fixed ``d`` is :func:`validation.mean_field_convergence`
with ``geometry="S^k"`` (:class:`~solvers.ZonalSphereSpectral` against particles, in the
Wasserstein distance of the laws of :math:`u = \langle x, e\rangle`); :func:`sample_zonal` draws
tokens from a zonal solver's density. Here, the convergence in ``d`` at fixed ``n``, measured as a
slope with a bootstrap interval over seeds (:func:`validation.convergence.fit_rates`):

* "A mathematical perspective on Transformers", Thm 6.9: iid uniform
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
