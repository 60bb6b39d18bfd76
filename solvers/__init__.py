"""solvers: discretizations of the mean-field PDE (finite volume on the circle, spectral on S^2)."""

from .circle import CircleFV
from .resolution import UnderResolvedWarning
from .sphere import SphereSpectral

__all__ = ["CircleFV", "SphereSpectral", "UnderResolvedWarning"]
