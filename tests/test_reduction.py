"""Metastable runs with tight clusters reduced (meanfield.simulate_clusters) against independent references."""

import json

import numpy as np
import pytest
from scipy.integrate import solve_ivp
from scipy.spatial.distance import pdist

import meanfield as mf
from meanfield.reduction import ClusterReduction, group_diameter, linked_groups
from meanfield.sphere import normalize


def two_point_merge_time(beta: float, mass: float, gap: float, width: float) -> float:
    """When two SA atoms of masses ``mass`` and ``1 - mass`` at angle ``gap`` on the circle come within chord ``width``.

    Written from the circle's angles: each atom turns towards the other at the speed of its
    attention to it, ``m_o e^{beta cos phi} sin phi / (m_s e^beta + m_o e^{beta cos phi})``.
    """
    def closing(t, y):
        a = np.exp(beta * (np.cos(y[0]) - 1.0))
        return [-np.sin(y[0]) * ((1 - mass) * a / (mass + (1 - mass) * a) + mass * a / ((1 - mass) + mass * a))]

    def reached(t, y):
        return 2.0 * np.sin(y[0] / 2.0) - width

    reached.terminal = True
    solution = solve_ivp(closing, [0.0, 1e14], [gap], method="DOP853", rtol=1e-13, atol=1e-16, events=reached)
    return float(solution.t_events[0][0])


@pytest.mark.parametrize("beta, gap", [(5.0, 2.4), (12.0, 1.8), (20.0, 1.6)])
def test_two_weighted_atoms_merge_when_the_two_point_equation_says_even_beyond_a_million(beta, gap):
    width = 1e-6
    expected = two_point_merge_time(beta, 0.3, gap, width)
    ds = mf.simulate_clusters(mf.SelfAttention(beta), mf.circle_points(np.array([0.4, 0.4 + gap])),
                              np.array([0.0, 4 * expected]), masses=np.array([0.3, 0.7]), rtol=1e-10, width=width,
                              progress=False)
    assert ds.merge_time.size == 1 and ds.atoms.values[-1] == 1
    assert abs(float(ds.merge_time[0]) - expected) <= 1e-6 * expected, (float(ds.merge_time[0]), expected)
    if beta == 20.0:
        assert expected > 1e6
        assert json.loads(ds.attrs["settings"])["steps"] < 1000  # the slow approach costs few steps


def three_clusters(rng, beta=5.0):
    theta = np.concatenate([centre + 0.05 * rng.standard_normal(5) for centre in (0.0, 1.3, 3.6)])
    return mf.SelfAttention(beta), mf.circle_points(theta)


def test_a_merge_of_reduced_clusters_happens_when_the_unreduced_tokens_merge_within_the_estimate(rng):
    # two clusters of five tokens meet near t = 14: the unreduced run (width 0) gives the time at which the
    # chord between their barycentres falls to the width, on a dense output grid
    model, x0 = three_clusters(rng)
    width, times = 1e-4, np.linspace(0.0, 20.0, 2001)
    full = mf.simulate_clusters(model, x0, times, width=0, rtol=1e-12, progress=False)
    assert full.atoms.values[-1] == 15 and full.merge_time.size == 0
    x = full.x.values
    chord = np.linalg.norm(normalize(x[:, :5].mean(axis=1)) - normalize(x[:, 5:10].mean(axis=1)), axis=1)
    i = np.flatnonzero(chord <= width)[0]
    unreduced = times[i - 1] + (times[i] - times[i - 1]) * np.log(chord[i - 1] / width) / np.log(chord[i - 1] / chord[i])
    reduced = mf.simulate_clusters(model, x0, times[[0, -1]], width=width, tolerance=1e-8, rtol=1e-12, progress=False)
    last = int(np.argmax(reduced.merge_mass.values))
    assert reduced.merge_mass.values[last] == pytest.approx(10 / 15) and reduced.merge_atoms.values[last] == 2
    estimate = float(reduced.merge_time_error[last])
    assert 0 < estimate < 1e-3
    assert abs(float(reduced.merge_time[last]) - unreduced) <= estimate, (float(reduced.merge_time[last]), unreduced)
    # the reduced run steps over what the tokens' contraction made the unreduced one crawl through
    assert json.loads(reduced.attrs["settings"])["steps"] < json.loads(full.attrs["settings"])["steps"] / 4


