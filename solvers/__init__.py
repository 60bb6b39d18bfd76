"""solvers: discretizations of the mean-field PDE (finite volumes and Fourier on the circle,
spherical harmonics on S^2; the measure in mass coordinates on the circle and weighted particles on S^2 through cluster formation), of the layered equation of causal attention on both, and of pure
attention on the line (d = 1, rescaled tokens)."""

from .causal import CausalCircleFV, CausalCircleSpectral, CausalSphereSpectral
from .circle import CircleFV
from .circle_auto import CircleAuto
from .circle_common_noise import CommonNoiseCircle
from .circle_collapse import CircleFVLagrangian
from .circle_lagrangian import CircleLagrangian, PointMasses
from .circle_spectral import CircleSpectral
from .consistency import check_pde_consistency
from .line import LineFV
from .line_lagrangian import LineLagrangian
from .resolution import UnderResolvedWarning
from .sphere import SphereSpectral
from .sphere_common_noise import CommonNoiseSphere
from .sphere_particles import SphereSpectralParticles, SphereWeightedParticles

__all__ = ["CircleFV", "CircleSpectral", "CircleAuto", "CommonNoiseCircle", "CommonNoiseSphere", "CircleLagrangian", "CircleFVLagrangian", "PointMasses", "SphereSpectral", "SphereSpectralParticles", "SphereWeightedParticles", "CausalCircleFV", "CausalCircleSpectral", "CausalSphereSpectral", "LineFV", "LineLagrangian", "UnderResolvedWarning", "check_pde_consistency"]
