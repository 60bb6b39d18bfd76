r"""Self-attention with random weights, resampled at every layer and head (Transformers at initialisation).

The discrete model (Koubbi, Geshkovski, Rigollet, "Homogenized Transformers", arXiv 2604.01978):
tokens :math:`x_i \in S^{d-1}`, and at every layer :math:`\ell` each head :math:`h = 1..H`
draws fresh weights :math:`\theta_{\ell h} = (Q, K, V)` independently of everything else,

.. math::
    x_i \leftarrow \frac{x_i + \frac{\eta}{H}\sum_h A_{\theta_{\ell h}}(x_i)}
                        {\big|x_i + \frac{\eta}{H}\sum_h A_{\theta_{\ell h}}(x_i)\big|},
    \qquad
    A_\theta(x_i) = V\,a_{QK}(x_i), \quad
    a_{QK}(x_i) = \sum_j \frac{e^{\beta\langle Q x_i, K x_j\rangle}}{\sum_l e^{\beta\langle Q x_i, K x_l\rangle}}\, x_j,

with step :math:`\eta` and :math:`H` heads: the residual stream with layer normalisation, a
discrete-time particle system on the sphere driven by a random vector field.

Weight laws: :class:`GaussianWeights` (entries :math:`N(0, \sigma^2/d)`, the fan-in convention of
initialisation, so that :math:`|Qx| \approx \sigma_Q` for a unit :math:`x`),
:class:`MatrixWeights` (the random-matrix phase diagrams of "A mathematical perspective on
Transformers": a Gaussian or Wigner bilinear form :math:`Q^TK` and a value matrix tied to it),
and :class:`SampledWeights` for any user sampler.

``redraw="system"`` draws each system's weights once and keeps them through every layer: a
Transformer whose layers share random weights (ALBERT at initialisation; the paper's phase
diagrams with random :math:`Q^TK` and :math:`V`), the Euler scheme of step :math:`\eta` of the
ODE :math:`\dot x_i = P_{x_i}\frac1H\sum_h V_h a_{Q_hK_h}(x_i)` with fixed weights; its clock
is :math:`t = \text{layer}\cdot\eta`. The rank collapse of the tokens is
:func:`span_dimension`. :func:`simulate_random_layers` runs batches of
systems, each with its own draws: system ``s`` draws from ``SeedSequence(seed, spawn_key=(s,))``,
so a system's path depends on the recorded seed and its index only, not on the batch it ran in.

The homogenized limit of this chain (its diffusion approximation as :math:`\eta \to 0`) is in
:mod:`meanfield.homogenized`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from .checks import check_int, check_memory, check_points, check_real
from .docstrings import fill_docstrings
from .progress import time_progress
from .records import PARTICLES, geometry_name, record_attrs
from .sampling import reproducible_seed
from .sphere import normalize

#: Largest number of weight entries (systems x heads x 3 d^2) drawn and held at once.
WEIGHT_BLOCK = 1 << 22

#: Largest number of attention weights (systems x heads x n x n) held at once.
ATTENTION_BLOCK = 1 << 22


#: The Parameters and Returns of every weight law's ``sample`` (``{sample_sections}``).
SAMPLE_SECTIONS = """
Parameters
----------
rng : numpy.random.Generator
    The only source of randomness (runs repeat from their recorded seed).
count : int
    Number of draws (heads times layers or systems, or quadrature nodes).
d : int
    Dimension of the tokens.

Returns
-------
tuple of numpy.ndarray
    ``(Q, K, V)``, each of shape ``(count, d, d)``.
