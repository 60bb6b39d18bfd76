"""CircleLagrangian: the mean-field equation on the circle in mass coordinates.

References independent of the solver: the weighted particle ODE written here with scipy
(Dirac masses), the two-point ODE of two clusters, CircleFV (an Eulerian discretisation
sharing no code with it), and the solver's own convergence in the number of labels.
"""

import json

import numpy as np
import pytest
from scipy.integrate import solve_ivp
from scipy.optimize import brentq

import meanfield as mf
from solvers import CircleFV
from solvers.circle.lagrangian import TIED, TWO_PI, CircleLagrangian, PointMasses, _turn_angles, tied_atoms
from validation import Merge, merge_times


def smooth_start(theta):
    return 1 + 0.1 * np.cos(theta) + 0.05 * np.sin(3 * theta + 0.3)


def weighted_sa_velocity(beta, angles, masses):
    """SA on the circle for tokens of masses ``masses``: the softmax over the others weighted by their mass."""
    difference = angles[None, :] - angles[:, None]
    weights = masses[None, :] * np.exp(beta * (np.cos(difference) - 1))
    return (weights * np.sin(difference)).sum(axis=1) / weights.sum(axis=1)


def test_dirac_masses_move_as_the_weighted_particle_system():
    """D = 0: masses that are multiples of 1/M are represented exactly; the labels of each Dirac stay
    together and follow the weighted particle ODE (DOP853 at rtol 1e-12) to the integrators' accuracy."""
    beta, points = 5.0, 64
    angles = np.array([0.3, 1.9, 2.2, 4.0, 5.5])
    masses = np.array([12, 20, 8, 16, 8]) / 64
    times = np.linspace(0.0, 4.0, 5)
    solver = CircleLagrangian(mf.SelfAttention(beta), points=points, cells=64, rtol=1e-12)
    ds = solver.solve(PointMasses(angles, masses), times, progress=False)
    reference = solve_ivp(lambda t, y: weighted_sa_velocity(beta, y, masses), (0.0, 4.0), angles,
                          method="DOP853", rtol=1e-13, atol=1e-13, t_eval=times).y.T
    owner = np.repeat(np.arange(angles.size), (masses * points).astype(int))
    np.testing.assert_allclose(ds.position.values, reference[:, owner], atol=1e-9)
    for row in ds.position.values:  # the labels of one Dirac mass share one position exactly
        for k in range(angles.size):
            assert np.ptp(row[owner == k]) == 0.0


def test_two_clusters_merge_when_the_two_point_ode_says():
    """Two Dirac masses 3/8 and 5/8 at distance 1.2 (SA beta = 4): the solver's cluster count drops from 2
    to 1 between the outputs that bracket the time at which the two-point ODE brings their distance to
    the cluster separation 0.2."""
    beta, masses = 4.0, np.array([3, 5]) / 8

    def gap_rate(t, gap):
        return weighted_sa_velocity(beta, np.array([0.0, gap[0]]), masses)[1:] - \
            weighted_sa_velocity(beta, np.array([0.0, gap[0]]), masses)[:1]

    path = solve_ivp(gap_rate, (0.0, 50.0), [1.2], method="DOP853", rtol=1e-12, atol=1e-14, dense_output=True)
    merge = brentq(lambda t: path.sol(t)[0] - 0.2, 0.0, 50.0, xtol=1e-12)
    times = np.array([0.0, merge - 1e-3, merge + 1e-3])
    solver = CircleLagrangian(mf.SelfAttention(beta), points=8, cells=64, rtol=1e-10)  # masses 3/8, 5/8
    ds = solver.solve(PointMasses([1.0, 2.2], masses), times, progress=False)
    assert list(ds.cluster_count.values) == [2, 2, 1]
    assert merge_times(ds) == [Merge(times[1], times[2], 2, 1)]
    np.testing.assert_allclose(np.sort(ds.cluster_mass.values[1][:2]), masses)
    np.testing.assert_allclose(ds.cluster_mass.values[2][0], 1.0)


def test_the_transport_in_mass_is_spectral_and_the_diffusion_second_order():
    """Labels of M points are every third label of 3M points. D = 0: the positions agree far beyond
    any power of 1/M (the midpoint rule of a periodic integrand); D > 0: their distance falls by 9
    per tripling (second order), measured."""
    times = [0.0, 2.0]
    transport = [CircleLagrangian(mf.SelfAttention(5.0), points=m, cells=64, rtol=1e-11).solve(
        smooth_start, times, progress=False).position.values[-1] for m in (128, 384)]
    assert np.abs(transport[0] - transport[1][1::3]).max() < 1e-9
    model = mf.SelfAttention(5.0, diffusion=0.1)
    runs = [CircleLagrangian(model, points=m, cells=64, rtol=1e-10).solve(smooth_start, times, progress=False)
            .position.values[-1] for m in (64, 192, 576)]
    differences = [np.abs(coarse - fine[1::3]).max() for coarse, fine in zip(runs, runs[1:])]
    assert 9 / 1.5 < differences[0] / differences[1] < 9 * 1.5, differences


