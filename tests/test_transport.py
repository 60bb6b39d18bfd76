"""CircleFV's compiled Heun engine against the reference step it implements, bit for bit.

The reference (``FiniteVolumeTransport`` under ``explicit_adaptive_step``) is itself checked
against exact references elsewhere (growth rates, stationary states, the error estimate); here
the engine must reproduce it exactly: same densities, same steps, same rejections, on the FFT
and the circulant convolution, SA (clipped log potential) and linear models, an external
field, rejections for accuracy and positivity repairs.
"""

import dataclasses
import json

import numpy as np
import pytest

import meanfield as mf
from meanfield.external import UserField
from meanfield.integration import HEUN_EULER, ExplicitRungeKutta
from solvers import CircleFV
from solvers.circle.transport import CompiledHeunTransport, FiniteVolumeTransport

#: Some runs go on past their resolution on purpose (the engine must follow the reference there too).
pytestmark = pytest.mark.filterwarnings("ignore::solvers.UnderResolvedWarning")

#: The same pair under another name: not ``HEUN_EULER``, so the solver takes the reference path.
REFERENCE_HEUN = dataclasses.replace(HEUN_EULER, name="heun_euler (reference path)")


#: An external field with a potential, and a perceptron block (a field without one).
TILT = UserField(lambda x: np.broadcast_to(np.array([0.5, 0.0]), x.shape).copy(), lambda x: x[..., 0], name="tilt")
BLOCK = mf.Perceptron([1.0, -0.5, 0.7], [[1.0, 0.2], [-0.3, 1.0], [0.5, -0.8]])


CASES = {
    "SA-beta9-FFT": (mf.SelfAttention(9.0), 512, 1e-6),
    "SA-beta9-circulant": (mf.SelfAttention(9.0), 64, 1e-6),
    "SA-beta5-tight": (mf.SelfAttention(5.0), 64, 1e-9),
    "USA-beta3": (mf.SelfAttention(3.0, normalized=False), 256, 1e-6),
    "USA-repulsive": (mf.SelfAttention(2.0, normalized=False, value=-1.0), 1024, 1e-7),
    "Kuramoto": (mf.SelfAttention(0.0), 128, 1e-6),
    "SA-tilted": (mf.SelfAttention(2.0, external=TILT), 128, 1e-6),
    "SA-perceptron": (mf.SelfAttention(2.0, external=BLOCK), 1024, 1e-6),
}


def _rho0(theta):
    return 1 + 0.3 * np.cos(4 * theta) + 0.2 * np.sin(3 * theta + 0.3)


@pytest.mark.parametrize("name", list(CASES))
def test_the_engine_runs_the_reference_bit_for_bit(name):
    model, cells, rtol = CASES[name]
    engine = CircleFV(model, cells=cells, rtol=rtol)
    reference = CircleFV(model, cells=cells, rtol=rtol, tableau=REFERENCE_HEUN)
    assert CompiledHeunTransport.serves(engine) and not CompiledHeunTransport.serves(reference)
    times = np.linspace(0.0, 3.0, 4)
    ours, theirs = (solver.solve(_rho0, times, progress=False, underresolved="continue") for solver in (engine, reference))
    np.testing.assert_array_equal(ours.rho.values, theirs.rho.values)
    np.testing.assert_array_equal(ours.error_estimate.values, theirs.error_estimate.values)
    counts = [{key: json.loads(ds.attrs["settings"])[key] for key in ("steps", "rejected_steps", "rejections")}
              for ds in (ours, theirs)]
    assert counts[0] == counts[1]
    assert counts[0]["steps"] > 50


def test_the_engine_rejects_as_the_reference_does():
    """A top hat (empty cells, a front) under SA: a rejection for accuracy, at the same step."""
    top_hat = lambda theta: np.where(np.abs(theta - np.pi) < 0.5, 1.0, 0.0)  # noqa: E731
    runs = [CircleFV(mf.SelfAttention(9.0), cells=256, rtol=1e-4, tableau=tableau).solve(
        top_hat, [0.0, 0.5, 1.0], progress=False, underresolved="continue") for tableau in ("heun_euler", REFERENCE_HEUN)]
    np.testing.assert_array_equal(runs[0].rho.values, runs[1].rho.values)
    settings = [json.loads(ds.attrs["settings"]) for ds in runs]
    assert settings[0]["rejections"] == settings[1]["rejections"] == {"accuracy": 1}
    assert settings[0]["steps"] == settings[1]["steps"]


