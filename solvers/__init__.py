"""solvers: discretizations of the mean-field PDE (finite volumes and Fourier on the circle,
spherical harmonics on S^2, Gegenbauer polynomials for zonal densities on S^{d-1} of any d; the measure in mass coordinates on the circle and weighted particles
on S^2 through cluster formation), of the layered equation of causal attention on both, of the
position-indexed equation of rotary attention on the circle, and of
pure attention on the line (d = 1, rescaled tokens).

:func:`solve` is the front door: it picks the solver from the geometry, the discretisation to
start with and the one to hand over to (the table :data:`~solvers.methods.METHODS`).
"""

__all__ = ["solve", "solver_for", "Chain", "ChainState", "CircleFV", "CircleSpectral", "CircleAuto", "CircleLagrangian", "PointMasses",
           "CircleFVLagrangian", "SphereSpectral", "SphereWeightedParticles", "SphereSpectralParticles",
           "ZonalSphereSpectral", "ZonalRings", "ZonalSpectralRings", "CausalCircleFV", "CausalCircleSpectral", "CausalSphereSpectral", "PositionalQuantiles",
           "FrequencyCircleFV", "LorentzianKuramoto", "GraphonCircleFV", "PairCorrelation", "LineFV",
           "LineLagrangian",
           "CommonNoiseCircle", "CommonNoiseSphere", "UnderResolvedWarning", "UnresolvedStart",
           "check_pde_consistency"]


def __getattr__(name: str):
    # The public names load on first use: reading the table of solvers (solvers.methods, as the
    # configuration checks and sweep workers do) does not import xarray and shtns.
    if name not in __all__:
        raise AttributeError(f"module 'solvers' has no attribute {name!r}")
    from .causal import CausalCircleFV, CausalCircleSpectral, CausalSphereSpectral  # noqa: F401 (locals())
    from .chain import Chain, ChainState  # noqa: F401
    from .circle.auto import CircleAuto  # noqa: F401
    from .circle.bbgky import PairCorrelation  # noqa: F401
    from .circle.collapse import CircleFVLagrangian  # noqa: F401
    from .circle.finite_volumes import CircleFV  # noqa: F401
    from .circle.frequencies import FrequencyCircleFV  # noqa: F401
    from .circle.graphon import GraphonCircleFV  # noqa: F401
    from .circle.lagrangian import CircleLagrangian, PointMasses  # noqa: F401
    from .circle.lorentzian import LorentzianKuramoto  # noqa: F401
    from .circle.positional import PositionalQuantiles  # noqa: F401
    from .circle.spectral import CircleSpectral  # noqa: F401
    from .consistency import check_pde_consistency  # noqa: F401
    from .line.finite_volumes import LineFV  # noqa: F401
    from .line.lagrangian import LineLagrangian  # noqa: F401
    from .methods import solve, solver_for  # noqa: F401
    from .noise.circle import CommonNoiseCircle  # noqa: F401
    from .noise.sphere import CommonNoiseSphere  # noqa: F401
    from .resolution import UnderResolvedWarning, UnresolvedStart  # noqa: F401
    from .sphere.particles import SphereSpectralParticles, SphereWeightedParticles  # noqa: F401
    from .sphere.spectral import SphereSpectral  # noqa: F401
    from .sphere.rings import ZonalRings, ZonalSpectralRings  # noqa: F401
    from .sphere.zonal import ZonalSphereSpectral  # noqa: F401

    return locals()[name]


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
