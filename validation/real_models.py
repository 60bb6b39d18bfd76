r"""A trained Transformer held against the theory: its hidden states beside the library's dynamics.

From the same input embeddings (:class:`meanfield.pretrained.Transformer`), :func:`compare_dynamics`
runs four layer-by-layer systems and records, per layer, how clustered each is and how far its
tokens point from the real ones:

``real``
    the checkpoint's forward pass (:meth:`~meanfield.pretrained.Transformer.hidden_states`);
``weights``
    the library's discrete layer with the extracted weights of each layer: attention with the
    papers' folded matrices :math:`B_h = Q_h^TK_h` and :math:`V_h` (biases dropped,
    :meth:`~meanfield.pretrained.MultiHeadAttention.folded`) as a :class:`meanfield.PureAttention`,
    the feed-forward block as an external field, and the library's normalisation
    :math:`N_g(x) = g\odot\sqrt d\,x/|x|` (RMS normalisation with the trained gain: no
    centring, no bias) where the checkpoint normalises, post-LN
    (:math:`x \leftarrow N_{g_1}(x + a(x))`, :math:`x \leftarrow N_{g_2}(x + f(x))`) or pre-LN
    (:math:`x \leftarrow x + a(N_{g_1}(x))`, :math:`x \leftarrow x + f(N_{g_2}(x))`);
``attention only``
    the same without the feed-forward sub-layers;
``isotropic``
    the papers' model :math:`Q = K = V = I` on the unit sphere, one Euler step of length one per
    layer, :math:`x_i \leftarrow (x_i + \sum_j P_{ij}x_j)/|\cdot|`,
    :math:`P_{ij} = \mathrm{softmax}_j(\beta\langle x_i, x_j\rangle)` (causal for a decoder),
    at the ``beta`` that fits the real mean inner product best (least squares over the layers).

Observables (of the directions :math:`u_i = x_i/|x_i|`): the mean inner product
:math:`|\bar u|^2` (:func:`meanfield.mean_inner_product`: 1 at collapse), and the direction error
:math:`\frac1n\sum_i (1 - \langle u_i, u^{\rm real}_i\rangle)`.

:func:`value_spectra` gives the eigenvalues of every head's value matrix and whether the head's
triple is good (Definition 1 of "The emergence of clusters": the eigenvalue of largest modulus
real, positive and simple, and :math:`\langle Q\varphi_1, K\varphi_1\rangle > 0`);
:func:`good_triple_fraction` is that fraction for random value matrices (the paper's 14 % of
real Ginibre matrices at ``d = 128``).
"""

from __future__ import annotations

import math
from typing import Callable

import numpy as np
import xarray as xr
from scipy.optimize import minimize_scalar

import meanfield as mf
from meanfield.checks import check_int, check_real
from meanfield.limit_geometry import leading_eigenpair
from meanfield.pretrained import Transformer
from meanfield.records import STUDY, euclidean_name, record_attrs
from meanfield.sampling import reproducible_seed
from meanfield.sphere import normalize

#: The systems of :func:`compare_dynamics`, in the order of its ``model`` coordinate.
SYSTEMS = ("real", "weights", "attention only", "isotropic")

#: The range of ``beta`` the isotropic fit searches (log-uniformly).
BETA_RANGE = (1e-2, 1e3)


def _gain(norm, d: int) -> np.ndarray:
    r"""The library's RMS gain for a checkpoint's norm: :math:`\sqrt d\,g` (the radius of a layer-normed token)."""
    return math.sqrt(d) * norm.gain


def _attention_model(block) -> mf.PureAttention:
    """The block's attention with the papers' folded matrices (biases dropped), reading the library's norm if pre-LN."""
    bilinear, value = block.attention.folded()
    d = bilinear.shape[-1]
    pre = block.placement == "pre"
    return mf.PureAttention(query=np.swapaxes(bilinear, -1, -2), value=value, beta=1.0,
                            mask="causal" if block.attention.causal else "none",
                            normalization="pre" if pre else "none",
                            gain=_gain(block.attention_norm, d) if pre else None)


def _rms(x: np.ndarray, gain: np.ndarray) -> np.ndarray:
    return gain * normalize(x)