def test_mass_is_kept_and_the_energy_never_falls_through_every_reduction(rng):
    model = mf.SelfAttention(9.0)
    x0 = mf.sample_circle(256, lambda theta: np.ones_like(theta), rng)
    ds = mf.simulate_clusters(model, x0, np.concatenate([[0.0], np.geomspace(1.0, 1e6, 60)]), progress=False)
    assert ds.atoms.values[-1] < 10 and ds.merge_time.size > 50
    np.testing.assert_allclose(ds.mass.values, 1.0, rtol=0, atol=1e-13)
    energy = ds.energy.values
    assert np.all(np.diff(energy) >= -1e-13 * energy[1:])
    assert np.all(ds.merge_energy_change.values >= -1e-14 * energy.max())  # round-off of a sum of 1e2
    # the energy is that of the reduced measure: a token's recorded position is its atom's, so the
    # particle energy of the recorded tokens is the same number, computed independently
    np.testing.assert_allclose(model.energy(ds.x.values[-1]), energy[-1], rtol=1e-12)


def test_usa_time_rescaled_at_large_beta_reaches_a_hundred_million():
    # the run: 12 tokens, beta = 40, to t = 1e8, stiff for explicit steps until its clusters are reduced
    model = mf.SelfAttention(40.0, normalized=False, time_rescaled=True)
    x0 = mf.circle_points(np.linspace(0.0, 2 * np.pi, 12, endpoint=False) + 0.05 * np.sin(np.arange(12)))
    ds = mf.simulate_clusters(model, x0, np.concatenate([[0.0], np.geomspace(1.0, 1e8, 40)]), progress=False)
    settings = json.loads(ds.attrs["settings"])
    assert settings["steps"] + settings["rejected_steps"] < 20_000
    energy = ds.energy.values
    assert np.all(np.diff(energy) >= -1e-13 * np.abs(energy[1:]))
    assert ds.atoms.values[-1] < 12


def test_on_the_sphere_three_atoms_merge_in_turn_and_the_tokens_sit_on_their_atoms(rng):
    angles = np.array([0.0, 2.0, 4.1])
    x0 = np.column_stack([np.cos(angles), np.sin(angles), 0.1 * np.ones(3)])
    ds = mf.simulate_clusters(mf.SelfAttention(9.0), x0, np.geomspace(1.0, 1e8, 30), masses=np.array([0.3, 0.3, 0.4]),
                              progress=False)
    assert list(ds.atoms.values[[0, -1]]) == [3, 1] and ds.merge_time.size == 2
    assert ds.merge_time.values[0] > 1e4  # metastable: well after the clusters' own time scale
    assert np.all(np.abs(np.linalg.norm(ds.x.values, axis=-1) - 1) < 1e-14)
    assert np.all(pdist(ds.x.values[-1]) == 0)


def test_a_reduction_whose_velocity_error_passes_the_tolerance_ends_the_run_with_its_outputs(rng):
    model, x0 = three_clusters(rng)
    times = np.linspace(0.0, 20.0, 21)
    with pytest.raises(mf.ReductionRefused, match="tolerance") as caught:
        mf.simulate_clusters(model, x0, times, width=1e-2, tolerance=1e-12, progress=False)
    partial = caught.value.partial
    assert 0 < partial.time.size < times.size and partial.time.values[-1] <= caught.value.time


@pytest.mark.parametrize("arguments, message", [
    ({"model": mf.SelfAttention(1.0, diffusion=0.1)}, "diffusion"),
    ({"x0": np.zeros((3, 2))}, "x0"),
    ({"masses": np.array([0.5, -0.1, 0.6])}, "masses"),
    ({"times": np.array([1.0, 0.5])}, "times"),
    ({"width": -1.0}, "width"),
])
def test_bad_arguments_are_named(arguments, message):
    call = {"model": mf.SelfAttention(1.0), "x0": mf.circle_points(np.array([0.0, 1.0, 2.0])),
            "times": np.array([0.0, 1.0])} | arguments
    with pytest.raises(ValueError, match=message):
        mf.simulate_clusters(call.pop("model"), call.pop("x0"), call.pop("times"), progress=False, **call)


