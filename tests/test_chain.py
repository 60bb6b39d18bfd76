"""Hand-overs as policies: solvers.Chain composes the transitions of solvers.handover, from code and from a config."""

from __future__ import annotations

import json

import numpy as np
import pytest

import meanfield as mf
import solvers
from solvers import Chain, CircleFV, CircleFVLagrangian, CircleLagrangian, CircleSpectral
from solvers.handover import TRANSITIONS
from solvers.methods import METHODS, METHODS_BY_NAME
from validation.app import ConfigError, check_config
from validation.app.experiment import run_experiment


def three_clusters(theta):
    """A smooth start that forms three clusters of unequal mass at beta = 9 (no symmetry fixes them)."""
    return 1 + 0.1 * np.cos(2 * theta) + 0.05 * np.sin(3 * theta) + 0.03 * np.cos(5 * theta)


def by_position(masses, positions):
    order = np.argsort(positions)
    return masses[order], positions[order]


def test_the_table_and_the_transitions_name_the_same_hand_overs():
    """Config checks read the table's ``hands_to`` without importing a solver; the runs use TRANSITIONS."""
    declared = {(method.name, target) for method in METHODS for target in method.hands_to}
    assert declared == set(TRANSITIONS)
    for source, target in TRANSITIONS:  # a hand-over joins two solvers of one geometry
        assert METHODS_BY_NAME[source].geometry == METHODS_BY_NAME[target].geometry


def test_the_circle_from_smooth_data_to_merged_clusters_in_one_chain():
    """Fourier -> finite volumes -> mass coordinates (no class of the package runs all three) against the
    measure in mass coordinates from t = 0 (exact for D = 0: the reference). The clusters are those of the
    reference to the error handed over: the Fourier stage hands over within its tail criterion, the finite
    volumes at 1e-3 of max rho, times a cluster's basin (2e-3 in mass, 1e-2 in angle, as for
    CircleFVLagrangian); mass is exact at every output."""
    model, times = mf.SelfAttention(9.0), np.array([0.0, 2.0, 40.0])
    ds = solvers.solve(model, three_clusters, times, method="fourier", then=("finite_volumes", "mass_coordinates"),
                       cells=256, points=1024, progress=False)
    settings = json.loads(ds.attrs["settings"])
    assert settings["stages"] == ["CircleSpectral", "CircleFV", "CircleLagrangian"]
    spectral_end, volumes_end = settings["handover_times"]
    assert 2.0 < spectral_end <= volumes_end < 40.0
    assert list(ds.stage.values) == ["CircleSpectral", "CircleSpectral", "CircleLagrangian"]
    assert ds.cluster_count.values[0] == 1 and np.all(np.isfinite(ds.position.values))  # labels at every output
    assert set(settings["runs"]) == {"CircleSpectral", "CircleFV", "CircleLagrangian"}
    assert settings["runs"]["CircleSpectral"]["error_level"] is None  # the hand-over's own criterion
    np.testing.assert_allclose(ds.rho.values.sum(axis=1) * 2 * np.pi / 256, 1.0, rtol=1e-12)  # a probability

    reference = CircleLagrangian(model, points=1024, cells=256, rtol=1e-10).solve(three_clusters, times,
                                                                                   progress=False)
    assert ds.cluster_count.values[-1] == reference.cluster_count.values[-1] == 3
    masses, positions = by_position(ds.cluster_mass.values[-1], ds.cluster_position.values[-1])
    exact_masses, exact_positions = by_position(reference.cluster_mass.values[-1],
                                                reference.cluster_position.values[-1])
    np.testing.assert_allclose(masses, exact_masses, atol=2e-3)
    np.testing.assert_allclose(positions, exact_positions, atol=1e-2)
    early = CircleSpectral(model, cells=256).solve(three_clusters, times[:2], progress=False)
    np.testing.assert_array_equal(ds.rho.values[:2], early.rho.values)  # the same steps until the hand-over



