"""CircleAuto: the spectral solver while it resolves the density, the finite volumes after, in one call."""

import json
import warnings

import numpy as np
import pytest
import xarray as xr

import meanfield as mf
from solvers import CircleAuto, CircleFV, CircleSpectral, UnderResolvedWarning
from solvers.grid_solver import joined_runs


def clustering_start(theta):
    return 1 + 0.1 * np.cos(4 * theta) + 0.05 * np.sin(3 * theta + 0.3)


@pytest.mark.filterwarnings("ignore::solvers.UnderResolvedWarning")  # the finite volumes' error passes 1e-3 at t = 5.5
def test_a_clustering_run_hands_over_before_any_negative_density_and_matches_circle_fv():
    """SA beta = 9, D = 0: the hand-over comes before a negative value is stored; until the finite
    volumes stop resolving the clusters, the result equals CircleFV from the start within
    CircleFV's Richardson estimate (second order; the spectral part is far more accurate), with
    10 % for the estimate's higher-order remainder."""
    model = mf.SelfAttention(9.0)
    times = np.linspace(0.0, 6.0, 13)
    auto = CircleAuto(model, cells=1024).solve(clustering_start, times, progress=False, underresolved="continue")
    settings = json.loads(auto.attrs["settings"])
    handover = settings["handover_time"]
    assert times[0] < handover < times[-1]
    np.testing.assert_array_equal(auto.spectral.values, times < handover)
    assert auto.min_density.values.min() >= 0 and auto.rho.values.min() >= 0
    assert settings["handover_clipped"] == 0.0
    assert set(settings["runs"]) == {"CircleSpectral", "CircleFV"}
    fine_run, coarse_run = (CircleFV(model, cells=n).solve(clustering_start, times, progress=False,
                                                           underresolved="continue") for n in (1024, 512))
    for name in fine_run.data_vars:  # what each series is (its name, what an energy holds) survives the join
        assert auto[name].attrs == fine_run[name].attrs, name
    assert auto.rho.attrs["long_name"] == "density" and auto.energy.attrs["note"] == "E"
    fine, coarse = fine_run.rho.values, coarse_run.rho.values
    estimate = np.abs(fine.reshape(times.size, 512, 2).mean(axis=-1) - coarse).max(axis=1) / 3
    difference = np.abs(auto.rho.values - fine).max(axis=1)
    assert np.all(difference <= 1.1 * estimate + 1e-12), np.c_[times, difference, estimate]


@pytest.mark.filterwarnings("ignore::solvers.UnderResolvedWarning")  # a discontinuous start is not resolved
def test_a_smooth_run_stays_spectral_and_a_sharp_start_takes_the_finite_volumes():
    smooth = CircleAuto(mf.SelfAttention(3.0, diffusion=0.1), cells=256).solve(
        lambda th: 1 + 0.3 * np.cos(th), [0.0, 1.0, 2.0], progress=False)
    assert smooth.spectral.values.all() and np.isnan(json.loads(smooth.attrs["settings"])["handover_time"])
    assert set(json.loads(smooth.attrs["settings"])["runs"]) == {"CircleSpectral"}
    step = lambda th: np.where(np.abs(th - np.pi) < 0.5, 1.0, 0.0)  # noqa: E731  (discontinuous)
    sharp = CircleAuto(mf.SelfAttention(3.0, diffusion=0.1), cells=256).solve(step, [0.0, 0.1], progress=False)
    assert not sharp.spectral.values.any() and json.loads(sharp.attrs["settings"])["handover_time"] == 0.0
    # the spectral solver's diagnostic, NaN here, still says what it is (as a spectral run records it)
    assert np.isnan(sharp.spectral_tail.values).all()
    assert sharp.spectral_tail.attrs == smooth.spectral_tail.attrs
    assert sharp.spectral_tail.attrs["long_name"].startswith("spectral energy fraction")


def test_a_kernel_the_spectral_grid_cannot_resolve_leaves_the_finite_volumes():
    solver = CircleAuto(mf.SelfAttention(400.0), cells=64)
    assert solver.spectral is None
    ds = solver.solve(lambda th: 1 + 0.1 * np.cos(th), [0.0, 0.01], progress=False)
    assert not ds.spectral.values.any()


def test_spectral_cells_must_divide_cells():
    with pytest.raises(ValueError, match="spectral_cells must divide cells=256"):
        CircleAuto(mf.SelfAttention(1.0), cells=256, spectral_cells=96)
    assert CircleAuto(mf.SelfAttention(1.0), cells=256).spectral.cells == 64


