"""The layering policy: a family of densities is data (solvers.layering.Layering) that the layered solvers move."""

from __future__ import annotations

import numpy as np
import pytest

import meanfield as mf
import solvers
from solvers.circle.layered import FamilyCircleFV
from solvers.layering import Layering


def test_a_family_of_uncoupled_layers_moves_each_as_the_solver_alone():
    """Identity mixing: each layer is moved by its own density's velocity, so each layer is CircleFV's solution
    from that density, independently computed. The family's steps are controlled over both layers together, so
    the two agree within the tolerance the steps are held to (ten times rtol over this span), not bit for bit."""
    model, cells, times = mf.SelfAttention(3.0), 64, [0.0, 1.0, 3.0]
    starts = [lambda t: 1 + 0.4 * np.cos(t), lambda t: 1 + 0.3 * np.sin(2 * t)]
    family = Layering("copy", np.array([0.0, 1.0]), ((np.eye(2), model),))
    ds = FamilyCircleFV(model, cells=cells, rtol=1e-7, error_level=None, family=family).solve(
        lambda label, t: np.where(label == 0.0, starts[0](t), starts[1](t)), times, progress=False)
    assert ds.rho.dims == ("time", "copy", "theta")
    for layer, start in enumerate(starts):
        alone = solvers.CircleFV(model, cells=cells, rtol=1e-7, error_level=None).solve(start, times, progress=False)
        np.testing.assert_allclose(ds.rho.values[:, layer], alone.rho.values, rtol=0, atol=10 * 1e-7)


def test_a_family_of_one_mixed_density_moves_its_average_as_the_solver_alone():
    """A one-row mixing (the frequencies' marginal) with uniform weights: every layer moves with the velocity of
    the layers' average, so (the transport being linear in each layer at a given velocity, its limiter idle on
    smooth data) the average solves the equation itself: it follows CircleFV from the average start, while a
    layer is far from CircleFV from its own start (the mixing is in effect)."""
    model, cells, times = mf.SelfAttention(3.0), 64, [0.0, 2.0]
    first, second = (lambda t: 1 + 0.4 * np.cos(t)), (lambda t: 1 + 0.3 * np.sin(2 * t))
    family = Layering("copy", np.array([0.0, 1.0]), ((np.full((1, 2), 0.5), model),))
    ds = FamilyCircleFV(model, cells=cells, rtol=1e-7, error_level=None, family=family).solve(
        lambda label, t: np.where(label == 0.0, first(t), second(t)), times, progress=False)

    def alone(start):
        return solvers.CircleFV(model, cells=cells, rtol=1e-7, error_level=None).solve(start, times, progress=False)

    average = alone(lambda t: 0.5 * (first(t) + second(t)))
    np.testing.assert_allclose(ds.rho.values.mean(axis=1), average.rho.values, rtol=0, atol=10 * 1e-7)
    assert np.abs(ds.rho.values[-1, 0] - alone(first).rho.values[-1]).max() > 0.05


def test_a_layering_refuses_what_is_not_a_family_naming_it():
    model = mf.SelfAttention(1.0)
    with pytest.raises(ValueError, match=r"mixing matrix must be \(3, 3\) or \(1, 3\)"):
        Layering("x", np.arange(3.0), ((np.eye(2), model),))
    with pytest.raises(ValueError, match=r"drift must give one angular velocity per label, shape \(3,\)"):
        Layering("x", np.arange(3.0), ((np.eye(3), model),), drift=np.zeros(2))
    with pytest.raises(TypeError, match="CausalCircleFV solves the layered equation of a CausalAttention"):
        Layering.causal(model, 4, "CausalCircleFV")
    two_slopes = mf.CausalAttention(beta=[2.0, 2.0], normalized=True, alibi=[0.0, 1.0])
    causal = Layering.causal(two_slopes, 4, "CausalCircleFV")
    assert len(causal.groups) == 2 and causal.label == "position"
    np.testing.assert_allclose(causal.labels, [0.125, 0.375, 0.625, 0.875], rtol=0, atol=1e-15)
    with pytest.raises(ValueError, match="one mixed model: this family has 2 groups .* use CausalCircleFV"):
        causal.one_group("CausalCircleSpectral", "CausalCircleFV")
    with pytest.raises(TypeError, match="family must be a solvers.layering.Layering, got None"):
        FamilyCircleFV(model, cells=64)