"""


@fill_docstrings(sample_sections=SAMPLE_SECTIONS)
@dataclass(frozen=True)
class GaussianWeights:
    r"""Independent Gaussian :math:`Q`, :math:`K`, :math:`V` with iid entries.

    .. math::
        Q_{ab} \sim N(0, \sigma_Q^2/d), \quad K_{ab} \sim N(0, \sigma_K^2/d), \quad
        V = m_V I + G, \ G_{ab} \sim N(0, \sigma_V^2/d),

    so that for a unit vector :math:`x`, :math:`E|Qx|^2 = \sigma_Q^2` and the logits
    :math:`\beta\langle Qx, Ky\rangle` have standard deviation :math:`\beta\sigma_Q\sigma_K/\sqrt d`
    (``beta`` carries the temperature). ``query_std=None`` (``key_std=None``) fixes :math:`Q = I`
    (:math:`K = I`): with both fixed the attention is that of :class:`~meanfield.SelfAttention`
    and only the values are random.

    Parameters
    ----------
    value_std : float
        :math:`\sigma_V \ge 0`.
    value_mean : float
        :math:`m_V`; non-zero only in the deterministic limit (the diffusive one needs centred values).
    query_std : float or None
        :math:`\sigma_Q \ge 0`, or ``None`` for :math:`Q = I`.
    key_std : float or None
        :math:`\sigma_K \ge 0`, or ``None`` for :math:`K = I`.

    Raises
    ------
    ValueError
        If a standard deviation is negative or a value is not finite.
    """

    value_std: float = 1.0
    value_mean: float = 0.0
    query_std: float | None = 1.0
    key_std: float | None = 1.0

    def __post_init__(self) -> None:
        check_real(self.value_std, "value_std", minimum=0.0)
        check_real(self.value_mean, "value_mean")
        for name, value in (("query_std", self.query_std), ("key_std", self.key_std)):
            if value is not None:
                check_real(value, name, minimum=0.0)

    @property
    def fixed_attention(self) -> bool:
        """Whether :math:`Q = K = I`: the attention weights are then not random."""
        return self.query_std is None and self.key_std is None

    def sample(self, rng: np.random.Generator, count: int, d: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Independent draws of the weights.


        {sample_sections}
        """
        def matrices(std):
            if std is None:
                return np.broadcast_to(np.eye(d), (count, d, d))
            return rng.standard_normal((count, d, d)) * (std / np.sqrt(d))
        query, key = matrices(self.query_std), matrices(self.key_std)
        value = rng.standard_normal((count, d, d)) * (self.value_std / np.sqrt(d))
        if self.value_mean:
            value += self.value_mean * np.eye(d)
        return query, key, value

    def to_dict(self) -> dict:
        return {"law": "GaussianWeights", "value_std": self.value_std, "value_mean": self.value_mean,
                "query_std": self.query_std, "key_std": self.key_std}


#: The bilinear forms :math:`Q^TK` of :class:`MatrixWeights`.
BILINEAR_LAWS = ("identity", "gaussian", "wigner")

#: Its value matrices.
VALUE_LAWS = ("identity", "gaussian", "wishart", "bilinear", "-bilinear")


