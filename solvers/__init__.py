"""solvers: discretizations of the mean-field PDE (finite volumes and Fourier on the circle,
spherical harmonics on S^2; the measure in mass coordinates on the circle and weighted particles
on S^2 through cluster formation), of the layered equation of causal attention on both, and of
pure attention on the line (d = 1, rescaled tokens).

:func:`solve` is the front door: it picks the solver from the geometry, the discretisation to
start with and the one to hand over to (the table :data:`~solvers.methods.METHODS`).
"""

#: Each public name and the module that defines it: loaded on first use, so that reading the
#: table of solvers (``solvers.methods``) does not import xarray and shtns.
_HOMES = {
    "solve": "methods", "solver_for": "methods",
    "CausalCircleFV": "causal", "CausalCircleSpectral": "causal", "CausalSphereSpectral": "causal",
    "CircleFV": "circle", "CircleAuto": "circle_auto", "CommonNoiseCircle": "circle_common_noise",
    "CircleFVLagrangian": "circle_collapse", "CircleLagrangian": "circle_lagrangian",
    "PointMasses": "circle_lagrangian", "CircleSpectral": "circle_spectral",
    "check_pde_consistency": "consistency", "LineFV": "line", "LineLagrangian": "line_lagrangian",
    "UnderResolvedWarning": "resolution", "SphereSpectral": "sphere", "CommonNoiseSphere": "sphere_common_noise",
    "SphereSpectralParticles": "sphere_particles", "SphereWeightedParticles": "sphere_particles",
}

__all__ = list(_HOMES)


def __getattr__(name: str):
    if name not in _HOMES:
        raise AttributeError(f"module 'solvers' has no attribute {name!r}")
    from . import (causal, circle, circle_auto, circle_collapse, circle_common_noise,  # noqa: F401 (globals())
                   circle_lagrangian, circle_spectral, consistency, line, line_lagrangian, methods, resolution,
                   sphere, sphere_common_noise, sphere_particles)

    return getattr(globals()[_HOMES[name]], name)


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
