r"""Tokens with their own frequencies on the circle: Kuramoto oscillators, and attention with an intrinsic rotation.

"A mathematical perspective on Transformers", sec. 7.2: each token carries a natural frequency
:math:`\omega_i` drawn from a law :math:`g`, and turns at that rate on top of the interaction,

.. math:: \dot\theta_i = \omega_i + v[\mu_t](\theta_i), \qquad \mu_t = \frac1n\sum_j \delta_{\theta_j(t)},

where :math:`v` is any circle model's velocity of a measure: ``SelfAttention(0, value=K)`` is the
Kuramoto model :math:`\dot\theta_i = \omega_i + \frac Kn\sum_j\sin(\theta_j - \theta_i)`, a value
matrix :math:`K R(-\alpha)` its Sakaguchi phase lag :math:`\sin(\theta_j - \theta_i - \alpha)`,
and ``beta > 0`` the attention analogue. The interaction does not read the others' frequencies,
so the mean field is a family of densities :math:`\rho_t(\omega, \cdot)`, one per frequency,
each moved by :math:`\omega + v[\bar\rho_t]` with the marginal
:math:`\bar\rho_t = \int g(\omega)\,\rho_t(\omega, \cdot)\,d\omega`
(:class:`solvers.FrequencyCircleFV` on the nodes of a quadrature of ``g``:
:func:`lorentzian_nodes`, :func:`gaussian_nodes`).

With Lorentzian frequencies of width :math:`\Delta` (Kuramoto, phase lag :math:`\alpha`), densities
on the Ott-Antonsen manifold stay on it and the order parameter obeys
:math:`\dot r = -\Delta r + \frac K2 r(1 - r^2)\cos\alpha` (:func:`ott_antonsen_radius`); with a
finite set of frequencies each population's Poisson kernel
:math:`\frac{1 - |a_m|^2}{|e^{i\theta} - a_m|^2}` is invariant, with
:math:`\dot a_m = i\omega_m a_m + \frac K2\big(e^{-i\alpha} Z - e^{i\alpha}\bar Z a_m^2\big)`,
:math:`Z = \sum_m w_m a_m` (:func:`ott_antonsen_populations`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.special import roots_hermite

from .checks import check_int, check_points, check_real
from .docstrings import fill_docstrings
from .models import POINTS_PARAMETERS, WithoutEnergy
from .sphere import normalize


@fill_docstrings(points_parameters=POINTS_PARAMETERS)
@dataclass(frozen=True, eq=False)
class NaturalFrequencies(WithoutEnergy):
    r"""A circle model whose tokens turn at their own frequencies (module docstring).

    Parameters
    ----------
    model : object
        The interaction: a model on the circle with a velocity of a measure (``SelfAttention``,
        ``ZonalAggregation``, a :class:`~meanfield.FieldModel`, ...).
    frequencies : array_like, shape (n,) or (systems, n)
        The natural frequencies :math:`\omega_i` of the tokens, in their order.
    """

    model: object
    frequencies: np.ndarray

    on_sphere = True
    heads = 1
    dimension = 2
    is_zonal = False
    causal = False
    external = None
    time_rescaled = False

    def __post_init__(self) -> None:
        if getattr(self.model, "dimension", None) not in (None, 2) or not getattr(self.model, "on_sphere", False):
            raise ValueError(f"model: natural frequencies turn tokens on the circle (d = 2), got {self.model!r}")
        if isinstance(self.model, NaturalFrequencies):
            raise TypeError("model already carries frequencies")
        try:
            frequencies = np.array(self.frequencies, dtype=float)
        except (TypeError, ValueError):
            raise TypeError(f"frequencies must be an array of numbers, got {self.frequencies!r}") from None
        if frequencies.ndim not in (1, 2) or frequencies.size == 0 or not np.all(np.isfinite(frequencies)):
            raise ValueError(f"frequencies must be a finite (n,) or (systems, n) array, got shape {frequencies.shape}")
        frequencies.setflags(write=False)
        object.__setattr__(self, "frequencies", frequencies)

    @property
    def diffusion(self) -> float:
        """The interaction's diffusion."""
        return self.model.diffusion

    @property
    def logit_bound(self) -> float:
        """The interaction's logit bound."""
        return self.model.logit_bound

    @property
    def velocity_is_linear(self) -> bool:
        """Whether the interaction is linear in the density."""
        return self.model.velocity_is_linear

    def rotation(self, unit: np.ndarray) -> np.ndarray:
        r""":math:`\omega_i J x_i`: the rotation of unit tokens ``(..., n, 2)`` at their frequencies.

        Parameters
        ----------
        unit : numpy.ndarray, shape (..., n, 2)
            Unit tokens.

        Returns
        -------
        numpy.ndarray, shape (..., n, 2)
            Tangent vectors; what the particle engines add to the interaction's output.
        """
        if unit.shape[-2] != self.frequencies.shape[-1]:
            raise ValueError(f"the model has frequencies for {self.frequencies.shape[-1]} tokens, got "
                             f"n={unit.shape[-2]}")
        return self.frequencies[..., None] * np.stack([-unit[..., 1], unit[..., 0]], axis=-1)

    def velocity(self, x: np.ndarray) -> np.ndarray:
        r"""The velocity :math:`\omega_i J x_i + v[\mu](x_i)` of tokens ``x`` on the circle, in their order.

        Parameters
        ----------
        x : numpy.ndarray, shape (..., n, 2)
            Tokens on the unit circle.

        Returns
        -------
        numpy.ndarray, shape (..., n, 2)
            The velocities, tangent to the circle.

        Raises
        ------
        ValueError
            If ``x`` is not on the unit circle or its count differs from the frequencies'.
        """
        x = check_points(x, "x")
        if x.shape[-1] != 2:
            raise ValueError(f"x must hold points on the circle (R^2), got R^{x.shape[-1]}")
        return self.velocity_unchecked(x)

    def velocity_unchecked(self, x: np.ndarray) -> np.ndarray:
        """:meth:`velocity` without input checks, extended off the circle as ``v(x / |x|)``.

        {points_parameters}

        Returns
        -------
        numpy.ndarray, shape (..., n, 2)
            The velocities, tangent at ``x / |x|``.
        """
        return self.model.velocity_unchecked(x) + self.rotation(normalize(x))

    def attention_output(self, x: np.ndarray) -> np.ndarray:
        """The interaction's output plus the rotation (tangent, so the projection keeps it).

        {points_parameters}

        Returns
        -------
        numpy.ndarray, shape (..., n, 2)
            The output whose tangent projection is the velocity.
        """
        return self.model.attention_output(x) + self.rotation(normalize(x))

    def to_dict(self) -> dict:
        """A JSON-serializable description: the interaction's and the frequencies.

        Returns
        -------
        dict
            Plain values; :func:`meanfield.model_from_dict` rebuilds the model.
        """
        return {"model": "NaturalFrequencies", "interaction": self.model.to_dict(),
                "frequencies": self.frequencies.tolist()}