def test_the_engine_repairs_round_off_negatives_as_the_reference_does():
    """A step that ends on a round-off negative takes the reference's repair (the engine's one other branch)."""
    solver = CircleFV(mf.SelfAttention(9.0), cells=64, error_level=None)
    uniform = solver.operators.uniform
    engine, reference = CompiledHeunTransport(solver), FiniteVolumeTransport(solver)
    stepper = ExplicitRungeKutta(HEUN_EULER, reference.rhs, norm=reference.norm, tolerance=reference.tolerance)
    q = solver.initial_density(lambda theta: np.where(np.abs(theta - np.pi) < 1.0, 1.0, 0.0)) - uniform
    q[0] = -uniform - 4e-16  # a round-off negative inside the empty arc, where nothing flows in
    h = 0.5 * engine.stable_step(q)
    (ours, error), (theirs, their_error) = engine.step(q, h), stepper.step(q, h)
    np.testing.assert_array_equal(ours, theirs)
    assert error == their_error
    assert (uniform + ours).min() < 0
    (admitted, reason), (their_admitted, their_reason) = engine.admit(q, ours), reference.admit(q, theirs)
    assert reason is their_reason is None
    np.testing.assert_array_equal(admitted, their_admitted)
    assert admitted.min() >= -uniform


def test_the_engine_is_the_operators_velocity_and_right_hand_side_bit_for_bit():
    """Random deviations of every scale, densities whose K*rho nearly vanishes (SA's log away from log1p),
    a NaN, an external field, linear and SA models, both convolutions.

    Both sides share the compiled per-face loops (``clipped_jump``, ``row_flux_divergence``), which
    tests/test_circle_fv.py checks against their whole-array forms; this checks how the engine puts
    them together (the external field, the division by h, the sign, the largest speed)."""
    rng = np.random.default_rng(3)
    models = [mf.SelfAttention(4.0), mf.SelfAttention(2.0, normalized=False), mf.SelfAttention(30.0),
              mf.SelfAttention(3.0, external=TILT), mf.SelfAttention(1.0, normalized=False, external=BLOCK)]
    for trial in range(80):
        model = models[trial % len(models)]
        cells = int(rng.choice([16, 64, 250, 512]))
        solver = CircleFV(model, cells=cells, error_level=None)
        engine, reference = CompiledHeunTransport(solver), FiniteVolumeTransport(solver)
        deviation = 10.0 ** rng.uniform(-12, 0) * rng.normal(size=cells)
        if trial % 5 == 0:  # nearly all the mass in one cell: K*rho vanishes far from it under SA at large beta
            deviation = -solver.operators.uniform + np.eye(cells)[0] * cells / (2 * np.pi)
        if trial % 11 == 0:
            deviation[cells // 2] = np.nan
        np.testing.assert_array_equal(engine.velocity(deviation), reference.velocity(deviation))
        np.testing.assert_array_equal(engine.rhs(deviation), reference.rhs(deviation))
        assert engine.stable_step(deviation) == reference.stable_step(deviation) or (
            np.isnan(engine.stable_step(deviation)) and np.isnan(reference.stable_step(deviation)))


def test_the_engine_serves_only_the_default_step():
    model = mf.SelfAttention(2.0)
    assert CompiledHeunTransport.serves(CircleFV(model, cells=64))
    assert not CompiledHeunTransport.serves(CircleFV(model, cells=64, tableau="bogacki_shampine"))
    assert not CompiledHeunTransport.serves(CircleFV(mf.SelfAttention(2.0, diffusion=0.1), cells=64))
    assert not CompiledHeunTransport.serves(CircleFV(model, cells=64, interaction="reference"))
