r"""Causal attention: exact references (docs/theory/causal.md) and what to measure on particles (sec. 5).

The closed forms, in the paper's time convention (prefactor ``c = beta``):

.. math::
    k_\lambda(s, s_0) = \frac{\lambda e^{-\lambda(s - s_0)}}{1 - e^{-\lambda s}}, \qquad
    Y(s; s_0) = \log\frac{e^{\lambda s} - 1}{e^{\lambda s_0} - 1}
    \qquad (\lambda = 0:\ k_0 = 1/s,\ Y = \log(s/s_0)),

    g_a(t, s; s_0) = k_\lambda(s, s_0)\sqrt{a t / Y}\; I_1\big(2\sqrt{a t Y}\big)
                   = k_\lambda(s, s_0)\, a t\; {}_0F_1(; 2; a t Y),

the second form (:math:`I_1(2\sqrt z) = \sqrt z\,{}_0F_1(;2;z)`) being free of the ``0/0`` at
:math:`s = s_0`. :math:`g_a` solves the Volterra equation
:math:`\partial_t g = a\,(k_\lambda(s, s_0) + \int_{s_0}^s k_\lambda(s, s') g(t, s'; s_0)\,ds')`,
:math:`g(0) = 0`, and is the limit of ``n`` times the correlation of Fourier mode ``k``
between the token at ``s`` and the source at ``s0`` for iid uniform tokens, with
:math:`a_k = k^2 I_k(\beta)`. The retrieval profile of ``M`` codewords is
:math:`S_t(s_0) = \sum_{k\ge1} e^{-\pi^2k^2/(2M^2)} g_{a_k}(t, 1; s_0)`.
"""

from __future__ import annotations

import numpy as np
import xarray as xr
from scipy.special import hyp0f1, iv

from meanfield.checks import check_int, check_real
from meanfield.records import dataset_settings

from .measures import sphere_grid

#: Modes of the retrieval profile: a_k = k^2 I_k(beta) falls like (beta/2)^k / (k-1)!, so
#: terms beyond this are far below round-off for any beta a Transformer uses (<= 20).
PROFILE_MODES = 64


def _positions(s, name: str) -> np.ndarray:
    s = np.asarray(s, dtype=float)
    if not np.all((s > 0) & (s <= 1)):
        bad = s[~((s > 0) & (s <= 1))].ravel()[0]
        raise ValueError(f"{name} must lie in (0, 1] (relative positions in the prompt), got {bad!r}")
    return s


def positional_kernel(s, s0, alibi: float) -> np.ndarray:
    r""":math:`k_\lambda(s, s_0)` for :math:`0 < s_0 < s \le 1` (zero for :math:`s_0 \ge s`)."""
    alibi = check_real(alibi, "alibi", minimum=0.0)
    s, s0 = np.broadcast_arrays(_positions(s, "s"), _positions(s0, "s0"))
    if alibi == 0.0:
        value = 1.0 / s
    else:
        value = alibi * np.exp(-alibi * (s - s0)) / -np.expm1(-alibi * s)
    return np.where(s0 < s, value, 0.0)


def position_log_ratio(s, s0, alibi: float) -> np.ndarray:
    r""":math:`Y(s; s_0) = \log\frac{e^{\lambda s}-1}{e^{\lambda s_0}-1}` (``log(s / s0)`` at ``lambda = 0``)."""
    alibi = check_real(alibi, "alibi", minimum=0.0)
    s, s0 = _positions(s, "s"), _positions(s0, "s0")
    if alibi == 0.0:
        return np.log(s / s0)
    return np.log(np.expm1(alibi * s) / np.expm1(alibi * s0))


def mode_rates(beta: float, modes) -> np.ndarray:
    r""":math:`a_k = k^2 I_k(\beta)`, the growth rate of Fourier mode ``k`` (paper's time, ``c = beta``)."""
    beta = check_real(beta, "beta", minimum=0.0)
    k = np.asarray(modes, dtype=float)
    return k**2 * iv(k, beta)


def correlation_limit(a, t, s, s0, alibi: float) -> np.ndarray:
    r""":math:`g_a(t, s; s_0) = k_\lambda(s, s_0)\, a t\, {}_0F_1(;2; a t Y(s; s_0))` (zero for :math:`s_0 \ge s`)."""
    a = np.asarray(a, dtype=float)
    t = check_real(t, "t", minimum=0.0)
    kernel = positional_kernel(s, s0, alibi)
    y = np.maximum(position_log_ratio(s, s0, alibi), 0.0)
    return kernel * a * t * hyp0f1(2.0, a * t * y)


