"""The model-to-solver seam: one reference per model (``velocity_field``), every discretisation through it.

Checked against code that shares nothing with the library's: direct sums of the velocity of a
measure, an independent pseudo-spectral solver of a user's kernel written here, the particles
at ``n^{-1/2}``, and the fast paths' own kernels (Funk-Hecke, FFT, head coefficients) by
``check_pde_consistency``, which must catch a perturbation of 1e-9.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

import meanfield as mf
from meanfield.interaction import pair_sums
from solvers import (CausalCircleFV, CausalCircleSpectral, CausalSphereSpectral, CircleFV, CircleSpectral,
                     SphereSpectral, check_pde_consistency)
from solvers.circle.general import GeneralCircleOperators
from solvers.circle.operators import CircleOperators
from solvers.sphere.general import GeneralSphereInteraction
from solvers.sphere.grid import BandLimited
from validation import mean_field_convergence
from validation.convergence import StudySettings

RNG = np.random.default_rng(11)
QUERY_2, VALUE_2 = np.eye(2) + 0.3 * RNG.normal(size=(2, 2)), RNG.normal(size=(2, 2))
QUERY_3, KEY_3 = np.eye(3) + 0.3 * RNG.normal(size=(2, 3, 3)), np.eye(3) + 0.2 * RNG.normal(size=(2, 3, 3))
VALUE_3 = RNG.normal(size=(2, 3, 3))

#: h(u) = e^{beta u} + 0.3 u^2, the user's kernel: a(x) = int h(<x, y>) y drho(y).
USER_BETA = 1.5


def user_kernel(u):
    kernel = np.exp(USER_BETA * u)
    kernel += 0.3 * (u * u)  # in place: a study evaluates it on (seeds, n, n) arrays
    return kernel


class UserKernel:
    """A model written outside the library: the protocol's members, no library base class."""

    diffusion = 0.0
    on_sphere = True
    heads = 1
    dimension = None
    is_zonal = False
    causal = False
    external = None
    time_rescaled = False
    logit_bound = 1.0
    has_energy = False
    velocity_is_linear = True

    def velocity_field(self, x, nodes, weights):
        x = x / np.linalg.norm(x, axis=-1, keepdims=True)
        y = nodes / np.linalg.norm(nodes, axis=-1, keepdims=True)
        a = user_kernel(x @ np.swapaxes(y, -1, -2)) @ (weights[..., :, None] * y)
        return a - np.sum(a * x, axis=-1, keepdims=True) * x

    def velocity_unchecked(self, x):
        return self.velocity_field(x, x, np.full(x.shape[:-1], 1.0 / x.shape[-2]))

    velocity = attention_output = velocity_unchecked

    def to_dict(self):
        return {"model": "UserKernel"}


# ---------------------------------------------------------------- the reference itself
def direct_field(x, nodes, weights, beta, normalized, heads, external=None):
    """The velocity of sum_j w_j delta_{y_j} at each x, one point and one head at a time."""
    out = np.zeros_like(x)
    for i, point in enumerate(x):
        a = np.zeros(x.shape[-1]) if external is None else external(point)
        for q, k, v in heads:
            logits = beta * np.array([(q @ point) @ (k @ y) for y in nodes])
            kernel = weights * np.exp(logits - (logits.max() if normalized else 0.0))
            drive = kernel @ nodes / (kernel.sum() if normalized else 1.0)
            a = a + v @ drive
        out[i] = a - (a @ point) * point
    return out


FIELD_CASES = {
    "SA": (dict(beta=3.0), 3, True, None),
    "USA": (dict(beta=3.0, normalized=False), 3, False, None),
    "SA heads": (dict(beta=2.0, query=QUERY_3, key=KEY_3, value=VALUE_3), 3, True, (QUERY_3, KEY_3, VALUE_3)),
    "USA heads": (dict(beta=1.0, normalized=False, query=QUERY_3, key=KEY_3, value=VALUE_3), 3, False,
                  (QUERY_3, KEY_3, VALUE_3)),
    "SA circle repulsive": (dict(beta=4.0, value=-1.0), 2, True, None),
}


