"""Exceptions that carry what was computed before a run stopped."""

from __future__ import annotations


class StepSizeCollapse(RuntimeError):
    """The time step fell below what the integrator can take; the run cannot go on.

    Parameters
    ----------
    message : str
        Why, and what to change.
    time : float
        The time reached.
    partial : xarray.Dataset, optional
        The outputs completed before the collapse.

    Attributes
    ----------
    time : float
        The time reached.
    partial : xarray.Dataset or None
        Every output time completed before the collapse, so that nothing is lost.
    """

    def __init__(self, message: str, *, time: float, partial=None):
        super().__init__(message)
        self.time = time
        self.partial = partial


class NonFiniteState(StepSizeCollapse):
    """The state became NaN or infinite (an overflow): nothing past the last finite output can be trusted.

    Raised by the integration driver at the first output whose state is not finite, or when
    every step from a state overflows in its stages.

    Parameters
    ----------
    message : str
        When, and the likely cause (the parameter to change).
    time : float
        The last time whose state was finite.
    partial : xarray.Dataset, optional
        The outputs up to it (filled in by the run that collected them).
    """


class ReductionRefused(StepSizeCollapse):
    """A cluster reduction's error estimate passed its tolerance (``meanfield.reduction``): the
    reduced run could no longer be trusted, so it ends with its outputs so far (``partial``).

    Parameters
    ----------
    message : str
        The estimate, the tolerance, and what to change (a smaller ``width``).
    time : float
        The time of the step whose reduction was refused.
    partial : xarray.Dataset, optional
        The outputs before it.
    """


class ModelFailure(ValueError):
    """A model cannot evaluate its velocity at the state it is given (an inner iteration that does not
    converge there): a run that meets it ends with the outputs so far (:class:`StepSizeCollapse`)."""