def retrieval_profile(t: float, s0, *, beta: float, alibi: float, words: int) -> np.ndarray:
    r""":math:`S_t(s_0) = \sum_{k\ge1} e^{-\pi^2k^2/(2M^2)}\, g_{a_k}(t, 1; s_0)`, ``M = words``."""
    words = check_int(words, "words", minimum=2)
    s0 = _positions(s0, "s0")
    k = np.arange(1, PROFILE_MODES + 1)
    weights = np.exp(-np.pi**2 * k**2 / (2.0 * words**2))
    terms = correlation_limit(mode_rates(beta, k)[:, None], t, 1.0, s0.reshape(1, -1), alibi)
    return (weights @ terms).reshape(s0.shape)


def retrieval_accuracy(t: float, s0, n: int, *, beta: float, alibi: float, words: int) -> np.ndarray:
    r""":math:`A_n(t, s_0) \approx \sqrt{\pi/2}/M + \sqrt{2\pi}\,S_t(s_0)/(M n)` (to :math:`o(1/n)`)."""
    n = check_int(n, "n", minimum=2)
    profile = retrieval_profile(t, s0, beta=beta, alibi=alibi, words=words)
    return np.sqrt(np.pi / 2) / words + np.sqrt(2 * np.pi) * profile / (words * n)


def u_shape_condition(t: float, *, beta: float, alibi: float) -> tuple[bool, float, float]:
    r"""The theorem's smallness condition :math:`t \sup_k a_k \le \min\{3 - \sqrt3,\ 2(1 - e^{-\lambda})\}`.

    Returns ``(holds, t sup_k a_k, bound)``. It is sufficient for the U-shape (primacy,
    recency, one interior minimum) when ``beta > 0`` and ``alibi > 0``.
    """
    t = check_real(t, "t", minimum=0.0)
    alibi = check_real(alibi, "alibi", minimum=0.0)
    left = t * float(mode_rates(beta, np.arange(1, PROFILE_MODES + 1)).max())
    bound = min(3.0 - np.sqrt(3.0), 2.0 * -np.expm1(-alibi))
    return bool(left <= bound), left, bound


# --------------------------------------------------------------------------- particles
def correlation_profile(theta0: np.ndarray, theta: np.ndarray, *, modes=(1, 2), bins: int = 8) -> xr.Dataset:
    r"""The correlation of each token with the last one, ``n`` times, binned in the source position ``s0 = i/n``.

    For prompts of angles ``theta0`` (time 0) and ``theta`` (time ``t``), shape ``(prompts, n)``,

    .. math:: C_k(i) = n\,\mathrm{Re}\big[e^{ik(\theta_n(t) - \theta_i(0))} - e^{ik(\theta_n(0) - \theta_i(0))}\big],
              \qquad i < n,

    whose mean is :math:`n\,E\,e^{ik(\theta_n(t) - \theta_i(0))}` for iid uniform tokens (the
    subtracted time-zero term has mean zero for :math:`i \ne n`) and whose variance is about
    ``n`` times smaller than without it (docs/theory/causal.md). Tokens are averaged within
    each bin of ``s0`` per prompt; the mean and its standard error are over prompts (the
    independent units). The mean tends to :func:`correlation_limit` at ``s = 1`` averaged
    over the same ``s0 = i/n`` (:func:`binned_correlation_limit`).

    Returns
    -------
    xarray.Dataset
        ``correlation`` and ``standard_error`` (mode, bin), ``tokens`` per bin; coordinates
        ``mode``, ``bin`` (bin centre), ``bin_low``, ``bin_high``; attrs ``n`` and ``prompts``.
    """
    modes = np.atleast_1d(np.asarray(modes))
    binning = _PromptBins(theta0, theta, bins)
    per_prompt = np.stack([binning.per_prompt(k) for k in modes])  # (mode, prompt, bin)
    return binning.summary("correlation", per_prompt, ("mode",), {"mode": modes})


def retrieval_profile_estimate(theta0: np.ndarray, theta: np.ndarray, *, words: int, bins: int = 8,
                               modes: int = 4) -> xr.Dataset:
    r"""The retrieval profile measured on prompts: :math:`\sum_{k \le K} e^{-\pi^2k^2/(2M^2)}\, C_k`, binned in ``s0``.

    The particle counterpart of :func:`retrieval_profile` (``K = modes`` terms; the weights
    make the rest negligible for ``M <= 8``: :math:`e^{-\pi^2 25/128} < 0.15` times a mode
    rate that falls like :math:`(\beta/2)^k/k!`), with :func:`correlation_profile`'s estimator
    combined per prompt, so the standard error includes the modes' covariance.

    Returns
    -------
    xarray.Dataset
        ``profile`` and ``standard_error`` (bin), coordinates as :func:`correlation_profile`.
    """
    words = check_int(words, "words", minimum=2)
    modes = check_int(modes, "modes", minimum=1)
    binning = _PromptBins(theta0, theta, bins)
    weights = np.exp(-np.pi**2 * np.arange(1, modes + 1) ** 2 / (2.0 * words**2))
    per_prompt = sum(w * binning.per_prompt(k) for k, w in zip(range(1, modes + 1), weights))
    ds = binning.summary("profile", per_prompt, (), {})
    ds.attrs.update(words=words, modes=modes)
    return ds