@pytest.mark.filterwarnings("ignore::solvers.UnderResolvedWarning")  # the finite volumes from t = 5.6, run on
def test_interpolated_outputs_through_a_hand_over_are_all_recorded():
    """``outputs="interpolated"`` on the Fourier stage, 801 outputs 0.01 apart: its steps pass several,
    and the one at whose end it hands over passes some too. Every output is in the dataset, once,
    and the Fourier stage's agree with a run that steps to each within both runs' bounds (rtol times
    the deviation per step, and once more for the interpolant). The steps are held by stability, so
    the runs agree far better than that; a wrong fraction of the step would be off by about 1e-3,
    and the extension's order is tested in tests/test_integration.py."""
    model, times = mf.SelfAttention(9.0), np.linspace(0.0, 8.0, 801)
    def start(theta):
        return 1 + 0.1 * np.cos(4 * theta)
    runs = {outputs: solvers.solve(model, start, times, method="fourier", then=("finite_volumes",), cells=512,
                                   outputs=outputs, progress=False, underresolved="continue")
            for outputs in ("stepped", "interpolated")}
    ds = runs["interpolated"]
    np.testing.assert_array_equal(ds.time.values, times)
    fourier = ds.stage.values == "CircleSpectral"
    assert 100 < fourier.sum() < times.size and np.all(runs["stepped"].stage.values[fourier] == "CircleSpectral")
    steps = [json.loads(run.attrs["settings"])["runs"]["CircleSpectral"]["steps"] for run in runs.values()]
    deviation = np.abs(runs["stepped"].rho.values[fourier] - 1 / (2 * np.pi)).max(axis=1)
    errors = np.abs(ds.rho.values[fourier] - runs["stepped"].rho.values[fourier]).max(axis=1) / deviation
    assert errors.max() <= (sum(steps) + 1) * 1e-6, (errors.max(), steps)  # both runs' bounds: rtol 1e-6


def sphere_start(x):
    return 1 + 0.2 * x[..., 0] + 0.8 * x[..., 1] * x[..., 2] + 0.3 * x[..., 2] ** 2


def zonal_start(x):
    return np.exp(x[..., -1])  # a density of u = <x, e>, e the last axis


@pytest.mark.parametrize("geometry, method, then, settings, flag, times, start", [
    ("circle", "finite_volumes", "mass_coordinates", {"cells": 128, "points": 256}, "lagrangian", [0.0, 4.0, 12.0],
     three_clusters),
    ("sphere", "harmonics", "atoms", {"lmax": 15}, "particles", [0.0, 2.0, 6.0], sphere_start),
    ("sphere", "gegenbauer", "rings", {"d": 5, "lmax": 24}, "rings", [0.0, 3.0, 10.0], zonal_start),
])
def test_a_chain_of_two_runs_as_the_class_of_that_hand_over(geometry, method, then, settings, flag, times, start):
    """The classes keep their records, but the run is the transition's: same hand-over, same densities (each
    class is tested against an independent reference in its own test file)."""
    model = mf.SelfAttention(4.0 if geometry == "sphere" else 9.0)
    chain = solvers.solver_for(model, geometry=geometry, method=method, then=(then,), **settings)
    ds = chain.solve(start, times, progress=False)
    direct = solvers.solve(model, start, times, geometry=geometry, method=method, then=then, progress=False, **settings)
    handover = json.loads(direct.attrs["settings"])["handover_time"]
    assert times[0] < handover < times[-1]
    assert json.loads(ds.attrs["settings"])["handover_times"] == [handover]
    np.testing.assert_array_equal(ds.stage.values == chain.stages[1].name, direct[flag].values)
    np.testing.assert_array_equal(ds.stage.values, direct.stage.values)  # the class records a chain's fields too
    for key in ("stages", "handover_times", "handover_moved"):
        assert json.loads(ds.attrs["settings"])[key] == json.loads(direct.attrs["settings"])[key], key
    np.testing.assert_array_equal(ds.rho.values, direct.rho.values)
    for name in ("position", "cluster_count", "cluster_mass"):  # recorded at every output, as the class does
        if name in direct:
            np.testing.assert_array_equal(ds[name].values, direct[name].values)