#: The laws :func:`sample_frequencies` draws from.
FREQUENCY_LAWS = ("lorentzian", "gaussian")


def sample_frequencies(law: str, width: float, shape, rng: int | np.random.Generator | None = None, *,
                       center: float = 0.0) -> np.ndarray:
    r"""Natural frequencies drawn iid from a Lorentzian (Cauchy) law of half-width ``width`` or a Gaussian of standard deviation ``width``.

    Parameters
    ----------
    law : {"lorentzian", "gaussian"}
        The law: :math:`g(\omega) = \frac{\Delta/\pi}{(\omega - \omega_0)^2 + \Delta^2}`, whose
        Kuramoto transition sits at :math:`K_c = 2\Delta`, or the normal law, at
        :math:`K_c = 2/(\pi g(\omega_0)) = 2\sqrt{2/\pi}\,\sigma`.
    width : float
        :math:`\Delta` or :math:`\sigma`, positive.
    shape : int or tuple of int
        The draws' shape (``(n,)``, or ``(systems, n)`` for a batch).
    rng : int, numpy.random.Generator or None
        Seed or generator.
    center : float
        :math:`\omega_0`.

    Returns
    -------
    numpy.ndarray

    Raises
    ------
    ValueError
        For an unknown law or a width that is not positive and finite.
    """
    if law not in FREQUENCY_LAWS:
        raise ValueError(f"law must be one of {', '.join(map(repr, FREQUENCY_LAWS))}, got {law!r}")
    width = check_real(width, "width", minimum=0.0, strictly=True)
    center = check_real(center, "center")
    generator = np.random.default_rng(rng)
    draws = generator.standard_cauchy(shape) if law == "lorentzian" else generator.standard_normal(shape)
    return center + width * draws