def library_layers(transformer: Transformer, x0: np.ndarray, *, feed_forward: bool = True) -> np.ndarray:
    """The library's discrete layers with the checkpoint's weights (module docstring), ``(layers + 1, n, d)``.

    Parameters
    ----------
    transformer : meanfield.pretrained.Transformer
    x0 : numpy.ndarray, shape (n, d)
        The first block's input.
    feed_forward : bool
        Keep the feed-forward sub-layers (``False``: attention only).

    Returns
    -------
    numpy.ndarray
    """
    d = transformer.dimension
    frames = [np.asarray(x0, dtype=float)]
    for block in transformer.blocks:
        x, attention = frames[-1], _attention_model(block)
        if block.placement == "pre":
            x = x + attention.velocity(x)
            if feed_forward:
                x = x + block.feed_forward(_rms(x, _gain(block.feed_forward_norm, d)))
        else:
            x = _rms(x + attention.velocity(x), _gain(block.attention_norm, d))
            if feed_forward:
                x = _rms(x + block.feed_forward(x), _gain(block.feed_forward_norm, d))
        frames.append(x)
    return np.stack(frames)


def isotropic_layers(x0: np.ndarray, beta: float, layers: int, *, causal: bool = False) -> np.ndarray:
    r"""The papers' discrete model :math:`Q = K = V = I` on the unit sphere, ``(layers + 1, n, d)``.

    Parameters
    ----------
    x0 : numpy.ndarray, shape (n, d)
        Initial tokens (normalised here).
    beta : float
        Inverse temperature ``> 0``.
    layers : int
        Number of layers (Euler steps of length one followed by the projection).
    causal : bool
        Mask the pairs ``j > i``.

    Returns
    -------
    numpy.ndarray
    """
    model = mf.PureAttention(beta=check_real(beta, "beta", minimum=0.0, strictly=True),
                             mask="causal" if causal else "none")
    frames = [normalize(np.asarray(x0, dtype=float))]
    for _ in range(check_int(layers, "layers", minimum=0)):
        frames.append(normalize(frames[-1] + model.velocity(frames[-1])))
    return np.stack(frames)


def _mean_inner_product(frames: np.ndarray) -> np.ndarray:
    return mf.mean_inner_product(normalize(frames))


def fit_isotropic_beta(real: np.ndarray, *, causal: bool = False) -> float:
    """The ``beta`` whose isotropic layers best fit the real mean inner products (least squares over the layers).

    Parameters
    ----------
    real : numpy.ndarray, shape (layers + 1, n, d)
        The real hidden states (their first frame is the isotropic model's input too).
    causal : bool
        Mask the pairs ``j > i``.

    Returns
    -------
    float
        The minimiser over :data:`BETA_RANGE`, searched in ``log beta`` (bounded Brent).
    """
    target = _mean_inner_product(real)

    def misfit(log_beta: float) -> float:
        fitted = _mean_inner_product(isotropic_layers(real[0], math.exp(log_beta), len(real) - 1, causal=causal))
        return float(np.sum((fitted - target) ** 2))

    low, high = (math.log(b) for b in BETA_RANGE)
    return math.exp(minimize_scalar(misfit, bounds=(low, high), method="bounded",
                                    options={"xatol": 1e-6}).x)


def compare_dynamics(transformer: Transformer, ids: object | None = None, *, embeddings: object | None = None,
                     beta: float | None = None):
    """The real hidden states against the library's dynamics from the same input (module docstring).

    Parameters
    ----------
    transformer : meanfield.pretrained.Transformer
    ids : array_like of int, shape (n,), optional
        A prompt's token ids.
    embeddings : array_like, shape (n, d), optional
        The first block's input instead of ``ids``.
    beta : float, optional
        The isotropic model's inverse temperature; fitted when omitted (least squares of the mean
        inner products over the layers, bounded Brent in ``log beta`` over ``[1e-2, 1e3]``).

    Returns
    -------
    xarray.Dataset
        ``mean_inner_product`` and ``direction_error`` over (model, time), ``model`` one of
        ``"real"``, ``"weights"``, ``"attention only"``, ``"isotropic"`` and ``time`` the layer; ``x`` (model, time, particle, component) the
        directions of the tokens; ``attrs["beta"]`` the isotropic model's.
    """
    real = transformer.hidden_states(ids, embeddings=embeddings).x.values
    causal, fitted = transformer.architecture.causal, beta is None
    beta = fit_isotropic_beta(real, causal=causal) if fitted else check_real(beta, "beta", minimum=0.0, strictly=True)
    systems = [real, library_layers(transformer, real[0]), library_layers(transformer, real[0], feed_forward=False),
               isotropic_layers(real[0], beta, transformer.layers, causal=causal)]
    directions = normalize(np.stack(systems))
    error = np.mean(1.0 - np.sum(directions * directions[:1], axis=-1), axis=-1)
    ds = xr.Dataset({"x": (("model", "time", "particle", "component"), directions),
                     "mean_inner_product": (("model", "time"), mf.mean_inner_product(directions)),
                     "direction_error": (("model", "time"), error,
                                         {"long_name": "mean of 1 - <u_i, u_i real> over the tokens"})},
                    coords={"model": list(SYSTEMS), "time": np.arange(transformer.layers + 1.0)})
    ds["time"].attrs["long_name"] = "layer"
    ds.attrs.update(record_attrs(STUDY, euclidean_name(transformer.dimension), transformer,
                                 {"beta": beta, "fitted": fitted}))
    ds.attrs["beta"] = beta
    return ds


