"""Stationary states on S^2 of models without rotation symmetry (solvers.stationary.sphere_general).

Checked against the time-dependent solver, an independent code path through the same
equation: a state Newton-Krylov returns does not move when SphereSpectral runs from it, and
the leading eigenvalue ARPACK reports is the rate at which a small perturbation along its
eigenvector grows or decays in that run (a stable gradient-flow state, an unstable state of a
model that is not a gradient flow).
"""

import numpy as np
import pytest

import meanfield as mf
from solvers import SphereSpectral
from solvers.stationary.continuation import stationary_state
from solvers.stationary.sphere_general import SphereStationaryGeneral

_A = np.random.default_rng(5).normal(size=(3, 3))
_B = np.random.default_rng(6).normal(size=(3, 3))
QUERY = np.eye(3) + 0.1 * (_A + _A.T)
MODELS = {
    # V = Q^T K with Q^T K symmetric: a gradient flow, whose state here is stable
    "gradient": mf.SelfAttention(3.0, query=QUERY, value=QUERY, diffusion=0.3),
    # a value matrix of its own: no gradient structure, and the state here is unstable
    "general": mf.SelfAttention(3.0, query=QUERY, value=np.eye(3) + 0.1 * (_B + _B.T), diffusion=0.3),
}
LMAX = 15


@pytest.fixture(scope="module", params=list(MODELS))
def state(request):
    model = MODELS[request.param]
    problem = SphereStationaryGeneral(model, lmax=LMAX)
    point = stationary_state(problem, np.zeros(problem.size))  # from the uniform density
    return request.param, model, problem, point


def test_newton_finds_a_non_axisymmetric_state_that_the_dynamics_keeps(state):
    name, model, problem, point = state
    assert problem.resolved(point.unknowns) == (True, "")
    rho = problem.density(point.unknowns)
    assert rho.max() - rho.min() > 0.05 * rho.mean()  # not uniform ...
    assert np.ptp(rho, axis=1).max() > 0.05 * rho.mean()  # ... and not axisymmetric about the pole
    solver = SphereSpectral(model, lmax=LMAX, rtol=1e-10)
    run = solver.solve(rho, [0.0, 5.0], progress=False)
    # Newton's residual is 1e-10 of the uniform density; the run's steps err by rtol = 1e-10 each, tens of them
    assert np.abs(run.rho.values[-1] - rho).max() < 1e-9 * rho.max(), name


def test_the_leading_eigenvalue_is_the_rate_of_the_dynamics_along_its_eigenvector(state):
    name, model, problem, point = state
    values, vectors = problem.leading_eigenvalues(point.unknowns, point.value, count=2)
    rate, direction = values[0], vectors[:, 0]
    assert abs(rate.imag) < 1e-9 and (rate.real < 0) == (name == "gradient")
    direction = direction.real / np.linalg.norm(direction.real)
    epsilon = 1e-5
    start = problem.density(point.unknowns + epsilon * direction)
    horizon = 5.0
    run = SphereSpectral(model, lmax=LMAX, rtol=1e-11).solve(start, [0.0, horizon], progress=False)
    moved = problem.unknowns(problem.grid.analyse(run.rho.values[-1])) - point.unknowns
    measured = np.log(np.dot(moved, direction) / epsilon) / horizon
    # the perturbation's own square, of relative size epsilon, bounds the agreement
    assert measured == pytest.approx(rate.real, rel=10 * epsilon), (name, measured, rate)


def test_zonal_models_and_no_diffusion_are_refused():
    with pytest.raises(ValueError, match="SphereStationary"):
        SphereStationaryGeneral(mf.SelfAttention(3.0, diffusion=0.3))
    problem = SphereStationaryGeneral(MODELS["general"], lmax=LMAX, parameter="diffusion")
    with pytest.raises(ValueError, match="diffusion=0"):
        stationary_state(problem, np.zeros(problem.size), 0.0)