@pytest.mark.parametrize("diffusion", [0.0, 0.05])
def test_the_measure_converges_to_what_circle_fv_converges_to(diffusion):
    """Cell averages on 64 cells: the L1 distance between CircleLagrangian (M labels) and CircleFV (N cells)
    falls at second order as both refine (both are second order in the recorded averages)."""
    model = mf.SelfAttention(9.0, diffusion=diffusion)
    times = np.linspace(0.0, 4.0, 3)
    distances = []
    for points, cells in ((256, 128), (512, 256), (1024, 512)):
        measure = CircleLagrangian(model, points=points, cells=64, rtol=1e-10).solve(smooth_start, times,
                                                                                    progress=False)
        grid = CircleFV(model, cells=cells, rtol=1e-7, error_level=None).solve(smooth_start, times, progress=False)
        averaged = grid.rho.values.reshape(times.size, 64, -1).mean(axis=-1)
        distances.append(np.abs(measure.rho.values - averaged).sum(axis=-1)[-1] * 2 * np.pi / 64)
    ratios = np.array(distances[:-1]) / np.array(distances[1:])
    assert np.all((ratios > 4 / 1.6) & (ratios < 4 * 1.6)), (distances, ratios)


def test_the_free_energy_agrees_with_circle_fv_and_decreases():
    """USA with diffusion is a gradient flow: D int rho log rho - cE, from the labels' spacings and their
    energy, equals CircleFV's functional to their discretisation errors and never increases."""
    model = mf.SelfAttention(3.0, normalized=False, diffusion=0.2)
    times = np.linspace(0.0, 3.0, 7)
    measure = CircleLagrangian(model, points=1024, cells=128).solve(smooth_start, times, progress=False)
    grid = CircleFV(model, cells=1024).solve(smooth_start, times, progress=False)
    np.testing.assert_allclose(measure.lyapunov.values, grid.lyapunov.values, rtol=1e-5)
    assert np.all(np.diff(measure.lyapunov.values) < 0)
    assert np.all(measure.mass.values == 1.0)


def test_cell_averages_of_a_measure_and_its_clusters():
    solver = CircleLagrangian(mf.SelfAttention(1.0), points=8, cells=8, min_cluster_mass=0.0)
    positions = solver.initial_quantile(PointMasses([0.1, 3.0, 6.2], [0.25, 0.5, 0.25]))
    np.testing.assert_allclose(positions, [0.1, 0.1, 3.0, 3.0, 3.0, 3.0, 6.2, 6.2])
    masses, where = solver.clusters(positions)
    # 6.2 and 0.1 are 0.18 apart across angle 0: one cluster of mass 1/2 at their middle
    np.testing.assert_allclose(masses, [0.5, 0.5])
    np.testing.assert_allclose(np.sort(where), np.sort([3.0, np.mod(0.5 * (6.2 + 0.1 + 2 * np.pi), 2 * np.pi)]))
    uniform = solver.initial_quantile(np.ones(8))
    np.testing.assert_allclose(uniform, 2 * np.pi * (np.arange(8) + 0.5) / 8)
    np.testing.assert_allclose(solver.density(uniform), np.full(8, 1 / (2 * np.pi)))


def test_bad_input_is_refused():
    with pytest.raises(ValueError, match="on the circle"):
        CircleLagrangian(mf.SelfAttention(1.0, query=np.eye(3)))
    with pytest.raises(ValueError, match="causal"):
        CircleLagrangian(mf.CausalAttention(1.0, normalized=True))
    with pytest.raises(ValueError, match="must have a density"):
        CircleLagrangian(mf.SelfAttention(1.0, diffusion=0.1), points=8).solve(
            PointMasses([1.0, 2.0], [1, 1]), [0.0, 1.0], progress=False)
    with pytest.raises(ValueError, match="masses must be positive"):
        PointMasses([1.0, 2.0], [1.0, 0.0])
    with pytest.raises(ValueError, match="ds.position"):
        CircleLagrangian(mf.SelfAttention(1.0), points=8).solve(np.ones(9), [0.0, 1.0], continued=True)


def clustering_start(theta):
    return 1 + 0.1 * np.cos(4 * theta) + 0.05 * np.sin(3 * theta + 0.3)