@pytest.mark.parametrize("case", FIELD_CASES, ids=list(FIELD_CASES))
def test_velocity_field_is_the_velocity_of_the_measure(case):
    kwargs, d, normalized, matrices = FIELD_CASES[case]
    model = mf.SelfAttention(**kwargs)
    rng = np.random.default_rng(3)
    nodes, points = mf.sample_uniform(40, d, rng=rng), mf.sample_uniform(9, d, rng=rng)
    weights = rng.random(40)
    if matrices is None:
        heads = [(np.eye(d), np.eye(d), float(kwargs.get("value", 1.0)) * np.eye(d))]
    else:
        heads = list(zip(*matrices))
    expected = direct_field(points, nodes, weights, kwargs["beta"], normalized, heads)
    found = model.velocity_field(points, nodes, weights)
    np.testing.assert_allclose(found, expected, rtol=0, atol=1e-13 * np.abs(expected).max())


def test_velocity_field_of_a_zonal_aggregation_and_an_external_field():
    rng = np.random.default_rng(4)
    nodes, points, weights = mf.sample_uniform(30, 3, rng=rng), mf.sample_uniform(7, 3, rng=rng), rng.random(30)
    aggregation = mf.ZonalAggregation(lambda s: np.sin(2 * s), lambda s: 2 * np.cos(2 * s))
    gram = points @ nodes.T
    a = (weights * 2 * np.cos(2 * gram)) @ nodes
    expected = a - np.sum(a * points, axis=-1, keepdims=True) * points
    np.testing.assert_allclose(aggregation.velocity_field(points, nodes, weights), expected, atol=1e-14)
    field = mf.UserField(lambda x: np.stack([x[..., 1], -x[..., 0], 0 * x[..., 2]], axis=-1))
    model = mf.SelfAttention(2.0, external=field)
    heads = [(np.eye(3), np.eye(3), np.eye(3))]
    expected = direct_field(points, nodes, weights, 2.0, True, heads, external=lambda p: np.array([p[1], -p[0], 0.0]))
    np.testing.assert_allclose(model.velocity_field(points, nodes, weights), expected, atol=1e-14)


def test_the_particle_velocity_is_the_field_of_the_empirical_measure():
    x = mf.sample_uniform(25, 3, rng=5)
    for model in (mf.SelfAttention(4.0), mf.SelfAttention(4.0, normalized=False),
                  mf.SelfAttention(2.0, query=QUERY_3, key=KEY_3, value=VALUE_3),
                  mf.ZonalAggregation(lambda s: s**3, lambda s: 3 * s**2)):
        np.testing.assert_allclose(model.velocity(x), model.velocity_field(x, x.copy(), np.full(25, 1 / 25)),
                                   rtol=0, atol=1e-14)


def test_velocity_field_far_from_every_weighted_node_and_with_signed_weights():
    """SA at beta = 2000 seen from a point no weighted node is near (the plain shift would give 0/0),
    and a signed measure (a spectral density's undershoot) as linearity says."""
    model = mf.SelfAttention(2000.0)
    nodes = np.array([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]])
    found = model.velocity_field(np.array([[0.0, 0.0, 1.0]]), nodes, np.array([0.5, 0.5, 0.0]))
    np.testing.assert_allclose(found, [[0.5, 0.5, 0.0]], atol=1e-15)
    usa = mf.SelfAttention(1.0, normalized=False)
    x, y = mf.sample_uniform(5, 3, rng=1), mf.sample_uniform(12, 3, rng=2)
    signed = np.linspace(-0.1, 1.0, 12)
    positive, negative = np.maximum(signed, 0), np.maximum(-signed, 0)
    np.testing.assert_allclose(usa.velocity_field(x, y, signed),
                               usa.velocity_field(x, y, positive) - usa.velocity_field(x, y, negative + 1e-300),
                               atol=1e-14)