def lorentzian_nodes(width: float, count: int, center: float = 0.0) -> tuple[np.ndarray, np.ndarray]:
    r"""Nodes and weights of the Lorentzian law :math:`g(\omega) = \frac{\Delta}{\pi((\omega - \omega_0)^2 + \Delta^2)}`.

    With :math:`\omega = \omega_0 + \Delta\tan\varphi` the law is uniform in
    :math:`\varphi \in (-\pi/2, \pi/2)`: the midpoints of ``count`` equal cells in :math:`\varphi`,
    equal weights. Heavy tails: the nodes reach :math:`\Delta\cot(\pi/2M)`, and integrals of
    rotations :math:`e^{i\omega t}` converge slowly in ``count`` as ``t`` grows.

    Parameters
    ----------
    width : float
        :math:`\Delta > 0`.
    count : int
        Number of nodes ``M``.
    center : float
        :math:`\omega_0`.

    Returns
    -------
    nodes, weights : numpy.ndarray, shape (count,)
        Increasing frequencies and their weights (summing to one).
    """
    width = check_real(width, "width", minimum=0.0, strictly=True)
    count = check_int(count, "count", minimum=1)
    angles = -0.5 * np.pi + (np.arange(count) + 0.5) * np.pi / count
    return check_real(center, "center") + width * np.tan(angles), np.full(count, 1.0 / count)


def gaussian_nodes(std: float, count: int, center: float = 0.0) -> tuple[np.ndarray, np.ndarray]:
    r"""Gauss-Hermite nodes and weights of the Gaussian law of standard deviation :math:`\sigma`.

    Parameters
    ----------
    std : float
        :math:`\sigma > 0`.
    count : int
        Number of nodes.
    center : float
        The mean.

    Returns
    -------
    nodes, weights : numpy.ndarray, shape (count,)
        Increasing frequencies and their weights (summing to one).
    """
    std = check_real(std, "std", minimum=0.0, strictly=True)
    count = check_int(count, "count", minimum=1)
    roots, weights = roots_hermite(count)
    return check_real(center, "center") + np.sqrt(2.0) * std * roots, weights / np.sqrt(np.pi)


def ott_antonsen_radius(t, *, coupling: float, width: float, r0: float, phase_lag: float = 0.0) -> np.ndarray:
    r"""The order parameter on the Ott-Antonsen manifold, Lorentzian frequencies of width :math:`\Delta`.

    The solution of :math:`\dot r = -\Delta r + \frac K2 r(1 - r^2)\cos\alpha`,
    :math:`r(0) = r_0`: with :math:`\lambda = \frac K2\cos\alpha - \Delta` and
    :math:`r_\infty^2 = \lambda / (\frac K2\cos\alpha)`,
    :math:`r(t)^{-2} = (r_0^{-2} - r_\infty^{-2}) e^{-2\lambda t} + r_\infty^{-2}` (the incoherent
    state is stable below :math:`K_c = 2\Delta/\cos\alpha`).

    Parameters
    ----------
    t : array_like
        Times.
    coupling : float
        :math:`K`.
    width : float
        :math:`\Delta > 0`.
    r0 : float
        :math:`r(0) \in (0, 1]`.
    phase_lag : float
        :math:`\alpha`, with :math:`|\alpha| < \pi/2`.

    Returns
    -------
    numpy.ndarray
        :math:`r(t)`.
    """
    t = np.asarray(t, dtype=float)
    half = 0.5 * check_real(coupling, "coupling") * np.cos(check_real(phase_lag, "phase_lag"))
    width = check_real(width, "width", minimum=0.0, strictly=True)
    r0 = check_real(r0, "r0", minimum=0.0, strictly=True)
    if r0 > 1:
        raise ValueError(f"r0 must lie in (0, 1], got {r0!r}")
    rate = half - width
    # r^-2 obeys a linear equation: d(r^-2)/dt = -2 rate r^-2 + 2 half
    if rate == 0.0:
        return 1.0 / np.sqrt(r0 ** -2 + 2.0 * half * t)
    limit = half / rate  # r_inf^-2 (negative below K_c: then r -> 0)
    return 1.0 / np.sqrt((r0 ** -2 - limit) * np.exp(-2.0 * rate * t) + limit)