def decimated_density(positions, cells):
    """Cell averages from the piecewise-linear distribution through every other label, written here with np.interp.

    Its reconstruction error is 3 to 4 times that of all labels (second order; the factor depends on
    where the cell edges fall between labels), so its difference to them bounds their error."""
    points = positions.size
    labels = (np.arange(points) + 0.5)[::2] / points
    kept = positions[::2]
    lifted = np.concatenate([kept - 2 * np.pi, kept, kept + 2 * np.pi])
    mass = np.concatenate([labels - 1, labels, labels + 1])
    edges = np.linspace(0.0, 2 * np.pi, cells + 1)
    return np.diff(np.interp(edges, lifted, mass)) * cells / (2 * np.pi)


def test_one_call_follows_the_clusters_past_the_grid_and_agrees_with_the_measure_from_the_start():
    """SA beta = 9, D = 0, to t = 200. Before the hand-over the finite volumes equal the Lagrangian run
    from t = 0 (the reference: spectral in mass) within the finite volumes' error estimate plus the
    reconstruction error of the averages (bounded from every other label); the hand-over comes when
    the estimate passes 1e-3 of max rho; after it the clusters (masses, positions) and their merges are
    once formed, those of the reference to the error handed over (1e-3 of max rho, times the width of a cluster's
    basin: 2e-3 in mass, 1e-2 in angle)."""
    from solvers import CircleFVLagrangian

    model = mf.SelfAttention(9.0)
    times = np.array([0.0, 2.0, 4.0, 5.0, 6.0, 8.0, 20.0, 60.0, 200.0])
    solver = CircleFVLagrangian(model, cells=1024, points=4096)
    ds = solver.solve(clustering_start, times, progress=False)
    handover = json.loads(ds.attrs["settings"])["handover_time"]
    assert 4.0 < handover < 6.0 and np.isnan(ds.attrs["underresolved_since"])
    np.testing.assert_array_equal(ds.lagrangian.values, times > handover)
    grid = ~ds.lagrangian.values
    assert np.all(ds.error_estimate.values[grid] <= 1e-3 * ds.rho.values[grid].max(axis=1))

    reference_solver = CircleLagrangian(model, points=4096, cells=1024, rtol=1e-10)
    reference = reference_solver.solve(clustering_start, times, progress=False)
    width = 2 * np.pi / 1024
    for index in np.flatnonzero(grid):
        positions = reference.position.values[index]
        reconstruction = np.abs(reference.rho.values[index] - decimated_density(positions, 1024)).sum() * width
        distance = np.abs(ds.rho.values[index] - reference.rho.values[index]).sum() * width
        assert distance <= 2 * np.pi * ds.error_estimate.values[index] + reconstruction + 1e-12, \
            (times[index], distance, ds.error_estimate.values[index], reconstruction)
    formed = times >= 6.0  # while clusters form, a gap near the separation may count either way
    np.testing.assert_array_equal(ds.cluster_count.values[formed], reference.cluster_count.values[formed])
    after = ds.lagrangian.values & formed
    assert ds.cluster_count.values[-1] < ds.cluster_count.values[after][0]  # a merge after the hand-over
    for run, ref in zip(by_position(ds, after), by_position(reference, after)):  # masses may tie: pair by place
        np.testing.assert_allclose(run[0], ref[0], atol=2e-3)
        np.testing.assert_allclose(run[1], ref[1], atol=1e-2)


def by_position(ds, rows):
    """Per output, the clusters' masses and positions in order of position."""
    for masses, positions in zip(ds.cluster_mass.values[rows], ds.cluster_position.values[rows]):
        order = np.argsort(positions)
        yield masses[order], positions[order]


def test_a_run_the_grid_resolves_stays_on_the_grid():
    from solvers import CircleFVLagrangian

    ds = CircleFVLagrangian(mf.SelfAttention(2.0, diffusion=0.2), cells=256, points=512).solve(
        smooth_start, [0.0, 1.0, 3.0], progress=False)
    assert not ds.lagrangian.values.any() and np.isnan(json.loads(ds.attrs["settings"])["handover_time"])
    assert ds.position.shape == (3, 512) and np.all(ds.cluster_count.values == 1)


