r"""Fourier pseudo-spectral solver for the mean-field equation on the circle.

.. math:: \partial_t\rho + \partial_\theta(\rho\, v[\rho]) = D\,\partial_\theta^2\rho

The density is carried by its Fourier coefficients, :math:`\rho(\theta) = \sum_{|k| < N/2}
\hat\rho_k e^{ik\theta}` (``N = cells``; the state holds :math:`k \ge 0`, the Nyquist mode is
not kept). The potential is diagonal in this basis (the kernel's Funk-Hecke spectrum from
:mod:`meanfield`): :math:`v = \partial_\theta(\Phi*\rho)` for USA, Kuramoto and zonal
aggregation, :math:`v = \frac{c}{\beta}\,\partial_\theta(K*\rho)/(K*\rho)` for SA (any query,
key and value matrices and heads through the coefficient matrices of
``solvers.circle.general``). The flux :math:`\rho v` is formed on :math:`M \ge 3N/2`
points (the 3/2 rule: a quadratic product of modes :math:`|k| < N/2` has no alias among
them) and its derivative taken exactly in coefficient space.

Time: the diffusion :math:`-Dk^2` is integrated exactly (integrating factor, Lawson form)
and the transport by an embedded Runge-Kutta pair (``tableau``, Dormand-Prince 5(4) by
default) with the error control of ``solvers.tolerance`` (``rtol`` relative to the
deviation from the uniform density) and a stability bound: mode :math:`k` advected by
:math:`v` has a nearly imaginary frequency up to :math:`k\max|v|`, so the step stays within
:math:`\Delta t\,(N/2)\max|v| \le y_I`, the pair's imaginary stability (as on :math:`S^2`,
:mod:`solvers.sphere.spectral`).

It is a second discretisation of the equation whose reference is the flux form of
:class:`~solvers.CircleFV` (same kernel spectra, same velocity laws); the tests check the two
against each other within their error estimates, and this one against exact solutions
(``tests/test_circle_spectral.py``). The method is exact in mass and spectrally accurate while
the density is smooth; it does not preserve positivity. Its resolution diagnostic is an
estimate of its spatial error from the decay of the top modes (:meth:`CircleSpectral.error_estimate`,
``solvers.resolution.fourier_tail_error``) against ``error_level`` times max rho, or, with
``error_level=None``, the tail of the spectrum: the fraction of the deviation's spectral
energy in the top 10 % of modes (``spectral_tail``, as on :math:`S^2`), past its threshold the
error estimate against ``rtol`` times the deviation's maximum; and a negative density beyond
round-off.

What it records is the same object as :class:`~solvers.CircleFV`: the averages of the
density over the ``N`` cells :math:`[jh, (j+1)h)`, computed exactly from the coefficients
(mode :math:`k` times :math:`e^{ik(j+1/2)h}\,\mathrm{sinc}(kh/2)`), so distances, cumulative
distributions and comparisons with a finite-volume run need no interpolation. An array
``rho0`` is read the same way (cell averages), a callable as point values.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache
from typing import Callable

import numpy as np
from scipy.fft import next_fast_len

from meanfield.checks import check_density, check_int
from meanfield.docstrings import fill_docstrings, inherit_docstrings
from meanfield.records import CIRCLE
from meanfield.sphere import periodic_angles

from .general import GeneralCircleOperators
from ..grid_solver import Diagnosis
from ..reference import ReferenceCircleOperators, interaction_path
from ..resolution import fourier_tail_error
from ..spectral_solver import OUTPUTS_PARAMETER, SPEED_PARAMETERS, SpectralSolver

#: The smallest positive double: K*rho is floored there before dividing by it.
_TINY = np.finfo(float).tiny

#: Modes of the kernel beyond the grid must be below this fraction of the largest.
KERNEL_TOLERANCE = 1e-8

#: The Parameters section of the methods that read the state, the series (``{series_parameters}``).
SERIES_PARAMETERS = r"""
Parameters
----------
coefficients : numpy.ndarray, shape (cells // 2,)
    Complex Fourier coefficients :math:`c_k`, :math:`k = 0 .. N/2 - 1`, of
    :math:`\rho(\theta) = \sum_{|k| < N/2} c_k e^{ik\theta}` (:math:`c_{-k} = \bar c_k`).
"""


@fill_docstrings(outputs_parameter=OUTPUTS_PARAMETER, series_parameters=SERIES_PARAMETERS,
                 speed_parameters=SPEED_PARAMETERS)
@inherit_docstrings
@dataclass(frozen=True, eq=False)
class CircleSpectral(SpectralSolver):
    r"""Fourier pseudo-spectral solver on the circle (dealiased, diffusion exact, adaptive steps).

    Parameters
    ----------
    model : SelfAttention or ZonalAggregation
        SA or USA with any query, key and value matrices (2 x 2) and heads, or a zonal
        aggregation; any diffusion, external field and time rescaling.
    cells : int
        ``N`` (even, at least 8): Fourier modes :math:`|k| < N/2`, and the ``N`` cells whose
        averages are recorded. The kernel's modes from ``N/2`` on must be negligible
        (``KERNEL_TOLERANCE``).
    rtol : float
        Local error per step, in :math:`L^2`, relative to the deviation :math:`\rho - \bar\rho`
        from the uniform density (``solvers.tolerance``).
    tail_threshold : float
        With ``error_level=None``: the solution counts as resolved while the top 10 % of modes
        hold less than this fraction of the spectral energy of :math:`\rho - \bar\rho`, or,
        past it, while :meth:`error_estimate` stays within ``rtol`` times
        :math:`\max|\rho - \bar\rho|` (what the steps are held to: a loose ``rtol`` is not
        stopped by a tail it tolerates, a tight one by the tail alone).
    interaction : {"auto", "zonal", "general", "reference"}
        As for :class:`~solvers.CircleFV`; ``"reference"`` evaluates the model's
        ``velocity_field`` at the flux grid's points, of the measure of those points.
    tableau : str or ExplicitTableau
        The embedded Runge-Kutta pair (``meanfield.integration.TABLEAUX``), in
        integrating-factor form with diffusion; held within its imaginary stability.
        ``"dormand_prince_853"``: as for :class:`~solvers.SphereSpectral`.
    {outputs_parameter}
    record_cells : int, optional
        Cells of the recorded averages (and of an array ``rho0``): a multiple of ``cells``
        (default ``cells``), e.g. the grid of a finite-volume run to compare with or hand over to.
    error_level : float or None
        The solution counts as resolved while :meth:`error_estimate` stays below this fraction
        of max rho (default ``1e-3``); ``None``: the ``tail_threshold`` criterion instead.
    """

    cells: int = 256
    record_cells: int | None = field(default=None, kw_only=True)
    points: int = field(init=False)
    wavenumber: np.ndarray = field(init=False, repr=False)
    _derivative: np.ndarray = field(init=False, repr=False)
    _advected_wavenumbers: np.ndarray = field(init=False, repr=False)
    general: GeneralCircleOperators | None = field(init=False, repr=False)
    _symbol: np.ndarray = field(init=False, repr=False)
    _log_derivative: tuple[float, float] | None = field(init=False, repr=False)
    _log_rows: np.ndarray | None = field(init=False, repr=False)
    _divergence: np.ndarray = field(init=False, repr=False)
    _energy_symbol: np.ndarray = field(init=False, repr=False)
    energy_scaled: bool = field(init=False, repr=False)
    external_velocity: np.ndarray | None = field(init=False, repr=False)
    external_potential: np.ndarray | None = field(init=False, repr=False)

    name = "CircleSpectral"
    geometry = CIRCLE
    default_max_steps = 1_000_000

    def __post_init__(self) -> None:
        set_ = object.__setattr__
        check_int(self.cells, "cells", minimum=8)
        if self.cells % 2:
            raise ValueError(f"cells must be even (modes |k| < cells/2), got {self.cells}")
        self._check_settings()
        if self.record_cells is None:
            set_(self, "record_cells", self.cells)
        elif check_int(self.record_cells, "record_cells", minimum=self.cells) % self.cells:
            raise ValueError(f"record_cells must be a multiple of cells={self.cells}, got {self.record_cells}")
        model = self._kernel_model
        if model.dimension not in (None, 2):
            raise ValueError(f"CircleSpectral solves on the circle: the model's matrices are "
                             f"{model.dimension} x {model.dimension}, not 2 x 2")
        modes = self.cells // 2
        set_(self, "points", next_fast_len(3 * modes, real=True))
        set_(self, "wavenumber", np.arange(modes, dtype=float))
        set_(self, "_derivative", 1j * self.wavenumber)
        set_(self, "_divergence", -self._derivative / self.points)
        # k = 1 .. N/2 (one above the highest kept mode: the bound of the undamped case)
        set_(self, "_advected_wavenumbers", np.arange(1.0, modes + 1))
        self._set_external()
        # SA's v = (c/beta) d/dth log(K*rho) on the zonal path, bounded by |c|: its scale and
        # bound (None: v linear in rho, or the general path's)
        set_(self, "_log_derivative", None)
        set_(self, "_log_rows", None)
        path = interaction_path(model, self.interaction, self.name)
        if path == "reference":
            # the field includes the external one, and the model's energy its potential
            set_(self, "external_velocity", None)
            set_(self, "external_potential", None)
            general = ReferenceCircleOperators(model, self.points)
            set_(self, "general", general)
            set_(self, "energy_scaled", general.energy_scaled)
            return
        if path == "general":
            general = GeneralCircleOperators(model, self.points)
            self._check_kernel_resolved(max(h.matrix.shape[0] for h in general.heads) // 2,
                                        "its coefficient matrices reach")
            set_(self, "general", general)
            set_(self, "energy_scaled", general.energy_scaled)
            return
        set_(self, "general", None)
        if not model.velocity_is_linear:
            set_(self, "_log_derivative", (model.value_scale / model.beta, abs(model.value_scale)))
        spectrum = model.potential_spectrum if model.velocity_is_linear else model.kernel_spectrum
        symbol = spectrum(modes, 2)
        largest = np.abs(symbol).max()
        if abs(symbol[-1]) > KERNEL_TOLERANCE * largest:
            reach = next((k for k in range(modes, 8 * modes + 64)
                          if abs(spectrum(k, 2)[-1]) <= KERNEL_TOLERANCE * largest), 8 * modes + 64)
            self._check_kernel_resolved(reach, f"its modes are above {KERNEL_TOLERANCE:g} of the largest up to")
        set_(self, "_symbol", symbol[:modes])
        # SA's transform rows: K*rho, its derivative and rho at the flux grid from one inverse transform
        set_(self, "_log_rows", None if model.velocity_is_linear else
             self.points * np.stack([self._symbol, self._derivative * self._symbol, np.ones(modes)]))
        try:  # E itself where it fits in double precision, e^{-beta} E otherwise (large-beta SA)
            energy, scaled = model.energy_spectrum(modes - 1, 2), model.time_rescaled
        except OverflowError:
            energy, scaled = model.energy_spectrum(modes - 1, 2, scaled=True), True
        set_(self, "_energy_symbol", energy)
        set_(self, "energy_scaled", scaled)

    def _check_kernel_resolved(self, reach: int, what: str) -> None:
        if reach >= self.cells // 2:
            raise ValueError(f"cells={self.cells} does not resolve the kernel: {what} mode {reach} "
                             f"(use cells >= {2 * reach + 2})")

    def _set_external(self) -> None:
        """The external field's tangential component and potential on the flux grid (it is fixed)."""
        external = self._kernel_model.external
        velocity = potential = None
        if external is not None:
            theta = self.flux_grid
            points = np.stack([np.cos(theta), np.sin(theta)], axis=-1)
            tangent = np.stack([-np.sin(theta), np.cos(theta)], axis=-1)
            velocity = np.sum(external.field(points) * tangent, axis=-1)
            potential = external.potential(points)
        object.__setattr__(self, "external_velocity", velocity)
        object.__setattr__(self, "external_potential", potential)

    @property
    def _kernel_model(self):
        """The model whose kernel and velocity law the solver uses (the layered causal solver's differs)."""
        return self.model

    @property
    def theta(self) -> np.ndarray:
        """Centres of the recorded cells, shape ``(record_cells,)``."""
        return (np.arange(self.record_cells) + 0.5) * (2 * np.pi / self.record_cells)

    @property
    def flux_grid(self) -> np.ndarray:
        r"""The ``M`` points :math:`2\pi j/M` where the flux is formed."""
        return periodic_angles(self.points)

    @property
    def _sample_angles(self) -> np.ndarray:
        """Where a callable initial density is sampled: ``4 cells`` angles, so that its modes up to
        ``4N`` fold onto none of the kept ones."""
        return periodic_angles(4 * self.cells)

    @property
    def _resolution_advice(self) -> str:
        return f"increase cells (now {self.cells}), add diffusion, stop earlier, or use CircleFV"

    # ------------------------------------------------------------------ transforms
    def values(self, coefficients: np.ndarray, derivative: bool = False) -> np.ndarray:
        r"""The series (or its derivative) at the flux grid's ``M`` points.

        {series_parameters}
        derivative : bool
            Evaluate :math:`\partial_\theta\rho` instead of :math:`\rho`.

        Returns
        -------
        numpy.ndarray, shape (points,)
            The values at :math:`2\pi j/M` (:attr:`flux_grid`).
        """
        if derivative:
            coefficients = self._derivative * coefficients
        return np.fft.irfft(coefficients, self.points) * self.points

    def cell_averages(self, coefficients: np.ndarray) -> np.ndarray:
        r"""The averages over the ``record_cells`` cells, exactly (the recorded density).

        {series_parameters}

        Returns
        -------
        numpy.ndarray, shape (record_cells,)
            The cell averages of the series.
        """
        n = self.record_cells
        return np.fft.irfft(coefficients * _averaging(self.cells // 2, n), n) * n

    def coefficients_of_averages(self, averages: np.ndarray, modes: int | None = None) -> np.ndarray:
        """Coefficients of modes ``0 .. modes - 1`` (default: the kept ones) of ``record_cells`` cell averages.

        Exact for a series of modes below ``record_cells / 2``.

        Parameters
        ----------
        averages : numpy.ndarray, shape (record_cells,)
            Cell averages.
        modes : int, optional
            Number of modes returned, at most ``record_cells / 2``.

        Returns
        -------
        numpy.ndarray, shape (modes,)
            The coefficients :math:`c_k` of the series whose cell averages these are.
        """
        n = self.record_cells
        modes = self.cells // 2 if modes is None else modes
        return np.fft.rfft(averages)[..., :modes] / n / _averaging(modes, n)

    # ------------------------------------------------------------------ velocity and transport
    def velocity(self, coefficients: np.ndarray) -> np.ndarray:
        r"""The velocity :math:`v[\rho]` at the flux grid's points.

        {series_parameters}

        Returns
        -------
        numpy.ndarray, shape (points,)
            The tangential velocity at :attr:`flux_grid`, external field included.
        """
        if self.general is not None:
            modes = self.cells // 2
            # rho_hat(q) = int e^{-iq phi} rho = 2 pi c_q, q = -(modes - 1) .. modes - 1, as the general operators take them
            spectrum = 2 * np.pi * np.concatenate([np.conj(coefficients[..., :0:-1]), coefficients], axis=-1)
            if self.general.batched:  # causal attention's layers in one call
                velocity = self.general.point_velocity(spectrum, -(modes - 1))
            else:
                velocity = np.reshape([self.general.point_velocity(row, -(modes - 1))
                                       for row in spectrum.reshape(-1, spectrum.shape[-1])],
                                      spectrum.shape[:-1] + (-1,))
        elif self._log_derivative is None:
            velocity = self.values(self._symbol * coefficients, derivative=True)
        else:
            velocity = self._log_velocity(*self._log_transforms(coefficients, 2))
        return self._with_external(velocity)

    def _with_external(self, velocity: np.ndarray) -> np.ndarray:
        return velocity if self.external_velocity is None else velocity + self.external_velocity

    def _log_transforms(self, coefficients: np.ndarray, rows: int) -> np.ndarray:
        """SA: K*rho, its derivative (and rho, ``rows=3``) at the flux grid, in one transform call."""
        leading = self._log_rows[:rows].reshape(rows, *(1,) * (coefficients.ndim - 1), -1)
        return np.fft.irfft(leading * coefficients, self.points)

    def _log_velocity(self, convolution: np.ndarray, slope: np.ndarray) -> np.ndarray:
        r"""SA's :math:`(c/\beta)\,\partial_\theta\log K*\rho` from K*rho and its derivative (no external field)."""
        scale, cap = self._log_derivative
        velocity = scale * slope / np.maximum(convolution, _TINY)
        # |d/dth log K*rho| <= beta for the exact kernel: the bound removes round-off noise
        # where K*rho is below machine precision of its maximum.
        return np.minimum(np.maximum(velocity, -cap, out=velocity), cap, out=velocity)

    def _velocity_density(self, coefficients: np.ndarray) -> np.ndarray:
        """The series whose velocity moves ``coefficients``: itself (the layered causal solver mixes layers)."""
        return coefficients

    def _transport_and_speed(self, coefficients: np.ndarray) -> tuple[np.ndarray, float]:
        if self._log_rows is not None and self._velocity_density(coefficients) is coefficients:
            convolution, slope, rho = self._log_transforms(coefficients, 3)
            velocity = self._with_external(self._log_velocity(convolution, slope))
        else:
            velocity, rho = self.velocity(coefficients), self.values(coefficients)
        # -d/dth of the flux's coefficients: the forward transform's 1/M and the derivative in one product
        flux = np.fft.rfft(rho * velocity)[..., : self.cells // 2]
        return self._divergence * flux, float(np.abs(velocity).max())

    def _largest_speed(self, coefficients: np.ndarray) -> float:
        return float(np.abs(self.velocity(coefficients)).max())

    def _stable_step(self, speed: float) -> float:
        r"""Largest step at which the explicit pair damps the advection of every mode.

        Mode :math:`k` is advected at frequency at most :math:`\omega_k = k\max|v|` and, with
        diffusion integrated exactly, decays at :math:`\mu_k = Dk^2`: a step of the pair in
        integrating-factor form multiplies it by :math:`e^{-\mu_k h}R(i\omega_k h)` (frozen
        coefficients), so the bound is the smallest over :math:`k \le N/2` of the pair's
        damped imaginary stability at :math:`a_k = \mu_k/\omega_k`, over :math:`\omega_k`.
        Without diffusion it is the pair's imaginary stability over :math:`(N/2)\max|v|`; with
        it the fast modes, damped the most, no longer bound the step.

        {speed_parameters}

        Returns
        -------
        float
            The largest stable step (``inf`` where the damping outweighs the advection of every mode).
        """
        if self.model.diffusion == 0:
            return self._undamped_stable_step(speed)
        speed, k = max(speed, 1e-300), self._advected_wavenumbers
        reach = self.tableau.damped_imaginary_stability(self.model.diffusion * k / speed)  # a_k = D k^2 / (k max|v|)
        return float(np.min(reach / k)) / speed

    def _undamped_stable_step(self, speed: float) -> float:
        """The pair's imaginary stability over the fastest frequency :math:`(N/2)\\max|v|` (no damping counted)."""
        return self.tableau.imaginary_stability / max((self.cells // 2) * speed, 1e-300)

    # ------------------------------------------------------------------ norms and functionals
    def _deviation_norm(self, coefficients: np.ndarray) -> float:
        deviation = coefficients[..., 1:]  # (layered solvers: over all layers)
        return float(np.sqrt(4 * np.pi * np.vdot(deviation, deviation).real))

    def _norm(self, coefficients: np.ndarray) -> float:
        r"""The :math:`L^2` norm of the series (its mean's part and its deviation's).

        {series_parameters}

        Returns
        -------
        float
            :math:`\|\rho\|_{L^2}`.
        """
        return float(np.hypot(self._uniform_norm(coefficients), self._deviation_norm(coefficients)))

    @staticmethod
    def _uniform_norm(coefficients: np.ndarray) -> float:
        return float(np.sqrt(2 * np.pi) * np.linalg.norm(coefficients[..., 0]))

    def _quadratic(self, coefficients: np.ndarray, symbol: np.ndarray) -> float:
        r""":math:`\frac12\int\rho\,(S*\rho) = \pi\sum_k S_k|\hat\rho_k|^2` over all :math:`k` (both signs)."""
        power = np.abs(coefficients) ** 2
        return float(np.pi * (symbol[0] * power[0] + 2 * np.dot(symbol[1:], power[1:])))

    def _external_energy(self, coefficients: np.ndarray, rho: np.ndarray | None = None) -> float:
        r""":math:`\frac12\int w\rho` of the external potential (``rho``: the series' values, if known)."""
        if self.external_potential is None:
            return 0.0
        rho = self.values(coefficients) if rho is None else rho
        return float(np.pi / self.points * np.dot(rho, self.external_potential))

    def _centred_values(self, coefficients: np.ndarray) -> np.ndarray:
        """Point values at the centres of the flux grid's cells (what the general operators take)."""
        return self.values(coefficients * np.exp(1j * np.pi * self.wavenumber / self.points))

    def energy(self, coefficients: np.ndarray) -> float:
        if self.general is not None:
            return self.general.energy(self._centred_values(coefficients))
        return self._quadratic(coefficients, self._energy_symbol) + self._external_energy(coefficients)

    def lyapunov(self, coefficients: np.ndarray) -> float:
        if self.general is not None:
            rho = self._centred_values(coefficients)
            return np.nan if self.model.diffusion > 0 and rho.min() <= 0 else self.general.lyapunov(rho)
        if self.external_velocity is not None and (self.external_potential is None or not self.model.velocity_is_linear):
            return np.nan  # no known functional: SA with a field, or a field without potential
        if not self.model.velocity_is_linear:
            return -self.model.value_scale * self.energy(coefficients) if self.model.diffusion == 0 else np.nan
        rho = self.values(coefficients)
        potential = self._quadratic(coefficients, self._symbol) + self._external_energy(coefficients, rho)
        diffusion = self.model.diffusion
        if diffusion == 0:
            return -potential
        if rho.min() <= 0:
            return np.nan
        return diffusion * 2 * np.pi / self.points * float(np.dot(rho, np.log(rho))) - potential

    def spectral_tail(self, coefficients: np.ndarray) -> float:
        return max(tail_fraction(series, self.cells // 2 - 1) for series in self._series_of(coefficients))

    def error_estimate(self, coefficients: np.ndarray) -> float:
        r"""An estimate of the max-norm error the truncation at ``N/2`` modes puts in the density.

        From the decay of the top modes (``solvers.resolution.fourier_tail_error``: the modes
        beyond ``N/2`` that the geometric decay of the spectrum's envelope predicts, summed in
        the max norm; its docstring gives the calibration). It measures the spatial error only;
        the steps' error is ``rtol``'s.

        Parameters
        ----------
        coefficients : numpy.ndarray, shape (..., cells // 2)
            Complex Fourier coefficients :math:`c_k`, :math:`k = 0 .. N/2 - 1` (a leading axis:
            several densities, e.g. layers).

        Returns
        -------
        float
            The estimated :math:`\max|\rho - \rho_{exact}|`, the largest over the densities
            (``inf`` where the top modes do not decay).
        """
        return max(fourier_tail_error(2.0 * np.abs(series)) for series in self._series_of(coefficients))

    # ------------------------------------------------------------------ solve
    def initial_coefficients(self, rho0: Callable[[np.ndarray], np.ndarray] | np.ndarray, *,
                             name: str = "rho0") -> np.ndarray:
        r"""The coefficients of an initial density, normalized to mass one.

        Parameters
        ----------
        rho0 : callable or numpy.ndarray
            A vectorized callable of :math:`\theta` (sampled at ``4 cells`` points, so modes
            up to ``4N`` fold onto none of the kept ones), or ``record_cells`` cell averages.
        name : str
            The argument's name in error messages.

        Returns
        -------
        numpy.ndarray, shape (cells // 2,)
            The coefficients :math:`c_k`, with :math:`2\pi c_0 = 1`.

        Raises
        ------
        ValueError
            If the density is negative, not finite, of zero mass or of the wrong shape.
        """
        if callable(rho0):
            theta = self._sample_angles
            values = check_density(np.asarray(rho0(theta), dtype=float), theta.shape, name)
            coefficients = np.fft.rfft(values)[: self.cells // 2] / theta.size
        else:
            coefficients = self.coefficients_of_averages(check_density(rho0, (self.record_cells,), name,
                                                                          grid=f"{self.record_cells} equal cells"))
        coefficients[0] = coefficients[0].real
        return coefficients / (2 * np.pi * coefficients[0].real)

    def _initial_state(self, rho0, continued: bool) -> np.ndarray:
        if continued:
            return self.coefficients_of_averages(check_density(rho0, (self.record_cells,), "rho0", evolved=True))
        return self.initial_coefficients(rho0)

    def density(self, coefficients: np.ndarray) -> np.ndarray:
        r"""The recorded density: the averages over the ``record_cells`` cells.

        {series_parameters}

        Returns
        -------
        numpy.ndarray, shape (record_cells,)
            As :meth:`cell_averages`.
        """
        return self.cell_averages(coefficients)

    def _stepper(self, coefficients: np.ndarray, times: np.ndarray):
        decay = self.model.diffusion * self.wavenumber ** 2 if self.model.diffusion > 0 else None
        # The first step: a tenth of the undamped advection bound (diffusion may lift the bound of
        # later steps, judged with an error estimate in hand, not this blind one).
        return self._transport_stepper(decay, self._norm, times,
                                       lambda transport: self._undamped_stable_step(transport.speed(coefficients)))

    def _resolves(self, coefficients: np.ndarray) -> bool:
        r"""Whether the series still resolves the solution.

        {series_parameters}

        Returns
        -------
        bool
            The error estimate and any negative value are below ``error_level`` times max rho
            (with ``error_level=None``: the spectral tail below ``tail_threshold`` or the error
            estimate within ``rtol`` times :math:`\max|\rho - \bar\rho|`, and the density
            nowhere negative beyond round-off, ``-1e-8`` of its maximum).
        """
        return self._resolution(coefficients, recorded=False).resolved

    def _resolution(self, coefficients: np.ndarray, recorded: bool = True) -> Diagnosis:
        """Whether the series resolves the density, why not, and the diagnostics it read (all of
        them when ``recorded``; the criterion's alone otherwise: the hand-over asks every step).

        As :class:`~solvers.SphereSpectral`'s: a negative value counts against the same level as
        the error estimate (``1e-8`` of max rho under the tail criterion)."""
        pointwise = self.values(coefficients)
        lowest, top = float(pointwise.min()), float(pointwise.max())
        level = (1e-8 if self.error_level is None else self.error_level) * top
        values = {"min_density": lowest}
        if recorded or self.error_level is None:
            values["spectral_tail"] = self.spectral_tail(coefficients)
        if recorded or self.error_level is not None:
            values["error_estimate"] = self.error_estimate(coefficients)
        layer = " of a layer" if coefficients.ndim > 1 else ""
        if lowest < -level:  # the truncated series no longer represents a density
            return Diagnosis(values, False, f"the density is negative ({lowest:.3g})")
        if self.error_level is not None:
            estimate = values["error_estimate"]
            return Diagnosis(values, bool(estimate <= level), f"the estimated error{layer}, {estimate:.2g}, "
                                                              f"exceeds error_level x max rho = {level:.2g}")
        tail = values["spectral_tail"]
        if tail < self.tail_threshold:
            return Diagnosis(values, True, "")
        # Past the tail threshold the series still serves while its error is within what rtol
        # asks of the steps (relative to the deviation from the mean, as solvers.tolerance).
        estimate = values["error_estimate"] if recorded else self.error_estimate(coefficients)
        allowed = self.rtol * float(np.abs(pointwise - coefficients[..., :1].real).max())
        return Diagnosis(values, bool(estimate <= allowed),
                         f"the top 10% of modes{layer} hold {tail:.2g} of the spectral energy (> "
                         f"{self.tail_threshold:g}) and the estimated error, {estimate:.2g}, exceeds "
                         f"rtol x max|rho - mean| = {allowed:.2g}")

    def _diagnose(self, coefficients: np.ndarray, rho: np.ndarray) -> Diagnosis:
        resolution = self._resolution(coefficients)
        values = {"mass": float(2 * np.pi * coefficients[0].real), "energy": self.energy(coefficients),
                  "lyapunov": self.lyapunov(coefficients), **resolution.values}
        return Diagnosis(values, resolution.resolved, resolution.reason)

    def _grid_coordinates(self) -> dict[str, np.ndarray]:
        return {"theta": self.theta}

    def _recorded_settings(self) -> dict:
        return {"cells": self.cells, "record_cells": self.record_cells, "rtol": self.rtol, "flux_points": self.points,
                "tableau": self.tableau.name, "outputs": self.outputs, "error_level": self.error_level}


@lru_cache(maxsize=64)
def _averaging(modes: int, cells: int) -> np.ndarray:
    r"""Mode :math:`k`'s factor from point values to averages over ``cells`` cells :math:`[jh, (j+1)h)`:
    :math:`e^{ikh/2}\,\mathrm{sinc}(kh/2)`, ``k = 0 .. modes - 1`` (read-only: one array per size, shared)."""
    k = np.arange(modes)
    factors = np.exp(1j * np.pi * k / cells) * np.sinc(k / cells)
    factors.flags.writeable = False
    return factors


def tail_fraction(coefficients: np.ndarray, highest: int) -> float:
    """Fraction of the spectral energy of modes ``1 ..`` held by those above ``0.9 highest`` (0 for a constant)."""
    power = np.abs(coefficients[1:]) ** 2  # mode k at k - 1
    total = power.sum()
    if total == 0:
        return 0.0
    return float(power[int(0.9 * highest):].sum() / total)  # k > 0.9 highest: k - 1 >= floor(0.9 highest)
