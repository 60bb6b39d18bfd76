r"""Oscillators with Lorentzian natural frequencies, exactly: the frequency family reduced by a residue.

:class:`meanfield.NaturalFrequencies` with frequencies from the Lorentzian law
:math:`g(\omega) = \frac{\Delta/\pi}{(\omega - \omega_0)^2 + \Delta^2}` has the mean field
:math:`\rho_t(\omega, \theta)` of :class:`~solvers.FrequencyCircleFV`. When the interaction's
pair kernel is one harmonic, :math:`\psi(s) = \hat\psi_1 e^{is} + \hat\psi_{-1}e^{-is}`
(Kuramoto's :math:`K\sin s`, Sakaguchi's :math:`K\sin(s - \alpha)`; :math:`\psi(s)` is the
angular velocity an atom at angle ``s`` induces at angle 0, read from the model's reference),
the moments :math:`a_k(\omega, t) = \int e^{ik\theta}\rho_t(\omega, \theta)\,d\theta` of
:math:`k \ge 1` close among themselves:

.. math:: \partial_t a_k = ik\big(\omega\,a_k + \hat\psi_1 R_1\,a_{k-1} + \hat\psi_{-1}\bar R_1\,a_{k+1}\big)
          - D k^2 a_k, \qquad a_0 = 1, \qquad R_1 = \int g(\omega)\,a_1(\omega)\,d\omega,

the velocity :math:`\omega + v`, :math:`v(\theta) = \hat\psi_1 R_1 e^{-i\theta} + \hat\psi_{-1}\bar
R_1 e^{i\theta}`, moving each frequency's density. From an initial density that does not depend on
:math:`\omega`, every :math:`a_k(\cdot, t)` extends analytically to :math:`\mathrm{Im}\,\omega > 0`
and stays bounded there (:math:`e^{ik\omega t}` decays), so the integral against the Lorentzian
closes on its pole: :math:`\int g\,a_k\,d\omega = a_k(\omega_0 + i\Delta)`. The marginal's
moments are those of one population at the complex frequency :math:`\omega_0 + i\Delta`: the
continuum of frequencies with no quadrature of the law, from any initial density, with noise
too. On the Ott-Antonsen manifold (:math:`a_k = \alpha^k`) it is the Ott-Antonsen equation,
:math:`\dot r = -\Delta r + \frac K2 r(1 - r^2)` for Kuramoto.

The ``modes`` moments are truncated (:math:`a_{K+1} = 0`) and integrated by DOP853; the run ends,
with an :class:`~solvers.UnderResolvedWarning`, at the first output where the top tenth of the
moments exceeds ``rtol`` (the marginal sharpens beyond them). Other laws (Gaussian) or kernels
of more harmonics (attention, ``beta > 0``) have no such closure: their family is
:class:`~solvers.FrequencyCircleFV`'s.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import xarray as xr

from meanfield.checks import check_int, check_real, check_rtol, check_times
from meanfield.docstrings import inherit_docstrings
from meanfield.records import CIRCLE, PDE, record_attrs

from ..resolution import UpFrontChecks, outputs_while_resolved
from .bbgky import pair_kernel

#: The kernel's other harmonics must be below this fraction of its first (one harmonic to round-off).
ONE_HARMONIC = 1e-12


@dataclass(frozen=True, eq=False)
@inherit_docstrings
class LorentzianKuramoto(UpFrontChecks):
    r"""The mean field of Lorentzian oscillators, one population at :math:`\omega_0 + i\Delta` (module docstring).

    Parameters
    ----------
    model : object
        The interaction on the circle, without the frequencies, linear in the measure and whose
        pair kernel is one harmonic: Kuramoto ``SelfAttention(0, value=K)``, Sakaguchi's
        ``value = K R(-alpha)`` (its diffusion, if any, is the noise).
    width : float
        The Lorentzian's half-width :math:`\Delta > 0`.
    center : float
        Its centre :math:`\omega_0`.
    modes : int
        Moments :math:`a_1, \dots, a_K` kept.
    rtol : float
        DOP853's relative tolerance (absolute: ``rtol`` times 1e-3), and the largest top moment of
        a resolved output.

    Raises
    ------
    ValueError
        If the model is not on the circle, not linear in the measure, or its pair kernel has
        another harmonic than the first, or a setting is out of range.
    """

    model: object
    width: float
    center: float = 0.0
    modes: int = 64
    rtol: float = 1e-10
    coupling: tuple = field(init=False, repr=False)

    name = "LorentzianKuramoto"
    geometry = CIRCLE

    def __post_init__(self) -> None:
        object.__setattr__(self, "width", check_real(self.width, "width", minimum=0.0))
        if not self.width > 0:
            raise ValueError(f"width must be > 0 (the Lorentzian's half-width), got {self.width!r}")
        object.__setattr__(self, "center", check_real(self.center, "center"))
        check_int(self.modes, "modes", minimum=2)
        check_rtol(self.rtol)
        model = self.model
        if model.dimension not in (None, 2) or not getattr(model, "on_sphere", True):
            raise ValueError(f"LorentzianKuramoto solves on the circle: got a model of dimension {model.dimension}")
        if getattr(model, "frequencies", None) is not None:
            raise TypeError("model is the interaction alone: the frequencies are the Lorentzian law's (width, center)")
        if not model.velocity_is_linear:
            raise ValueError(f"the moments close only for a velocity linear in the measure (Kuramoto: beta = 0); "
                             f"{type(model).__name__} with beta = {model.beta} is not: its family of frequencies is "
                             "solvers.FrequencyCircleFV's")
        angles = 2 * np.pi * np.arange(64) / 64
        harmonics = np.fft.fft(pair_kernel(model, angles)) / angles.size  # psi(s) = sum_j c_j e^{ijs}
        first = max(abs(harmonics[1]), abs(harmonics[-1]))
        others = np.abs(np.delete(harmonics, [1, -1 % angles.size])).max()
        if not first > 0 or others > ONE_HARMONIC * first:
            raise ValueError(f"the exact Lorentzian reduction needs a pair kernel of one harmonic (Kuramoto, "
                             f"Sakaguchi): {type(model).__name__}'s has others up to {others / max(first, 1e-300):.3g} "
                             "of its first; its family of frequencies is solvers.FrequencyCircleFV's")
        object.__setattr__(self, "coupling", (complex(harmonics[1]), complex(harmonics[-1])))

    @property
    def frequency(self) -> complex:
        r"""The complex frequency :math:`\omega_0 + i\Delta` whose population carries the marginal."""
        return complex(self.center, self.width)

    def resolved_start(self, rho0, *, name: str = "rho0") -> np.ndarray:
        return self.initial_moments(rho0)

    def initial_moments(self, rho0) -> np.ndarray:
        r"""The moments :math:`a_k = \int e^{ik\theta}\rho_0\,d\theta`, ``k = 1 .. modes``, of a density of the angle.

        Parameters
        ----------
        rho0 : callable or array_like
            A density ``rho0(theta)`` (any positive mass; the same at every frequency), or the
            moments themselves, shape ``(modes,)``.

        Returns
        -------
        numpy.ndarray of complex, shape (modes,)
        """
        if not callable(rho0):
            moments = np.asarray(rho0, dtype=complex)
            if moments.shape != (self.modes,) or not np.all(np.isfinite(moments)):
                raise ValueError(f"rho0 must be a callable of the angle or {self.modes} finite moments, got shape "
                                 f"{moments.shape}")
            return moments
        grid = 2 * np.pi * np.arange(16 * self.modes) / (16 * self.modes)  # spectral for a smooth density
        values = np.asarray(rho0(grid), dtype=float)
        if values.shape != grid.shape or not np.all(np.isfinite(values)) or values.min() < 0 or values.sum() <= 0:
            raise ValueError("rho0 must map angles to finite nonnegative values of positive mass")
        spectrum = np.conj(np.fft.fft(values)) / values.sum()  # sum_j rho e^{ik theta_j} / sum_j rho
        return spectrum[1:self.modes + 1]

    def rhs(self, moments: np.ndarray) -> np.ndarray:
        r""":math:`\partial_t a_k`, ``k = 1 .. modes`` (module docstring), at the frequency :math:`\omega_0 + i\Delta`.

        Parameters
        ----------
        moments : numpy.ndarray of complex, shape (modes,)

        Returns
        -------
        numpy.ndarray of complex, shape (modes,)
        """
        k = np.arange(1, self.modes + 1)
        below = np.concatenate([[1.0], moments[:-1]])  # a_{k-1}, a_0 = 1
        above = np.concatenate([moments[1:], [0.0]])  # a_{k+1}, truncated
        forward, backward = self.coupling
        r1 = moments[0]
        return (1j * k * (self.frequency * moments + forward * r1 * below + backward * np.conj(r1) * above)
                - self.model.diffusion * k * k * moments)

    def solve(self, rho0, times, *, progress: bool | None = None) -> xr.Dataset:
        """Evolve the marginal's moments from ``rho0`` and record them at ``times``.

        Parameters
        ----------
        rho0 : callable or array_like
            As for :meth:`initial_moments`.
        times : array_like
            Strictly increasing output times.
        progress : bool or tqdm.tqdm, optional
            Progress bar over the output intervals (default: when stderr is a terminal), or an
            open bar to advance.

        Returns
        -------
        xarray.Dataset
            ``order_parameter`` (time): :math:`r = |R_1|`; ``moment_real``, ``moment_imag``
            (time, mode): :math:`a_k` of the marginal; ``rho`` (time, theta): the marginal density
            on ``4 modes`` angles, at the outputs reached; ``attrs["underresolved_since"]`` (NaN:
            every output).
        """
        times = check_times(times)
        def sharpened(moments: np.ndarray) -> str | None:
            tail = np.abs(moments[-max(1, self.modes // 10):]).max()
            return (f"the marginal sharpens beyond {self.modes} moments (the top ones reach {tail:.3g} > rtol)"
                    if tail > self.rtol else None)

        frames, since = outputs_while_resolved(self.rhs, self.initial_moments(rho0), times, self.rtol, sharpened,
                                               "Raise modes", progress=progress, name=self.name)
        moments = np.array(frames)
        theta = 2 * np.pi * np.arange(4 * self.modes) / (4 * self.modes)
        k = np.arange(1, self.modes + 1)
        rho = (1 + 2 * np.real(moments @ np.exp(-1j * np.outer(k, theta)))) / (2 * np.pi)
        ds = xr.Dataset({"order_parameter": ("time", np.abs(moments[:, 0]), {"long_name": "r = |int e^(i theta) rho|"}),
                         "moment_real": (("time", "mode"), moments.real),
                         "moment_imag": (("time", "mode"), moments.imag),
                         "rho": (("time", "theta"), rho, {"long_name": "the marginal density of all frequencies"})},
                        coords={"time": times[:len(frames)], "mode": k, "theta": theta})
        ds.attrs.update(record_attrs(PDE, CIRCLE, self.model, {"solver": self.name, "width": self.width,
                                                              "center": self.center, "modes": self.modes,
                                                              "rtol": self.rtol}))
        ds.attrs["underresolved_since"] = since
        return ds
