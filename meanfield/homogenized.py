r"""The homogenized limit of the random-weight chain: an SDE on the sphere with noise common to all tokens.

Derivation (from :mod:`meanfield.random_weights`). One layer moves token :math:`x` by
:math:`x' = N(x + \Delta)`, :math:`N(y) = y/|y|`, with the increment
:math:`\Delta = \frac{\eta}{H}\sum_{h=1}^H A_{\theta_h}(x)`, a mean of :math:`H` iid random fields.
Write its mean and one head's covariance,

.. math::
    m(x;\mu) = E_\theta A_\theta(x), \qquad
    C(x, y; \mu) = \operatorname{Cov}_\theta\big(A_\theta(x), A_\theta(y)\big),

so :math:`\Delta = \eta m + \frac{\eta}{\sqrt H}\xi` with :math:`\xi` of mean 0 and covariance
:math:`C` (jointly over all tokens: the same :math:`\theta` moves every token). Expanding the
normalisation to second order,

.. math::
    N(x + \Delta) = x + P_x\Delta - \langle x, \Delta\rangle P_x\Delta - \tfrac12|P_x\Delta|^2 x + O(|\Delta|^3).

Measure depth in the diffusive time :math:`s = \ell\tau`, :math:`\tau = \eta^2/H`. Per unit
:math:`s` the increments then have covariance :math:`P_x C(x,y) P_y`, and mean
:math:`\frac{H}{\eta} P_x m - P_x C(x,x) x - \frac12\operatorname{tr}(P_x C(x,x))\,x`. As
:math:`\eta \to 0` (any :math:`H \ge 1`) this has a limit only if the values are centred,
:math:`m = 0`, and the chain tends (in law, with error :math:`O(\tau)`: the odd moments of
:math:`\xi` vanish for a centred Gaussian :math:`V`) to the Itô SDE with common noise

.. math::
    dX_i = P_{X_i}\,dM(X_i) - \Big(P_{X_i} C(X_i, X_i) X_i + \tfrac12\operatorname{tr}\big(P_{X_i}C(X_i,X_i)\big) X_i\Big)ds,

:math:`M` a Gaussian martingale field with :math:`d\langle M(x), M(y)\rangle = C(x, y; \mu_s)\,ds`,
the same for every token. The radial term keeps :math:`|X_i| = 1`. For :class:`GaussianWeights`,
:math:`V` is independent of :math:`(Q, K)` with iid :math:`N(0, \sigma_V^2/d)` entries, so

.. math:: C(x, y; \mu) = \frac{\sigma_V^2}{d}\,E_{QK}\big[\langle a_{QK}(x), a_{QK}(y)\rangle\big]\, I_d,

isotropic: the tangential drift :math:`P_x C x` vanishes (the limiting drift is zero), and what
is left is the sphere's Itô term. With :math:`Q = K = I` fixed the expectation is the product
:math:`\langle a(x), a(y)\rangle` of the :class:`~meanfield.SelfAttention` averages (closed form);
otherwise it is a Monte Carlo quadrature over ``nodes`` draws of :math:`(Q, K)`, fixed for a
path (so the SDE has finitely many Brownian motions), whose error on expectations is
:math:`O(1/\text{nodes})`. For :class:`SampledWeights` the nodes are whole draws
:math:`(Q_m, K_m, V_m)`, each with one scalar Brownian motion:
:math:`M(x) = \frac{1}{\sqrt{\text{nodes}}}\sum_m V_m a_m(x) B^m`.

In the other scaling, depth measured as :math:`t = \ell\eta`, the noise per unit time is
:math:`O(\eta/H) \to 0` and the limit is deterministic: :math:`\dot X = P_X m(X; \mu)`, which
for :class:`GaussianWeights` is :math:`m_V P_X E_{QK}[a_{QK}(X)]`, the
:class:`~meanfield.SelfAttention` flow with :math:`V = m_V I` when :math:`Q = K = I`.

The scheme: projected Euler-Maruyama on the ambient increment,
:math:`X \leftarrow N\big(X + m\,\Delta s + \sum_m G_m a_m(X)\big)`, whose second-order terms
produce exactly the Itô drift above, and which stays on the sphere. Strong order 1/2 (the noise
is multiplicative and non-commutative), weak order 1.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .checks import check_int, check_real, check_times
from .common_noise import NoisePath, WeightedAttention
from .integration.runs import noise_grid_run
from .random_weights import (GaussianWeights, RandomAttention, SampledWeights, attention_averages,
                             batch_of_tokens, collapse_dataset)
from .sampling import reproducible_seed
from .sphere import normalize

#: The largest small parameter accepted: the layer time step^2/heads in the diffusive limit; the
#: step and the noise left per unit time, value_std^2 step/heads, in the deterministic one. The
#: limit's error is of this order.
LARGEST_LAYER_TIME = 0.25


@dataclass(frozen=True)
class HomogenizedLimit:
    r"""The limit SDE (or ODE) of the random-weight chain, driven by noise common to all tokens.

    Parameters
    ----------
    beta : float
        Inverse temperature of the softmax.
    law : GaussianWeights or SampledWeights
        The law of one head's weights; its values must be centred when ``noise`` is on.
    nodes : int
        Draws of the attention weights over which :math:`E_{QK}` is taken (one path's fixed
        quadrature); 1 suffices, and is used, when :math:`Q = K = I` are fixed.
    drift : float
        Coefficient :math:`m_V` of the deterministic drift :math:`m_V P_x E_{QK}[a_{QK}(x)]`.
    noise : bool
        Whether the common noise is on.
    """

    beta: float
    law: GaussianWeights | SampledWeights = GaussianWeights()
    nodes: int = 64
    drift: float = 0.0
    noise: bool = True

    #: Its density equation is driven by noise common to all tokens (one density path per noise path):
    #: the solvers' table sends it to the common-noise solvers (``solvers.methods``).
    common_noise = True

    def __post_init__(self) -> None:
        check_real(self.beta, "beta", minimum=0.0)
        check_int(self.nodes, "nodes", minimum=1)
        check_real(self.drift, "drift")
        if self.drift and not isinstance(self.law, GaussianWeights):
            raise ValueError("a drift (the values' mean) is defined for GaussianWeights only: a sampled law's "
                             "mean field E[V a_QK(x)] needs its joint law")
        if self.noise:
            require_centred(self.law)

    @property
    def node_count(self) -> int:
        """Quadrature nodes actually used: 1 when the attention is not random."""
        return 1 if self.law.fixed_attention else self.nodes

    @classmethod
    def of(cls, model: RandomAttention, regime: str = "diffusive", nodes: int = 64) -> tuple[HomogenizedLimit, float]:
        r"""The limit of ``model`` in a regime, and the limit's time per layer.

        ``"diffusive"``: time :math:`s = \ell\eta^2/H`, the SDE with common noise; needs centred
        values. ``"deterministic"``: time :math:`t = \ell\eta`, the mean-field ODE of the values'
        mean (:class:`GaussianWeights` only); the noise left per unit time is
        :math:`\sigma_V^2\eta/H`. Either is refused when its small parameter is not small.

        Parameters
        ----------
        model : RandomAttention
            The discrete random-weight model.
        regime : {"diffusive", "deterministic"}
            Which limit.
        nodes : int
            Quadrature nodes of the weight law in the limit's noise (see the class).

        Returns
        -------
        limit : HomogenizedLimit
            The limit.
        layer_time : float
            The limit's time per layer of ``model`` (:math:`\eta^2/H` or :math:`\eta`).

        Raises
        ------
        ValueError
            If the regime is unknown, its small parameter is above ``0.25``, or the model's weights
            are drawn once per system.
        """
        if model.redraw != "layer":
            raise ValueError("the homogenized limit averages weights redrawn at every layer; with redraw='system' "
                             "the chain is the Euler scheme of one fixed-weight ODE per system (no such limit)")
        if regime == "diffusive":
            if model.layer_time > LARGEST_LAYER_TIME:
                raise ValueError(f"the diffusive limit needs a small layer time step**2/heads; "
                                 f"{model.step}**2/{model.heads} = {model.layer_time:.3g} > {LARGEST_LAYER_TIME} "
                                 "(a layer moves the tokens by as much as the noise the limit averages)")
            return cls(model.beta, model.law, nodes), model.layer_time
        if regime == "deterministic":
            if not isinstance(model.law, GaussianWeights):
                raise ValueError("the deterministic limit is defined for GaussianWeights only")
            leftover = model.law.value_std ** 2 * model.step / model.heads
            if leftover > LARGEST_LAYER_TIME or model.step > LARGEST_LAYER_TIME:
                raise ValueError(f"the deterministic limit needs step and value_std**2*step/heads small; got "
                                 f"step = {model.step:.3g} and {leftover:.3g} (limit {LARGEST_LAYER_TIME}): "
                                 "the noise does not average out")
            return cls(model.beta, model.law, nodes, drift=model.law.value_mean, noise=False), model.step
        raise ValueError(f"regime must be 'diffusive' or 'deterministic', got {regime!r}")

    def draw_nodes(self, rng: np.random.Generator, d: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """One path's quadrature nodes of the weight law.

        Parameters
        ----------
        rng : numpy.random.Generator
            The path's generator.
        d : int
            Dimension of the tokens.

        Returns
        -------
        tuple of numpy.ndarray
            ``(Q, K, V)``, each ``(node_count, d, d)``.
        """
        return self.law.sample(rng, self.node_count, d)

    def noise_matrices(self, increments: np.ndarray, values: np.ndarray) -> np.ndarray:
        r"""The matrices :math:`G_m` that move :math:`x` by :math:`\sum_m G_m a_m(x)` over one step.

        Parameters
        ----------
        increments : numpy.ndarray
            The Brownian increments: ``(..., nodes, d, d)`` for :class:`GaussianWeights` (a
            matrix Brownian motion per node, exact over :math:`V`), ``(..., nodes)`` otherwise
            (one scalar per node, times that node's :math:`V_m`).
        values : numpy.ndarray, shape (..., nodes, d, d)
            The nodes' value matrices (used by sampled laws only).

        Returns
        -------
        numpy.ndarray, shape (..., nodes, d, d)
            :math:`G_m`.
        """
        if isinstance(self.law, GaussianWeights):
            d = increments.shape[-1]
            return increments * (self.law.value_std / np.sqrt(d * self.node_count))
        return values * (increments[..., None, None] / np.sqrt(self.node_count))

    def increment_shape(self, systems: int, d: int) -> tuple[int, ...]:
        """Shape of one step's Brownian increments.

        Parameters
        ----------
        systems : int
            Number of independent paths.
        d : int
            Dimension of the tokens.

        Returns
        -------
        tuple of int
            ``(systems, nodes, d, d)`` for :class:`GaussianWeights`, ``(systems, nodes)`` otherwise.
        """
        if isinstance(self.law, GaussianWeights):
            return (systems, self.node_count, d, d)
        return (systems, self.node_count)

    def to_dict(self) -> dict:
        return {"model": "HomogenizedLimit", "beta": self.beta, "law": self.law.to_dict(), "nodes": self.nodes,
                "drift": self.drift, "noise": self.noise}


def require_centred(law) -> None:
    """Refuse Gaussian values with a non-zero mean: the diffusive limit's drift would diverge (a sampled
    law is checked at the tokens' dimension, :func:`meanfield.random_weights.check_centred`)."""
    if isinstance(law, GaussianWeights) and law.value_mean != 0.0:
        raise ValueError(f"the common-noise limit needs centred values (E V = 0), got value_mean = {law.value_mean}: "
                         "a mean m_V drifts by m_V*heads/step per unit diffusive time, unbounded as step -> 0; "
                         "take the deterministic limit (HomogenizedLimit.of(model, 'deterministic'))")


def simulate_homogenized(limit: HomogenizedLimit, x0, times, *, dt: float, seed: int | np.random.Generator | None = None,
                         increments: np.ndarray | None = None, scheme: str = "euler", keep_positions: bool = True,
                         progress: bool | None = None):
    r"""Integrate the limit SDE from tokens ``x0`` ``(n, d)`` or ``(systems, n, d)`` over ``times``.

    ``scheme="euler"``: projected Euler-Maruyama of the Itô form, step ``dt``. ``scheme="heun"``:
    Heun's predictor-corrector on the Stratonovich form (``meanfield.common_noise``), each
    stage projected back; the same scheme as the stochastic density solvers, so the two can be
    compared on one path at one step. Both have strong order 1/2 (the noise is multiplicative
    and non-commutative) and stay on the sphere to round-off. ``times`` must lie on the grid of
    ``dt``. Each system is one path with its own nodes and Brownian motions
    (``meanfield.common_noise.NoisePath``, from ``seed``); ``increments`` (shape
    ``(steps,) + limit.increment_shape(systems, d)``, variance ``dt``) replaces the Brownian
    draws, for comparing step sizes on one path.

    Parameters
    ----------
    limit : HomogenizedLimit
        The limit to integrate.
    x0 : array_like, shape (n, d) or (systems, n, d)
        Initial tokens on the unit sphere; each system is one path.
    times : array_like
        Increasing output times (the limit's time), on the grid of ``dt`` from ``times[0]``.
    dt : float
        Time step, ``> 0``.
    seed : int or numpy.random.Generator, optional
        Seed of the nodes and Brownian motions (drawn and recorded when omitted).
    increments : numpy.ndarray, optional
        Brownian increments to use instead of drawing them (see above).
    scheme : {"euler", "heun"}
        The integrator.
    keep_positions : bool
        Record the tokens ``x`` (else only the collapse observables).
    progress : bool, optional
        Progress bar (default: when stderr is a terminal).

    Returns
    -------
    xarray.Dataset
        As :func:`simulate_random_layers`: ``mean_inner_product`` and ``diameter`` per
        system and time, the tokens ``x`` with ``keep_positions``, the settings (seed, dt,
        scheme) in ``attrs``.

    Raises
    ------
    TypeError
        If ``limit`` is not a :class:`HomogenizedLimit`.
    ValueError
        If ``scheme`` is unknown, ``dt <= 0``, ``times`` is off the grid of ``dt``, or ``x0``
        is not on the sphere.
    """
    if not isinstance(limit, HomogenizedLimit):
        raise TypeError(f"limit must be a HomogenizedLimit, got {type(limit).__name__}")
    if scheme not in ("euler", "heun"):
        raise ValueError(f"scheme must be 'euler' or 'heun', got {scheme!r}")
    x, single = batch_of_tokens(x0)
    times = check_times(times)
    steps_at, dt = output_steps(times, dt)
    systems, n, d = x.shape
    seed = reproducible_seed(seed)
    path = NoisePath(limit, systems, d, seed, dt, steps_at[-1], increments)
    weights = np.full((systems, n), 1.0 / n)

    def stratonovich_move(points, increment):
        attention = WeightedAttention(points, weights, slice(None), path, limit.beta)
        return attention.stratonovich_drift()[0] * dt + attention.noise(increment)

    def step(x, index: int):  # the index-th step of dt on the noise path
        increment = path.increment(index)
        if scheme == "euler":
            averages = attention_averages(x, path.query, path.key, limit.beta)
            move = np.zeros_like(x)
            if limit.drift:
                move += (limit.drift * dt) * averages.mean(axis=1)
            if limit.noise:
                move += path.displacement(averages, increment)
            return normalize(x + move)
        first = stratonovich_move(x, increment)
        return normalize(x + 0.5 * (first + stratonovich_move(normalize(x + first), increment)))

    frames = []
    noise_grid_run(step, x, times, steps_at, dt, progress, frames.append)
    settings = {"seed": seed, "dt": dt, "scheme": scheme, "nodes": limit.node_count,
                "given_increments": increments is not None}
    return collapse_dataset(frames, times, single, keep_positions, limit, settings)


def output_steps(times: np.ndarray, dt) -> tuple[np.ndarray, float]:
    """The step counts at which ``times`` fall on the grid of ``dt`` from ``times[0]`` (refused off the grid), and ``dt``."""
    dt = check_real(dt, "dt", minimum=0.0)
    if dt == 0.0:
        raise ValueError("dt must be > 0, got 0.0")
    steps_at = np.rint((times - times[0]) / dt).astype(int)  # distinct: times increase and lie on the grid
    if not np.allclose(steps_at * dt, times - times[0], rtol=0, atol=1e-9 * max(1.0, times[-1])):
        raise ValueError(f"times must lie on the grid of dt = {dt!r} from times[0]; got {times!r}")
    return steps_at, dt
