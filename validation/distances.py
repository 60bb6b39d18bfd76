r"""Distances between measures: exact :math:`W_1` on the circle and the line, a spectral MMD on :math:`S^2`.

Either argument may be a particle dataset (empirical measure) or a PDE dataset
(the solver's density); both must share geometry, model and output times.
"""

from __future__ import annotations

import numpy as np
import xarray as xr

from meanfield.records import CIRCLE, SPHERE, dataset_model

from .measures import (LINE, circle_breakpoints, circle_cdf, coefficient_degrees, harmonic_coefficients, is_zonal,
                       line_breakpoints, line_cdf, measure_geometry, zonal_breakpoints, zonal_cdf)

#: Smoothing of the default MMD kernel, :math:`a_l = e^{-s\,l(l+1)}` (the heat kernel at time s).
DEFAULT_SMOOTHING = 0.05


def circle_w1(ds_a: xr.Dataset, index_a: int, ds_b: xr.Dataset, index_b: int) -> float:
    r"""Exact :math:`W_1` between two measures on the circle (docs/theory/references.md).

    .. math:: W_1(\mu, \nu) = \min_c \int_0^{2\pi} |F_\mu - F_\nu - c|\, d\theta

    :math:`G = F_\mu - F_\nu` is affine between the breakpoints (particle angles, cell
    boundaries), so on each piece its values are uniform on an interval; the optimal
    :math:`c` is the median of that piecewise-uniform law, found exactly from its
    piecewise-linear distribution function, and the integral is summed in closed form.
    """
    points = np.unique(np.concatenate([[0.0, 2 * np.pi], circle_breakpoints(ds_a, index_a),
                                       circle_breakpoints(ds_b, index_b)]))
    return _integral_of_absolute_difference(
        points, lambda z, side: circle_cdf(ds_a, index_a, z, side) - circle_cdf(ds_b, index_b, z, side), centred=True)


def line_w1(ds_a: xr.Dataset, index_a: int, ds_b: xr.Dataset, index_b: int) -> float:
    r"""Exact :math:`W_1` between two measures on the line: :math:`\int_{\mathbb{R}} |F_\mu - F_\nu|\, dz`.

    :math:`G = F_\mu - F_\nu` vanishes outside the breakpoints (tokens, cell faces) and is
    affine between them: the integral is summed in closed form, piece by piece.
    """
    points = np.unique(np.concatenate([line_breakpoints(ds_a, index_a), line_breakpoints(ds_b, index_b)]))
    return _integral_of_absolute_difference(
        points, lambda z, side: line_cdf(ds_a, index_a, z, side) - line_cdf(ds_b, index_b, z, side), centred=False)


#: Gauss-Legendre nodes per piece in :func:`zonal_w1`, and the pieces ``[-1, 1]`` is cut into at least.
ZONAL_W1_NODES, ZONAL_W1_PIECES = 8, 256


def zonal_w1(ds_a: xr.Dataset, index_a: int, ds_b: xr.Dataset, index_b: int) -> float:
    r""":math:`W_1` of the laws of :math:`u = \langle x, e\rangle`: :math:`\int_{-1}^{1}|F_\mu - F_\nu|\,du`.

    :math:`G = F_\mu - F_\nu` jumps at the tokens and rings and is smooth between them (constant,
    or a Gegenbauer series' distribution function). ``[-1, 1]`` is cut at the jumps and into at
    least ``ZONAL_W1_PIECES`` pieces; where :math:`G` changes sign inside a piece, the piece is cut
    again at the root (bisection to round-off); each piece then takes a Gauss-Legendre rule of
    ``ZONAL_W1_NODES`` nodes on a smooth :math:`|G|`. For zonal measures it is the :math:`W_1` of
    their laws of :math:`u`, a lower bound of theirs on the sphere.
    """
    def difference(u: np.ndarray, side: str = "right") -> np.ndarray:
        return zonal_cdf(ds_a, index_a, u, side) - zonal_cdf(ds_b, index_b, u, side)

    points = np.unique(np.concatenate([np.linspace(-1.0, 1.0, ZONAL_W1_PIECES + 1),
                                       zonal_breakpoints(ds_a, index_a), zonal_breakpoints(ds_b, index_b)]))
    low, high = points[:-1], points[1:]
    start, end = difference(low, "right"), difference(high, "left")
    crossing = start * end < 0
    a, b = low[crossing], high[crossing]
    sign = np.sign(start[crossing])
    for _ in range(60):  # bisection of each crossing piece to its root
        middle = 0.5 * (a + b)
        same = np.sign(difference(middle)) == sign
        a, b = np.where(same, middle, a), np.where(same, b, middle)
    points = np.unique(np.concatenate([points, 0.5 * (a + b)]))
    x, w = np.polynomial.legendre.leggauss(ZONAL_W1_NODES)
    half = 0.5 * np.diff(points)
    nodes = (0.5 * (points[1:] + points[:-1]))[:, None] + half[:, None] * x
    return float(np.sum(half[:, None] * w * np.abs(difference(nodes.ravel()).reshape(nodes.shape))))


