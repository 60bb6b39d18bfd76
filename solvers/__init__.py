"""solvers: discretizations of the mean-field PDE (finite volume on the circle, spectral on S^2),
and of the layered equation of causal attention on both."""

from .causal import CausalCircleFV, CausalSphereSpectral
from .circle import CircleFV
from .resolution import UnderResolvedWarning
from .sphere import SphereSpectral

__all__ = ["CircleFV", "SphereSpectral", "CausalCircleFV", "CausalSphereSpectral", "UnderResolvedWarning"]
