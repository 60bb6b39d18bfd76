"""Datasets say what they are through one set of accessors; runs record the seed that repeats them."""

from __future__ import annotations

import numpy as np
import pytest
import xarray as xr

import meanfield as mf
from meanfield.records import (CIRCLE, PARTICLES, PDE, SPHERE, STUDY, dataset_geometry, dataset_kind,
                               dataset_model, dataset_settings, geometry_dimension, geometry_name)
from solvers import CircleFV, SphereSpectral
from validation import StudySettings, mean_field_convergence


@pytest.mark.parametrize("d, geometry", [(2, CIRCLE), (3, SPHERE), (5, "S^4")])
def test_particle_runs_say_kind_geometry_model_and_settings(d, geometry, rng):
    model = mf.SelfAttention(1.5)
    ds = mf.simulate_particles(model, mf.sample_uniform(5, d, rng), [0.0, 0.1], method="rk4", dt=0.05)
    assert (dataset_kind(ds), dataset_geometry(ds)) == (PARTICLES, geometry)
    assert geometry_dimension(geometry) == d and geometry_name(d) == geometry
    assert dataset_model(ds) == model.to_dict()
    assert dataset_settings(ds)["method"] == "rk4" and dataset_settings(ds)["dt"] == 0.05


@pytest.mark.parametrize("solver, geometry", [(lambda m: CircleFV(m, cells=32), CIRCLE),
                                              (lambda m: SphereSpectral(m, lmax=12), SPHERE)],
                         ids=["circle", "sphere"])
def test_pde_runs_say_kind_geometry_model_and_settings(solver, geometry):
    model = mf.SelfAttention(1.0)
    ds = solver(model).solve(lambda p: np.ones(np.shape(p)[:-1] if geometry == SPHERE else np.shape(p)), [0, 0.1])
    assert (dataset_kind(ds), dataset_geometry(ds)) == (PDE, geometry)
    assert dataset_model(ds) == model.to_dict()
    assert dataset_settings(ds)["steps"] >= 1


def test_files_of_earlier_versions_are_read():
    old = xr.Dataset({"rho": (("time", "colatitude", "longitude"), np.ones((1, 2, 4)))},
                     attrs={"geometry": "S^2", "settings": '{"lmax": 2}'})
    assert (dataset_kind(old), dataset_geometry(old), dataset_settings(old)) == (PDE, SPHERE, {"lmax": 2})
    assert dataset_model(old) == {}


@pytest.mark.parametrize("attrs, message", [({"kind": "film"}, "kind"), ({"kind": "pde", "geometry": "torus"},
                                                                        "geometry")])
def test_foreign_datasets_are_refused(attrs, message):
    ds = xr.Dataset({"rho": ("time", [1.0])}, attrs=attrs)
    with pytest.raises(ValueError, match=message):
        dataset_kind(ds) and dataset_geometry(ds)


@pytest.mark.parametrize("rng_kind", ["generator", "none"])
def test_a_noisy_run_records_the_seed_that_repeats_it(rng_kind):
    model = mf.SelfAttention(2.0, diffusion=0.3)
    x0 = mf.sample_uniform(6, 3, 0)
    rng = np.random.default_rng(11) if rng_kind == "generator" else None
    first = mf.simulate_particles(model, x0, [0.0, 0.2], dt=0.05, rng=rng)
    seed = dataset_settings(first)["seed"]
    assert isinstance(seed, int)
    again = mf.simulate_particles(model, x0, [0.0, 0.2], dt=0.05, rng=seed)
    np.testing.assert_array_equal(first.x.values, again.x.values)


def test_the_convergence_study_takes_a_generator_and_records_its_seed():
    def study(rng):
        return mean_field_convergence(mf.SelfAttention(1.0), lambda th: 1 + 0.3 * np.cos(th), sizes=[8, 16],
                                      seeds=2, times=[0.0, 0.1], rng=rng,
                                      settings=StudySettings(cells=64, particle_dt=0.05, bootstrap=20))

    first = study(np.random.default_rng(4))
    assert dataset_kind(first) == STUDY
    seed = dataset_settings(first)["rng"]
    np.testing.assert_array_equal(study(seed).distance.values, first.distance.values)


def test_runs_on_one_grid_and_times_share_their_indexed_coordinates_and_record_their_own_values():
    from meanfield.datasets import indexed_coordinates

    model = mf.SelfAttention(2.0, diffusion=0.1)
    first, second = (CircleFV(model, cells=32).solve(lambda t: 1 + 0.2 * np.cos(t), [0.0, 0.1], progress=False)
                     for _ in range(2))
    finer = CircleFV(model, cells=64).solve(lambda t: 1 + 0.2 * np.cos(t), [0.0, 0.1], progress=False)
    # the values: the cell centres (k + 1/2) 2 pi / N, written out here, not taken from the solver
    np.testing.assert_array_equal(first.theta.values, (np.arange(32) + 0.5) * (2 * np.pi / 32))
    np.testing.assert_array_equal(finer.theta.values, (np.arange(64) + 0.5) * (2 * np.pi / 64))
    # built once for the grid and times (each dataset holds its own shallow copy of the index object)
    assert first.xindexes["theta"].index is second.xindexes["theta"].index
    assert first.xindexes["time"].index is second.xindexes["time"].index
    assert first.xindexes["theta"].index is not finer.xindexes["theta"].index
    later = CircleFV(model, cells=32).solve(lambda t: 1 + 0.2 * np.cos(t), [0.0, 0.2], progress=False)
    assert later.time.values.tolist() == [0.0, 0.2] and first.time.values.tolist() == [0.0, 0.1]
    for values in (first.theta.values, first.time.values):
        with pytest.raises(ValueError, match="read-only"):  # a dataset cannot change what later runs share
            values[0] = 1.0
    # the same bytes of another dtype are another coordinate
    integers = np.arange(4, dtype=np.int64)
    assert indexed_coordinates({"k": integers})["k"].dtype == np.int64
    assert indexed_coordinates({"k": integers.view(np.float64)})["k"].dtype == np.float64


def test_datasets_of_one_layout_share_no_values_or_attributes():
    # the grid solvers fill a template per layout (solvers.grid_solver.assembled_dataset):
    # what one run's dataset is given or changed must not reach the next run's
    model = mf.SelfAttention(2.0, diffusion=0.1)

    def run():
        return CircleFV(model, cells=32).solve(lambda t: 1 + 0.2 * np.cos(t), [0.0, 0.1], progress=False)

    first = run()
    expected = run().rho.values.copy()
    first.rho.values[:] = -1.0
    first.rho.attrs["units"] = "changed"
    first.energy.attrs["note"] = "changed"
    first.attrs["underresolved_since"] = -1.0
    second = run()
    np.testing.assert_array_equal(second.rho.values, expected)
    assert second.rho.attrs == {"long_name": "density"} and second.energy.attrs["note"] == "E"
    assert np.isnan(second.attrs["underresolved_since"])
    assert second.resolved.dtype == bool and second.mass.dtype == np.float64
    # the values are the run's own arrays: writable, and not a view of the template's zeros
    assert second.rho.values.flags.writeable and not np.shares_memory(second.rho.values, first.rho.values)
