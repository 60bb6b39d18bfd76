r"""Spherical-harmonic spectral solver for the mean-field equation on :math:`S^2`.

.. math:: \partial_t\rho + \mathrm{div}_S(\rho\, v[\rho]) = D\,\Delta_S\rho

The density is carried by its coefficients :math:`\rho_{lm}`, ``l <= lmax``. Convolution
with the zonal kernel is diagonal (Funk-Hecke; spectra from :mod:`meanfield`), the
velocity :math:`v = \nabla_S(\Phi*\rho)` (USA, Kuramoto, zonal aggregation) or
:math:`v = \frac{c}{\beta}\nabla_S\log(K*\rho)` (SA) is formed on a dealiased Gauss grid,
and the divergence of the flux comes back through the spheroidal/toroidal analysis.
Diffusion, :math:`-D\,l(l+1)`, is integrated exactly (Lawson integrating factor); the
transport part by an embedded Runge-Kutta pair (``tableau``, Dormand-Prince 5(4) by default)
with error control (``rtol``, relative to the deviation from the uniform density:
``solvers.tolerance``) and a stability bound: the advection of degree :math:`l` by
:math:`v` has frequencies up to about :math:`l\max|v|`, nearly imaginary, where the explicit
pair is stable only for :math:`\Delta t\,(l_{max}+1)\max|v| \le y_I`, its imaginary
stability (0.997 for Dormand-Prince 5(4); 5.96 for 8(5,3), ``tableau="dormand_prince_853"``:
with twice the stages a six times longer step, so resolved runs without diffusion are
cheaper (``docs/performance.md``); past under-resolution its error estimates reject many steps, and the
integrating-factor form of diffusion needs nondecreasing abscissas, which it lacks).
Without that bound the error estimate
lets the top degrees grow from round-off until they dominate it: the error then sits in
the top degrees, grows with ``lmax`` and sets off the resolution diagnostic.

The resolution diagnostic is an estimate of the spatial error (:meth:`SphereSpectral.error_estimate`:
the degrees beyond ``lmax`` that the decay of the top ones predicts), recorded per output;
the run is under-resolved once it passes ``error_level`` times :math:`\max\rho`.
"""

from __future__ import annotations

from contextlib import nullcontext
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from meanfield.checks import check_density, check_int
from meanfield.docstrings import fill_docstrings, inherit_docstrings
from meanfield.records import SPHERE
from meanfield.spectra import attention_spectrum

from ..grid_solver import Diagnosis
from ..heads import energy_factors
from ..reference import ReferenceSphereInteraction, interaction_path
from ..resolution import geometric_tail_error
from ..spectral_solver import OUTPUTS_PARAMETER, SPEED_PARAMETERS, SpectralSolver
from .general import GeneralSphereInteraction
from .grid import BandLimited, SphereGrid
from ..threads import single_threaded_blas

#: Degrees whose kernel eigenvalue is below this fraction of the largest are negligible.
KERNEL_TOLERANCE = 1e-8

#: The velocity's syntheses leave out the degrees above the last whose kernel eigenvalue is at
#: least this fraction of the largest: their terms lie four decades below the synthesis's own
#: round-off (machine epsilon times its largest term), so that the velocity changes by round-off
#: at most, and the syntheses sum a fraction of the degrees (a band-limited transform).
NEGLIGIBLE_KERNEL = 1e-20


#: The Parameters section of the methods that read the state, its coefficients (``{coefficients_parameters}``).
COEFFICIENTS_PARAMETERS = """
Parameters
----------
coefficients : numpy.ndarray
    Spherical-harmonic coefficients of the density, in the grid's (shtns) layout.
"""


@fill_docstrings(outputs_parameter=OUTPUTS_PARAMETER, coefficients_parameters=COEFFICIENTS_PARAMETERS,
                 speed_parameters=SPEED_PARAMETERS)
