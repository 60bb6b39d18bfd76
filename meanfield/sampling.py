r"""Initial measures: iid samples on :math:`S^{d-1}`.

All samplers draw exactly from their target law (no binning, no grid
approximation of a callable density), so that sampling error is pure Monte Carlo
error, :math:`O(n^{-1/2})`, as the mean-field convergence study assumes.
"""

from __future__ import annotations

import numbers
from typing import Callable

import numpy as np

from .checks import check_int, check_real
from .sphere import circle_points, normalize

#: What every ``rng`` argument of the library accepts.
RNG = "int | numpy.random.Generator | None"


def as_generator(rng: int | np.random.Generator | None) -> np.random.Generator:
    """A :class:`numpy.random.Generator` from a seed, a generator, or ``None`` (fresh entropy)."""
    if isinstance(rng, np.random.Generator):
        return rng
    if rng is None or _is_seed(rng):
        return np.random.default_rng(rng)
    raise TypeError(f"rng must be a nonnegative int seed, a numpy Generator or None, got {rng!r}")


def reproducible_seed(rng: int | np.random.Generator | None) -> int:
    """An int seed from which a run can be repeated exactly, for the record of the run.

    An int is its own seed; a Generator gives a seed drawn from it (so the run depends on its
    state, and repeating it with ``rng=<recorded seed>`` needs no generator); ``None`` gives
    fresh entropy from the operating system. The run then draws from ``default_rng(seed)``.
    """
    if isinstance(rng, np.random.Generator):
        return int(rng.integers(2**63))
    if rng is None:
        return int(np.random.SeedSequence().entropy)
    if _is_seed(rng):
        return int(rng)
    raise TypeError(f"rng must be a nonnegative int seed, a numpy Generator or None, got {rng!r}")


def _is_seed(value: object) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool) and value >= 0


def sample_uniform(n: int, d: int, rng: int | np.random.Generator | None = None,
                   *, batch: int | None = None) -> np.ndarray:
    r"""``n`` iid points uniform on the unit sphere :math:`S^{d-1}` (normalised Gaussian vectors).

    Parameters
    ----------
    n : int
        Number of points (tokens), at least 1.
    d : int
        Ambient dimension, at least 2 (``d = 2``: the circle).
    rng : int, numpy.random.Generator or None
        Seed or generator; ``None`` draws fresh entropy.
    batch : int, optional
        Number of independent systems: a leading axis of that length.

    Returns
    -------
    numpy.ndarray
        Shape ``(n, d)``, or ``(batch, n, d)``, each row of unit norm.

    Raises
    ------
    ValueError
        If ``n``, ``d`` or ``batch`` is not an integer in range (the message names it).

    Examples
    --------
    >>> sample_uniform(4, 3, rng=0).shape
    (4, 3)
    """
    n = check_int(n, "n", minimum=1)
    d = check_int(d, "d", minimum=2)
    shape = (n, d) if batch is None else (check_int(batch, "batch", minimum=1), n, d)
    return normalize(as_generator(rng).standard_normal(shape))


def sample_circle(n: int, density: Callable[[np.ndarray], np.ndarray] | np.ndarray,
                  rng: int | np.random.Generator | None = None) -> np.ndarray:
    r"""``n`` iid points of the circle, shape ``(n, 2)``, drawn from a density in :math:`\theta`.

    Every sampler takes the number of points first, then the law, then ``rng``.

    Parameters
    ----------
    n : int
        Number of points.
    density : callable or numpy.ndarray
        A vectorized callable :math:`\rho(\theta)` (any positive multiple of a density,
        bounded), sampled exactly by rejection; or an array of ``N`` nonnegative cell values
        on the uniform grid of cells :math:`[2\pi j/N, 2\pi (j+1)/N)`, sampled exactly as that
        piecewise-constant density.
    rng : int, numpy.random.Generator or None
        Seed or generator of the draws.

    Returns
    -------
    numpy.ndarray, shape (n, 2)
        The points :math:`(\cos\theta_i, \sin\theta_i)`.

    Raises
    ------
    ValueError
        If ``n < 1`` or the cell values are negative, not finite, or of zero mass.
    """
    n = check_int(n, "n", minimum=1)
    gen = as_generator(rng)
    if callable(density):
        theta = _rejection_sample(density, n, gen, lambda m: gen.uniform(0, 2 * np.pi, m),
                                  probe=np.linspace(0, 2 * np.pi, 4097)[:-1])
        return circle_points(theta)
    cells = np.asarray(density, dtype=float)
    if cells.ndim != 1 or cells.size < 1 or not np.all(np.isfinite(cells)) or np.any(cells < 0) \
            or cells.sum() <= 0:
        raise ValueError("density must be a callable or a 1-d array of finite, nonnegative cell "
                         "values with positive mass")
    width = 2 * np.pi / cells.size
    index = gen.choice(cells.size, size=n, p=cells / cells.sum())
    return circle_points((index + gen.random(n)) * width)