@pytest.mark.parametrize("arguments, message", [
    ((np.ones((3, 3)), np.full((4, 3), np.nan), np.ones(4)), "nodes contains NaN"),
    ((np.ones((3, 3)), np.ones((4, 2)), np.ones(4)), "same d"),
    ((np.ones((3, 3)), np.ones((4, 3)), np.ones(5)), "weights must have the shape"),
    ((np.ones((3, 3)), np.ones((4, 3)), -np.ones(4)), "positive total"),
    ((np.zeros((3, 3)), np.ones((4, 3)), np.ones(4)), "nonzero points"),
], ids=["nan", "dimension", "weights shape", "negative total", "zero point"])
def test_velocity_field_refuses_bad_measures(arguments, message):
    with pytest.raises(ValueError, match=message):
        mf.SelfAttention(1.0).velocity_field(*arguments)


def test_pair_sums_with_more_nodes_than_points_in_small_blocks():
    rng = np.random.default_rng(0)
    queries, keys, values = rng.normal(size=(2, 5, 3)), rng.normal(size=(2, 17, 3)), rng.normal(size=(2, 17, 2))

    def weight(block):
        np.exp(block, out=block)

    sums, _ = pair_sums(queries, keys, values, weight, max_block_elements=20)
    expected = np.exp(queries @ np.swapaxes(keys, -1, -2)) @ values
    np.testing.assert_allclose(sums, expected, rtol=1e-14)


# ---------------------------------------------------------------- fast paths against the reference
CONSISTENCY_MODELS = {
    "SA": mf.SelfAttention(4.0),
    "USA": mf.SelfAttention(4.0, normalized=False),
    "Kuramoto (beta = 0)": mf.SelfAttention(0.0),
    "repulsive SA": mf.SelfAttention(3.0, value=-1.0),
    "time-rescaled USA": mf.SelfAttention(4.0, normalized=False, time_rescaled=True),
    "SA with diffusion": mf.SelfAttention(2.0, diffusion=0.1),
    "zonal aggregation": mf.ZonalAggregation(lambda s: np.exp(2 * s) / 2 + 0.1 * s**3, lambda s: np.exp(2 * s) + 0.3 * s**2),
    "SA with a perceptron": mf.SelfAttention(2.0, external=mf.Perceptron([1.0, -0.5], [[0.6, 0.8, 0.0], [0.0, 0.0, 1.0]])),
    "SA matrices (circle)": mf.SelfAttention(2.0, query=QUERY_2, value=VALUE_2),
    "USA matrices (circle)": mf.SelfAttention(1.5, normalized=False, query=QUERY_2, value=VALUE_2),
    "SA two heads (sphere)": mf.SelfAttention(2.0, query=QUERY_3, key=KEY_3, value=VALUE_3),
    "USA two heads (sphere)": mf.SelfAttention(1.0, normalized=False, query=QUERY_3, key=KEY_3, value=VALUE_3),
}

def expected_pairs(model):
    """The pairs a model must be compared on: its dimension's discretisations x the fast paths serving it."""
    circle = {"CircleFV", "CircleSpectral"}
    names = circle if model.dimension == 2 else {"SphereSpectral"} if model.dimension == 3 else circle | {"SphereSpectral"}
    if isinstance(model, mf.ZonalAggregation):
        return {(name, "zonal") for name in names}
    paths = ("zonal", "general") if model.is_zonal else ("general",)
    return {(name, path) for name in names for path in paths}


@pytest.mark.parametrize("name", CONSISTENCY_MODELS, ids=list(CONSISTENCY_MODELS))
def test_every_fast_path_matches_the_reference_path(name):
    model = CONSISTENCY_MODELS[name]
    records = check_pde_consistency(model)
    assert {(r.discretisation, r.path) for r in records} == expected_pairs(model)
    assert all(r.velocity <= 1e-11 for r in records)


