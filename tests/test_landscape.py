"""Critical configurations of the interaction energy: Platonic solids, designs, the circle's saddles.

Independent references: the solids' inner products, the sphere's moments (double factorials)
for designs, the model's own particle energy differentiated numerically for the Hessian.
"""

import numpy as np
import pytest

import meanfield as mf
from meanfield.landscape import critical_configuration, design_strength, riemannian_hessian, rotation_modes

SOLIDS = {  # n: (inner products between distinct vertices, design strength)
    4: ([-1 / 3], 2),
    6: ([-1.0, 0.0], 3),
    12: ([-1.0, -1 / np.sqrt(5), 1 / np.sqrt(5)], 5),
}


def sphere_moment(powers):
    """Mean of x^a y^b z^c over S^2: zero unless all even, else (a-1)!!(b-1)!!(c-1)!!/(a+b+c+1)!!."""
    if any(p % 2 for p in powers):
        return 0.0
    return float(np.prod([double_factorial(p - 1) for p in powers]) / double_factorial(sum(powers) + 1))


def double_factorial(k):
    """k!! with (-1)!! = 0!! = 1."""
    return float(np.prod(np.arange(k, 0, -2))) if k > 0 else 1.0


def moments_match(x, degree):
    for a in range(degree + 1):
        for b in range(degree + 1 - a):
            for c in range(degree + 1 - a - b):
                mean = np.mean(x[:, 0] ** a * x[:, 1] ** b * x[:, 2] ** c)
                if abs(mean - sphere_moment((a, b, c))) > 1e-10:
                    return False
    return True


@pytest.mark.parametrize("n", sorted(SOLIDS))
def test_repulsive_dynamics_and_newton_find_the_platonic_solids(n):
    model = mf.SelfAttention(3.0, normalized=False, value=-1.0)
    run = mf.simulate_particles(model, mf.sample_uniform(n, 3, rng=1), [0.0, 50.0], progress=False)
    critical = critical_configuration(model, run.x.values[-1], tol=1e-12)
    assert critical.gradient_norm <= 1e-12 * np.exp(3.0) / n
    inner = critical.x @ critical.x.T
    expected, strength = SOLIDS[n]
    off_diagonal = inner[~np.eye(n, dtype=bool)]
    distance = np.abs(off_diagonal[:, None] - np.array(expected)[None, :]).min(axis=1)
    # Newton's error bound: positions within |grad| / (smallest nonzero |eigenvalue|), inner products twice that
    nonzero = np.abs(critical.eigenvalues)[np.abs(critical.eigenvalues) > 1e-8 * np.abs(critical.eigenvalues).max()]
    bound = 2 * critical.gradient_norm * np.sqrt(2 * n) / nonzero.min()
    assert distance.max() < max(bound, 1e-14) and distance.max() < 1e-10
    # an optimum of the energy the dynamics lowers: no direction to leave by but the rotations
    assert critical.strict_optimum and critical.rotation_modes == 3
    assert design_strength(critical.x) == strength
    assert moments_match(critical.x, strength) and not moments_match(critical.x, strength + 1)


@pytest.mark.parametrize("beta", [0.5, 1.0, 2.0, 4.0, 8.0])
def test_circle_critical_points_global_maximum_and_saddles(beta):
    """Problem 3 on the circle: the single cluster has index 0; the n-gon and two antipodal clusters are strict saddles."""
    model, n = mf.SelfAttention(beta), 8
    # tokens in an open half-circle form one cluster (Wendel's event), at any beta
    start = np.random.default_rng(3).uniform(0.0, 1.5, n)
    run = mf.simulate_particles(model, np.stack([np.cos(start), np.sin(start)], axis=1), [0.0, 60.0], progress=False)
    maximum = critical_configuration(model, run.x.values[-1])
    assert np.allclose(maximum.x @ maximum.x.T, 1.0, atol=1e-10)
    assert maximum.strict_optimum and maximum.index == 0
    # one cluster: E = W(1) / 2 = e^beta / (2 beta)
    assert abs(maximum.energy - np.exp(beta) / (2 * beta)) < 1e-12 * maximum.energy
    angles = 2 * np.pi * np.arange(n) / n
    polygon = critical_configuration(model, np.stack([np.cos(angles), np.sin(angles)], axis=1))
    assert polygon.iterations == 0 and polygon.strict_saddle
    # the polygon minimises the energy: every direction but the rotation raises it
    assert polygon.index == n - 1 and polygon.zero_modes == 1
    halves = np.repeat([[1.0, 0.0], [-1.0, 0.0]], n // 2, axis=0)
    antipodal = critical_configuration(model, halves)
    assert antipodal.strict_saddle


def test_hessian_is_the_second_derivative_of_the_particle_energy():
    model = mf.SelfAttention(2.0, normalized=False)
    angles = 2 * np.pi * np.arange(5) / 5
    critical = critical_configuration(model, np.stack([np.cos(angles), np.sin(angles)], axis=1))
    rng = np.random.default_rng(0)
    # along a tangent direction xi (one angle per token) the energy's second derivative is xi^T Hess xi
    for _ in range(3):
        xi = rng.normal(size=5)
        energy = lambda t: float(model.energy(np.stack([np.cos(angles + t * xi), np.sin(angles + t * xi)], axis=1)))  # noqa: E731
        h = 1e-4
        second = (energy(h) - 2 * energy(0.0) + energy(-h)) / h**2
        # the tangent bases of the circle are +-(-sin, cos): xi's coordinates up to those signs
        bases = np.stack([-np.sin(angles), np.cos(angles)], axis=1)
        hessian, tangent = riemannian_hessian(model, critical.x)
        signs = np.sign(np.einsum("ia,ia->i", bases, tangent[:, :, 0]))
        coordinates = signs * xi
        assert abs(coordinates @ hessian @ coordinates - second) < 1e-6 * max(1.0, abs(second))


def test_rotation_modes_and_designs_of_simple_configurations():
    assert rotation_modes(np.eye(3)) == 3
    assert rotation_modes(np.array([[0.0, 0.0, 1.0], [0.0, 0.0, -1.0]])) == 2  # an axis: rotations about it fix it
    antipodal = np.array([[1.0, 0.0, 0.0], [-1.0, 0.0, 0.0]])
    assert design_strength(antipodal) == 1
    assert design_strength(np.array([[1.0, 0.0, 0.0]] * 2)) == 0


def test_bad_input_is_named():
    with pytest.raises(ValueError, match="zonal SelfAttention"):
        critical_configuration(mf.ZonalAggregation(lambda s: s, np.ones_like), np.eye(3))
    with pytest.raises(ValueError, match="one configuration of shape"):
        critical_configuration(mf.SelfAttention(1.0), np.stack([np.eye(3)] * 2))
    with pytest.raises(RuntimeError, match="did not reach a critical configuration in 1 iterations"):
        critical_configuration(mf.SelfAttention(1.0), mf.sample_uniform(10, 3, rng=0), max_iterations=1)