@pytest.mark.parametrize("every", [1, 2])
def test_a_config_chain_runs_in_checkpointed_segments_as_in_one_call(every, tmp_path):
    """``method.then``: the chain from a TOML config; segments continue from the chain's state (the stage that
    ran last), and the run records the hand-overs where they happened, not where a segment began."""
    # two sharp bumps: the Fourier part's negative round-off is clipped at its hand-over (a mass moved, recorded)
    config = {"geometry": "circle", "times": {"stop": 4.0, "count": 5}, "model": {"beta": 9.0},
              "method": {"kind": "CircleSpectral", "then": ["CircleFV", "CircleLagrangian"], "cells": 256,
                         "points": 512},
              "initial": {"kind": "von_mises_fisher", "means": [[1.0, 0.0], [-0.5, 0.8]], "kappa": 40.0}}
    whole = run_experiment({**config, "output": str(tmp_path / "whole")}, progress=False)
    parts = run_experiment({**config, "output": str(tmp_path / "parts"), "checkpoint_every": every}, progress=False)
    assert parts.attrs["segments"] > 1
    np.testing.assert_array_equal(parts.stage.values, whole.stage.values)
    # the Fourier stage's segments round-trip cell averages through coefficients: round-off only
    np.testing.assert_allclose(parts.rho.values, whole.rho.values, rtol=0, atol=1e-12 * whole.rho.values.max())
    handovers = json.loads(whole.attrs["settings"])["handover_times"]
    assert np.all(np.isfinite(handovers))
    np.testing.assert_allclose(json.loads(parts.attrs["settings"])["handover_times"], handovers, rtol=1e-12)
    moved = json.loads(whole.attrs["settings"])["handover_moved"]
    assert moved[0] > 0  # the segments must carry it from where it happened
    # the mass moved sums negatives of densities equal to 1e-12 max rho: within 2 pi of that
    np.testing.assert_allclose(json.loads(parts.attrs["settings"])["handover_moved"], moved, rtol=0,
                               atol=2 * np.pi * 1e-12 * whole.rho.values.max())


@pytest.mark.parametrize("method, message", [
    ({"kind": "CircleSpectral", "then": ["CircleLagrangian"]},
     "method.then: CircleSpectral hands a run over to 'CircleFV', not to 'CircleLagrangian'"),
    ({"kind": "CircleSpectral", "then": ["SphereSpectral"]}, "method.then must list solvers of the geometry"),
    ({"kind": "CircleAuto", "then": ["CircleLagrangian"]}, "method.then: CircleAuto hands a run over to no solver"),
    ({"kind": "CircleSpectral", "then": ["CircleFV"], "lmax": 11}, "method.lmax does not apply"),
])
def test_a_config_chain_that_cannot_run_is_refused_in_one_line(method, message, tmp_path):
    config = {"geometry": "circle", "output": str(tmp_path / "out"), "times": {"stop": 1.0, "count": 2},
              "model": {"beta": 9.0}, "method": {"cells": 64, **method},
              "initial": {"kind": "perturbed_uniform", "amplitude": 0.1, "mode": 2}}
    with pytest.raises(ConfigError, match=message):
        check_config(config)


def test_the_front_door_refuses_chains_it_cannot_build():
    model = mf.SelfAttention(9.0)
    with pytest.raises(ValueError, match="CircleSpectral hands a run over to CircleFV, not to CircleLagrangian"):
        solvers.solver_for(model, method="fourier", then=("mass_coordinates",))
    with pytest.raises(ValueError, match="a chain is given by discretisations"):
        solvers.solver_for(model, method="fourier", then=("CircleFV",))
    with pytest.raises(TypeError, match="no solver of the chain CircleSpectral -> CircleFV takes the setting 'lmax'"):
        solvers.solver_for(model, method="fourier", then=("finite_volumes",), lmax=3)


def test_a_chain_refuses_solvers_that_do_not_join():
    model = mf.SelfAttention(9.0)
    with pytest.raises(ValueError, match="no hand-over from CircleLagrangian to CircleFV"):
        Chain((CircleLagrangian(model, cells=64), CircleFV(model, cells=64)))
    with pytest.raises(ValueError, match="CircleFV records its density on \\(theta: 64\\) and CircleLagrangian on "
                                         "\\(theta: 128\\)"):
        Chain((CircleFV(model, cells=64), CircleLagrangian(model, cells=128)))
    with pytest.raises(ValueError, match="every solver of a chain solves one model"):
        Chain((CircleFV(model, cells=64), CircleLagrangian(mf.SelfAttention(9.0), cells=64)))
    with pytest.raises(ValueError, match="its error_level must be a number"):
        Chain((CircleFV(model, cells=64, error_level=None), CircleLagrangian(model, cells=64))).solve(
            three_clusters, [0.0, 1.0], progress=False)
    with pytest.raises(ValueError, match="at least two solvers"):
        Chain((CircleFV(model, cells=64),))