def _scaled(method, factor=1.0 + 1e-9):
    def perturbed(*args, **kwargs):
        result = method(*args, **kwargs)
        return tuple(part * factor for part in result) if isinstance(result, tuple) else result * factor
    return perturbed


PERTURBATIONS = {
    "circle FV, zonal": (CircleOperators, "potential_jumps", mf.SelfAttention(4.0), "CircleFV's zonal path"),
    "circle FV, general": (GeneralCircleOperators, "face_velocity", mf.SelfAttention(2.0, query=QUERY_2),
                           "CircleFV's general path"),
    "circle Fourier, zonal SA": (CircleSpectral, "_log_velocity", mf.SelfAttention(4.0), "CircleSpectral's zonal path"),
    "circle Fourier, general": (GeneralCircleOperators, "point_velocity", mf.SelfAttention(2.0, query=QUERY_2),
                                "CircleSpectral's general path"),
    "sphere, zonal": (BandLimited, "gradient", mf.SelfAttention(3.0, normalized=False), "SphereSpectral's zonal path"),
    "sphere, general": (GeneralSphereInteraction, "velocity", mf.SelfAttention(2.0, query=QUERY_3, key=KEY_3),
                        "SphereSpectral's general path"),
}


@pytest.mark.parametrize("case", PERTURBATIONS, ids=list(PERTURBATIONS))
def test_the_consistency_check_catches_a_fast_path_off_by_1e_9(case, monkeypatch):
    owner, method, model, named = PERTURBATIONS[case]
    check_pde_consistency(model)  # passes as it is
    monkeypatch.setattr(owner, method, _scaled(getattr(owner, method)))
    with pytest.raises(AssertionError, match=named):
        check_pde_consistency(model)


# ---------------------------------------------------------------- a model changed or written outside the library
class DoubledAttention(mf.SelfAttention):
    """SelfAttention with its reference doubled: no fast path serves a subclass, so every solver must follow."""

    def _attention_at(self, points, nodes, masses):
        return 2.0 * super()._attention_at(points, nodes, masses)


def circle_density(theta):
    return np.exp(np.cos(theta - 0.3)) + 0.3 * np.cos(2 * theta)


def sphere_density(points):
    return np.exp(points[..., 2] + 0.5 * points[..., 0])


DISCRETISED_VELOCITY = {
    "CircleFV": lambda model: (lambda s: s.operators.face_velocity(s.initial_density(circle_density) - s.operators.uniform))(
        CircleFV(model, cells=64, error_level=None)),
    "CircleSpectral": lambda model: (lambda s: s.velocity(s.initial_coefficients(circle_density)))(
        CircleSpectral(model, cells=64)),
    "SphereSpectral": lambda model: (lambda s: np.stack(s.velocity(s.initial_coefficients(sphere_density))))(
        SphereSpectral(model, lmax=15)),
}


@pytest.mark.parametrize("discretisation", DISCRETISED_VELOCITY, ids=list(DISCRETISED_VELOCITY))
def test_doubling_the_reference_doubles_every_discretisation(discretisation):
    velocity = DISCRETISED_VELOCITY[discretisation]
    single, double = velocity(mf.SelfAttention(3.0)), velocity(DoubledAttention(3.0))
    np.testing.assert_allclose(double, 2.0 * single, rtol=0, atol=1e-12 * np.abs(single).max())
    x = mf.sample_uniform(20, 3, rng=0)
    np.testing.assert_allclose(DoubledAttention(3.0).velocity(x), 2.0 * mf.SelfAttention(3.0).velocity(x), atol=1e-15)