@fill_docstrings(sample_sections=SAMPLE_SECTIONS)
@dataclass(frozen=True)
class MatrixWeights:
    r"""Random-matrix weights: a bilinear form :math:`B = Q^TK` and a value matrix, possibly tied to it.

    The laws of the phase diagrams of "A mathematical perspective on Transformers" (its code's
    ``randomKQ`` and ``randomV``), with :math:`G, G'` of iid :math:`N(0, 1)` entries:

    ``bilinear``
        ``"identity"``: :math:`Q = K = I`; ``"gaussian"``: :math:`B = GG'/\sqrt d`
        (:math:`Q = G^T/d^{1/4}`, :math:`K = G'/d^{1/4}`); ``"wigner"``: :math:`B = (G + G^T)/\sqrt2`,
        the Gaussian orthogonal ensemble (:math:`Q = I`, :math:`K = B`). Entries of variance one
        off the diagonal; ``beta`` sets the scale.
    ``value``
        ``"identity"``; ``"gaussian"``: :math:`G/\sqrt d` (real Ginibre); ``"wishart"``:
        :math:`GG^T/d` (positive semi-definite); ``"bilinear"`` / ``"-bilinear"``:
        :math:`V = \pm B/\sqrt d`, symmetric for the Wigner form (then the fixed-weight dynamics is
        the gradient ascent, or descent, of the interaction energy of :math:`B`).

    Parameters
    ----------
    bilinear : {"identity", "gaussian", "wigner"}
    value : {"identity", "gaussian", "wishart", "bilinear", "-bilinear"}

    Raises
    ------
    ValueError
        Naming the argument, for a law not listed above.
    """

    bilinear: str = "wigner"
    value: str = "identity"

    def __post_init__(self) -> None:
        if self.bilinear not in BILINEAR_LAWS:
            raise ValueError(f"bilinear must be one of {BILINEAR_LAWS}, got {self.bilinear!r}")
        if self.value not in VALUE_LAWS:
            raise ValueError(f"value must be one of {VALUE_LAWS}, got {self.value!r}")
        if self.bilinear == "identity" and self.value.endswith("bilinear"):
            raise ValueError("value = 'bilinear' ties V to a random bilinear form: bilinear must be 'gaussian' or "
                             "'wigner', got 'identity' (V = I is value = 'identity')")

    @property
    def fixed_attention(self) -> bool:
        """Whether :math:`Q = K = I`."""
        return self.bilinear == "identity"

    def sample(self, rng: np.random.Generator, count: int, d: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Independent draws of the weights.


        {sample_sections}
        """
        eye = np.broadcast_to(np.eye(d), (count, d, d))
        if self.bilinear == "identity":
            query, key = eye, eye
        elif self.bilinear == "gaussian":
            query = np.swapaxes(rng.standard_normal((count, d, d)), -1, -2) / d ** 0.25
            key = rng.standard_normal((count, d, d)) / d ** 0.25
        else:
            g = rng.standard_normal((count, d, d))
            query, key = eye, (g + np.swapaxes(g, -1, -2)) / np.sqrt(2.0)
        if self.value == "identity":
            value = eye
        elif self.value == "gaussian":
            value = rng.standard_normal((count, d, d)) / np.sqrt(d)
        elif self.value == "wishart":
            g = rng.standard_normal((count, d, d))
            value = g @ np.swapaxes(g, -1, -2) / d
        else:
            sign = -1.0 if self.value.startswith("-") else 1.0
            value = sign * (np.swapaxes(query, -1, -2) @ key) / np.sqrt(d)
        return query, key, value

    def to_dict(self) -> dict:
        return {"law": "MatrixWeights", "bilinear": self.bilinear, "value": self.value}


@dataclass(frozen=True)
class SampledWeights:
    """Any weight law, given by a sampler.

    Parameters
    ----------
    sampler : callable
        ``sampler(rng, count, d) -> (Q, K, V)``, each of shape ``(count, d, d)``. It must draw
        only from ``rng`` (a :class:`numpy.random.Generator`), so that runs repeat from their
        recorded seed.
    name : str
        Labels the law in the run's record (the callable itself is not serialized).

    Raises
    ------
    TypeError
        If ``sampler`` is not callable.
    """

    sampler: Callable[[np.random.Generator, int, int], tuple]
    name: str = "user sampler"
    fixed_attention = False  # not a field: a sampled law's attention is random

    def __post_init__(self) -> None:
        if not callable(self.sampler):
            raise TypeError(f"sampler must be callable as sampler(rng, count, d) -> (Q, K, V), got {self.sampler!r}")

    def sample(self, rng: np.random.Generator, count: int, d: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        drawn = self.sampler(rng, count, d)
        if not (isinstance(drawn, tuple) and len(drawn) == 3):
            raise ValueError(f"the sampler {self.name!r} must return a tuple (Q, K, V), got {type(drawn).__name__}")
        matrices = tuple(np.asarray(m, dtype=float) for m in drawn)
        for label, m in zip("QKV", matrices):
            if m.shape != (count, d, d):
                raise ValueError(f"the sampler {self.name!r} returned {label} of shape {m.shape}; "
                                 f"expected ({count}, {d}, {d})")
            if not np.all(np.isfinite(m)):
                raise ValueError(f"the sampler {self.name!r} returned non-finite entries in {label}")
        return matrices

    def to_dict(self) -> dict:
        return {"law": "SampledWeights", "name": self.name}


@dataclass(frozen=True)
class RandomAttention:
    r"""The random-weight layer chain: :math:`x \leftarrow N\big(x + \frac{\eta}{H}\sum_h V_h a_{Q_hK_h}(x)\big)`.

    Parameters
    ----------
    beta : float
        Inverse temperature of the softmax, ``>= 0``.
    heads : int
        Heads per layer :math:`H`, each with its own draw.
    step : float
        Residual step :math:`\eta > 0`.
    law : GaussianWeights, MatrixWeights or SampledWeights
        The law of one head's :math:`(Q, K, V)`.
    redraw : {"layer", "system"}
        Draw fresh weights at every layer (Transformers at initialisation, the homogenized
        chain), or once per system, kept through every layer (module docstring).
    """

    beta: float
    heads: int = 1
    step: float = 0.1
    law: GaussianWeights | MatrixWeights | SampledWeights = GaussianWeights()
    redraw: str = "layer"

    def __post_init__(self) -> None:
        check_real(self.beta, "beta", minimum=0.0)
        check_int(self.heads, "heads", minimum=1)
        check_real(self.step, "step", minimum=0.0)
        if self.step == 0.0:
            raise ValueError("step must be > 0, got 0.0 (the tokens would not move)")
        if not isinstance(self.law, (GaussianWeights, MatrixWeights, SampledWeights)):
            raise TypeError(f"law must be a GaussianWeights, MatrixWeights or SampledWeights, got {self.law!r}")
        if self.redraw not in ("layer", "system"):
            raise ValueError(f"redraw must be 'layer' or 'system', got {self.redraw!r}")

    @property
    def layer_time(self) -> float:
        r"""Time per layer: diffusive, :math:`\tau = \eta^2/H` (the homogenized limit's clock) with weights
        redrawn per layer; the Euler step :math:`\eta` of the fixed-weight ODE with ``redraw="system"``."""
        return self.step if self.redraw == "system" else self.step ** 2 / self.heads

    def layer(self, x: np.ndarray, query: np.ndarray, key: np.ndarray, value: np.ndarray) -> np.ndarray:
        r"""One layer :math:`x \mapsto \mathrm{normalize}(x + \frac{\eta}{H}\sum_h V_h a_{Q_hK_h}(x))`.

        Parameters
        ----------
        x : numpy.ndarray, shape (systems, n, d)
            Tokens on the unit sphere.
        query, key, value : numpy.ndarray, shape (systems, heads, d, d)
            This layer's weights, per system and head.

        Returns
        -------
        numpy.ndarray, shape (systems, n, d)
            The tokens after the layer, on the unit sphere.
        """
        return normalize(x + (self.step / self.heads) * value_sum(attention_averages(x, query, key, self.beta), value))

    def to_dict(self) -> dict:
        return {"model": "RandomAttention", "beta": self.beta, "heads": self.heads, "step": self.step,
                "law": self.law.to_dict(), "redraw": self.redraw}


#: At most this many draws estimate a sampled law's centring (fewer in high d: their memory).
CENTRING_DRAWS = 65536

#: Tokens at which the mean field E[V a_QK(x)] is estimated.
CENTRING_TOKENS = 16

#: Standard errors beyond which an estimated mean counts as non-zero.
CENTRING_ERRORS = 6.0


def check_centred(law, beta: float, d: int) -> None:
    r"""Refuse a sampled law whose diffusive limit does not exist: the mean field of one head must vanish.

    The limit SDE (:mod:`meanfield.homogenized`) needs :math:`m(x;\mu) = E[V\,a_{QK}(x)] = 0`
    for every configuration: otherwise the drift per unit diffusive time, :math:`H m/\eta`,
    grows without bound as the step :math:`\eta 	o 0`. With :math:`V` independent of
    :math:`(Q, K)` that is :math:`E V = 0`; a :math:`V` correlated with the attention can give
    :math:`m 
e 0` with :math:`E V = 0`. Both are estimated by Monte Carlo at dimension ``d``
    (the mean field at ``CENTRING_TOKENS`` uniform tokens), each entry against its standard
    error. :class:`GaussianWeights` is centred exactly when ``value_mean = 0`` (checked
    where the limit is built).

    Parameters
    ----------
    law : GaussianWeights or SampledWeights
        One head's weight law.
    beta : float
        The softmax's inverse temperature.
    d : int
        The tokens' dimension.

    Raises
    ------
    ValueError
        If an estimated mean is more than ``CENTRING_ERRORS`` standard errors from zero, or the
        law cannot be sampled at dimension ``d``.
    """
    if isinstance(law, GaussianWeights):
        return
    draws = int(min(CENTRING_DRAWS, max(1024, 2 ** 24 // (3 * d * d + CENTRING_TOKENS * (CENTRING_TOKENS + d)))))
    try:
        query, key, values = law.sample(np.random.default_rng(0), draws, d)
    except (ValueError, TypeError, IndexError) as error:
        raise ValueError(f"the law {law.name!r} cannot be sampled at the tokens' dimension d = {d}: {error}") from None
    tokens = normalize(np.random.default_rng(1).standard_normal((CENTRING_TOKENS, d)))
    averages = attention_averages(np.broadcast_to(tokens, (draws,) + tokens.shape), query[:, None], key[:, None],
                                  beta)[:, 0]
    drift = np.einsum("mab,mkb->mka", values, averages)
    for what, samples in (("E V", values), ("the mean field E[V a_QK(x)] at uniform tokens", drift)):
        samples = samples.reshape(draws, -1)
        mean, error = samples.mean(axis=0), samples.std(axis=0) / np.sqrt(draws)
        scaled = np.divide(np.abs(mean), error, out=np.where(mean == 0, 0.0, np.inf), where=error > 0)
        if scaled.max() > CENTRING_ERRORS:
            raise ValueError(f"the diffusive (common-noise) limit needs centred weights, E[V a_QK(x)] = 0 for every "
                             f"configuration; for the law {law.name!r} at d = {d}, {what} is {scaled.max():.3g} "
                             f"standard errors from zero ({draws} draws): V has a mean or is correlated with Q, K, "
                             "and the chain's drift diverges as the step goes to 0 (no such limit)")


def attention_averages(x: np.ndarray, query: np.ndarray, key: np.ndarray, beta: float) -> np.ndarray:
    r"""Every head's attention average :math:`a_{Q_hK_h}(x_i)`, shape ``(systems, heads, n, d)``.

    A batched engine for :meth:`meanfield.SelfAttention.attention_output` with ``V = I`` (the
    reference, one head and one system at a time), each system and head with its own ``Q`` and
    ``K`` of shape ``(systems, heads, d, d)``; the softmax is shifted by its row maximum. The
    queries and keys of all heads come from one product per system.
    """
    systems, n, d = x.shape
    heads = query.shape[1]
    block = max(1, ATTENTION_BLOCK // (heads * n * n))
    if systems > block:
        return np.concatenate([attention_averages(x[s:s + block], query[s:s + block], key[s:s + block], beta)
                               for s in range(0, systems, block)])

    def projected(matrices):  # x_i -> M_h x_i for every head, as (systems, heads, n, d)
        stacked = np.swapaxes(matrices, -1, -2).transpose(0, 2, 1, 3).reshape(systems, d, heads * d)
        return (x @ stacked).reshape(systems, n, heads, d).transpose(0, 2, 1, 3)
    logits = projected(query) @ np.swapaxes(projected(key), -1, -2)
    logits *= beta
    logits -= logits.max(axis=-1, keepdims=True)
    np.exp(logits, out=logits)
    logits /= logits.sum(axis=-1, keepdims=True)
    return (logits.reshape(systems, heads * n, n) @ x).reshape(systems, heads, n, d)


def value_sum(averages: np.ndarray, value: np.ndarray) -> np.ndarray:
    r""":math:`\sum_h V_h a_h(x_i)` of averages ``(systems, heads, n, d)``: one product per system."""
    systems, heads, n, d = averages.shape
    stacked = np.swapaxes(value, -1, -2).reshape(systems, heads * d, d)
    return averages.transpose(0, 2, 1, 3).reshape(systems, n, heads * d) @ stacked


def system_generators(seed: int, systems: int) -> list[np.random.Generator]:
    """One generator per system, ``SeedSequence(seed, spawn_key=(s,))``: a system's draws do not depend on its batch."""
    return [np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(s,))) for s in range(systems)]