def test_mass_coordinates_with_reduction_follow_two_point_masses_as_the_two_point_equation_does():
    from solvers import CircleLagrangian
    from solvers.circle.lagrangian import PointMasses

    beta, gap = 12.0, 1.8
    merge = two_point_merge_time(beta, 0.3, gap, 1e-6)
    times = np.array([0.0, 0.5 * merge, 0.95 * merge, 1.5 * merge])
    solver = CircleLagrangian(mf.SelfAttention(beta), points=10, cells=16, rtol=1e-10, width=1e-6)
    ds = solver.solve(PointMasses(np.array([0.4, 0.4 + gap]), np.array([0.3, 0.7])), times, progress=False)

    def closing(t, y):
        a = np.exp(beta * (np.cos(y[0]) - 1.0))
        return [-np.sin(y[0]) * (0.7 * a / (0.3 + 0.7 * a) + 0.3 * a / (0.7 + 0.3 * a))]

    expected = solve_ivp(closing, [0.0, times[2]], [gap], t_eval=times[:3], method="DOP853", rtol=1e-13,
                         atol=1e-16).y[0]
    position = ds.position.values  # labels 0-2 hold the mass 0.3, labels 3-9 the mass 0.7
    np.testing.assert_allclose(position[:3, 3] - position[:3, 0], expected, rtol=0, atol=1e-7)
    assert np.ptp(position[-1]) < 1e-6 and json.loads(ds.attrs["settings"])["merges"] == 1


def test_mass_coordinates_with_reduction_reach_a_million_for_the_steps_of_a_thousand():
    # the run: SA beta = 6 from three point masses on 30 labels
    from solvers import CircleLagrangian
    from solvers.circle.lagrangian import PointMasses

    initial = PointMasses(np.array([0.3, 2.2, 4.0]), np.array([0.3, 0.3, 0.4]))
    steps = {}
    for end in (1e3, 1e6):
        solver = CircleLagrangian(mf.SelfAttention(6.0), points=30, cells=64, width=1e-6)
        ds = solver.solve(initial, np.concatenate([[0.0], np.geomspace(1.0, end, 12)]), progress=False)
        steps[end] = json.loads(ds.attrs["settings"])["steps"]
        energy = ds.energy.values
        assert np.all(np.diff(energy) >= -1e-13 * energy[1:])
    assert steps[1e6] <= 3 * steps[1e3], steps
    assert ds.cluster_count.values[-1] == 1


def test_mass_coordinates_refuse_a_reduction_past_the_tolerance_and_keep_the_outputs():
    from solvers import CircleLagrangian

    solver = CircleLagrangian(mf.SelfAttention(5.0), points=64, cells=16, width=1e-2, tolerance=1e-14)
    times = np.linspace(0.0, 30.0, 31)
    with pytest.raises(mf.StepSizeCollapse, match="tolerance") as caught:
        solver.solve(lambda theta: 1 + 0.3 * np.cos(3 * theta), times, progress=False)
    assert 0 < caught.value.partial.time.size < times.size


def test_mass_coordinates_refuse_a_width_with_diffusion():
    from solvers import CircleLagrangian

    with pytest.raises(ValueError, match="width"):
        CircleLagrangian(mf.SelfAttention(5.0, diffusion=0.01), points=64, width=1e-6)


