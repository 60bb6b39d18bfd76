"""ZonalRings and ZonalSpectralRings: zonal measures as rings of mass in u = <x, e>, through cluster formation.

References: the Funk-Hecke velocity of ZonalSphereSpectral (a different computation: Gegenbauer
series against the model's reference on a fibre quadrature), the spectral solver's energy while
it resolves the density, and the exact energy of a Dirac mass, e^beta / (2 beta).
"""

import json

import numpy as np
import pytest

import meanfield as mf
from solvers import ZonalRings, ZonalSpectralRings, ZonalSphereSpectral

MODELS = [mf.SelfAttention(6.0), mf.SelfAttention(3.0, normalized=False),
          mf.ZonalAggregation(lambda s: s ** 3 - s, lambda s: 3 * s ** 2 - 1)]


@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("d", [3, 5, 128])
def test_rings_move_with_the_spectral_velocity_of_the_density_they_sample(model, d):
    spectral = ZonalSphereSpectral(model, d=d, lmax=32)
    coefficients = spectral.initial_coefficients(lambda x: np.exp(1.5 * x[..., -1]) + x[..., -1] ** 2)
    solver = ZonalRings(model, d=d, lmax=32, rings=24)
    rings, clipped = solver.density_rings(coefficients)
    assert clipped == 0 and rings[:, 1].sum() == pytest.approx(1.0, abs=1e-14)
    u = rings[:, 0]
    expected = (1 - u * u) * spectral.velocity(coefficients, u)
    assert np.abs(solver.rhs(rings)[:, 0] - expected).max() <= 1e-12 * np.abs(expected).max()


def test_rings_keep_the_spectral_energy_while_it_resolves_the_density():
    model, d = mf.SelfAttention(6.0), 16
    rho0 = lambda x: np.exp(2 * x[..., -1])  # noqa: E731
    times = [0.0, 0.5, 1.0]
    series = ZonalSphereSpectral(model, d=d, lmax=48, rtol=1e-10).solve(rho0, times, progress=False)
    rings = ZonalRings(model, d=d, lmax=48, rtol=1e-10, merge_distance=0).solve(rho0, times, progress=False)
    assert series.resolved.values.all()
    assert rings.energy.values == pytest.approx(series.energy.values, rel=1e-9)
    assert rings.mass.values == pytest.approx(1.0, abs=1e-13)


@pytest.mark.parametrize("d", [3, 16, 768])
def test_the_hand_over_follows_the_density_into_a_dirac_at_the_pole(d):
    beta = 6.0
    model = mf.SelfAttention(beta)
    ds = ZonalSpectralRings(model, d=d, lmax=48).solve(lambda x: np.exp(0.5 * np.sqrt(d) * x[..., -1]),
                                                                np.linspace(0, 20, 11), progress=False)
    settings = json.loads(ds.attrs["settings"])
    assert 0 < settings["handover_time"] < 20 and ds.rings.values[-1]
    np.testing.assert_array_equal(ds.angle.values, np.arccos(ds.u.values))
    assert np.all(np.diff(ds.lyapunov.values) <= 1e-12 * np.abs(ds.lyapunov.values).max())
    heaviest = int(np.nanargmax(ds.cluster_mass.values[-1]))
    assert ds.cluster_u.values[-1, heaviest] == pytest.approx(1.0, abs=1e-6)
    # a Dirac mass m at the pole has energy m^2 e^beta / (2 beta); at d = 3 a little mass settles at the
    # south pole (a stationary ring configuration of the zonal class), whose share is recorded
    masses = ds.cluster_mass.values[-1]
    masses = masses[np.isfinite(masses)]
    exact = np.exp(beta) / (2 * beta) * np.sum(masses ** 2) + (
        np.exp(-beta) / beta * np.prod(masses) if masses.size == 2 else 0.0)
    assert float(ds.energy[-1]) == pytest.approx(exact, rel=1e-5)
    assert ds.mass.values == pytest.approx(1.0, abs=1e-12)