def test_a_config_runs_it_in_checkpointed_segments_as_in_one_call(tmp_path):
    """``method.kind = "CircleFVLagrangian"``: segments continued from each other's continuation_state (the
    finite volumes' shadow, then the labels' positions) join into the one-call result, hand-over included."""
    from solvers import CircleFVLagrangian
    from validation.app import run_experiment

    config = {"geometry": "circle", "output": str(tmp_path / "run"), "times": {"stop": 8.0, "count": 9},
              "checkpoint_every": 3, "model": {"beta": 9.0},
              "method": {"kind": "CircleFVLagrangian", "cells": 256, "points": 1024},
              "initial": {"kind": "perturbed_uniform", "amplitude": 0.1, "mode": 4}}
    ds = run_experiment(config, progress=False)
    direct = CircleFVLagrangian(mf.SelfAttention(9.0), cells=256, points=1024).solve(
        lambda th: 1 + 0.1 * np.cos(4 * th), ds.time.values, progress=False)
    assert ds.lagrangian.values[-1] and not ds.lagrangian.values[0]
    np.testing.assert_array_equal(ds.lagrangian.values, direct.lagrangian.values)
    np.testing.assert_allclose(ds.rho.values, direct.rho.values, rtol=0, atol=1e-9 * direct.rho.values.max())
    np.testing.assert_array_equal(ds.cluster_count.values, direct.cluster_count.values)
    # the hand-over where it happened, not where the last segment began with the labels
    handover = json.loads(direct.attrs["settings"])["handover_time"]
    assert handover < ds.time.values[6]
    np.testing.assert_allclose(json.loads(ds.attrs["settings"])["handover_time"], handover, rtol=1e-12)


def test_merges_of_particles_and_of_the_limit_are_listed_alike():
    """merge_times reads the Lagrangian dataset's own counts and counts particle clusters output by output:
    tokens at the labels' initial positions are the same system, so both list the same merges."""
    model = mf.SelfAttention(4.0)
    times = np.linspace(0.0, 30.0, 16)
    measure = CircleLagrangian(model, points=64, cells=64, min_cluster_mass=0.0).solve(
        PointMasses([0.5, 1.6, 3.0, 4.1, 5.4], [12, 16, 12, 12, 12]), times, progress=False)
    tokens = mf.circle_points(measure.position.values[0])
    particles = mf.simulate_particles(model, tokens, times, method="dop853", rtol=1e-10)
    merges = merge_times(measure)
    assert merges and merges == merge_times(particles)


def _tied_atoms_array_form(positions):
    """The whole-array form of ``tied_atoms``: sorted angles, a new atom at each gap above TIED, the last one
    joined to the first across the turn."""
    angles = np.mod(positions, TWO_PI)
    order = np.argsort(angles, kind="stable")
    ordered = angles[order]
    starts = np.concatenate([[True], np.diff(ordered) > TIED])
    sorted_atom = np.cumsum(starts) - 1
    if sorted_atom[-1] > 0 and ordered[0] + TWO_PI - ordered[-1] <= TIED:
        sorted_atom[sorted_atom == sorted_atom[-1]] = 0
    atom = np.empty_like(sorted_atom)
    atom[order] = sorted_atom
    counts = np.bincount(atom)
    return atom, ordered[starts][: counts.size], counts


def test_the_compiled_tied_atoms_are_the_array_form_bit_for_bit():
    """Labels in a few tight groups (ties within TIED, gaps just above it), on both sides of the turn, negative
    and beyond one turn, zeros of both signs: the same atoms, angles and counts, of the same types."""
    rng = np.random.default_rng(4)
    for _ in range(2000):
        n = int(rng.integers(1, 60))
        centres = rng.choice([0.0, -0.0, 1e-13, TWO_PI - 1e-13, TWO_PI, 1.0, 3.0, -0.5, 7.0],
                             size=int(rng.integers(1, 5)))
        positions = rng.choice(centres, n) + rng.choice([0.0, 1e-13, 3e-12, 0.1], n) * rng.random(n)
        for ours, theirs in zip(tied_atoms(positions), _tied_atoms_array_form(positions)):
            assert ours.dtype == theirs.dtype
            np.testing.assert_array_equal(ours, theirs)
            assert np.array_equal(np.signbit(ours), np.signbit(theirs))
    # the angles of every label, across several turns and at the edges of the shortcuts
    edges = [-0.0, 0.0, TWO_PI, -TWO_PI, 2 * TWO_PI, -2 * TWO_PI, np.nextafter(TWO_PI, 0), np.nextafter(2 * TWO_PI, 0),
             np.nextafter(-TWO_PI, 0), 5e-324, -5e-324]
    positions = np.concatenate([edges, (rng.random(100_000) - 0.5) * 8 * TWO_PI])
    angles, expected = _turn_angles(positions), np.mod(positions, TWO_PI)
    np.testing.assert_array_equal(angles, expected)
    assert np.array_equal(np.signbit(angles), np.signbit(expected))