def mean_inner_product(x: np.ndarray) -> np.ndarray:
    r"""The mean inner product :math:`\frac1{n^2}\sum_{i,j}\langle x_i, x_j\rangle = |\bar x|^2`.

    Parameters
    ----------
    x : numpy.ndarray, shape (..., n, d)
        Tokens on the unit sphere.

    Returns
    -------
    numpy.ndarray, shape (...,)
        1 at collapse (all tokens equal), about ``1/n`` for spread unit tokens.

    Raises
    ------
    ValueError
        If ``x`` is not finite or not of unit norm (the observable's 1 and 1/n read unit tokens).
    """
    x = check_points(x, "x")
    return np.sum(np.mean(x, axis=-2) ** 2, axis=-1)


def diameter(x: np.ndarray) -> np.ndarray:
    r"""The diameter :math:`\max_{i,j}|x_i - x_j|` of unit tokens.

    Parameters
    ----------
    x : numpy.ndarray, shape (..., n, d)
        Tokens on the unit sphere (the distance is computed from their Gram matrix).

    Returns
    -------
    numpy.ndarray, shape (...,)
        0 at collapse, 2 with antipodal tokens.

    Raises
    ------
    ValueError
        If ``x`` is not finite or not of unit norm (the Gram matrix gives the distance of unit tokens only).
    """
    x = check_points(x, "x")
    gram = x @ np.swapaxes(x, -1, -2)
    return np.sqrt(np.maximum(2.0 - 2.0 * gram.min(axis=(-1, -2)), 0.0))