@inherit_docstrings
@dataclass(frozen=True, eq=False)
class SphereSpectral(SpectralSolver):
    r"""Spectral Galerkin solver on :math:`S^2` with shtns transforms.

    Parameters
    ----------
    model : SelfAttention, ZonalAggregation or any model with a velocity_field
        Any diffusion; query, key and value matrices (3 x 3) and stacked heads for
        :class:`~meanfield.SelfAttention` (then ``interaction="general"``); any model that
        provides ``meanfield.protocols.Model`` through ``interaction="reference"``.
    lmax : int
        Largest degree; it must resolve the kernel (:math:`\lambda_{l_{max}}/\lambda_{max}`
        below ``1e-8``, i.e. ``lmax`` well above :math:`\sqrt{\beta}`; with matrices, of the
        zonal kernel of :math:`\beta\max_h\|Q_h^T K_h\|_2`).
    rtol : float
        Local error per step, in :math:`L^2`, relative to the deviation :math:`\rho - \bar\rho`
        from the uniform density (``solvers.tolerance``).
    error_level : float or None
        The solution counts as resolved while its estimated max-norm error
        (:meth:`error_estimate`) and its negative values stay below ``error_level`` times
        :math:`\max\rho`. ``None``: by ``tail_threshold`` instead.
    tail_threshold : float
        With ``error_level=None``, the solution counts as resolved while the top 10 % of
        degrees hold less than this fraction of the spectral energy of :math:`\rho - \rho_0`
        (and it is nowhere negative beyond round-off): a stricter criterion, with no error attached.
    interaction : {"auto", "zonal", "general", "reference"}
        ``"zonal"``: the kernel is diagonal in harmonics (Funk-Hecke); ``"general"``: any
        query, key and value matrices and heads (``solvers.sphere.general``);
        ``"reference"``: the model's ``velocity_field`` of the grid's measure at the grid's
        points, any model (``solvers.reference``; :math:`O(P^2)` per right-hand side on ``P``
        grid points); ``"auto"`` takes the fastest path that serves the model.
    tableau : str or ExplicitTableau
        The embedded Runge-Kutta pair of the transport part (``meanfield.integration.TABLEAUX``),
        in integrating-factor form when there is diffusion; its step is also held within the
        pair's imaginary stability over the fastest advection frequency.
        ``"dormand_prince_853"`` reaches six times further along the imaginary axis: about
        cheaper on resolved runs without diffusion (``docs/performance.md``; it is refused with diffusion,
        and slower than the default once the run is under-resolved).
    {outputs_parameter}
    threads : int
        OpenMP threads of the shtns transforms. One by default: with other work on the machine a
        second thread waits for a busy core at every transform, and a run costs several times
        its one-thread time; more pay only on idle cores at large ``lmax``
        (``docs/performance.md``, "Threads").
    """

    lmax: int = 63
    threads: int = 1
    grid: SphereGrid = field(init=False, repr=False)
    _symbol: np.ndarray = field(init=False, repr=False)
    _kernel_band: BandLimited = field(init=False, repr=False)
    _band_symbol: np.ndarray = field(init=False, repr=False)
    _energy_symbol: np.ndarray = field(init=False, repr=False)
    energy_scaled: bool = field(init=False, repr=False)
    general: GeneralSphereInteraction | None = field(init=False, repr=False)
    external_velocity: tuple | None = field(init=False, repr=False)
    external_potential: np.ndarray | None = field(init=False, repr=False)

    def __post_init__(self) -> None:
        check_int(self.lmax, "lmax", minimum=2)
        self._check_settings()
        model = self._kernel_model
        if model.dimension not in (None, 3):
            raise ValueError(f"SphereSpectral solves on S^2 (d = 3), but the model lives in R^{model.dimension}")
        path = interaction_path(model, self.interaction, self.name)
        object.__setattr__(self, "grid", SphereGrid(self.lmax, self.threads))
        self._set_external()
        if path == "reference":
            # the field includes the external one, and the model's energy its potential
            object.__setattr__(self, "external_velocity", None)
            object.__setattr__(self, "external_potential", None)
            interaction = ReferenceSphereInteraction(model, self.grid)
            object.__setattr__(self, "general", interaction)
            object.__setattr__(self, "energy_scaled", interaction.energy_scaled)
            return
        if path == "general":
            # For fixed y the kernel is zonal in x with beta |A y| <= beta max_h ||A_h|| (model.logit_bound): resolve that one.
            check_kernel_resolved(lambda lmax: attention_spectrum(model.beta * model.logit_bound, lmax, 3, scaled=True),
                                  self.lmax)
            interaction = GeneralSphereInteraction(model, self.grid)
            object.__setattr__(self, "general", interaction)
            object.__setattr__(self, "energy_scaled", interaction.energy_scaled)
            return
        object.__setattr__(self, "general", None)
        check_kernel_resolved(self._symbol_by_degree, self.lmax)
        by_degree = self._symbol_by_degree()
        object.__setattr__(self, "_symbol", self._per_coefficient(by_degree))
        band = self.grid.band_limited(max(1, significant_degree(by_degree, NEGLIGIBLE_KERNEL)))
        object.__setattr__(self, "_kernel_band", band)
        object.__setattr__(self, "_band_symbol", band.select(self._symbol))
        energy_spectrum, scaled = zonal_energy_spectrum(model, self.lmax)
        object.__setattr__(self, "_energy_symbol", self._per_coefficient(energy_spectrum))
        object.__setattr__(self, "energy_scaled", scaled)

    # ------------------------------------------------------------------ operators
    name = "SphereSpectral"
    geometry = SPHERE
    default_max_steps = 1_000_000

    @property
    def _kernel_model(self):
        """The zonal model whose kernel and velocity law the solver uses (the layered causal solver's differs)."""
        return self.model

    @property
    def _linear(self) -> bool:
        """Whether the velocity is linear in rho (the model says)."""
        return self._kernel_model.velocity_is_linear

    @property
    def _resolution_advice(self) -> str:
        return f"raise lmax (now {self.lmax}), add diffusion, or stop earlier"

    def _set_external(self) -> None:
        """The external field's grid components (colatitude, longitude) and potential, evaluated once (it is fixed)."""
        external = self.model.external
        velocity = potential = None
        if external is not None:
            points = self.grid.points()
            e_theta, e_phi = self.grid.tangent_frame()
            values = np.moveaxis(external.field(points), -1, 0)
            velocity = (np.sum(values * e_theta, axis=0), np.sum(values * e_phi, axis=0))
            potential = external.potential(points)
        object.__setattr__(self, "external_velocity", velocity)
        object.__setattr__(self, "external_potential", potential)

    def _threads(self):
        # The general path's products share the cores with the transforms (solvers.threads).
        return single_threaded_blas() if self.general is not None else nullcontext()

    def _symbol_by_degree(self, lmax: int | None = None) -> np.ndarray:
        lmax = self.lmax if lmax is None else lmax
        if self._linear:
            return self._kernel_model.potential_spectrum(lmax, 3)
        return self._kernel_model.kernel_spectrum(lmax, 3)

    def _per_coefficient(self, by_degree: np.ndarray) -> np.ndarray:
        return by_degree[self.grid.degree.astype(int)]

    def velocity(self, coefficients: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        r"""The velocity :math:`v[\rho]` on the grid.

        {coefficients_parameters}

        Returns
        -------
        tuple of numpy.ndarray
            Its colatitude and longitude components, each of ``grid.shape``, external field
            included.
        """
        if self.general is not None:
            return self._with_external(*self.general.velocity(coefficients))
        band = self._kernel_band  # the convolution's degrees that are not negligible (NEGLIGIBLE_KERNEL)
        convolution = self._band_symbol * band.select(coefficients)
        if self._linear:
            return self._with_external(*band.gradient(convolution))
        c, beta = self._kernel_model.value_scale, self._kernel_model.beta
        scale = (c / beta) / np.maximum(band.synthesise(convolution), np.finfo(float).tiny)
        along_t, along_p = band.gradient(convolution)
        along_t *= scale
        along_p *= scale
        # |grad log K*rho| <= beta for the exact kernel, so |v| <= |c|: the bound removes round-off
        # noise where K*rho is below machine precision of its maximum (rarely active: checked first).
        speed_squared = along_t * along_t + along_p * along_p
        if speed_squared.max() > c * c:
            excess = np.sqrt(np.maximum(speed_squared / (c * c), 1.0))
            along_t /= excess
            along_p /= excess
        return self._with_external(along_t, along_p)

    def _with_external(self, along_t: np.ndarray, along_p: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        if self.external_velocity is None:
            return along_t, along_p
        return along_t + self.external_velocity[0], along_p + self.external_velocity[1]

    def transport(self, coefficients: np.ndarray) -> np.ndarray:
        r"""The transport term :math:`-\mathrm{div}_S(\rho v[\rho])`.

        {coefficients_parameters}

        Returns
        -------
        numpy.ndarray
            Its coefficients.
        """
        return self._transport_and_speed(coefficients)[0]

    def _transport_and_speed(self, coefficients: np.ndarray) -> tuple[np.ndarray, float]:
        rho = self.grid.synthesise(coefficients)
        along_t, along_p = self.velocity(coefficients)
        speed = _largest_speed(along_t, along_p)
        along_t *= rho
        along_p *= rho
        return self.grid.divergence(along_t, along_p, sign=-1.0), speed

    def _largest_speed(self, coefficients: np.ndarray) -> float:
        return _largest_speed(*self.velocity(coefficients))

    def _stable_step(self, speed: float) -> float:
        r"""Largest step at which the explicit pair damps the advection of every degree.

        {speed_parameters}

        Returns
        -------
        float
            The pair's imaginary stability limit over :math:`(l_{max} + 1)\max|v|`.
        """
        return self.tableau.imaginary_stability / max((self.lmax + 1) * speed, 1e-300)

    def _deviation_norm(self, coefficients: np.ndarray) -> float:
        return float(np.sqrt(np.sum(self.grid.deviation_weight * (coefficients.real ** 2 + coefficients.imag ** 2))))

    @staticmethod
    def _uniform_norm(coefficients: np.ndarray) -> float:
        return float(np.sqrt(np.sum(coefficients[..., 0].real ** 2)))

    # ------------------------------------------------------------------ functionals
    def energy(self, coefficients: np.ndarray) -> float:
        if self.general is not None:
            energy = self.general.energy(coefficients)
        else:
            energy = 0.5 * self.grid.inner(coefficients, self._energy_symbol * coefficients)
        if self.external_potential is not None:
            energy += 0.5 * self.grid.integrate(self.external_potential * self.grid.synthesise(coefficients))
        return energy

    def lyapunov(self, coefficients: np.ndarray) -> float:
        if self.external_velocity is not None and (self.external_potential is None or not self._linear):
            return np.nan  # no known functional: SA with a field, or a field without potential
        if self.general is not None:
            if not self.general.gradient_flow:
                return np.nan
            return self._free_energy(coefficients, self.energy(coefficients))
        if self._linear:
            potential = 0.5 * self.grid.inner(coefficients, self._symbol * coefficients)
            if self.external_potential is not None:
                potential += 0.5 * self.grid.integrate(self.external_potential * self.grid.synthesise(coefficients))
            return self._free_energy(coefficients, potential)
        if self.model.diffusion == 0:
            return -self.model.value_scale * self.energy(coefficients)
        return np.nan

    def _free_energy(self, coefficients: np.ndarray, potential: float) -> float:
        """``D int rho log rho - potential`` (NaN where rho is not positive; ``-potential`` at ``D = 0``)."""
        diffusion = self.model.diffusion
        if diffusion == 0:
            return -potential
        rho = self.grid.synthesise(coefficients)
        if rho.min() <= 0:
            return np.nan
        return diffusion * self.grid.integrate(rho * np.log(rho)) - potential

    def spectral_tail(self, coefficients: np.ndarray) -> float:
        return max(self.grid.tail_fraction(series) for series in self._series_of(coefficients))

    def error_estimate(self, coefficients: np.ndarray) -> float:
        r"""An estimate of the max-norm error the truncation at ``lmax`` puts in the density.

        From the decay of the top degrees (``solvers.resolution.geometric_tail_error``: the
        :math:`L^2` norm of the degrees beyond ``lmax`` that their geometric decay predicts,
        times :math:`\sqrt{(2 l_{max} + 3)/4\pi}`, the largest value of a degree
        :math:`l_{max} + 1` harmonic of unit norm, times a calibration constant fitted against
        runs at :math:`2 l_{max} + 1`; the PDE solvers guide gives the runs and the measured
        range, ``tests/test_sphere_error_estimate.py`` checks it). It measures the spatial
        error only; the steps' error is ``rtol``'s.

        {coefficients_parameters}

        Returns
        -------
        float
            The estimated :math:`\max|\rho - \rho_{exact}|` (``inf`` when the top degrees do not
            decay); of a layered state, the largest over its layers.
        """
        pointwise = np.sqrt((2 * self.lmax + 3) / (4 * np.pi))
        return max(geometric_tail_error(self._degree_amplitudes(series), pointwise)
                   for series in self._series_of(coefficients))

    def _degree_amplitudes(self, series: np.ndarray) -> np.ndarray:
        """The :math:`L^2` norm of each degree's part of one density's series."""
        power = self.grid.parseval_weight * np.abs(series) ** 2
        return np.sqrt(np.bincount(self.grid.transform.l, weights=power, minlength=self.lmax + 1))

    # ------------------------------------------------------------------ solve
    def initial_coefficients(self, rho0: Callable[[np.ndarray], np.ndarray] | np.ndarray, *,
                             name: str = "rho0") -> np.ndarray:
        """The coefficients of an initial density, normalized to mass one.

        Parameters
        ----------
        rho0 : callable or numpy.ndarray
            A vectorized callable of points ``(..., 3)``, or values on the grid (``grid.shape``).
        name : str
            The argument's name in error messages.

        Returns
        -------
        numpy.ndarray
            The spherical-harmonic coefficients.

        Raises
        ------
        ValueError
            If the density is negative, not finite, of zero mass or of the wrong shape.
        """
        values = rho0(self.grid.points()) if callable(rho0) else rho0
        values = check_density(values, self.grid.shape, name, grid=self.grid.description)
        coefficients = self.grid.analyse(values)
        return coefficients / self.grid.mass(coefficients)

    def _initial_state(self, rho0, continued: bool) -> np.ndarray:
        if continued:
            return self.grid.analyse(check_density(rho0, self.grid.shape, "rho0", evolved=True))
        return self.initial_coefficients(rho0)

    def density(self, coefficients: np.ndarray) -> np.ndarray:
        """The density on the Gauss grid.

        {coefficients_parameters}

        Returns
        -------
        numpy.ndarray
            Its values, of ``grid.shape``.
        """
        return self.grid.synthesise(coefficients)

    def _stepper(self, coefficients: np.ndarray, times: np.ndarray):
        decay = self.model.diffusion * self.grid.laplacian_eigenvalue if self.model.diffusion > 0 else None
        return self._transport_stepper(decay, lambda c: float(np.sqrt(self.grid.inner(c, c))), times,
                                       lambda discretisation: discretisation.stable_step(coefficients))

    def _resolves(self, coefficients: np.ndarray, rho: np.ndarray | None = None) -> bool:
        """Whether the truncated series still represents the density (the hand-over criterion).

        {coefficients_parameters}
        rho : numpy.ndarray, optional
            Its grid values, when already synthesised.

        Returns
        -------
        bool
            The estimated error and the negative values are below ``error_level`` times the
            density's maximum (with ``error_level=None``: the spectral tail is below
            ``tail_threshold`` and the density nowhere negative beyond ``-1e-8`` of its maximum).
        """
        return self._resolution(coefficients, self.density(coefficients) if rho is None else rho).resolved

    def _resolution(self, coefficients: np.ndarray, rho: np.ndarray) -> Diagnosis:
        """Whether the series resolves the density, why not, and the spectral tail and error estimate."""
        tail, estimate = self.spectral_tail(coefficients), self.error_estimate(coefficients)
        lowest, level = rho.min(), (1e-8 if self.error_level is None else self.error_level) * rho.max()
        values = {"spectral_tail": tail, "error_estimate": estimate}
        if lowest < -level:  # the truncated series no longer represents a density
            return Diagnosis(values, False, f"the density is negative ({lowest:.3g})")
        if self.error_level is None:
            return Diagnosis(values, bool(tail < self.tail_threshold),
                             f"the top 10% of degrees hold {tail:.2g} of the spectral energy (> {self.tail_threshold:g})")
        return Diagnosis(values, bool(estimate <= level),
                         f"the estimated error {estimate:.2g} exceeds error_level x max rho = {level:.2g}")

    def _diagnose(self, coefficients: np.ndarray, rho: np.ndarray):
        resolution = self._resolution(coefficients, rho)
        values = {"mass": self.grid.mass(coefficients), "energy": self.energy(coefficients),
                  "lyapunov": self.lyapunov(coefficients), "min_density": rho.min(), **resolution.values}
        return Diagnosis(values, resolution.resolved, resolution.reason)

    def _grid_coordinates(self) -> dict[str, np.ndarray]:
        return {"colatitude": self.grid.colatitude, "longitude": self.grid.longitude}

    def _recorded_settings(self) -> dict:
        return {"lmax": self.lmax, "rtol": self.rtol, "grid": list(self.grid.shape), "tableau": self.tableau.name,
                "outputs": self.outputs, "error_level": self.error_level}


def check_kernel_resolved(spectrum_by_degree: Callable[[int], np.ndarray], lmax: int) -> None:
    """Refuse an ``lmax`` at which the kernel's degree-``lmax`` eigenvalue exceeds ``KERNEL_TOLERANCE`` of the largest.

    Raises
    ------
    ValueError
        Naming the smallest ``lmax`` that resolves it (searched up to ``4 lmax + 64``).
    """
    spectrum = np.abs(spectrum_by_degree(lmax))
    tail = spectrum[-1] / spectrum.max()
    if tail > KERNEL_TOLERANCE:
        needed = next((l for l in range(lmax, 4 * lmax + 64)
                       if abs(spectrum_by_degree(l)[-1]) / spectrum.max() <= KERNEL_TOLERANCE), None)
        advice = f"use lmax >= {needed}" if needed else "raise lmax"
        raise ValueError(f"lmax={lmax} does not resolve the kernel: its degree-{lmax} "
                         f"eigenvalue is {tail:.2g} of the largest (> {KERNEL_TOLERANCE:g}); {advice}")


def zonal_energy_spectrum(model, lmax: int) -> tuple[np.ndarray, bool]:
    r"""The energy kernel's eigenvalues of degrees ``0 .. lmax`` on :math:`S^2`, and whether they carry :math:`e^{-\beta}`.

    :math:`E` itself where it fits in double precision, :math:`e^{-\beta}E` otherwise (large-``beta``
    SA), and always for a time-rescaled model.
    """
    try:
        return model.energy_spectrum(lmax, 3), model.time_rescaled
    except OverflowError:
        return model.energy_spectrum(lmax, 3, scaled=True), True


def energy_is_scaled(model, lmax: int, interaction: str = "auto") -> bool:
    r"""Whether :class:`SphereSpectral` with these settings records :math:`e^{-\beta B}E` rather than :math:`E`."""
    path = interaction_path(model, interaction, SphereSpectral.name)
    if path == "reference":
        return bool(model.time_rescaled)
    if path == "general":
        return energy_factors(model, 3)[1]
    return zonal_energy_spectrum(model, lmax)[1]


def _largest_speed(along_t: np.ndarray, along_p: np.ndarray) -> float:
    return float(np.sqrt(np.max(along_t * along_t + along_p * along_p)))


def significant_degree(by_degree: np.ndarray, fraction: float) -> int:
    """The largest degree whose eigenvalue is at least ``fraction`` of the largest in magnitude (0 if none)."""
    magnitude = np.abs(by_degree)
    significant = np.flatnonzero(magnitude >= fraction * magnitude.max())
    return int(significant[-1]) if significant.size else 0