class _PromptBins:
    """The estimator of docs/theory/causal.md per prompt and bin of source positions ``s0 = i/n``, ``i < n``."""

    def __init__(self, theta0, theta, bins) -> None:
        theta0, theta = np.asarray(theta0, dtype=float), np.asarray(theta, dtype=float)
        if theta0.shape != theta.shape or theta0.ndim != 2:
            raise ValueError(f"theta0 and theta must both have shape (prompts, n), got {theta0.shape} and {theta.shape}")
        self.prompts, self.n = theta.shape
        if self.prompts < 2:
            raise ValueError(f"the standard error needs prompts >= 2, got {self.prompts}")
        self.bins = check_int(bins, "bins", minimum=1)
        if self.n < 2 * self.bins:
            raise ValueError(f"n = {self.n} tokens cannot fill bins = {self.bins} bins of s0 (need n >= 2 bins)")
        self.theta0, self.theta = theta0, theta
        self.edges = np.linspace(0.0, 1.0, self.bins + 1)
        s0 = np.arange(1, self.n) / self.n
        self.which = np.clip(np.searchsorted(self.edges, s0, side="left") - 1, 0, self.bins - 1)  # (low, high]

    def per_prompt(self, k: int) -> np.ndarray:
        """Bin means of :math:`C_k(i)` per prompt, shape ``(prompts, bins)``."""
        source = self.theta0[:, :-1]
        c = self.n * (np.cos(k * (self.theta[:, -1:] - source)) - np.cos(k * (self.theta0[:, -1:] - source)))
        return np.stack([c[:, self.which == b].mean(axis=1) for b in range(self.bins)], axis=1)

    def summary(self, name: str, per_prompt: np.ndarray, leading: tuple, coords: dict) -> xr.Dataset:
        """``name`` and its ``standard_error``: mean and standard error over prompts (the axis before ``bin``)."""
        dims = leading + ("bin",)
        variables = {name: (dims, per_prompt.mean(axis=-2), {"long_name": "n x correlation with the last token"}),
                     "standard_error": (dims, per_prompt.std(axis=-2, ddof=1) / np.sqrt(self.prompts))}
        variables["tokens"] = (("bin",), np.bincount(self.which, minlength=self.bins))
        return xr.Dataset(variables, coords={**coords, "bin": 0.5 * (self.edges[:-1] + self.edges[1:]),
                                             "bin_low": ("bin", self.edges[:-1]), "bin_high": ("bin", self.edges[1:])},
                          attrs={"n": self.n, "prompts": self.prompts})


def binned_correlation_limit(profile: xr.Dataset, t: float, *, beta: float, alibi: float) -> xr.DataArray:
    """:func:`correlation_limit` at ``s = 1`` averaged over the ``s0 = i/n`` of each bin of ``profile`` (mode, bin)."""
    values = [_bin_means(profile, correlation_limit(mode_rates(beta, k), t, 1.0, _sources(profile), alibi))
              for k in profile["mode"].values]
    return xr.DataArray(np.array(values), coords={"mode": profile["mode"], "bin": profile["bin"]},
                        dims=("mode", "bin"), name="correlation_limit")


def binned_retrieval_profile(estimate: xr.Dataset, t: float, *, beta: float, alibi: float) -> xr.DataArray:
    """:func:`retrieval_profile` (truncated to the estimate's modes) averaged over the ``s0 = i/n`` of each bin."""
    k = np.arange(1, int(estimate.attrs["modes"]) + 1)
    weights = np.exp(-np.pi**2 * k**2 / (2.0 * int(estimate.attrs["words"]) ** 2))
    limits = correlation_limit(mode_rates(beta, k)[:, None], t, 1.0, _sources(estimate)[None, :], alibi)
    return xr.DataArray(_bin_means(estimate, weights @ limits), coords={"bin": estimate["bin"]}, dims=("bin",),
                        name="retrieval_profile")


def _sources(binned: xr.Dataset) -> np.ndarray:
    n = int(binned.attrs["n"])
    return np.arange(1, n) / n


def _bin_means(binned: xr.Dataset, values: np.ndarray) -> list[float]:
    s0 = _sources(binned)
    return [float(values[(s0 > low) & (s0 <= high)].mean())
            for low, high in zip(binned["bin_low"].values, binned["bin_high"].values)]