def _integral_of_absolute_difference(points: np.ndarray, difference, *, centred: bool) -> float:
    r""":math:`\int |G - c|` over ``[points[0], points[-1]]`` for :math:`G` affine between the sorted
    ``points`` (``difference(z, side)``: its right or left limits there), with :math:`c` the
    minimiser (the median of :math:`G`'s values) when ``centred``, else 0."""
    lengths = np.diff(points)
    # G just right of each breakpoint, and just left of the next one (no atom inside a piece).
    start = difference(points[:-1], "right")
    end = difference(points[1:], "left")
    low, high = np.minimum(start, end), np.maximum(start, end)
    c = _piecewise_uniform_median(low, high, lengths) if centred else 0.0
    return float(np.sum(_mean_absolute_deviation(low, high, c) * lengths))


def _piecewise_uniform_median(low: np.ndarray, high: np.ndarray, weight: np.ndarray) -> float:
    """Median of the mixture of uniforms on ``[low_k, high_k]`` (points if equal) with weights."""
    half = 0.5 * weight.sum()
    candidates = np.unique(np.concatenate([low, high]))
    at_or_below, strictly_below = _mass_below(low, high, weight, candidates)
    k = min(int(np.searchsorted(at_or_below, half)), candidates.size - 1)
    if k == 0 or strictly_below[k] < half:
        return float(candidates[k])  # the crossing is a jump: a point mass sits at the median
    # Otherwise the distribution function crosses one half on the affine stretch before c_k.
    c0, c1, m0, m1 = candidates[k - 1], candidates[k], at_or_below[k - 1], strictly_below[k]
    return float(c0 + (half - m0) * (c1 - c0) / (m1 - m0)) if m1 > m0 else float(c0)


def _mass_below(low, high, weight, candidates) -> tuple[np.ndarray, np.ndarray]:
    """Mass of the mixture at or below, and strictly below, each sorted candidate, O((K + P) log P)."""
    flat = high == low
    below = np.zeros(candidates.size)
    strictly = np.zeros(candidates.size)
    if np.any(~flat):
        density = weight[~flat] / (high[~flat] - low[~flat])
        # The distribution function is piecewise linear: slope +density from low, -density after high.
        events = np.concatenate([low[~flat], high[~flat]])
        slopes = np.concatenate([density, -density])
        order = np.argsort(events, kind="stable")
        events, slope_after = events[order], np.cumsum(slopes[order])
        at_events = np.concatenate([[0.0], np.cumsum(slope_after[:-1] * np.diff(events))])
        index = np.searchsorted(events, candidates, side="right") - 1
        safe = np.maximum(index, 0)
        below += np.where(index >= 0, at_events[safe] + slope_after[safe] * (candidates - events[safe]), 0.0)
        strictly += below
    if np.any(flat):
        # Point masses (pieces where G is constant) count from their value on.
        order = np.argsort(low[flat])
        atoms = low[flat][order]
        cumulative = np.concatenate([[0.0], np.cumsum(weight[flat][order])])
        below += cumulative[np.searchsorted(atoms, candidates, side="right")]
        strictly += cumulative[np.searchsorted(atoms, candidates, side="left")]
    return below, strictly


def _mean_absolute_deviation(low, high, c) -> np.ndarray:
    """:math:`E|U - c|` for U uniform on ``[low, high]`` (a point mass if they are equal)."""
    span = high - low
    inside = (c > low) & (c < high)
    with np.errstate(divide="ignore", invalid="ignore"):
        spread = ((c - low) ** 2 + (high - c) ** 2) / (2 * span)
    return np.where(inside, spread, np.abs(0.5 * (low + high) - c))


def mmd_weights(lmax: int, smoothing: float) -> np.ndarray:
    """Kernel weights :math:`a_l = e^{-s\\,l(l+1)}` per coefficient (shtns order)."""
    degree = coefficient_degrees(lmax)
    return np.exp(-smoothing * degree * (degree + 1))


def mmd_degree(smoothing: float) -> int:
    """Smallest degree beyond which the kernel weights are below 1e-17."""
    return int(np.ceil(np.sqrt(40.0 / smoothing)))


