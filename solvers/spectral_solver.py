r"""What a spectral solver provides: the members its stepping, diagnostics and hand-overs read.

:class:`~solvers.CircleSpectral` (Fourier series) and :class:`~solvers.SphereSpectral`
(spherical harmonics) hold the density as a truncated series.
:class:`~solvers.spectral_transport.SpectralTransport`
steps either through the same members (the transport and its largest speed, the stable step,
the local tolerance), the records read the same functionals, and the hand-over solvers
(:class:`~solvers.CircleAuto`, :class:`~solvers.SphereSpectralParticles`) the same resolution
diagnostic. :class:`SpectralSolver` declares them once, with their docstrings, and holds the
settings both take; each solver defines the members for its series (and inherits the
docstrings).
"""

from __future__ import annotations

import time
from dataclasses import KW_ONLY, dataclass
from typing import Callable

import numpy as np

from meanfield.checks import check_real, check_rtol
from meanfield.docstrings import fill_docstrings, parameters
from meanfield.integration import ExplicitTableau, explicit_adaptive_step
from meanfield.records import CIRCLE

from .grid_solver import CostEstimate, GridSolver, attention_speed_bound
from .resolution import UnresolvedStart
from .spectral_transport import SpectralTransport, transport_tableau
from .tolerance import error_tolerance

#: The Parameters section of a member that reads a spectral solver's state (``{spectral_state_parameters}``).
SPECTRAL_STATE_PARAMETERS = parameters(r"""
coefficients : numpy.ndarray
    The density's series in the solver's layout: on the circle the complex Fourier
    coefficients :math:`c_k`, :math:`k = 0 .. N/2 - 1`, of
    :math:`\rho(\theta) = \sum_{|k| < N/2} c_k e^{ik\theta}`; on :math:`S^2` the
    spherical-harmonic coefficients in the grid's (shtns) layout. A layered (causal) solver's
    state holds one series per layer along a leading axis.
""")

#: The entry of the ``outputs`` setting in a spectral solver's Parameters (``{outputs_parameter}``).
OUTPUTS_PARAMETER = r"""
outputs : {"stepped", "interpolated"}
    How the state at an output time is obtained. ``"stepped"`` (the default): a step ends
    there, so a run continued from any output (or run in checkpointed segments) takes the
    steps of the run in one call, but each output interval takes at least one step.
    ``"interpolated"``: the steps pass the output times and the pair's continuous extension
    gives the state there (order 4 for Dormand-Prince 5(4), 7 for 8(5,3)), so outputs more
    frequent than the steps cost no right-hand sides (a film, a fine time series); the last
    output is still stepped to, and a run that stops or hands over at a step's end keeps the
    outputs inside that step (with ``underresolved="stop"``, those after the first
    under-resolved one too, flagged). It needs a pair with an extension and no diffusion (the
    integrating-factor form has none).
"""

#: The Parameters section of a stable step (``{speed_parameters}``).
SPEED_PARAMETERS = parameters(r"""
speed : float
    The largest speed :math:`\max|v|`.
""")