def is_good_triple(bilinear: object, value: object) -> bool:
    r"""Whether :math:`(Q, K, V)` is a good triple (Definition 1 of "The emergence of clusters").

    Parameters
    ----------
    bilinear : array_like, shape (d, d)
        :math:`Q^TK` (the logit of ``x``, ``y`` is :math:`x^TQ^TKy`).
    value : array_like, shape (d, d)
        :math:`V`.

    Returns
    -------
    bool
        The eigenvalue of largest modulus of ``V`` is real, positive and simple
        (``meanfield.limit_geometry.leading_eigenpair``), and
        :math:`\varphi_1^TQ^TK\varphi_1 > 0` on its eigenvector.
    """
    try:
        _, phi, _ = leading_eigenpair(value)
    except ValueError:
        return False
    return bool(phi @ np.asarray(bilinear, dtype=float) @ phi > 0)


def value_spectra(transformer: Transformer):
    """Every head's value spectrum and whether its triple is good, per layer.

    Parameters
    ----------
    transformer : meanfield.pretrained.Transformer

    Returns
    -------
    xarray.Dataset
        ``eigenvalues`` (time, head, index), complex, by decreasing modulus; ``good_triple``
        (time, head); ``time`` is the layer (1 for the first block).
    """
    eigenvalues, good = [], []
    for block in transformer.blocks:
        bilinear, value = block.attention.folded()
        spectra = np.linalg.eigvals(value)
        eigenvalues.append(np.take_along_axis(spectra, np.argsort(-np.abs(spectra), axis=-1), axis=-1))
        good.append([is_good_triple(b, v) for b, v in zip(bilinear, value)])
    return xr.Dataset({"eigenvalues": (("time", "head", "index"), np.array(eigenvalues)),
                       "good_triple": (("time", "head"), np.array(good))},
                      coords={"time": np.arange(1.0, transformer.layers + 1)})


def ginibre(d: int, rng: np.random.Generator) -> np.ndarray:
    """A real Ginibre matrix: iid standard normal entries."""
    return rng.standard_normal((d, d))


def good_triple_fraction(d: int, samples: int, *, law: Callable[[int, np.random.Generator], np.ndarray] = ginibre,
                         seed: int | None = None) -> tuple[float, float]:
    r"""The fraction of value matrices from ``law`` whose eigenvalue of largest modulus is real, positive and simple.

    The first condition of a good triple (the second holds for :math:`Q = K = I`).

    Parameters
    ----------
    d : int
        Dimension.
    samples : int
        Number of draws.
    law : callable
        ``law(d, rng)`` draws one ``(d, d)`` matrix (default: real Ginibre, iid standard normal entries).
    seed : int, optional
        Draw ``s`` uses ``SeedSequence(seed, spawn_key=(s,))``: the same seed repeats every draw.

    Returns
    -------
    fraction, standard_error : float
        The fraction and its binomial standard error :math:`\sqrt{p(1-p)/N}`.
    """
    d, samples = check_int(d, "d", minimum=1), check_int(samples, "samples", minimum=1)
    seed = reproducible_seed(seed)
    identity = np.eye(d)
    good = sum(is_good_triple(identity, law(d, np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(s,)))))
               for s in range(samples))
    fraction = good / samples
    return fraction, math.sqrt(fraction * (1 - fraction) / samples)