def test_a_sweep_runs_a_chain_at_every_point(tmp_path):
    """A PDE sweep keeps the numeric series of each point's chain (its ``stage`` names are not numbers)."""
    import xarray as xr

    from validation.app.cli import main

    config = tmp_path / "sweep.toml"
    config.write_text(f"""
output = "{tmp_path / 'sweep'}"
geometry = "circle"
times = {{ stop = 12.0, count = 4 }}
[model]
beta = 9.0
[method]
kind = "CircleFV"
then = ["CircleLagrangian"]
cells = 64
points = 128
[initial]
kind = "perturbed_uniform"
amplitude = 0.1
mode = 2
[sweep]
file = "sweep.zarr"
[sweep.grid]
beta = [6.0, 9.0]
""")
    assert main(["sweep", str(config), "--quiet", "--workers", "1"]) == 0
    ds = xr.open_zarr(tmp_path / "sweep" / "sweep.zarr").load()
    assert "stage" not in ds and ds.cluster_count.dims == ("beta", "time")
    model = mf.SelfAttention(6.0)
    direct = Chain((CircleFV(model, cells=64), CircleLagrangian(model, cells=64, points=128))).solve(
        lambda t: 1 + 0.1 * np.cos(2 * t), ds.time.values, progress=False)
    assert direct.stage.values[-1] == "CircleLagrangian"
    np.testing.assert_array_equal(ds.energy.sel(beta=6.0).values, direct.energy.values)


def test_the_figures_mark_the_hand_overs_of_a_class_and_of_a_chain():
    """validation.app.experiment_figures.handover_times reads both records: a class's ``handover_time`` and a
    chain's ``handover_times``, those within the outputs' span."""
    from validation.app.experiment_figures import handover_times

    model, times = mf.SelfAttention(9.0), np.array([0.0, 4.0, 12.0])
    pair = CircleFVLagrangian(model, cells=128, points=256).solve(three_clusters, times, progress=False)
    assert handover_times(pair) == [json.loads(pair.attrs["settings"])["handover_time"]]
    chain = Chain((CircleSpectral(model, cells=128, error_level=None), CircleFV(model, cells=128),
                   CircleLagrangian(model, cells=128, points=256))).solve(three_clusters, times, progress=False)
    recorded = json.loads(chain.attrs["settings"])["handover_times"]
    assert handover_times(chain) == recorded and len(recorded) == 2
    assert handover_times(chain.isel(time=slice(0, 2))) == []  # the outputs before them


def test_causal_attention_hands_over_from_fourier_to_finite_volumes_layer_by_layer():
    """The layered equation composes with a hand-over: CausalCircleSpectral while it resolves every layer, then
    CausalCircleFV (no class does this). Against CausalCircleFV on four times the cells (the reference, as
    averages over the coarse cells): before the hand-over the chain is the Fourier run, bit for bit, and after
    it no farther from the reference than the finite volumes alone on the same cells (the handed density's
    error, the tail criterion's, is far below theirs); each layer keeps mass one."""
    model, times, layers = mf.CausalAttention(9.0, True), np.linspace(0.0, 6.0, 4), 8
    start = lambda s, t: 1 + 0.1 * np.cos(2 * t) + 0.05 * np.sin(3 * t)  # noqa: E731
    ds = solvers.solve(model, start, times, method="fourier", then=("finite_volumes",), cells=128, layers=layers,
                       progress=False)
    handover = json.loads(ds.attrs["settings"])["handover_times"][0]
    assert times[1] < handover < times[-1]
    before = times < handover
    spectral = solvers.CausalCircleSpectral(model, cells=128, layers=layers, error_level=None).solve(
        start, times[before], progress=False)
    np.testing.assert_array_equal(ds.rho.values[before], spectral.rho.values)
    np.testing.assert_allclose(ds.rho.values.sum(axis=-1) * 2 * np.pi / 128, 1.0, rtol=1e-12)

    fine = solvers.CausalCircleFV(model, cells=512, layers=layers).solve(start, times, progress=False)
    reference = fine.rho.values.reshape(times.size, layers, 128, 4).mean(axis=-1)
    alone = solvers.CausalCircleFV(model, cells=128, layers=layers).solve(start, times, progress=False)
    chain_error = np.abs(ds.rho.values - reference).max(axis=(1, 2))
    volumes_error = np.abs(alone.rho.values - reference).max(axis=(1, 2))
    assert np.all(chain_error[~before] <= volumes_error[~before]), (chain_error, volumes_error)
    assert chain_error[-1] > 1e-4  # the clusters are sharp by then: the comparison is not of round-off