def span_dimension(x: np.ndarray, tolerance: float = 1e-3) -> np.ndarray:
    r"""The rank collapse: how many eigenvalues of the tokens' Gram matrix exceed ``tolerance``.

    The dimension of the span the tokens still fill ("A mathematical perspective on
    Transformers", its phase diagrams' ``plotdim``): ``min(n, d)`` for spread tokens, 1 at collapse.

    Parameters
    ----------
    x : numpy.ndarray, shape (..., n, d)
        Tokens on the unit sphere (the Gram matrix's trace is ``n``).
    tolerance : float
        The eigenvalue below which a direction counts as collapsed (absolute; the paper's 1e-3).

    Returns
    -------
    numpy.ndarray of int, shape (...,)
    """
    x = check_points(x, "x")
    tolerance = check_real(tolerance, "tolerance", minimum=0.0)
    # x x^T (n x n) and x^T x (d x d) have the same nonzero eigenvalues: the smaller one is decomposed
    gram = x @ np.swapaxes(x, -1, -2) if x.shape[-2] <= x.shape[-1] else np.swapaxes(x, -1, -2) @ x
    return np.sum(np.linalg.eigvalsh(gram) > tolerance, axis=-1)


def batch_of_tokens(x0, name: str = "x0") -> tuple[np.ndarray, bool]:
    """``x0`` as ``(systems, n, d)`` unit vectors, and whether it was one system ``(n, d)``."""
    x = check_points(x0, name)
    if x.ndim > 3:
        raise ValueError(f"{name} must have shape (n, d) or (systems, n, d), got shape {x.shape}")
    return (x[None], True) if x.ndim == 2 else (x, False)