def test_atoms_on_the_sphere_refuse_a_merge_past_the_tolerance_and_count_their_merges():
    from solvers import SphereWeightedParticles

    tokens = mf.sample_uniform(200, 3, np.random.default_rng(3))
    atoms = np.column_stack([tokens, np.full(200, 1 / 200)])
    times = np.array([0.0, 5.0, 10.0, 20.0, 40.0])
    ds = SphereWeightedParticles(mf.SelfAttention(4.0), lmax=8).solve(atoms, times, continued=True, progress=False)
    settings = json.loads(ds.attrs["settings"])
    assert settings["merges"] > 0 and 0 < settings["largest_velocity_error"] <= 1e-6
    with pytest.raises(mf.ReductionRefused, match="tolerance") as caught:
        SphereWeightedParticles(mf.SelfAttention(4.0), lmax=8, merge_distance=1e-2, tolerance=1e-15).solve(
            atoms, times, continued=True, progress=False)
    assert 0 < caught.value.partial.time.size < times.size


def test_the_tokens_engine_gives_the_atoms_the_velocity_of_the_reference_sums():
    # while atoms are many (above K / 3 = 192 for the 576 harmonics of beta = 4) the series engine sums over
    # the atoms weighted by their masses; the reference sums over the atoms (kernel="numpy") must give the same run
    x0 = mf.sample_uniform(300, 3, np.random.default_rng(4))
    times = np.concatenate([[0.0], np.geomspace(1.0, 1e3, 10)])
    fast = mf.simulate_clusters(mf.SelfAttention(4.0), x0, times, kernel="series", progress=False)
    reference = mf.simulate_clusters(mf.SelfAttention(4.0), x0, times, kernel="numpy", progress=False)
    assert json.loads(fast.attrs["settings"])["kernel"] == "series"
    assert json.loads(reference.attrs["settings"])["kernel"] == "reference"
    np.testing.assert_array_equal(fast.atoms.values, reference.atoms.values)
    np.testing.assert_allclose(fast.x.values, reference.x.values, rtol=0, atol=1e-9)
    # the two sums differ by round-off (1e-12 in a position); a merge time moves by that over width x rate
    # (1e-8 x 1): 1e-4
    np.testing.assert_allclose(fast.merge_time.values, reference.merge_time.values, rtol=0, atol=1e-3)


def test_mass_coordinates_give_tied_labels_one_velocity_through_the_labels_engine_and_the_reference():
    # 512 labels on 300 atoms (ties across the turn included): the series engine on the labels, each at its
    # atom, and the reference sums over the atoms with their label counts
    from solvers import CircleLagrangian

    rng = np.random.default_rng(6)
    atoms = np.sort(rng.uniform(0.0, 2 * np.pi, 300))
    counts = 1 + rng.multinomial(212, np.full(300, 1 / 300))
    positions = np.repeat(atoms, counts)
    positions[-counts[-1]:] -= 2 * np.pi  # the last atom's labels on the branch below: the same points
    positions = np.sort(positions)
    velocities = [CircleLagrangian(mf.SelfAttention(9.0), points=512, cells=32, width=1e-6, kernel=kernel).velocity(
        positions) for kernel in ("series", "numpy")]
    np.testing.assert_allclose(velocities[0], velocities[1], rtol=0, atol=1e-12)
    tied = np.abs(np.diff(np.mod(positions, 2 * np.pi))) < 1e-12
    assert np.all(np.diff(velocities[0])[tied] == 0)  # labels of one atom move as one


class UserKernel(mf.FieldModel):
    """A model written outside the library: x' = P_x int (e^{beta u} + 0.3 u^2) y dmu(y), u = <x, y>."""

    def __init__(self, beta):
        self.beta = beta

    def velocity_field(self, x, nodes, weights):
        x = x / np.linalg.norm(x, axis=-1, keepdims=True)
        y = nodes / np.linalg.norm(nodes, axis=-1, keepdims=True)
        u = x @ np.swapaxes(y, -1, -2)
        a = (weights[..., None, :] * (np.exp(self.beta * u) + 0.3 * u ** 2)) @ y
        return a - np.sum(a * x, axis=-1, keepdims=True) * x