@fill_docstrings(spectral_state_parameters=SPECTRAL_STATE_PARAMETERS, speed_parameters=SPEED_PARAMETERS)
@dataclass(frozen=True, eq=False)
class SpectralSolver(GridSolver):
    """The template of a solver whose state is a truncated series of the density.

    It holds the model and the settings every spectral solver takes, keyword-only, with the
    same defaults (each solver's docstring says what they mean for its series), and checks
    them (:meth:`_check_settings`, from the solver's ``__post_init__``). A subclass defines
    each member below for its series but :meth:`_local_tolerance`, which they share.
    """

    model: object
    _: KW_ONLY
    rtol: float = 1e-6
    tail_threshold: float = 1e-10
    interaction: str = "auto"
    tableau: str | ExplicitTableau = "dormand_prince"
    error_level: float | None = 1e-3
    outputs: str = "stepped"

    def _check_settings(self) -> None:
        """Check the shared settings, and replace ``tableau`` by the pair it names."""
        check_rtol(self.rtol)
        check_real(self.tail_threshold, "tail_threshold", minimum=0.0, strictly=True)
        if self.error_level is not None:
            check_real(self.error_level, "error_level", minimum=0.0, strictly=True)
        object.__setattr__(self, "tableau", transport_tableau(self.tableau, self.model.diffusion))
        check_outputs(self.outputs, self.tableau, self.model.diffusion)

    def _transport_and_speed(self, coefficients: np.ndarray) -> tuple[np.ndarray, float]:
        r"""The transport term of the equation and the largest speed.

        {spectral_state_parameters}

        Returns
        -------
        transport : numpy.ndarray
            The series of :math:`-\mathrm{div}(\rho\, v[\rho])` (dealiased), shaped as
            ``coefficients``.
        speed : float
            :math:`\max|v|` on the solver's grid (the stable step needs it).
        """
        raise NotImplementedError

    def _largest_speed(self, coefficients: np.ndarray) -> float:
        r"""The largest speed :math:`\max|v|` on the solver's grid.

        {spectral_state_parameters}

        Returns
        -------
        float
            The largest speed (it sets the stable step).
        """
        raise NotImplementedError

    def _stable_step(self, speed: float) -> float:
        """The largest step the solver's explicit pair is stable for at this largest speed.

        {speed_parameters}

        Returns
        -------
        float
            The step (``inf`` where nothing bounds it).
        """
        raise NotImplementedError

    def _deviation_norm(self, coefficients: np.ndarray) -> float:
        r"""The deviation from the uniform density, :math:`\|\rho - \bar\rho\|_{L^2}`.

        {spectral_state_parameters}

        Returns
        -------
        float
            By Parseval over the series' non-constant terms (of every layer).
        """
        raise NotImplementedError

    def _uniform_norm(self, coefficients: np.ndarray) -> float:
        """The :math:`L^2` norm of the series' constant part (of every layer)."""
        raise NotImplementedError

    def _transport_stepper(self, decay: np.ndarray | None, norm: Callable[[np.ndarray], float], times: np.ndarray,
                           first_bound: Callable[[SpectralTransport], float]) -> tuple:
        """The solver's ``_stepper``: its pair on :class:`~solvers.spectral_transport.SpectralTransport`.

        With ``outputs="interpolated"`` (checked: a pair with a continuous extension and no
        diffusion) the steps pass the output times, which the extension interpolates.

        Parameters
        ----------
        decay : numpy.ndarray or None
            The diffusion's symbol per coefficient (``None`` without diffusion).
        norm : callable
            The :math:`L^2` norm of a coefficient array.
        times : numpy.ndarray
            The output times.
        first_bound : callable
            ``first_bound(discretisation)``: the stable step the first step is a tenth of.

        Returns
        -------
        tuple
            ``(attempt, first_step, extra_settings)``, as ``GridSolver._stepper``; the settings
            record the right-hand sides evaluated.
        """
        discretisation = SpectralTransport(self, decay, norm)
        attempt = explicit_adaptive_step(discretisation, self.tableau, dense_output=self.outputs == "interpolated")
        first = min(times[-1] - times[0], 0.1 * first_bound(discretisation)) or 1.0
        return attempt, first, lambda: {"rhs_evaluations": attempt.stepper.evaluations}

    def _local_tolerance(self, coefficients: np.ndarray) -> float:
        """The largest accepted local error of a step from these coefficients (``solvers.tolerance``).

        {spectral_state_parameters}

        Returns
        -------
        float
            ``rtol`` times the deviation's norm, floored at a fraction of the uniform density's
            norm (so that a run from the uniform state takes steps).
        """
        return error_tolerance(self.rtol, self._deviation_norm(coefficients), self._uniform_norm(coefficients))

    def resolved_start(self, rho0, *, name: str = "rho0") -> np.ndarray:
        """The initial coefficients (``initial_coefficients``), refused where the series does not resolve them.

        Parameters
        ----------
        rho0 : callable or numpy.ndarray
            As for ``initial_coefficients``.
        name : str
            The argument's name in error messages.

        Returns
        -------
        numpy.ndarray
            The coefficients: what :meth:`cost_estimate` takes.

        Raises
        ------
        UnresolvedStart
            If the top 10 % of the modes (degrees) hold ``tail_threshold`` or more of the spectral energy.
        ValueError
            As ``initial_coefficients``.
        """
        coefficients = self.initial_coefficients(rho0, name=name)
        tail = self.spectral_tail(coefficients)
        if tail >= self.tail_threshold:
            terms, setting = "modes" if self.geometry == CIRCLE else "degrees", self._resolution_setting
            raise UnresolvedStart(f"the top 10% of {terms} hold {tail:.2g} of its spectral energy "
                                  f"(> {self.tail_threshold:g})", setting, getattr(self, setting))
        return coefficients

    def cost_estimate(self, coefficients: np.ndarray, span: float) -> CostEstimate:
        """The stable step's count over ``span`` and one step's time (``UpFrontChecks.cost_estimate``).

        {spectral_state_parameters}
        span : float
            The run's duration.

        Returns
        -------
        CostEstimate
            Steps of the pair's stable step at the larger of the initial speed and the model's bound.
        """
        started = time.perf_counter()
        _, speed = self._transport_and_speed(coefficients)
        per_step = self.tableau.stages * (time.perf_counter() - started)  # a right-hand side per stage
        steps = span / self._stable_step(max(speed, attention_speed_bound(self.model)))
        setting = self._resolution_setting
        return CostEstimate(steps, per_step, setting, getattr(self, setting))

    @property
    def _resolution_setting(self) -> str:
        """The setting that sets the series' resolution: ``cells`` on the circle, ``lmax`` on spheres."""
        return "cells" if self.geometry == CIRCLE else "lmax"

    def energy(self, coefficients: np.ndarray) -> float:
        r"""The interaction energy :math:`E = \frac12\int\rho\,(\Psi*\rho)`, plus :math:`\frac12\int w\rho` of a potential.

        {spectral_state_parameters}

        Returns
        -------
        float
            :math:`E`, times :math:`e^{-\beta}` where it would overflow (``energy_scaled``).
        """
        raise NotImplementedError

    def lyapunov(self, coefficients: np.ndarray) -> float:
        r"""The functional the dynamics decreases, where one is known.

        {spectral_state_parameters}

        Returns
        -------
        float
            The free energy :math:`D\int\rho\log\rho - \frac12\int\rho\,(\Phi*\rho)` (gradient
            flows: USA, zonal aggregation, Kuramoto, a general interaction that is one),
            ``-cE`` (SA without diffusion); NaN where none is known or, with diffusion, where
            the density is not positive.
        """
        raise NotImplementedError

    def spectral_tail(self, coefficients: np.ndarray) -> float:
        r"""The share of the spectral energy of :math:`\rho - \bar\rho` in the top 10 % of modes (or degrees).

        {spectral_state_parameters}

        Returns
        -------
        float
            In ``[0, 1]``; the resolution diagnostic (compared with ``tail_threshold``). Of a
            layered state, the largest over its layers.
        """
        raise NotImplementedError

    @staticmethod
    def _series_of(coefficients: np.ndarray) -> np.ndarray:
        """Each density's series, one per row: the state's one, or a layered state's layers."""
        return coefficients.reshape(-1, coefficients.shape[-1])


def check_outputs(outputs: str, tableau: ExplicitTableau, diffusion: float) -> None:
    """Refuse an ``outputs`` setting that is unknown, or ``"interpolated"`` where the steps have no dense output.

    Raises
    ------
    ValueError
        Naming the setting and why: an unknown value, a pair without a continuous extension,
        or diffusion (its integrating-factor form has no dense output).
    """
    if outputs not in ("stepped", "interpolated"):
        raise ValueError(f"outputs must be 'stepped' or 'interpolated', got {outputs!r}")
    if outputs == "stepped":
        return
    if tableau.continuous_extension is None:
        raise ValueError(f"outputs='interpolated' needs a pair with a continuous extension, and tableau "
                         f"{tableau.name!r} has none: use 'dormand_prince' or 'dormand_prince_853', "
                         "or outputs='stepped'")
    if diffusion > 0:
        raise ValueError(f"outputs='interpolated' has no dense output with diffusion={diffusion} (its "
                         "integrating-factor form would need growing exponentials): use outputs='stepped'")