def sample_sphere(n: int, density: Callable[[np.ndarray], np.ndarray], d: int = 3,
                  rng: int | np.random.Generator | None = None) -> np.ndarray:
    r"""``n`` iid points of :math:`S^{d-1}` drawn from a density, by rejection from the uniform law.

    Parameters
    ----------
    n : int
        Number of points, at least 1.
    density : callable
        ``density(points)`` for points of shape ``(..., d)``: non-negative values, with respect
        to the surface measure; it need not be normalised (only its ratios matter).
    d : int
        Ambient dimension, at least 2 (default 3, the sphere :math:`S^2`).
    rng : int, numpy.random.Generator or None
        Seed or generator.

    Returns
    -------
    numpy.ndarray
        Shape ``(n, d)``, unit rows.

    Raises
    ------
    ValueError
        If the density is negative, not finite, or zero on every probe point.
    """
    n = check_int(n, "n", minimum=1)
    d = check_int(d, "d", minimum=2)
    gen = as_generator(rng)

    def propose(m: int) -> np.ndarray:
        return normalize(gen.standard_normal((m, d)))

    return _rejection_sample(density, n, gen, propose, probe=propose(8192))


def sample_interval(n: int, density: Callable[[np.ndarray], np.ndarray], interval,
                    rng: int | np.random.Generator | None = None) -> np.ndarray:
    r"""``n`` iid tokens of :math:`\mathbb{R}` (``d = 1``) drawn from a density on an interval, by rejection.

    Parameters
    ----------
    n : int
        Number of tokens, at least 1.
    density : callable
        A vectorized :math:`\rho(z)` on ``interval`` (non-negative, bounded; only its ratios matter).
    interval : (float, float)
        ``(lo, hi)``, ``hi > lo``: the support of the law.
    rng : int, numpy.random.Generator or None
        Seed or generator.

    Returns
    -------
    numpy.ndarray, shape (n, 1)
        The tokens, as :class:`~meanfield.PureAttention` takes them.

    Raises
    ------
    ValueError
        If ``n < 1``, ``interval`` is not increasing, or the density is negative, not finite,
        or zero on every probe point.
    """
    n = check_int(n, "n", minimum=1)
    lo, hi = (check_real(end, "interval") for end in interval)
    if not hi > lo:
        raise ValueError(f"interval must be (lo, hi) with hi > lo, got {interval!r}")
    gen = as_generator(rng)
    z = _rejection_sample(density, n, gen, lambda m: gen.uniform(lo, hi, m), probe=np.linspace(lo, hi, 4097))
    return z[:, None]


def _rejection_sample(density, n, gen, propose, probe) -> np.ndarray:
    """Rejection from the uniform law with an envelope that is verified on every proposal.

    The envelope starts at 1.25 x the largest value seen on ``probe``; if any proposal exceeds
    it, the envelope is raised and sampling restarts from scratch. The result is exactly iid
    from the density whenever the final envelope bounds it, which every proposal has confirmed.
    """
    values = np.asarray(density(probe), dtype=float)
    if values.shape != probe.shape[:1] or not np.all(np.isfinite(values)) or np.any(values < 0):
        raise ValueError("density must map an array of points to finite, nonnegative values "
                         "of matching shape")
    if values.max() <= 0:
        raise ValueError("density is zero everywhere it was probed: it has no mass")
    bound = 1.25 * values.max()
    while True:
        accepted, count = [], 0
        while count < n:
            m = max(1024, 2 * (n - count))
            points = propose(m)
            rho = np.asarray(density(points), dtype=float)
            if np.any(rho > bound):
                break
            keep = points[gen.random(m) * bound < rho]
            accepted.append(keep)
            count += len(keep)
        else:
            return np.concatenate(accepted)[:n]
        bound = 2.0 * rho.max()