def collapse_dataset(frames: list[np.ndarray], times: np.ndarray, single: bool, keep_positions: bool,
                     model, settings: dict, extra_coords: dict | None = None):
    """The run's dataset: tokens (optionally), the mean inner product and the diameter per system and time."""
    import xarray as xr  # here, not at the top: sweep workers never build a dataset (xarray is half their start-up)

    x = np.stack(frames, axis=1)  # (systems, time, n, d)
    variables = {
        "mean_inner_product": (("system", "time"), mean_inner_product(x),
                               {"long_name": "mean pairwise inner product (1/n^2) sum_ij <x_i, x_j>"}),
        "diameter": (("system", "time"), diameter(x), {"long_name": "max_ij |x_i - x_j|"}),
        "span_dimension": (("system", "time"), span_dimension(x),
                           {"long_name": "Gram eigenvalues above 1e-3 (the dimension the tokens span)"}),
    }
    if keep_positions:
        variables["x"] = (("system", "time", "particle", "component"), x)
    ds = xr.Dataset(variables, coords={"time": times, **(extra_coords or {})})
    if single:
        ds = ds.isel(system=0)
    ds.attrs.update(record_attrs(PARTICLES, geometry_name(x.shape[-1]), model, settings))
    return ds


def simulate_random_layers(model: RandomAttention, x0, layers: int, *, seed: int | np.random.Generator | None = None,
                           record_every: int = 1, keep_positions: bool = True, progress: bool | None = None):
    r"""Run the random-weight chain for ``layers`` layers from tokens ``x0`` ``(n, d)`` or ``(systems, n, d)``.

    Each system draws its own weights, ``heads`` per layer, from ``model.law``. Returns an
    :class:`xarray.Dataset` over ``time`` (the diffusive time ``layer * step**2 / heads``, with
    the ``layer`` index alongside), every ``record_every`` layers: ``mean_inner_product`` and
    ``diameter`` per system (the collapse observables) and, with ``keep_positions``, the tokens
    ``x``. ``attrs["settings"]`` records the seed that repeats the run.

    Parameters
    ----------
    model : RandomAttention
        The random-weight model (law, heads, step, ``beta``).
    x0 : array_like, shape (n, d) or (systems, n, d)
        Initial tokens on the unit sphere.
    layers : int
        Number of layers, ``>= 1``.
    seed : int or numpy.random.Generator, optional
        Seed of the weights (drawn and recorded when omitted); system ``s`` draws from
        ``SeedSequence(seed, spawn_key=(s,))``, so its weights do not depend on the batch.
    record_every : int
        Record every that many layers (and the last).
    keep_positions : bool
        Record the tokens.
    progress : bool, optional
        Progress bar (default: when stderr is a terminal).

    Returns
    -------
    xarray.Dataset
        The collapse observables, the tokens, and the run's record in ``attrs``.

    Raises
    ------
    TypeError
        If ``model`` is not a :class:`RandomAttention`.
    ValueError
        If ``x0`` is not on the sphere or ``layers`` / ``record_every`` is not a positive integer.
    """
    if not isinstance(model, RandomAttention):
        raise TypeError(f"model must be a RandomAttention, got {type(model).__name__}")
    layers = check_int(layers, "layers", minimum=1)
    record_every = check_int(record_every, "record_every", minimum=1)
    record = sorted({*range(record_every, layers + 1, record_every), layers})
    seed = reproducible_seed(seed)
    frames, index = observe_random_layers(model, x0, record, lambda x: x, seed=seed, progress=progress)
    settings = {"seed": seed, "layers": layers, "record_every": record_every}
    return collapse_dataset(frames, index * model.layer_time, np.ndim(x0) == 2, keep_positions, model, settings,
                            {"layer": ("time", index)})