def test_a_config_runs_the_causal_chain(tmp_path):
    config = {"geometry": "circle", "output": str(tmp_path / "causal"), "times": {"stop": 9.0, "count": 3},
              "model": {"beta": 9.0, "causal": True},
              "method": {"kind": "CausalCircleSpectral", "then": ["CausalCircleFV"], "cells": 128, "layers": 8},
              "initial": {"kind": "perturbed_uniform", "amplitude": 0.1, "mode": 2}}
    ds = run_experiment(config, progress=False)
    assert list(ds.stage.values) == ["CausalCircleSpectral", "CausalCircleSpectral", "CausalCircleFV"]
    assert ds.rho.dims == ("time", "position", "theta")


@pytest.mark.parametrize("geometry, method, then, settings, key, expected", [
    ("circle", "fourier", ("finite_volumes", "mass_coordinates"), {}, "cells", 256),
    ("circle", "finite_volumes", ("mass_coordinates",), {}, "cells", 1024),
    ("sphere", "harmonics", ("atoms",), {}, "lmax", 31),
    ("sphere", "gegenbauer", ("rings",), {"d": 5}, "lmax", 64),
])
def test_a_chain_from_the_front_door_at_its_defaults_records_on_one_grid(geometry, method, then, settings, key,
                                                                        expected):
    """The solvers' own defaults differ (CircleSpectral 256 cells, CircleFV 1024): the chain takes the smallest."""
    chain = solvers.solver_for(mf.SelfAttention(9.0), geometry=geometry, method=method, then=then, **settings)
    assert [getattr(stage, key) for stage in chain.stages] == [expected] * len(chain.stages)


def test_a_start_the_fourier_stage_does_not_resolve_goes_to_the_next_solver():
    """A discontinuous density: the Fourier solver's rule refuses it, so the run starts on the finite volumes
    (as CircleAuto's does), which hand over to the labels once their estimate passes error_level; the clusters
    at the end are those of the labels from t = 0 (the reference)."""
    model, times = mf.SelfAttention(9.0), np.array([0.0, 1.0, 20.0])
    step = lambda t: 1.0 + (np.abs(t - np.pi) < 0.5)  # noqa: E731
    ds = solvers.solve(model, step, times, method="fourier", then=("finite_volumes", "mass_coordinates"), cells=256,
                       points=512, progress=False)
    settings = json.loads(ds.attrs["settings"])
    assert ds.stage.values[0] == "CircleFV" and settings["handover_times"][0] == times[0]
    assert "CircleSpectral" not in settings["runs"]
    reference = CircleLagrangian(model, points=512, cells=256, rtol=1e-10).solve(step, times, progress=False)
    found = [values[np.isfinite(values)] for values in (ds.cluster_mass.values[-1], ds.cluster_position.values[-1])]
    exact = [values[np.isfinite(values)] for values in (reference.cluster_mass.values[-1],
                                                         reference.cluster_position.values[-1])]
    assert found[0].size == exact[0].size
    gaps = np.abs(np.angle(np.exp(1j * (found[1][:, None] - exact[1][None, :]))))  # across the turn
    nearest = gaps.argmin(axis=1)
    assert sorted(nearest) == list(range(exact[0].size))
    np.testing.assert_allclose(found[0], exact[0][nearest], atol=2e-3)
    assert gaps[np.arange(nearest.size), nearest].max() <= 1e-2