def test_bad_input():
    with pytest.raises(ValueError, match="no diffusion"):
        ZonalRings(mf.SelfAttention(1.0, diffusion=0.1), d=4)
    solver = ZonalRings(mf.SelfAttention(1.0), d=4, lmax=8)
    with pytest.raises(ValueError, match=r"rings of shape \(n, 2\)"):
        solver.solve(np.zeros((3, 3)), [0.0, 1.0], continued=True, progress=False)
    # with diffusion the hand-over stays spectral
    assert ZonalSpectralRings(mf.SelfAttention(1.0, diffusion=0.1), d=4, lmax=8).measure is None


def test_a_sweep_over_the_dimension_runs_the_zonal_solvers_to_a_dirac(tmp_path):
    """``method.d`` of the zonal solvers is a sweep parameter; every point ends at the Dirac's energy."""
    from validation.app.sweep import run_sweep
    from validation.app.sweep_config import check_sweep_config

    raw = {"geometry": "sphere", "output": str(tmp_path / "sweep"), "times": {"stop": 12.0, "count": 4},
           "model": {"beta": 6.0}, "method": {"kind": "ZonalSpectralRings", "d": 4, "lmax": 32},
           "initial": {"kind": "perturbed_uniform", "amplitude": 0.5, "mode": 1},
           "sweep": {"realisations": 1, "grid": {"d": [3, 16, 768]}}}
    ds = run_sweep(check_sweep_config(raw), workers=1, progress=False)
    assert ds.d.values.tolist() == [3, 16, 768]
    assert ds.energy.isel(time=-1).values == pytest.approx(np.exp(6.0) / 12.0, rel=1e-3)
    assert np.all(ds.rings.isel(time=-1).values == 1)


@pytest.mark.parametrize("change, message", [
    ({"method": {"kind": "ZonalSphereSpectral", "lmax": 16}}, "needs method.d, the dimension of S"),
    ({"initial": {"kind": "von_mises_fisher", "means": [[1.0, 0.0, 0.0, 0.0, 0.0]], "kappa": 2.0}},
     "initial.means must lie on it"),
    ({"method": {"kind": "particles", "d": 5}, "initial": {"kind": "file", "path": "x.npy"}},
     "method.d = 5 takes initial.kind"),
])
def test_the_zonal_configs_refuse_with_the_key_named(change, message, tmp_path):
    from validation.app import ConfigError, check_config

    raw = {"geometry": "sphere", "output": str(tmp_path / "run"), "times": {"stop": 1.0, "count": 3},
           "model": {"beta": 2.0}, "method": {"kind": "ZonalSphereSpectral", "d": 5, "lmax": 16},
           "initial": {"kind": "perturbed_uniform", "amplitude": 0.5, "mode": 1}}
    raw.update(change)
    with pytest.raises(ConfigError, match=message):
        check_config(raw)


@pytest.mark.parametrize("d", [4, 5, 6])
def test_the_product_rule_atoms_move_with_the_spectral_velocity_spectrally_in_the_nodes(d):
    """SphereWeightedParticles on S^{d-1}: the model's reference on the product rule's atoms against Funk-Hecke."""
    from solvers import SphereWeightedParticles

    model = mf.SelfAttention(3.0)
    rho0 = lambda x: np.exp(1.5 * x[..., -1]) + x[..., -1] ** 2  # noqa: E731
    spectral = ZonalSphereSpectral(model, d=d, lmax=32)
    coefficients = spectral.initial_coefficients(rho0)
    x = mf.sample_uniform(20, d, np.random.default_rng(0))
    exact = spectral.velocity(coefficients, x[:, -1])[:, None] * (np.eye(d)[-1] - x[:, -1:] * x)
    errors = []
    for nodes in (4, 6, 8):
        atoms = SphereWeightedParticles(model, d=d, lmax=8, quadrature_nodes=nodes)._initial_state(rho0, False)
        assert atoms.shape == (2 * nodes ** (d - 1), d + 1)
        errors.append(np.abs(model.velocity_field(x, atoms[:, :-1], atoms[:, -1]) - exact).max() / np.abs(exact).max())
    assert errors[0] > 1e3 * errors[2] and errors[2] < 1e-8, errors  # spectral: 1e-3, 1e-6, 1e-9