# --------------------------------------------------------------------------- particles vs layered PDE
def layered_moments(x: np.ndarray, pde: xr.Dataset, time_index: int, *, bins: int = 8) -> xr.Dataset:
    r"""Moments of the coordinates and their products per bin of positions: particles (per system) and layered PDE.

    The test functions are :math:`f(x) = x_a` and :math:`x_a x_b`, :math:`a \le b` (the Fourier
    modes 1 and 2 on the circle, the harmonics of degree :math:`\le 2` on :math:`S^2`). For
    each bin of relative positions ``s`` in ``((b-1)/B, b/B]``: ``particles`` is the mean of
    ``f`` over a system's tokens ``i/n`` in the bin, ``pde`` the mean over the PDE's layers in
    the bin of :math:`\int f\rho`.

    Parameters
    ----------
    x : numpy.ndarray, shape (systems, n, d) or (n, d)
        Tokens in prompt order at the PDE's output time ``pde.time[time_index]``.
    pde : xarray.Dataset
        A run of :class:`solvers.CausalCircleFV` or :class:`solvers.CausalSphereSpectral`.
    bins : int
        Number of bins; the PDE's layer count must be a multiple of it.

    Returns
    -------
    xarray.Dataset
        ``particles`` (system, bin, moment) and ``pde`` (bin, moment).
    """
    x = np.asarray(x, dtype=float)
    x = x[None] if x.ndim == 2 else x
    rho = pde["rho"].values[time_index]
    positions = pde["position"].values
    layers = positions.size
    bins = check_int(bins, "bins", minimum=1)
    if layers % bins:
        raise ValueError(f"bins={bins} must divide the PDE's {layers} layers")
    n = x.shape[1]
    if n < bins:
        raise ValueError(f"n = {n} tokens cannot fill bins = {bins} bins")
    points, weights = _grid_quadrature(pde)
    if points.shape[-1] != x.shape[-1]:
        raise ValueError(f"particles in R^{x.shape[-1]} against a PDE in R^{points.shape[-1]}")
    layer_moments = np.einsum("lg,gk->lk", rho.reshape(layers, -1) * weights, _test_functions(points))
    token_moments = _test_functions(x)  # (systems, n, k)
    edges = np.linspace(0.0, 1.0, bins + 1)
    which_token = np.clip(np.searchsorted(edges, np.arange(1, n + 1) / n, side="left") - 1, 0, bins - 1)
    which_layer = np.clip(np.searchsorted(edges, positions, side="left") - 1, 0, bins - 1)
    particles = np.stack([token_moments[:, which_token == b].mean(axis=1) for b in range(bins)], axis=1)
    field = np.stack([layer_moments[which_layer == b].mean(axis=0) for b in range(bins)])
    return xr.Dataset({"particles": (("system", "bin", "moment"), particles), "pde": (("bin", "moment"), field)},
                      coords={"bin": 0.5 * (edges[:-1] + edges[1:])}, attrs={"n": n})


def layered_moment_error(x: np.ndarray, pde: xr.Dataset, time_index: int, *, bins: int = 8) -> xr.DataArray:
    r"""Distance per system and bin between causal particles and the layered PDE: the norm of the moments' difference.

    :func:`layered_moments` gives the moments. The mean over systems estimates
    :math:`E\,d(\mu^n, \rho)`, which falls like :math:`n^{-1/2}` (the fluctuation of ``n/B``
    tokens) plus the finite-``n`` bias and the PDE's discretization error.
    """
    moments = layered_moments(x, pde, time_index, bins=bins)
    error = np.linalg.norm(moments["particles"] - moments["pde"], axis=-1)
    return xr.DataArray(error, dims=("system", "bin"), coords={"bin": moments["bin"]}, name="moment_error",
                        attrs=moments.attrs)


def _test_functions(points: np.ndarray) -> np.ndarray:
    """``[x_a, x_a x_b (a <= b)]`` per point, shape ``(..., d + d (d + 1) / 2)``."""
    d = points.shape[-1]
    upper = np.triu_indices(d)
    products = points[..., :, None] * points[..., None, :]
    return np.concatenate([points, products[..., upper[0], upper[1]]], axis=-1)


def _grid_quadrature(pde: xr.Dataset) -> tuple[np.ndarray, np.ndarray]:
    """Points of the PDE's grid, shape ``(g, d)``, and quadrature weights ``(g,)`` (cells or Gauss-Legendre)."""
    if "theta" in pde.coords:
        theta = pde["theta"].values
        return np.stack([np.cos(theta), np.sin(theta)], axis=-1), np.full(theta.size, 2 * np.pi / theta.size)
    grid = sphere_grid(int(dataset_settings(pde)["lmax"]))
    return grid.points().reshape(-1, 3), np.broadcast_to(grid.area_weight, grid.shape).ravel()