def _layered_velocity(solver) -> np.ndarray:
    """Every layer's velocity of a causal solver, on one layered state (the layers differ)."""
    if isinstance(solver, CausalCircleFV):
        rho = solver.initial_density(lambda s, t: 1 + 0.3 * np.cos(2 * t + 3 * s) + 0.1 * np.sin(3 * t))
        return solver.operators.face_velocity(rho - solver.operators.uniform)
    if isinstance(solver, CausalCircleSpectral):
        return solver.velocity(solver.initial_coefficients(lambda s, t: 1 + 0.3 * np.cos(2 * t + 3 * s)))
    coefficients = solver.initial_coefficients(lambda s, x: 1 + 0.3 * s * x[..., 2] + 0.1 * x[..., 0])
    return np.stack(solver._transport_and_speed(coefficients)[0])


@pytest.mark.parametrize("solver", [
    lambda model, path: CausalCircleFV(model, cells=64, layers=5, interaction=path, error_level=None),
    lambda model, path: CausalCircleSpectral(model, cells=64, layers=5, interaction=path),
    lambda model, path: CausalSphereSpectral(model, lmax=15, layers=3, interaction=path),
], ids=["CausalCircleFV", "CausalCircleSpectral", "CausalSphereSpectral"])
def test_the_causal_layers_move_by_every_path_alike(solver, monkeypatch):
    """Each layer's velocity is the mixed model's at its mixed density, by the convolution, the general
    heads or the model's own field: they agree to round-off (the reference path takes one layer at a time),
    and the reference path is the mixed model's field (doubling it doubles the layers' velocity)."""
    model = mf.CausalAttention(3.0, True, alibi=1.0)
    zonal = _layered_velocity(solver(model, "zonal"))
    assert np.abs(np.diff(zonal, axis=0)).max() > 1e-3 * np.abs(zonal).max()  # the layers do differ
    for path in ("general", "reference"):
        np.testing.assert_allclose(_layered_velocity(solver(model, path)), zonal, rtol=0,
                                   atol=1e-12 * np.abs(zonal).max())
    field = mf.SelfAttention.velocity_field
    monkeypatch.setattr(mf.SelfAttention, "velocity_field", lambda self, *args: 2.0 * field(self, *args))
    np.testing.assert_allclose(_layered_velocity(solver(model, "reference")), 2.0 * zonal, rtol=0,
                               atol=1e-12 * np.abs(zonal).max())


def test_a_model_without_a_field_is_refused_in_one_line():
    class Incomplete(UserKernel):
        velocity_field = None

    with pytest.raises(ValueError, match="CircleFV runs a model through its velocity_field.*Incomplete has none"):
        CircleFV(Incomplete(), cells=64)
    with pytest.raises(ValueError, match="causal attention: use CausalCircleSpectral"):
        CircleSpectral(mf.CausalAttention(1.0, True), cells=64)


def user_rho0(theta):
    return (1 + 0.4 * np.cos(2 * theta) + 0.2 * np.sin(3 * theta)) / (2 * np.pi)


def independent_circle_solution(stop: float, points: int = 128, steps: int = 1500) -> np.ndarray:
    r"""The user kernel's equation by a pseudo-spectral method written here: trapezoid rule for
    :math:`v(\theta) = \int h(\cos(\varphi-\theta))\sin(\varphi-\theta)\rho(\varphi)\,d\varphi`, FFT
    derivative of the flux, classical RK4. Returns the Fourier coefficients of rho at ``stop``."""
    theta = 2 * np.pi * np.arange(points) / points
    wavenumber = np.fft.rfftfreq(points, 1.0 / points)
    difference = theta[None, :] - theta[:, None]
    transfer = user_kernel(np.cos(difference)) * np.sin(difference) * (2 * np.pi / points)

    def rhs(rho):
        return -np.fft.irfft(1j * wavenumber * np.fft.rfft(rho * (transfer @ rho)), points)

    rho, dt = user_rho0(theta), stop / steps
    for _ in range(steps):
        k1 = rhs(rho)
        k2 = rhs(rho + 0.5 * dt * k1)
        k3 = rhs(rho + 0.5 * dt * k2)
        k4 = rhs(rho + dt * k3)
        rho = rho + dt / 6 * (k1 + 2 * k2 + 2 * k3 + k4)
    return np.fft.rfft(rho) / points