def test_a_users_model_runs_reduced_to_its_consensus_and_two_of_its_atoms_merge_when_their_equation_says():
    x0 = mf.sample_uniform(128, 3, np.random.default_rng(0))
    ds = mf.simulate_clusters(UserKernel(6.0), x0, np.concatenate([[0.0], np.geomspace(0.1, 1e4, 20)]),
                              progress=False)
    assert ds.atoms.values[-1] == 1 and "energy" not in ds  # the user's model declares no energy
    np.testing.assert_allclose(ds.mass.values, 1.0, rtol=0, atol=1e-13)
    # two atoms (masses 0.3 and 0.7 at angle phi): each turns towards the other at the speed
    # m_other h(cos phi) sin phi, so phi' = -(0.3 + 0.7) h(cos phi) sin phi
    gap, width = 2.0, 1e-6

    def closing(t, y):
        return [-(np.exp(6.0 * np.cos(y[0])) + 0.3 * np.cos(y[0]) ** 2) * np.sin(y[0])]

    def reached(t, y):
        return 2 * np.sin(y[0] / 2) - width

    reached.terminal = True
    expected = solve_ivp(closing, [0.0, 1e6], [gap], method="DOP853", rtol=1e-13, atol=1e-16,
                         events=reached).t_events[0][0]
    pair = mf.simulate_clusters(UserKernel(6.0), mf.circle_points(np.array([0.0, gap])), np.array([0.0, 10.0]),
                                masses=np.array([0.3, 0.7]), rtol=1e-10, width=width, progress=False)
    assert float(pair.merge_time[0]) == pytest.approx(expected, rel=1e-6)


def assert_threshold_components(x, distance):
    """``linked_groups`` against the components of every pair within ``distance`` (scipy's k-d tree and
    connected components), count and labels."""
    from scipy.sparse import coo_matrix
    from scipy.sparse.csgraph import connected_components
    from scipy.spatial import cKDTree

    pairs = cKDTree(x).query_pairs(distance, output_type="ndarray")
    expected = connected_components(coo_matrix((np.ones(len(pairs)), (pairs[:, 0], pairs[:, 1])),
                                               shape=(len(x), len(x))), directed=False)
    count, labels = linked_groups(x, distance)
    assert count == expected[0]
    np.testing.assert_array_equal(labels, expected[1])


def test_linked_groups_on_the_circle_are_the_threshold_graphs_components():
    """The circle's runs in angular order against the components of every pair within the distance (scipy's
    k-d tree and connected components, written here), clusters across the angle's wrap at pi included."""
    rng = np.random.default_rng(0)
    for trial in range(300):
        k = int(rng.integers(1, 60))
        centres = rng.uniform(-np.pi, np.pi, int(rng.integers(1, 6)))
        if trial % 5 == 0:
            centres[0] = np.pi  # a cluster across the wrap
        theta = rng.choice(centres, k) + rng.normal(size=k) * 10 ** rng.uniform(-8, -1)
        x = np.stack([np.cos(theta), np.sin(theta)], axis=1)
        assert_threshold_components(x, 10 ** rng.uniform(-7, -0.5))


def test_a_groups_diameter_on_the_circle_is_its_largest_chord():
    """The arc's end-to-end chord against every pair's (scipy's pdist), across the angle's wrap too; and a group
    spread wider than a quarter circle takes the pairs."""
    rng = np.random.default_rng(1)
    for trial in range(300):
        centre = np.pi if trial % 4 == 0 else rng.uniform(-np.pi, np.pi)
        spread = 10 ** rng.uniform(-9, 0.5)
        theta = centre + rng.uniform(-spread, spread, int(rng.integers(2, 40)))
        x = np.stack([np.cos(theta), np.sin(theta)], axis=1)
        assert group_diameter(x) == pytest.approx(pdist(x).max(), rel=1e-12, abs=1e-15)


@pytest.mark.parametrize("crowded", [1, None], ids=["always-cells", "default"])
def test_linked_groups_on_the_sphere_are_the_threshold_graphs_components(crowded, monkeypatch):
    """The cells' grouping in d = 3 (forced on every configuration, or where the library takes it) against the
    components of every pair within the distance (scipy's k-d tree and connected components, written here)."""
    import meanfield.reduction as reduction

    if crowded is not None:
        monkeypatch.setattr(reduction, "CROWDED_CELLS", crowded)
    rng = np.random.default_rng(2)
    for _ in range(150):
        k = int(rng.integers(1, 200))
        centres = normalize(rng.normal(size=(int(rng.integers(1, 6)), 3)))
        spread = 10 ** rng.uniform(-9, -1, size=(k, 1))
        x = normalize(centres[rng.integers(0, len(centres), k)] + rng.normal(size=(k, 3)) * spread)
        assert_threshold_components(x, 10 ** rng.uniform(-8, -0.5))