def sample_von_mises_fisher(n: int, mean: np.ndarray, kappa: float,
                            rng: int | np.random.Generator | None = None) -> np.ndarray:
    r"""``n`` iid points from the von Mises-Fisher law :math:`\propto e^{\kappa\langle\mu, x\rangle}` on :math:`S^{d-1}`.

    Wood's (1994) algorithm: the component :math:`w = \langle \mu, x\rangle` by rejection
    (exact inversion on :math:`S^2`), the tangent direction uniformly.

    Parameters
    ----------
    n : int
        Number of points.
    mean : array_like, shape (d,)
        Mean direction (normalized here).
    kappa : float
        Concentration, ``>= 0`` (``0`` is uniform).
    rng : int, numpy.random.Generator or None
        Seed or generator of the draws.

    Returns
    -------
    numpy.ndarray, shape (n, d)
        The points, on the unit sphere.

    Raises
    ------
    ValueError
        If ``mean`` is not a nonzero finite vector of length ``>= 2``, ``kappa < 0`` or ``n < 1``.
    """
    mu = np.asarray(mean, dtype=float)
    if mu.ndim != 1 or mu.size < 2 or not np.all(np.isfinite(mu)) or np.linalg.norm(mu) == 0:
        raise ValueError(f"mean must be a nonzero finite vector of length d >= 2, got {mean!r}")
    mu = mu / np.linalg.norm(mu)
    kappa = check_real(kappa, "kappa", minimum=0.0)
    n = check_int(n, "n", minimum=1)
    gen = as_generator(rng)
    d = mu.size
    if kappa == 0:
        return sample_uniform(n, d, gen)
    w = _vmf_component(kappa, d, n, gen)
    tangent = gen.standard_normal((n, d))
    tangent -= np.outer(tangent @ mu, mu)
    tangent = normalize(tangent)
    return w[:, None] * mu + np.sqrt(np.clip(1 - w * w, 0, None))[:, None] * tangent


def _vmf_component(kappa: float, d: int, n: int, gen: np.random.Generator) -> np.ndarray:
    if d == 3:
        u = gen.random(n)
        # Inverse CDF of w on S^2, written with log1p/expm1 so that large kappa stays exact.
        return 1.0 + np.log1p(u * np.expm1(-2.0 * kappa)) / kappa
    b = (d - 1) / (2 * kappa + np.sqrt(4 * kappa**2 + (d - 1) ** 2))
    x0 = (1 - b) / (1 + b)
    c = kappa * x0 + (d - 1) * np.log(1 - x0 * x0)
    out = np.empty(0)
    while out.size < n:
        m = 2 * (n - out.size) + 16
        z = gen.beta((d - 1) / 2, (d - 1) / 2, m)
        w = (1 - (1 + b) * z) / (1 - (1 - b) * z)
        accept = kappa * w + (d - 1) * np.log(1 - x0 * w) - c >= np.log(gen.random(m))
        out = np.concatenate([out, w[accept]])
    return out[:n]


def in_common_hemisphere(x: np.ndarray) -> bool:
    r"""Whether the points ``x`` (shape ``(n, d)``) lie in a common open hemisphere.

    True iff some :math:`w` has :math:`\langle w, x_i\rangle > 0` for all ``i``; decided by the
    linear program :math:`\max t` s.t. :math:`\langle w, x_i\rangle \ge t`, :math:`|w_k| \le 1`.
    Tokens that start in a common open hemisphere converge to one cluster
    (see Wendel's probability in ``docs/theory/references.md``).

    Parameters
    ----------
    x : array_like, shape (n, d)
        Points of the sphere.

    Returns
    -------
    bool
        Whether an open hemisphere contains all of them (an optimum above ``1e-12``).
    """
    from scipy.optimize import linprog  # here: sweep workers import this module, never this function

    x = np.asarray(x, dtype=float)
    n, d = x.shape
    cost = np.zeros(d + 1)
    cost[-1] = -1.0
    constraints = np.hstack([-x, np.ones((n, 1))])
    result = linprog(cost, A_ub=constraints, b_ub=np.zeros(n),
                     bounds=[(-1, 1)] * d + [(None, 1)], method="highs")
    return bool(result.status == 0 and -result.fun > 1e-12)


def sinusoidal_encoding(n: int, d: int, *, base: float = 10000.0) -> np.ndarray:
    r"""The sinusoidal positional encoding of Vaswani et al., added to the embeddings of ``n`` tokens.

    .. math:: P_{k, 2m} = \sin\big(k\,b^{-2m/d}\big), \qquad P_{k, 2m+1} = \cos\big(k\,b^{-2m/d}\big),
              \qquad k = 0, \dots, n - 1,

    (Remark 3.2 of "A mathematical perspective on Transformers"): it enters the dynamics only
    through the initial tokens, e.g. ``normalize(embeddings + scale * sinusoidal_encoding(n, d))``.

    Parameters
    ----------
    n : int
        Number of tokens (positions ``0..n-1``).
    d : int
        Dimension of the embeddings.
    base : float
        The base ``b``.

    Returns
    -------
    numpy.ndarray, shape (n, d)
        The encodings, one row per position (an odd ``d`` ends with a sine).
    """
    n, d = check_int(n, "n", minimum=1), check_int(d, "d", minimum=1)
    base = check_real(base, "base", minimum=1.0)
    angles = np.arange(n)[:, None] * base ** (-2.0 * (np.arange(d) // 2) / d)[None, :]
    return np.where(np.arange(d) % 2 == 0, np.sin(angles), np.cos(angles))