def exact_cell_averages(coefficients: np.ndarray, cells: int) -> np.ndarray:
    """Averages over ``cells`` equal cells of the series with these (rfft-normalised) coefficients."""
    width = 2 * np.pi / cells
    left = width * np.arange(cells)
    averages = np.full(cells, coefficients[0].real)
    for k in range(1, coefficients.size - 1):
        averages += 2 * np.real(coefficients[k] * (np.exp(1j * k * (left + width)) - np.exp(1j * k * left))
                                / (1j * k * width))
    return averages


STOP = 0.4


def test_a_users_kernel_on_the_circle_matches_an_independent_solver():
    """Fourier within its spatial error estimate plus the steps' (at most ``rtol`` of the deviation's
    L2 norm each); finite volumes within their own error estimate, at second order."""
    reference = independent_circle_solution(STOP)
    rtol = 1e-10
    spectral = CircleSpectral(UserKernel(), cells=64, rtol=rtol).solve(user_rho0, [0.0, STOP], progress=False)
    steps = json.loads(spectral.attrs["settings"])["steps"]
    deviation_norm = np.sqrt(2 * np.pi) * np.abs(spectral.rho.values - 1 / (2 * np.pi)).max()
    error = np.abs(spectral.rho.values[-1] - exact_cell_averages(reference, 64)).max()
    assert error <= spectral.error_estimate.values[-1] + steps * rtol * deviation_norm, error
    errors = []
    for cells in (128, 256):
        finite = CircleFV(UserKernel(), cells=cells).solve(user_rho0, [0.0, STOP], progress=False)
        errors.append(np.abs(finite.rho.values[-1] - exact_cell_averages(reference, cells)).max())
        assert errors[-1] <= finite.error_estimate.values[-1], (cells, errors[-1])
    assert np.log2(errors[0] / errors[1]) >= 2 - 0.2, errors


def test_a_users_kernel_on_the_sphere_matches_the_funk_hecke_path():
    """The reference path on the user's class against the zonal fast path of the same kernel as a ZonalAggregation.

    Both discretise the same equation at the same degree; the kernels meet only through the model (a
    quadrature of h against the Funk-Hecke spectrum of its primitive). Their right-hand sides agree to
    round-off (check_pde_consistency's 1e-11 of the speed), so they take the same steps and the
    densities agree to that round-off carried through the run's dozen steps.
    """
    primitive = mf.ZonalAggregation(lambda s: np.exp(USER_BETA * s) / USER_BETA + 0.1 * s**3, user_kernel)
    times = [0.0, 0.5]
    user = SphereSpectral(UserKernel(), lmax=15, rtol=1e-8).solve(sphere_density, times, progress=False)
    zonal = SphereSpectral(primitive, lmax=15, rtol=1e-8).solve(sphere_density, times, progress=False)
    assert np.abs(user.rho.values[-1] - user.rho.values[0]).max() > 1e-2  # the density did move
    np.testing.assert_allclose(user.rho.values[-1], zonal.rho.values[-1], rtol=0,
                               atol=1e-10 * zonal.rho.values[-1].max())


def test_a_users_kernel_as_particles_converges_to_its_pde_on_the_circle(assert_half_rate):
    """Particles of the user's class against CircleAuto (Fourier, then finite volumes) on the reference path.

    RK4 at step 0.05 (error ~1e-6, far below the distances). 16 seeds per size, as the Sinkhorn study: the
    user's field is O(n^2) numpy over (seeds, n, n) arrays, and the sizes' range (to 1024) sets the interval.
    """
    study = mean_field_convergence(UserKernel(), lambda theta: 1 + 0.4 * np.cos(2 * theta), geometry="circle",
                                   sizes=[64, 128, 256, 512, 1024], seeds=16, times=[0.0, 0.3, 0.6], rng=3,
                                   settings=StudySettings(cells=128, particle_dt=0.05), progress=False)
    assert_half_rate(study, (0.3, 0.6))