def ott_antonsen_populations(t, nodes, weights, a0, *, coupling: float, phase_lag: float = 0.0,
                             rtol: float = 1e-12) -> np.ndarray:
    r"""The order parameter :math:`Z(t)` of finitely many populations, each on its Poisson manifold.

    Population ``m`` (frequency :math:`\omega_m`, weight :math:`w_m`) has the density
    :math:`\frac{1}{2\pi}\frac{1 - |a_m|^2}{|e^{i\theta} - a_m|^2}`, whose first moment
    :math:`\int e^{i\theta}\rho_m` is :math:`a_m`, and stays of that form under the Kuramoto-Sakaguchi
    interaction (module docstring); the populations' ODEs are integrated by DOP853.

    Parameters
    ----------
    t : array_like
        Increasing output times, from the start.
    nodes, weights : array_like, shape (M,)
        The frequencies and their weights.
    a0 : complex or array_like of complex, shape (M,)
        The initial :math:`a_m`, of modulus below one.
    coupling : float
        :math:`K`.
    phase_lag : float
        :math:`\alpha`.
    rtol : float
        DOP853's relative tolerance.

    Returns
    -------
    numpy.ndarray of complex, shape (times,)
        :math:`Z(t) = \sum_m w_m a_m(t)`, the mean-field :math:`\int e^{i\theta}\bar\rho_t`.
    """
    from scipy.integrate import solve_ivp  # here: sweep workers import meanfield and never need it

    t = np.asarray(t, dtype=float)
    nodes, weights = np.asarray(nodes, dtype=float), np.asarray(weights, dtype=float)
    a = np.broadcast_to(np.asarray(a0, dtype=complex), nodes.shape).copy()
    if np.any(np.abs(a) >= 1):
        raise ValueError("a0 must have modulus below one (a Poisson kernel)")
    lag = np.exp(-1j * check_real(phase_lag, "phase_lag"))
    half = 0.5 * check_real(coupling, "coupling")

    def rhs(_, y):
        a = y[: nodes.size] + 1j * y[nodes.size:]
        z = weights @ a
        da = 1j * nodes * a + half * (lag * z - np.conj(lag * z) * a * a)
        return np.concatenate([da.real, da.imag])

    solution = solve_ivp(rhs, (t[0], t[-1]), np.concatenate([a.real, a.imag]), method="DOP853", t_eval=t,
                         rtol=rtol, atol=rtol * 1e-3)
    a = solution.y[: nodes.size] + 1j * solution.y[nodes.size:]
    return weights @ a


def incoherent_growth_rate(nodes, weights, *, coupling: float, phase_lag: float = 0.0) -> float:
    r"""The growth rate of the incoherent state of the populations :math:`(\omega_m, w_m)`: its linear stability.

    Linearised about the uniform densities, the first moments obey
    :math:`\dot a_m = i\omega_m a_m + \frac K2 e^{-i\alpha}\sum_j w_j a_j` (module docstring); the rate
    is the largest real part of that matrix's eigenvalues. For a continuous law the
    populations' rates approach the root of :math:`1 = \frac K2 e^{-i\alpha}\int\frac{g(\omega)}{\lambda - i\omega}d\omega`
    where it has one with :math:`\mathrm{Re}\,\lambda > 0` (above the critical coupling: Lorentzian
    :math:`\lambda = \frac K2\cos\alpha - \Delta`; Gaussian at :math:`\alpha = 0` from
    :math:`K_c = 2/(\pi g(0))`); below it a finite set of frequencies keeps neutral modes.

    Parameters
    ----------
    nodes, weights : array_like, shape (M,)
        The frequencies and their weights.
    coupling : float
        :math:`K`.
    phase_lag : float
        :math:`\alpha`.

    Returns
    -------
    float
        The largest real part.
    """
    nodes, weights = np.asarray(nodes, dtype=float), np.asarray(weights, dtype=float)
    half = 0.5 * check_real(coupling, "coupling") * np.exp(-1j * check_real(phase_lag, "phase_lag"))
    matrix = np.diag(1j * nodes) + half * np.outer(np.ones(nodes.size), weights)
    return float(np.linalg.eigvals(matrix).real.max())