def test_atoms_of_unequal_masses_take_the_series_and_move_as_the_reference_sums_move_them(monkeypatch):
    """Weighted atoms (no tokens to stand for them): the kernel's series over the atoms while it costs less,
    the same run as the reference sums' to their round-off (the merges as in the tokens' test above)."""
    from meanfield.engines import WeightedVelocity

    rng = np.random.default_rng(8)
    x0 = mf.sample_uniform(600, 3, rng)
    masses = rng.uniform(0.5, 1.5, 600)
    masses /= masses.sum()
    times = np.concatenate([[0.0], np.geomspace(1.0, 1e2, 6)])
    fast = mf.simulate_clusters(mf.SelfAttention(9.0), x0, times, masses=masses, progress=False)
    monkeypatch.setattr(WeightedVelocity, "engine", lambda self, n: "reference")
    reference = mf.simulate_clusters(mf.SelfAttention(9.0), x0, times, masses=masses, progress=False)
    assert json.loads(fast.attrs["settings"])["kernel"] == "series"
    assert json.loads(reference.attrs["settings"])["kernel"] == "reference"
    np.testing.assert_array_equal(fast.atoms.values, reference.atoms.values)
    np.testing.assert_allclose(fast.x.values, reference.x.values, rtol=0, atol=1e-9)


def test_a_large_reductions_velocity_error_is_the_reference_fields(monkeypatch):
    """2048 atoms of unequal masses on the circle in pairs 1e-3 apart, most pairs merged: the check of the
    reduction (the field before it at the reduced atoms through the series, which pays at this size) against
    the reference's velocity_field; the reference is not called."""
    model = mf.SelfAttention(9.0)
    rng = np.random.default_rng(4)
    angles = np.repeat(rng.uniform(0.0, 2 * np.pi, 1024), 2) + np.tile([0.0, 1e-3], 1024)
    x = np.stack([np.cos(angles), np.sin(angles)], axis=1)
    masses = rng.dirichlet(np.full(2048, 2.0))
    atoms = ClusterReduction(model, width=2e-3, tolerance=1.0, energy_changes=False)(
        np.column_stack([x, masses]), np.column_stack([x, masses]))[0]
    at = atoms[:, :-1]
    expected = np.max(np.linalg.norm(model.velocity_field(at, x, masses)
                                     - model.velocity_field(at, at, atoms[:, -1]), axis=1))

    def refused(*_):
        raise AssertionError("the reference was called where the series pays")
    monkeypatch.setattr(mf.SelfAttention, "velocity_field", refused)
    reduced, _, merges = ClusterReduction(model, width=2e-3, tolerance=1.0, energy_changes=False)(
        np.column_stack([x, masses]), np.column_stack([x, masses]))
    assert len(merges) > 400 and len(reduced) == 2048 - sum(merge.atoms - 1 for merge in merges) and expected > 1e-9
    assert merges[0].velocity_error == pytest.approx(expected, rel=0, abs=1e-13)


def test_a_reduction_whose_velocity_check_is_not_finite_is_refused(monkeypatch):
    """A NaN velocity error passes no tolerance: the reduction is refused, not taken."""
    x = np.array([[1.0, 0.0], [np.cos(1e-4), np.sin(1e-4)], [0.0, 1.0]])
    atoms = np.column_stack([x, np.full(3, 1 / 3)])
    monkeypatch.setattr(ClusterReduction, "_velocity_error", lambda self, before, after: np.nan)
    with pytest.raises(mf.ReductionRefused, match="not finite"):
        ClusterReduction(mf.SelfAttention(4.0), width=1e-3, tolerance=1.0)(atoms, atoms)