@pytest.mark.filterwarnings("ignore::solvers.UnderResolvedWarning")  # 512 cells: error above 1e-3 from t = 5
def test_a_config_runs_it_in_checkpointed_segments_as_in_one_call(tmp_path):
    """``method.kind = "CircleAuto"``: the run's segments (each a call, continued from the last) join into the
    one-call result, the hand-over included; every segment carries both solvers' diagnostics."""
    from validation.app import run_experiment

    config = {"geometry": "circle", "output": str(tmp_path / "run"), "times": {"stop": 6.0, "count": 13},
              "checkpoint_every": 4, "model": {"beta": 9.0}, "method": {"kind": "CircleAuto", "cells": 512},
              "initial": {"kind": "perturbed_uniform", "amplitude": 0.1, "mode": 4}}
    ds = run_experiment(config, progress=False)
    assert ds.spectral.values[0] and not ds.spectral.values[-1]
    rho0 = lambda th: 1 + 0.1 * np.cos(4 * th)  # noqa: E731  (perturbed_uniform, mode 4)
    direct = CircleAuto(mf.SelfAttention(9.0), cells=512).solve(rho0, ds.time.values, progress=False)
    # the segments' boundaries round-trip cell averages through coefficients: round-off only
    np.testing.assert_allclose(ds.rho.values, direct.rho.values, rtol=0, atol=1e-12 * direct.rho.values.max())
    np.testing.assert_array_equal(ds.spectral.values, direct.spectral.values)
    handover = json.loads(direct.attrs["settings"])["handover_time"]
    assert handover < ds.time.values[8]  # before the last segment, which starts on the finite volumes
    np.testing.assert_allclose(json.loads(ds.attrs["settings"])["handover_time"], handover, rtol=1e-12)
    np.testing.assert_allclose(json.loads(ds.attrs["settings"])["handover_clipped"],
                               json.loads(direct.attrs["settings"])["handover_clipped"], rtol=1e-9, atol=1e-18)


def test_the_spectral_pair_is_named_through_circle_auto():
    """Dormand-Prince 8(5,3) for the spectral part (the finite volumes keep theirs): the same
    density within the tolerance, in fewer right-hand sides."""
    model = mf.SelfAttention(5.0)
    start = lambda th: 1 + 0.1 * np.cos(th) + 0.05 * np.sin(3 * th + 0.4)  # noqa: E731
    runs = {name: CircleAuto(model, cells=384, spectral_cells=96, rtol=1e-8, tableau=name).solve(
        start, [0.0, 4.0], progress=False) for name in ("dormand_prince", "dormand_prince_853")}
    assert all(bool(ds.spectral.all()) for ds in runs.values())
    counts = {name: json.loads(ds.attrs["settings"])["runs"]["CircleSpectral"]["rhs_evaluations"]
              for name, ds in runs.items()}
    assert counts["dormand_prince_853"] < counts["dormand_prince"], counts
    difference = np.abs(runs["dormand_prince_853"].rho.values - runs["dormand_prince"].rho.values).max()
    assert difference < 1e-6 * runs["dormand_prince"].rho.values.max()


def test_the_default_spectral_pair_is_8_5_3_without_diffusion_and_5_4_with():
    """``tableau="auto"``: the hand-over ends the spectral part while the density is smooth, where
    8(5,3)'s reach along the imaginary axis pays; diffusion's integrating factor needs 5(4)."""
    assert CircleAuto(mf.SelfAttention(5.0), cells=256).spectral.tableau.name == "dormand_prince_853"
    assert CircleAuto(mf.SelfAttention(5.0, diffusion=0.05), cells=256).spectral.tableau.name == "dormand_prince"
    assert CircleAuto(mf.SelfAttention(5.0), cells=256, tableau="dormand_prince").spectral.tableau.name \
        == "dormand_prince"


def test_parts_that_record_a_series_with_different_meanings_are_not_joined():
    def part(note, time):
        return xr.Dataset({"energy": ("time", [1.0], {"note": note})}, coords={"time": [time]})

    joined = joined_runs([(part("E", 0.0), True), (part("E", 1.0), False)], "first", "which part")
    assert joined.energy.attrs == {"note": "E"} and joined.first.values.tolist() == [True, False]
    assert joined.time.values.tolist() == [0.0, 1.0]
    with pytest.raises(ValueError, match="'energy' with different attributes"):
        joined_runs([(part("E", 0.0), True), (part("exp(-beta) E", 1.0), False)], "first", "which part")


