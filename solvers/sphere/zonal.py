r"""Zonal densities on :math:`S^{d-1}` for every ``d >= 3``: the mean-field equation in :math:`u = \langle x, e\rangle`.

A zonal model (the kernel a function of :math:`\langle x, y\rangle`) keeps a density that
depends on :math:`u = \langle x, e\rangle` only in that form, whatever ``d``. Write
:math:`\rho = \tilde f(u)/|S^{d-1}|` (:math:`\tilde f` is the density relative to the uniform
one, finite in every dimension while :math:`|S^{d-1}|` underflows past ``d = 340``). The
velocity of such a density is :math:`v = w(u)\,(e - u x)`, with

.. math:: w = g', \quad g = \Phi \bar* \tilde f \quad\text{(USA, Kuramoto, zonal aggregation)};
   \qquad w = \frac{c}{\beta}\,\frac{g'}{g},\quad g = K \bar* \tilde f \quad\text{(SA)},

:math:`\bar*` the convolution against the uniform probability measure, diagonal in the
orthonormal Gegenbauer basis :math:`\hat P_l` of :mod:`solvers.sphere.gegenbauer` with the
eigenvalues :math:`\lambda_l/|S^{d-1}|` (Funk-Hecke; ``uniform_measure=True`` of the model's
spectra). The continuity equation becomes one-dimensional,

.. math:: \partial_t\tilde f = -\frac{1}{\pi_d}\,\partial_u\big((1-u^2)\,\pi_d\,w\,\tilde f\big)
   + D\,\Delta\tilde f,

and in the basis its transport term is, after one integration by parts (the flux
:math:`(1-u^2)\pi_d` vanishes at :math:`\pm 1`),

.. math:: T_l = \int \tilde f\, w\, \hat P_l'\,(1-u^2)\,\pi_d\,du
   = c_l\,\frac{d-1}{d}\int \tilde f\, w\, \hat Q_{l-1}\, \pi_{d+2}\,du,

a Gauss rule of :math:`\pi_{d+2}` with :math:`\lceil 3(l_{max}+1)/2\rceil` nodes (exact for
USA's polynomial integrand, dealiased as the other spectral solvers' 3/2 rule). Mass is the
coefficient :math:`a_0`, which nothing changes. Diffusion, :math:`-D\,l(l+d-2)`, is integrated
exactly; the transport by the embedded pair with the library's ``rtol``
(:mod:`solvers.tolerance`: relative to the deviation :math:`\|\tilde f - 1\|_{L^2(\pi_d)}`).

The resolution diagnostic reads the law of :math:`u`, not the maximum of :math:`\rho`: at
large ``d`` the maximum sits near :math:`u = \pm1`, where there is no mass and where a
degree-``l`` polynomial is :math:`\sqrt{\dim\mathcal H_l}` (about :math:`10^{26}` at ``d = 128``,
``l = 64``) times its :math:`L^2` norm. The estimate is the :math:`L^2(\pi_d)` norm of the
degrees beyond ``lmax`` that the decay of the top ones predicts
(``solvers.resolution.geometric_tail_error``), which bounds the error of the law of
:math:`u` in total variation.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from meanfield.checks import check_density, check_int
from meanfield.docstrings import fill_docstrings, inherit_docstrings
from meanfield.records import geometry_name

from ..grid_solver import Diagnosis
from ..resolution import geometric_tail_error
from ..spectral_solver import OUTPUTS_PARAMETER, SPEED_PARAMETERS, SpectralSolver
from .gegenbauer import derivative_factors, gauss_rule, log_law_of_u, mass_profile, orthonormal_gegenbauer
from .spectral import check_kernel_resolved

#: The Parameters section of the methods that read the state (``{coefficients_parameters}``).
COEFFICIENTS_PARAMETERS = """
Parameters
----------
coefficients : numpy.ndarray, shape (lmax + 1,)
    The coefficients :math:`a_l` of :math:`\\tilde f = \\sum_l a_l \\hat P_l` (``a_0 = 1`` at mass one).