def test_the_atoms_on_s3_keep_the_spectral_energy_and_take_any_density():
    from solvers import SphereWeightedParticles

    model, d = mf.SelfAttention(3.0), 4
    rho0 = lambda x: np.exp(1.5 * x[..., -1]) + x[..., -1] ** 2  # noqa: E731
    times = [0.0, 0.5]
    series = ZonalSphereSpectral(model, d=d, lmax=32, rtol=1e-10).solve(rho0, times, progress=False)
    atoms = SphereWeightedParticles(model, d=d, lmax=16, quadrature_nodes=8, rtol=1e-10,
                                    merge_distance=0).solve(rho0, times, progress=False)
    assert atoms.attrs["geometry"] == "S^3" and atoms.rho.dims == ("time", "u")
    assert atoms.energy.values[0] == pytest.approx(series.energy.values[0], rel=1e-10)
    assert atoms.energy.values[1] == pytest.approx(series.energy.values[1], rel=1e-6)
    # a density that is not zonal: two bumps on S^4 become one cluster, the energy rising to a Dirac's
    ds = SphereWeightedParticles(model, d=5, lmax=16, quadrature_nodes=4).solve(
        lambda x: np.exp(2 * x[..., 0]) + np.exp(2 * x[..., 1]), [0.0, 5.0, 10.0], progress=False)
    assert ds.cluster_count.values[-1] == 1 and ds.mass.values == pytest.approx(1.0, abs=1e-12)
    assert np.all(np.diff(ds.energy.values) > 0)
    assert float(ds.energy[-1]) == pytest.approx(np.exp(3.0) / 6.0, rel=1e-3)


def test_the_sweep_example_over_the_dimension_checks():
    from pathlib import Path

    from validation.app.sweep_config import load_sweep_config

    sweep = load_sweep_config(Path(__file__).parents[1] / "examples" / "high_dimension_sweep.toml")
    assert sweep.shape == (4, 4) and sweep.base.method.kind == "ZonalSpectralRings"


def test_the_atoms_on_s3_record_a_scaled_energy_where_it_would_overflow():
    from solvers import SphereWeightedParticles

    model = mf.SelfAttention(800.0)
    solver = SphereWeightedParticles(model, d=4, lmax=8, quadrature_nodes=3)
    ds = solver.solve(lambda x: np.exp(40 * x[..., -1]), [0.0, 0.01], progress=False)
    atoms = solver._initial_state(lambda x: np.exp(40 * x[..., -1]), False)
    expected = np.exp(model.log_energy(atoms[None, :, :-1], masses=atoms[None, :, -1])[0] - 800.0)
    assert ds.energy.attrs["note"] == "exp(-beta) E" and np.isfinite(ds.energy.values).all()
    assert float(ds.energy[0]) == pytest.approx(expected, rel=1e-12)
    assert ZonalSphereSpectral(model, d=4, lmax=171).energy_scaled  # the series records the same convention


def test_interpolated_outputs_are_the_spectral_parts():
    """``outputs="interpolated"`` goes to ZonalSphereSpectral: fewer steps than its outputs, none lost."""
    times = np.linspace(0.0, 10.0, 201)
    ds = ZonalSpectralRings(mf.SelfAttention(2.0), d=5, lmax=24, outputs="interpolated").solve(
        lambda x: np.exp(x[..., -1]), times, progress=False)
    np.testing.assert_array_equal(ds.time.values, times)
    spectral = json.loads(ds.attrs["settings"])["runs"]["ZonalSphereSpectral"]
    assert spectral["outputs"] == "interpolated" and spectral["steps"] < (~ds.rings.values).sum()