def test_past_the_tail_threshold_the_spectral_part_goes_on_while_its_error_is_within_rtol():
    """SA beta = 5, D = 0, 64 modes: the tail passes 1e-10 near t = 4; at rtol 1e-4 the run stays
    spectral to t = 4.5, at every output within 4 rtol max|rho - mean| of a run at four times the
    modes (the estimate's calibrated claim, ``tests/test_circle_error_estimate.py``: the true error
    is at most four times it), where at rtol 1e-6 the tail hands it over."""
    model = mf.SelfAttention(5.0)
    start = lambda th: 1 + 0.1 * np.cos(th) + 0.05 * np.sin(3 * th + 0.4)  # noqa: E731
    times = np.linspace(0.0, 4.5, 10)
    reference = CircleSpectral(model, cells=256, rtol=1e-11).solve(start, times, progress=False).rho.values
    exact = reference.reshape(times.size, 64, 4).mean(axis=-1)  # the averages over the 64 cells
    with warnings.catch_warnings():
        warnings.simplefilter("error", UnderResolvedWarning)
        loose = CircleAuto(model, cells=64, spectral_cells=64, rtol=1e-4).solve(start, times, progress=False)
    assert loose.spectral.values.all() and loose.spectral_tail.values[-1] > 1e-10
    deviation = np.abs(exact - 1 / (2 * np.pi)).max(axis=1)
    error = np.abs(loose.rho.values - exact).max(axis=1)
    assert np.all(error <= 4 * 1e-4 * deviation), error / deviation
    tight = CircleAuto(model, cells=64, spectral_cells=64, rtol=1e-6, error_level=None).solve(
        start, times, progress=False)
    assert times[0] < json.loads(tight.attrs["settings"])["handover_time"] < times[-1]


@pytest.mark.parametrize("rtol, resolved", [(5e-6, False), (1e-4, True)])
def test_the_tail_criterion_past_its_threshold_compares_the_error_estimate_with_rtol(rtol, resolved):
    r"""A Poisson kernel series, :math:`\rho = (1 + 2a\sum_k r^k \cos k\theta)/2\pi`, r = 0.7, 32 modes:
    the top 10 % of modes hold about 4e-9 of the deviation's energy, more than the 1e-10 threshold,
    and the estimated error is about 2e-5 of :math:`\max|\rho - \bar\rho| = a r/\pi(1 - r)`."""
    solver = CircleSpectral(mf.SelfAttention(1.0), cells=64, rtol=rtol, error_level=None)
    a, r, k = 0.5, 0.7, np.arange(32)
    coefficients = np.where(k == 0, 1.0, a * r ** k) / (2 * np.pi) + 0j
    power = np.abs(coefficients[1:]) ** 2
    assert power[k[1:] > 0.9 * 31].sum() / power.sum() > 1e-10
    relative = solver.error_estimate(coefficients) / (a * r / (np.pi * (1 - r)))
    assert 5e-6 < relative < 1e-4, relative
    assert solver._resolves(coefficients) is resolved
    negative = coefficients.copy()
    negative[0] *= -1  # the mean negated: negative over most of the circle, whatever the error
    assert solver._resolves(negative) is False


@pytest.mark.filterwarnings("ignore::solvers.UnderResolvedWarning")  # the finite volumes from t = 5.6, run on
def test_interpolated_outputs_reach_the_spectral_part_and_every_output_is_recorded():
    """``outputs="interpolated"`` is the spectral solver's: it takes fewer steps than the outputs before
    the hand-over, the finite volumes step to each after it, and none of the 801 is lost."""
    times = np.linspace(0.0, 8.0, 801)
    ds = CircleAuto(mf.SelfAttention(9.0), cells=512, outputs="interpolated").solve(
        lambda th: 1 + 0.1 * np.cos(4 * th), times, progress=False, underresolved="continue")
    np.testing.assert_array_equal(ds.time.values, times)
    settings = json.loads(ds.attrs["settings"])
    spectral = settings["runs"]["CircleSpectral"]
    assert spectral["outputs"] == "interpolated" and spectral["steps"] < ds.spectral.values.sum()
    assert settings["runs"]["CircleFV"]["steps"] >= (~ds.spectral.values).sum()
    with pytest.raises(ValueError, match="no dense output with diffusion"):
        CircleAuto(mf.SelfAttention(9.0, diffusion=0.1), cells=512, outputs="interpolated")