def sphere_mmd(ds_a: xr.Dataset, index_a: int, ds_b: xr.Dataset, index_b: int,
               *, smoothing: float = DEFAULT_SMOOTHING) -> float:
    r"""MMD on :math:`S^2` for the zonal kernel :math:`k = \sum_l a_l \sum_m Y_{lm}(x)\overline{Y_{lm}(y)}`.

    .. math:: \mathrm{MMD}^2(\mu,\nu) = \sum_l a_l \sum_{m=-l}^{l} |\mu_{lm} - \nu_{lm}|^2,
              \qquad a_l = e^{-s\,l(l+1)}

    (the heat kernel at time ``s``: a smooth kernel, so the MMD metrizes weak convergence
    and converges at the rate :math:`n^{-1/2}`). Particle coefficients are exact sums.
    """
    lmax = mmd_degree(smoothing)
    a, weights = harmonic_coefficients(ds_a, index_a, lmax)
    b, _ = harmonic_coefficients(ds_b, index_b, lmax)
    difference = np.abs(a - b) ** 2
    return float(np.sqrt(np.sum(mmd_weights(lmax, smoothing) * weights * difference)))


def distance(ds_a: xr.Dataset, ds_b: xr.Dataset, *, smoothing: float = DEFAULT_SMOOTHING) -> xr.DataArray:
    r"""Distance between two runs at each of their common output times.

    :math:`W_1` on the circle and on the line (exact), the spectral MMD of ``sphere_mmd`` on :math:`S^2`,
    and on :math:`S^{d-1}`, ``d >= 4``, or with a zonal solver's run, the :math:`W_1` of the laws of
    :math:`u = \langle x, e\rangle` (``validation.distances.zonal_w1``).

    Parameters
    ----------
    ds_a, ds_b : xarray.Dataset
        Two runs of one model with the same output times: particles (``x``) or densities
        (``rho``), in any combination.
    smoothing : float
        The sphere's MMD kernel smoothing (ignored on the circle).

    Returns
    -------
    xarray.DataArray
        The distance along ``time`` (named ``w1`` or ``mmd``, with its description).

    Raises
    ------
    ValueError
        If the datasets differ in geometry, model or output times.
    """
    geometry, geometry_b = measure_geometry(ds_a, "ds_a"), measure_geometry(ds_b, "ds_b")
    if geometry_b != geometry:
        raise ValueError(f"ds_a and ds_b have different geometries: {geometry!r} and {geometry_b!r}")
    if dataset_model(ds_a) != dataset_model(ds_b):
        raise ValueError("ds_a and ds_b were run with different models: "
                         f"{ds_a.attrs.get('model')} vs {ds_b.attrs.get('model')}")
    times_a, times_b = ds_a["time"].values, ds_b["time"].values
    if times_a.shape != times_b.shape or not np.allclose(times_a, times_b, rtol=1e-12, atol=1e-12):
        raise ValueError(f"ds_a and ds_b must have the same output times, got {times_a} and {times_b}")
    zonal = geometry not in (CIRCLE, LINE) and (geometry != SPHERE or is_zonal(ds_a) or is_zonal(ds_b))
    if geometry in (CIRCLE, LINE):
        w1 = circle_w1 if geometry == CIRCLE else line_w1
        values = [w1(ds_a, k, ds_b, k) for k in range(times_a.size)]
    elif zonal:
        values = [zonal_w1(ds_a, k, ds_b, k) for k in range(times_a.size)]
    else:
        values = [sphere_mmd(ds_a, k, ds_b, k, smoothing=smoothing) for k in range(times_a.size)]
    name, long_name = distance_description(geometry, smoothing, zonal=zonal)
    return xr.DataArray(np.array(values), coords={"time": times_a}, dims=("time",), name=name,
                        attrs={"long_name": long_name})


def distance_description(geometry: str, smoothing: float = DEFAULT_SMOOTHING, *,
                         zonal: bool = False) -> tuple[str, str]:
    """``(name, long_name)`` of the distance :func:`distance` measures on ``geometry`` (``zonal``: of the laws of u)."""
    if zonal or geometry not in (CIRCLE, LINE, SPHERE):
        return "w1", "Wasserstein-1 distance of the laws of u = <x, e> (e the last axis)"
    if geometry in (CIRCLE, LINE):
        return "w1", f"Wasserstein-1 distance on the {'circle' if geometry == CIRCLE else 'line'} (exact)"
    return "mmd", f"MMD with the heat kernel at s={smoothing:g}"
