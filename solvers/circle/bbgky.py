r"""The BBGKY hierarchy on the circle for iid uniform tokens: the pair correlation and its closures.

"A mathematical perspective on Transformers", sec. 8. ``n`` tokens on the circle move with an
additive pair velocity, :math:`\dot\theta_i = \frac1n\sum_j \psi(\theta_j - \theta_i)` (USA:
:math:`\psi(s) = c\,e^{\beta\cos s}\sin s`; Kuramoto at ``beta = 0``), from iid uniform angles.
Their joint law stays invariant under rotations, so the one-point marginal stays uniform,
:math:`f_1 = 1/2\pi`, and the two-point marginal is a function of the relative angle,
:math:`f_2(\theta_1, \theta_2) = f_1^2\,g(\varphi)`, :math:`\varphi = \theta_1 - \theta_2`, with
:math:`\frac1{2\pi}\int g = 1` (:math:`g \equiv 1`: no correlation). Integrating the Liouville
equation over the other tokens gives the first equation of the hierarchy,

.. math:: \partial_t g = \frac2n\,\partial_\varphi(\psi\,g)
   \;-\; \frac{n-2}{n}\,\frac{2}{f_1^2}\,\partial_\varphi\!\int \psi(\theta_3 - \theta_1)\,
   f_3(\theta_1, \theta_2, \theta_3)\,d\theta_3\Big|_{\text{odd part in }\varphi},

the pair term (the two tokens' own attraction, :math:`\dot\varphi = -\frac2n\psi(\varphi)`) and
the three-body term, which needs :math:`f_3`: the hierarchy does not close. A closure is an
ansatz for :math:`f_3` in terms of :math:`f_2`:

``"chaos"`` (molecular chaos, :math:`f_3 = f_2 f_1`: the third token independent)
    the three-body term vanishes (:math:`\int\psi = 0`), and what is left is the pair term:
    correlations of order :math:`1/n`. It is exact at :math:`t = 0` (iid tokens), so it agrees
    with the tokens to first order in :math:`t`.
``"kirkwood"`` (Kirkwood's superposition, :math:`f_3 = f_1^3\,g_{12}\,g_{13}\,g_{23}`: three tokens
    correlated pair by pair, the closure that sees clusters)
    the three-body term is :math:`-\frac{n-2}{n}\frac1\pi\,\partial_\varphi(g\,J)` with
    :math:`J(\varphi) = \int\psi(s)\,g(s)\,g(s+\varphi)\,ds`: a third token near both pulls them
    together (the answer to Problem 4 it offers).

The kernel :math:`\psi` is the model's own reference: the velocity that an atom at angle ``s``
induces at angle 0 (``velocity_field``). A model whose velocity is not a sum over pairs (SA,
whose softmax divides by every token) has no such hierarchy; its derivation is open (the paper).
:class:`PairCorrelation` solves the closed equation on ``2 modes`` equally spaced angles
(pseudo-spectral: exact derivatives and convolutions of the truncated series) with DOP853.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import xarray as xr

from meanfield.checks import check_int, check_rtol, check_times
from meanfield.docstrings import inherit_docstrings
from meanfield.records import CIRCLE, PDE, record_attrs

from ..resolution import UpFrontChecks, outputs_while_resolved

#: The closures of the hierarchy's first equation (module docstring).
CLOSURES = ("chaos", "kirkwood")


def pair_kernel(model, s: np.ndarray) -> np.ndarray:
    r""":math:`\psi(s)`: the angular velocity that a unit atom at angle ``s`` induces at angle 0, from the model's reference.

    Parameters
    ----------
    model : object
        A model on the circle whose velocity is a sum over pairs (``velocity_is_linear``).
    s : numpy.ndarray
        Angles.

    Returns
    -------
    numpy.ndarray
        :math:`\psi(s)`, of the shape of ``s``.
    """
    s = np.asarray(s, dtype=float)
    nodes = np.stack([np.cos(s.ravel()), np.sin(s.ravel())], axis=-1)[:, None, :]
    at_zero = np.broadcast_to(np.array([1.0, 0.0]), (nodes.shape[0], 1, 2))
    field_ = model.velocity_field(at_zero, nodes, np.ones((nodes.shape[0], 1)))
    return field_[:, 0, 1].reshape(s.shape)


@dataclass(frozen=True, eq=False)
@inherit_docstrings
class PairCorrelation(UpFrontChecks):
    r"""The pair correlation :math:`g(t, \varphi)` of ``n`` iid uniform tokens under a closure of the hierarchy (module docstring).

    Parameters
    ----------
    model : SelfAttention or ZonalAggregation
        A model on the circle whose velocity is a sum over pairs: USA, Kuramoto, zonal
        aggregation (``velocity_is_linear``), without diffusion.
    n : int
        Tokens, ``>= 2``.
    closure : {"chaos", "kirkwood"}
        The ansatz for :math:`f_3`.
    modes : int
        Fourier modes of :math:`g` (``2 modes`` angles).
    rtol : float
        DOP853's relative tolerance (its absolute one is ``rtol`` times 1e-3).
    """

    model: object
    n: int
    closure: str = "chaos"
    modes: int = 64
    rtol: float = 1e-10
    _angles: np.ndarray = field(init=False, repr=False)
    _kernel: np.ndarray = field(init=False, repr=False)
    _wavenumbers: np.ndarray = field(init=False, repr=False)

    name = "PairCorrelation"
    geometry = CIRCLE

    def __post_init__(self) -> None:
        check_int(self.n, "n", minimum=2)
        check_int(self.modes, "modes", minimum=4)
        check_rtol(self.rtol)
        if self.closure not in CLOSURES:
            raise ValueError(f"closure must be one of {', '.join(map(repr, CLOSURES))}, got {self.closure!r}")
        model = self.model
        if model.dimension not in (None, 2) or not getattr(model, "on_sphere", True):
            raise ValueError(f"PairCorrelation solves on the circle: got a model of dimension {model.dimension}")
        if not model.velocity_is_linear:
            raise ValueError(f"the hierarchy needs a velocity that is a sum over pairs (USA, Kuramoto, zonal "
                             f"aggregation); {type(model).__name__} with normalized=True and beta > 0 (SA) divides by "
                             "every token, and its hierarchy is an open problem (the paper's sec. 8)")
        if model.diffusion > 0:
            raise ValueError(f"PairCorrelation has no diffusion term; got diffusion={model.diffusion}")
        angles = 2 * np.pi * np.arange(2 * self.modes) / (2 * self.modes)
        object.__setattr__(self, "_angles", angles)
        object.__setattr__(self, "_kernel", pair_kernel(model, angles))
        object.__setattr__(self, "_wavenumbers", np.fft.rfftfreq(angles.size, 1.0 / angles.size))

    @property
    def angles(self) -> np.ndarray:
        r"""The relative angles :math:`\varphi` of the grid."""
        return self._angles

    def _derivative(self, values: np.ndarray) -> np.ndarray:
        spectrum = 1j * self._wavenumbers * np.fft.rfft(values)
        spectrum[-1] = 0.0  # the Nyquist mode has no odd part to differentiate
        return np.fft.irfft(spectrum, values.size)

    def three_body(self, g: np.ndarray) -> np.ndarray:
        r""":math:`J(\varphi) = \int\psi(s)\,g(s)\,g(s+\varphi)\,ds` (Kirkwood's closure), by FFT.

        Parameters
        ----------
        g : numpy.ndarray
            The pair correlation on :attr:`angles`.

        Returns
        -------
        numpy.ndarray
        """
        width = 2 * np.pi / g.size
        # a cross-correlation: sum_s a(s) g(s + phi) = irfft(conj(rfft(a)) rfft(g))
        return width * np.fft.irfft(np.conj(np.fft.rfft(self._kernel * g)) * np.fft.rfft(g), g.size)

    def rhs(self, g: np.ndarray) -> np.ndarray:
        r""":math:`\partial_t g` under the closure.

        Parameters
        ----------
        g : numpy.ndarray
            The pair correlation on :attr:`angles`.

        Returns
        -------
        numpy.ndarray
        """
        change = (2.0 / self.n) * self._derivative(self._kernel * g)
        if self.closure == "kirkwood":
            change -= ((self.n - 2) / self.n / np.pi) * self._derivative(g * self.three_body(g))
        return change

    def resolved_start(self, rho0, *, name: str = "rho0") -> np.ndarray:
        return self.initial_correlation(rho0)

    def initial_correlation(self, rho0) -> np.ndarray:
        r"""The pair correlation :math:`g_0` on :attr:`angles` that ``rho0`` describes, of mean one.

        Parameters
        ----------
        rho0 : None, callable or array_like
            ``None``: iid tokens, :math:`g_0 \equiv 1`. Otherwise the law of the relative angle
            :math:`\varphi` of two tokens (any positive mass; a uniform one is iid tokens): a
            vectorized callable of :math:`\varphi`, or its values on :attr:`angles`. It must be even,
            :math:`g_0(-\varphi) = g_0(\varphi)` (the tokens are exchangeable).

        Returns
        -------
        numpy.ndarray, shape (2 modes,)
            :math:`g_0`, normalized so that :math:`\frac1{2\pi}\int g_0 = 1`.

        Raises
        ------
        ValueError
            If the values are not finite, negative, of zero mass, of the wrong shape, or not even.
        """
        if rho0 is None:
            return np.ones(self._angles.size)
        values = np.asarray(rho0(self._angles) if callable(rho0) else rho0, dtype=float)
        if values.shape != self._angles.shape or not np.all(np.isfinite(values)) or values.min() < 0 \
                or not values.sum() > 0:
            raise ValueError(f"rho0 must be the law of the pair's relative angle: finite nonnegative values of positive "
                             f"mass on the {self._angles.size} angles, got shape {values.shape}")
        mirrored = np.roll(values[::-1], 1)  # the values at -phi
        if not np.allclose(values, mirrored, rtol=1e-12, atol=1e-14 * values.max()):
            raise ValueError("rho0 must be even in the relative angle, rho0(-phi) = rho0(phi): the tokens are "
                             "exchangeable")
        return values / values.mean()

    def solve(self, rho0, times, *, progress: bool | None = None) -> xr.Dataset:
        r"""Evolve :math:`g` from :math:`g_0` and record it at ``times``.

        Under Kirkwood's closure the correlation concentrates at :math:`\varphi = 0` as the
        tokens cluster, and in finite time no truncated series holds it: the run ends, with an
        :class:`~solvers.UnderResolvedWarning`, at the first output where :math:`g` is not finite,
        negative beyond ``1e-6`` of its maximum, or the integrator cannot go on.

        Parameters
        ----------
        rho0 : None, callable or array_like
            :math:`g_0` (:meth:`initial_correlation`): ``None`` or a uniform law for iid tokens.
        times : array_like
            Increasing output times.
        progress : bool or tqdm.tqdm, optional
            Progress bar over the output intervals (default: when stderr is a terminal), or an
            open bar to advance.

        Returns
        -------
        xarray.Dataset
            ``g`` (time, phi) and its cosine coefficients ``coefficient`` (time, mode), the
            mean of :math:`\cos k\varphi` over pairs, :math:`k = 1 .. modes - 1`;
            ``mean_inner_product`` (time), the first of them, :math:`E\langle x_i, x_j\rangle`
            (1: collapsed); at the outputs reached; ``attrs["underresolved_since"]`` (NaN: every
            output).
        """
        times = check_times(times)
        def concentrated(g: np.ndarray) -> str | None:
            return (f"the pair correlation of the {self.closure} closure concentrates beyond {self.modes} modes (the "
                    "tokens cluster)") if g.min() < -1e-6 * g.max() else None

        frames, since = outputs_while_resolved(self.rhs, self.initial_correlation(rho0), times, self.rtol, concentrated,
                                               "Raise modes, or stop earlier", progress=progress, name=self.name)
        g = np.array(frames)
        reached = times[:len(frames)]
        coefficients = cosine_coefficients(g, self.modes - 1)
        ds = xr.Dataset({"g": (("time", "phi"), g, {"long_name": "pair correlation g(phi), 1: independent"}),
                         "coefficient": (("time", "mode"), coefficients),
                         "mean_inner_product": ("time", coefficients[:, 0],
                                                {"long_name": "E <x_i, x_j> over pairs, the mean of cos(phi)"})},
                        coords={"time": reached, "phi": self._angles, "mode": np.arange(1, self.modes)})
        ds.attrs.update(record_attrs(PDE, CIRCLE, self.model, {"solver": self.name, "n": self.n,
                                                              "closure": self.closure, "modes": self.modes,
                                                              "rtol": self.rtol}))
        ds.attrs["underresolved_since"] = since
        return ds


def cosine_coefficients(g: np.ndarray, top: int) -> np.ndarray:
    r""":math:`\frac{1}{2\pi}\int g(\varphi)\cos k\varphi\,d\varphi`, ``k = 1 .. top``, of values on equally spaced angles."""
    return np.fft.rfft(g, axis=-1).real[..., 1:top + 1] / g.shape[-1]