def observe_random_layers(model: RandomAttention, x0, record, observe: Callable[[np.ndarray], object], *,
                          seed: int | np.random.Generator | None = None, progress: bool | None = None):
    r"""Run the random-weight chain, keeping only ``observe(x)`` at layer 0 and at the ``record`` layers.

    The engine of :func:`simulate_random_layers` for large ensembles (sweeps): the same draws
    (system ``s`` from ``SeedSequence(seed, spawn_key=(s,))``), without the tokens' history.

    Parameters
    ----------
    model : RandomAttention
    x0 : array_like, shape (n, d) or (systems, n, d)
        Initial tokens on the unit sphere.
    record : sequence of int
        Increasing layer indices ``>= 1``; the run ends at the last.
    observe : callable
        ``observe(x)`` of tokens ``(systems, n, d)`` (do not keep ``x`` itself: it is updated in place).
    seed : int or numpy.random.Generator, optional
        As :func:`simulate_random_layers`.
    progress : bool, optional
        Progress bar (default: when stderr is a terminal).

    Returns
    -------
    observations : list
        ``observe`` at layer 0 and at every recorded layer.
    layers : numpy.ndarray of int
        ``0`` and ``record``.

    Raises
    ------
    ValueError
        If ``record`` is not increasing positive integers, or the weights drawn once per system
        (``redraw="system"``) would not fit in memory.
    """
    x, _ = batch_of_tokens(x0)
    record = [check_int(layer, "record", minimum=1) for layer in record]
    if not record or any(b <= a for a, b in zip(record, record[1:])):
        raise ValueError(f"record must be increasing layer indices >= 1, got {record!r}")
    seed = reproducible_seed(seed)
    generators = system_generators(seed, x.shape[0])
    d, heads, systems = x.shape[-1], model.heads, x.shape[0]
    block = max(1, WEIGHT_BLOCK // (3 * heads * d * d))
    fixed = None
    if model.redraw == "system":
        check_memory(24.0 * systems * heads * d * d, f"redraw='system' with {systems} systems, {heads} heads, d = {d}",
                     "run fewer systems at once")
        fixed = _draws(model, generators, heads, d)
    observations, layers, wanted = [observe(x)], [0], set(record)
    with time_progress(0.0, float(record[-1]), progress, "layers") as bar:
        for layer in range(1, record[-1] + 1):
            x = x.copy()
            for start in range(0, systems, block):
                part = slice(start, start + block)
                weights = _draws(model, generators[part], heads, d) if fixed is None else \
                    tuple(w[part] for w in fixed)
                x[part] = model.layer(x[part], *weights)
            if layer in wanted:
                observations.append(observe(x))
                layers.append(layer)
            bar.update(1.0)
    return observations, np.asarray(layers)


def _draws(model: RandomAttention, generators, heads: int, d: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(Q, K, V)`` of shape ``(systems, heads, d, d)``, one draw of ``heads`` per generator."""
    draws = [model.law.sample(g, heads, d) for g in generators]
    return tuple(np.stack([draw[i] for draw in draws]) for i in range(3))