"""

#: Fibre directions at which a callable ``rho0`` is evaluated to check that it is zonal.
AXISYMMETRY_PROBES = 3

#: A callable ``rho0`` counts as zonal when its values at one ``u`` agree to this fraction of its maximum.
AXISYMMETRY_TOLERANCE = 1e-10


@fill_docstrings(outputs_parameter=OUTPUTS_PARAMETER, coefficients_parameters=COEFFICIENTS_PARAMETERS,
                 speed_parameters=SPEED_PARAMETERS)
@inherit_docstrings
@dataclass(frozen=True, eq=False)
class ZonalSphereSpectral(SpectralSolver):
    r"""Gegenbauer spectral solver for densities of :math:`u = \langle x, e\rangle` on :math:`S^{d-1}`, any ``d >= 3``.

    ``e`` is the last coordinate axis (the pole of :class:`SphereSpectral`'s colatitude at
    ``d = 3``). The dataset records, on the Gauss nodes of the law of :math:`u` (``u``, where
    the mass is), the density relative to the uniform one (``rho``, which is 1 at
    equilibrium; at large ``d`` its values at the outer nodes, where the law is negligible,
    carry the coefficients' round-off times :math:`1/\sqrt{w_k}`, the basis' size there), the
    law of :math:`u` (``law``; ``min_density`` is its smallest value), its distribution function
    (``mass_profile``, exact between nodes through :meth:`mass_profile`), the coefficients
    (``coefficient``, by ``degree``) and ``angle`` :math:`= \arccos u` beside ``u``.

    Parameters
    ----------
    model : SelfAttention or ZonalAggregation
        A zonal model (``Q = K = I``, ``V = cI``, one head, or a zonal potential), any
        diffusion; no external field.
    lmax : int
        Largest degree; it must resolve the kernel (its degree-``lmax`` eigenvalue below
        ``1e-8`` of the largest).
    d : int, optional
        The ambient dimension, ``>= 3``; the model's own when it fixes one.
    rtol : float
        Local error per step, in :math:`L^2(\pi_d)`, relative to the deviation
        :math:`\tilde f - 1` from the uniform density (``solvers.tolerance``).
    error_level : float or None
        The run counts as resolved while the estimated error of the law of :math:`u` in total
        variation (:meth:`error_estimate`) and its negative mass stay below ``error_level``.
        ``None``: by ``tail_threshold`` instead.
    tail_threshold : float
        With ``error_level=None``: resolved while the top 10 % of degrees hold less than this
        fraction of the deviation's :math:`L^2` norm squared (and no mass is negative beyond
        ``1e-8``).
    interaction : {"auto", "zonal"}
        The Funk-Hecke path is the only one (a density of :math:`u` carries no quadrature of
        the sphere for a model's reference).
    tableau : str or ExplicitTableau
        As for :class:`SphereSpectral`.
    {outputs_parameter}
    """

    lmax: int = 64
    d: int | None = None
    _nodes: np.ndarray = field(init=False, repr=False)
    _weights: np.ndarray = field(init=False, repr=False)
    _basis: np.ndarray = field(init=False, repr=False)
    _flux_nodes: np.ndarray = field(init=False, repr=False)
    _flux_weights: np.ndarray = field(init=False, repr=False)
    _flux_basis: np.ndarray = field(init=False, repr=False)
    _flux_derivatives: np.ndarray = field(init=False, repr=False)
    _derivative_factor: np.ndarray = field(init=False, repr=False)
    _symbol: np.ndarray = field(init=False, repr=False)
    _energy_symbol: np.ndarray = field(init=False, repr=False)
    energy_scaled: bool = field(init=False, repr=False)

    name = "ZonalSphereSpectral"
    default_max_steps = 1_000_000

    def __post_init__(self) -> None:
        check_int(self.lmax, "lmax", minimum=2)
        self._check_settings()
        model = self.model
        d = self._checked_dimension(model)
        if self.interaction not in ("auto", "zonal"):
            raise ValueError(f"ZonalSphereSpectral has only the zonal (Funk-Hecke) path: interaction must be 'auto' "
                             f"or 'zonal', got {self.interaction!r}")
        self._check_model(model)
        set_ = object.__setattr__
        set_(self, "d", d)
        check_kernel_resolved(self._symbol_by_degree, self.lmax)
        set_(self, "_symbol", self._symbol_by_degree())
        set_(self, "_energy_symbol", self._energy_by_degree())
        nodes = -(-3 * (self.lmax + 1) // 2)
        u, w = gauss_rule(d, nodes)
        set_(self, "_nodes", u)
        set_(self, "_weights", w)
        set_(self, "_basis", orthonormal_gegenbauer(d, self.lmax, u))
        u, w = gauss_rule(d + 2, nodes)
        set_(self, "_flux_nodes", u)
        set_(self, "_flux_weights", w)
        set_(self, "_flux_basis", orthonormal_gegenbauer(d, self.lmax, u))
        set_(self, "_flux_derivatives", orthonormal_gegenbauer(d + 2, self.lmax - 1, u))
        set_(self, "_derivative_factor", derivative_factors(d, self.lmax))

    def _checked_dimension(self, model) -> int:
        d = self.d if self.d is not None else model.dimension
        if d is None:
            raise ValueError("ZonalSphereSpectral needs the dimension: pass d (>= 3)")
        d = check_int(d, "d", minimum=2)
        if d < 3:
            raise ValueError(f"ZonalSphereSpectral solves on S^(d-1) for d >= 3, got d={d} (the circle: "
                             "CircleSpectral or CircleFV)")
        if model.dimension not in (None, d):
            raise ValueError(f"d={d} but the model lives in R^{model.dimension}")
        return d

    @staticmethod
    def _check_model(model) -> None:
        name = type(model).__name__
        if not getattr(model, "on_sphere", True) or model.causal:
            raise ValueError(f"ZonalSphereSpectral evolves a measure on the sphere; got {name}"
                             f"{' (causal)' if model.causal else ' (off the sphere)'}")
        if not model.is_zonal or not hasattr(model, "potential_spectrum"):
            raise ValueError(f"ZonalSphereSpectral needs a zonal model (SelfAttention with Q = K = I, V = cI and one "
                             f"head, or ZonalAggregation): the velocity of a density of <x, e> is then one of <x, e>; "
                             f"got {name} with is_zonal={model.is_zonal} (use particles, or SphereSpectral at d = 3)")
        if model.external is not None:
            raise ValueError("ZonalSphereSpectral takes no external field (it would have to be zonal about the same "
                             "axis); got one")

    @property
    def geometry(self) -> str:
        return geometry_name(self.d)

    @property
    def _linear(self) -> bool:
        """Whether the velocity is linear in rho (the model says)."""
        return self.model.velocity_is_linear

    @property
    def _resolution_advice(self) -> str:
        return f"raise lmax (now {self.lmax}), add diffusion, or stop earlier"

    def _symbol_by_degree(self, lmax: int | None = None) -> np.ndarray:
        lmax, model, d = self.lmax if lmax is None else lmax, self.model, self.d
        if self._linear:
            return model.potential_spectrum(lmax, d, uniform_measure=True)
        return model.kernel_spectrum(lmax, d, uniform_measure=True)

    def _energy_by_degree(self) -> np.ndarray:
        try:
            values, scaled = self.model.energy_spectrum(self.lmax, self.d, uniform_measure=True), False
        except OverflowError:
            values, scaled = self.model.energy_spectrum(self.lmax, self.d, scaled=True,
                                                        uniform_measure=True), True
        object.__setattr__(self, "energy_scaled", scaled or bool(self.model.time_rescaled))
        return values

    # ------------------------------------------------------------------ operators
    def velocity(self, coefficients: np.ndarray, u: np.ndarray | None = None) -> np.ndarray:
        r"""The velocity's profile :math:`w(u)`, :math:`v = w(u)\,(e - u x)`, at :attr:`flux_nodes` or at ``u``.

        {coefficients_parameters}
        u : numpy.ndarray, optional
            Points of ``(-1, 1)`` (default: the Gauss nodes of :math:`\pi_{{d+2}}` the transport
            integrates on).

        Returns
        -------
        numpy.ndarray
            :math:`w`; the tangential speed is :math:`|w|\sqrt{{1-u^2}}` and :math:`\dot u = (1-u^2)\,w`.
        """
        if u is None:
            u, values, slopes = self._flux_nodes, self._flux_basis, self._flux_derivatives
        else:
            u = np.asarray(u, dtype=float)
            values = orthonormal_gegenbauer(self.d, self.lmax, u)
            slopes = orthonormal_gegenbauer(self.d + 2, self.lmax - 1, u)
        convolved = self._symbol * coefficients
        slope = slopes @ (self._derivative_factor[1:] * convolved[1:])
        if self._linear:
            return slope
        c, beta = self.model.value_scale, self.model.beta
        w = (c / beta) * slope / np.maximum(values @ convolved, np.finfo(float).tiny)
        # |grad log K*rho| <= beta for the exact kernel, so |v| <= |c|: the bound removes round-off
        # where K*rho is below machine precision of its maximum
        sine = np.sqrt(1.0 - u ** 2)
        return np.clip(w, -abs(c) / sine, abs(c) / sine)

    def _transport_and_speed(self, coefficients: np.ndarray) -> tuple[np.ndarray, float]:
        w = self.velocity(coefficients)
        flux = self._flux_weights * (self._flux_basis @ coefficients) * w
        transport = np.zeros_like(coefficients)
        transport[1:] = self._derivative_factor[1:] * ((self.d - 1) / self.d) * (
            flux @ self._flux_derivatives)
        return transport, self._speed(w)

    def transport(self, coefficients: np.ndarray) -> np.ndarray:
        r"""The transport term :math:`-\mathrm{div}_S(\rho v[\rho])`, in the basis.

        {coefficients_parameters}

        Returns
        -------
        numpy.ndarray
            Its coefficients.
        """
        return self._transport_and_speed(coefficients)[0]

    def _speed(self, w: np.ndarray) -> float:
        return float(np.max(np.abs(w) * np.sqrt(1.0 - self._flux_nodes ** 2)))

    def _largest_speed(self, coefficients: np.ndarray) -> float:
        return self._speed(self.velocity(coefficients))

    def _stable_step(self, speed: float) -> float:
        r"""Largest step at which the explicit pair damps the advection of every degree.

        {speed_parameters}

        Returns
        -------
        float
            The pair's imaginary stability limit over :math:`(l_{{max}} + 1)\max|v|`.
        """
        return self.tableau.imaginary_stability / max((self.lmax + 1) * speed, 1e-300)

    def _deviation_norm(self, coefficients: np.ndarray) -> float:
        return float(np.sqrt(np.sum(coefficients[..., 1:] ** 2)))

    @staticmethod
    def _uniform_norm(coefficients: np.ndarray) -> float:
        return float(np.sqrt(np.sum(coefficients[..., 0] ** 2)))

    # ------------------------------------------------------------------ functionals
    def energy(self, coefficients: np.ndarray) -> float:
        return float(0.5 * np.sum(self._energy_symbol * coefficients ** 2))

    def lyapunov(self, coefficients: np.ndarray) -> float:
        r"""The functional the dynamics decreases, where one is known.

        {coefficients_parameters}

        Returns
        -------
        float
            :math:`D\int\tilde f\log\tilde f\,d\pi_d - \frac12\sum_l \phi_l a_l^2` (USA, zonal
            aggregation, Kuramoto: the free energy less the constant :math:`D\log|S^{{d-1}}|`),
            ``-cE`` (SA without diffusion); NaN where none is known or, with diffusion, where
            the density is not positive at the nodes.
        """
        if self._linear:
            potential = 0.5 * float(np.sum(self._symbol * coefficients ** 2))
            diffusion = self.model.diffusion
            if diffusion == 0:
                return -potential
            f = self.density(coefficients)
            if f.min() <= 0:
                return np.nan
            return diffusion * float(np.sum(self._weights * f * np.log(f))) - potential
        if self.model.diffusion == 0:
            return -self.model.value_scale * self.energy(coefficients)
        return np.nan

    def spectral_tail(self, coefficients: np.ndarray) -> float:
        power = coefficients ** 2
        deviation = power[1:].sum()
        if deviation == 0:
            return 0.0
        return float(power[np.arange(power.size) > 0.9 * self.lmax].sum() / deviation)

    def error_estimate(self, coefficients: np.ndarray) -> float:
        r"""An estimate of the total-variation error the truncation at ``lmax`` puts in the law of :math:`u`.

        The :math:`L^2(\pi_d)` norm of the missing degrees that the geometric decay of the top
        ones predicts (``solvers.resolution.geometric_tail_error`` with unit pointwise
        factor); by Cauchy-Schwarz it bounds :math:`\int|\delta\tilde f|\,d\pi_d`. The spatial
        error only; the steps' error is ``rtol``'s.

        {coefficients_parameters}

        Returns
        -------
        float
            The estimate (``inf`` when the top degrees do not decay).
        """
        return geometric_tail_error(np.abs(coefficients), 1.0)

    # ------------------------------------------------------------------ state, records
    @property
    def nodes(self) -> np.ndarray:
        r"""The recorded points :math:`u` (Gauss nodes of :math:`\pi_d`, ascending)."""
        return self._nodes

    @property
    def flux_nodes(self) -> np.ndarray:
        r"""The points :math:`u` the transport is integrated on (Gauss nodes of :math:`\pi_{d+2}`, ascending)."""
        return self._flux_nodes

    def initial_coefficients(self, rho0: Callable[[np.ndarray], np.ndarray] | np.ndarray, *,
                             name: str = "rho0") -> np.ndarray:
        r"""The coefficients of a zonal initial density, normalized to mass one.

        Parameters
        ----------
        rho0 : callable or numpy.ndarray
            A vectorized callable of points ``(..., d)`` of :math:`S^{d-1}` that depends on
            :math:`\langle x, e\rangle` only (checked at three points per node), or its values
            at :attr:`nodes`; any positive scale (with respect to :math:`\sigma` or to the
            uniform probability measure).
        name : str
            The argument's name in error messages.

        Returns
        -------
        numpy.ndarray, shape (lmax + 1,)

        Raises
        ------
        ValueError
            If the density is not zonal about the last axis, negative, not finite, of zero
            mass or of the wrong shape.
        """
        values = self._zonal_values(rho0, name) if callable(rho0) else rho0
        values = check_density(values, self._nodes.shape, name)
        coefficients = self._analyse(values)
        return coefficients / coefficients[0]

    def _zonal_values(self, rho0: Callable[[np.ndarray], np.ndarray], name: str) -> np.ndarray:
        """``rho0`` at the nodes, after checking it is the same around each parallel ``<x, e> = u``."""
        points = zonal_points(self._nodes, self.d, AXISYMMETRY_PROBES)
        values = np.asarray(rho0(points), dtype=float)
        if values.shape != points.shape[:-1]:
            raise ValueError(f"{name} must map points of shape (..., {self.d}) to values of shape (...), "
                             f"got {values.shape} for {points.shape}")
        spread = np.max(np.abs(values - values[:, :1]))
        scale = np.max(np.abs(values))
        if np.isfinite(spread) and spread > AXISYMMETRY_TOLERANCE * scale:
            raise ValueError(f"{name} is not zonal about the last axis e: its values on one parallel <x, e> = u differ "
                             f"by {spread / scale:.3g} of its maximum (ZonalSphereSpectral evolves densities of "
                             "<x, e> only; use particles, or SphereSpectral at d = 3)")
        return values[:, 0]

    def _analyse(self, values: np.ndarray) -> np.ndarray:
        return (self._weights * values) @ self._basis

    def _initial_state(self, rho0, continued: bool) -> np.ndarray:
        if continued:
            return self._analyse(check_density(rho0, self._nodes.shape, "rho0", evolved=True))
        return self.initial_coefficients(rho0)

    def density(self, coefficients: np.ndarray) -> np.ndarray:
        r"""The density relative to the uniform one, :math:`\tilde f = |S^{{d-1}}|\rho`, at :attr:`nodes`.

        {coefficients_parameters}

        Returns
        -------
        numpy.ndarray
        """
        return self._basis @ coefficients

    def law(self, coefficients: np.ndarray, u: np.ndarray | None = None) -> np.ndarray:
        r"""The density of :math:`u = \langle x, e\rangle`, :math:`\tilde f(u)\,\pi_d(u)`.

        {coefficients_parameters}
        u : numpy.ndarray, optional
            Points of ``[-1, 1]`` (default :attr:`nodes`).

        Returns
        -------
        numpy.ndarray
        """
        u = self._nodes if u is None else np.asarray(u, dtype=float)
        basis = self._basis if u is self._nodes else orthonormal_gegenbauer(self.d, self.lmax, u)
        return (basis @ coefficients) * np.exp(log_law_of_u(self.d, u))

    def mass_profile(self, coefficients: np.ndarray, u: np.ndarray | None = None) -> np.ndarray:
        r"""The mass below :math:`u`, :math:`F(u) = \int_{{-1}}^u \tilde f\,\pi_d`, exactly for the series (``solvers.sphere.gegenbauer.mass_profile``).

        {coefficients_parameters}
        u : numpy.ndarray, optional
            Points of ``[-1, 1]`` (default :attr:`nodes`).

        Returns
        -------
        numpy.ndarray
        """
        return mass_profile(coefficients, self.d, self._nodes if u is None else u)

    def _stepper(self, coefficients: np.ndarray, times: np.ndarray):
        d = self.d
        degrees = np.arange(self.lmax + 1, dtype=float)
        decay = self.model.diffusion * degrees * (degrees + d - 2) if self.model.diffusion > 0 else None  # of -D Lap
        return self._transport_stepper(decay, lambda c: float(np.sqrt(np.sum(c * c))), times,
                                       lambda discretisation: discretisation.stable_step(coefficients))

    def _resolves(self, coefficients: np.ndarray) -> bool:
        """Whether the truncated series still represents the density.

        {coefficients_parameters}

        Returns
        -------
        bool
            The estimated error and the negative mass are below ``error_level`` (with
            ``error_level=None``: the spectral tail below ``tail_threshold`` and no negative mass
            beyond ``1e-8``).
        """
        return self._resolution(coefficients).resolved

    def _resolution(self, coefficients: np.ndarray) -> Diagnosis:
        tail, estimate = self.spectral_tail(coefficients), self.error_estimate(coefficients)
        negative = float(np.sum(self._weights * np.minimum(self.density(coefficients), 0.0)))
        level = 1e-8 if self.error_level is None else self.error_level
        values = {"spectral_tail": tail, "error_estimate": estimate, "negative_mass": negative}
        if negative < -level:
            return Diagnosis(values, False, f"the density is negative (mass {negative:.3g} below zero)")
        if self.error_level is None:
            return Diagnosis(values, bool(tail < self.tail_threshold),
                             f"the top 10% of degrees hold {tail:.2g} of the spectral energy (> {self.tail_threshold:g})")
        return Diagnosis(values, bool(estimate <= level),
                         f"the estimated error of the law of u, {estimate:.2g}, exceeds error_level = {level:g}")

    def _diagnose(self, coefficients: np.ndarray, rho: np.ndarray) -> Diagnosis:
        resolution = self._resolution(coefficients)
        # the smallest value of the law of u, not of rho: at large d the outer nodes carry no mass and
        # rho there holds the coefficients' round-off times the basis' size, 1/sqrt(weight)
        values = {"mass": float(coefficients[0]), "energy": self.energy(coefficients),
                  "lyapunov": self.lyapunov(coefficients), "min_density": float(self.law(coefficients).min()),
                  **resolution.values}
        return Diagnosis(values, resolution.resolved, resolution.reason)

    def _grid_coordinates(self) -> dict[str, np.ndarray]:
        return {"u": self._nodes}

    def _recorded_fields(self, coefficients: np.ndarray) -> dict:
        return {"law": (("u",), self.law(coefficients)), "mass_profile": (("u",), self.mass_profile(coefficients)),
                "coefficient": (("degree",), coefficients.copy())}

    def _recorded_coordinates(self) -> dict[str, np.ndarray]:
        return {"degree": np.arange(self.lmax + 1)}

    def _recorded_settings(self) -> dict:
        return {"lmax": self.lmax, "d": self.d, "rtol": self.rtol, "nodes": int(self._nodes.size),
                "tableau": self.tableau.name, "outputs": self.outputs, "error_level": self.error_level}

    def solve(self, rho0, times, *, progress=None, observer=None, max_steps=None, first_step=None, continued=False,
              pace=None, underresolved="stop"):
        return with_angle(super().solve(rho0, times, progress=progress, observer=observer, max_steps=max_steps,
                                        first_step=first_step, continued=continued, pace=pace,
                                        underresolved=underresolved), self._nodes)


def with_angle(ds, nodes: np.ndarray):
    r"""The dataset with the angle to ``e``, :math:`\arccos u`, beside ``u``."""
    return ds.assign_coords(angle=("u", np.arccos(nodes), {"long_name": "angle to e", "units": "rad"}))


def zonal_points(u: np.ndarray, d: int, probes: int) -> np.ndarray:
    r"""Points :math:`u_k e + \sqrt{1-u_k^2}\,\xi_j` of :math:`S^{d-1}`, shape ``(len(u), probes, d)``.

    ``e`` is the last axis; the fibre directions :math:`\xi_j \perp e` are the first axis, its
    opposite turned toward the second, and fixed pseudo-random ones (the same at every call).
    """
    directions = np.random.default_rng(20261127).standard_normal((probes, d))
    directions[0] = 0.0
    directions[0, 0] = 1.0
    if probes > 1:
        directions[1] = 0.0
        directions[1, 0], directions[1, min(1, d - 2)] = -0.6, 0.8
    directions[:, -1] = 0.0
    directions /= np.linalg.norm(directions, axis=1, keepdims=True)
    u = np.asarray(u, dtype=float)[:, None, None]
    axis = np.zeros(d)
    axis[-1] = 1.0
    return u * axis + np.sqrt(1.0 - u * u) * directions[None]