def test_the_up_front_checks_read_the_solver_a_chain_starts_on():
    """``meanfield run`` asks resolved_start and cost_estimate before anything runs: of the first solver that
    takes the density, the one solve starts on."""
    model = mf.SelfAttention(9.0)
    chain = solvers.solver_for(model, method="fourier", then=("finite_volumes", "mass_coordinates"), cells=256,
                               points=512)
    smooth = chain.resolved_start(three_clusters)
    assert smooth.stage == 0 and smooth.state.shape == (128,)  # the Fourier coefficients
    assert chain.cost_estimate(smooth, 10.0) is not None
    step = chain.resolved_start(lambda t: 1.0 + (np.abs(t - np.pi) < 0.5))
    assert step.stage == 1 and step.state.shape == (256,)  # the finite volumes' averages
    assert chain.cost_estimate(step, 10.0).steps > 0


def test_a_model_written_outside_the_library_runs_through_the_chain():
    """The seam: a model that provides only its velocity_field (tests/test_reduction.py's kernel
    e^{beta u} + 0.3 u^2) hands over from Fourier to finite volumes to labels through the reference paths, and
    ends with the clusters of its labels from t = 0 (the reference; the error handed over, as above)."""
    from test_reduction import UserKernel

    model, times = UserKernel(1.0), np.array([0.0, 2.0, 20.0])
    ds = solvers.solve(model, three_clusters, times, method="fourier", then=("finite_volumes", "mass_coordinates"),
                       cells=128, points=512, progress=False)
    assert json.loads(ds.attrs["settings"])["stages"] == ["CircleSpectral", "CircleFV", "CircleLagrangian"]
    assert ds.stage.values[-1] == "CircleLagrangian"
    reference = CircleLagrangian(model, points=512, cells=128, rtol=1e-10).solve(three_clusters, times,
                                                                                progress=False)
    assert ds.cluster_count.values[-1] == reference.cluster_count.values[-1]
    masses, positions = by_position(ds.cluster_mass.values[-1], ds.cluster_position.values[-1])
    exact_masses, exact_positions = by_position(reference.cluster_mass.values[-1],
                                                reference.cluster_position.values[-1])
    kept = np.isfinite(exact_masses)
    np.testing.assert_allclose(masses[kept], exact_masses[kept], atol=2e-3)
    np.testing.assert_allclose(positions[kept], exact_positions[kept], atol=1e-2)


def test_the_classes_of_one_hand_over_are_chains_of_their_two_solvers():
    """CircleAuto, CircleFVLagrangian, SphereSpectralParticles and ZonalSpectralRings are thin constructors over
    Chain: their stages are the two solvers they build. Where one does not apply (diffusion stops the sphere's
    hand-over to atoms) the other runs alone: it records no hand-over, and ends at its first under-resolved
    output as the solver alone does (``underresolved="stop"``), flagging it."""
    model = mf.SelfAttention(9.0)
    built = {solvers.CircleAuto(model, cells=256): ["CircleSpectral", "CircleFV"],
             CircleFVLagrangian(model, cells=128, points=256): ["CircleFV", "CircleLagrangian"],
             solvers.SphereSpectralParticles(mf.SelfAttention(4.0), lmax=15): ["SphereSpectral",
                                                                               "SphereWeightedParticles"],
             solvers.ZonalSpectralRings(model, d=4, lmax=24): ["ZonalSphereSpectral", "ZonalRings"]}
    for solver, names in built.items():
        assert isinstance(solver, Chain) and [stage.name for stage in solver.stages] == names
    noisy = solvers.SphereSpectralParticles(mf.SelfAttention(4.0, diffusion=0.002), lmax=15)
    assert [stage.name for stage in noisy.stages] == ["SphereSpectral"]
    times, start = [0.0, 1.0, 2.0, 3.0, 4.0], lambda x: np.exp(2.5 * x[..., 2])
    with pytest.warns(solvers.UnderResolvedWarning, match="negative"):
        ds = noisy.solve(start, times, progress=False)
    with pytest.warns(solvers.UnderResolvedWarning, match="negative"):
        alone = noisy.stages[0].solve(start, times, progress=False)
    assert ds.sizes["time"] == alone.sizes["time"] < len(times) and not ds.resolved.values[-1]
    np.testing.assert_array_equal(ds.rho.values, alone.rho.values)
    settings = json.loads(ds.attrs["settings"])
    assert settings["handover_times"] == [] and np.isnan(settings["handover_time"]) and not ds.particles.values.any()
