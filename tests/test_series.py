"""Fast summation through the kernel's series (meanfield.engines.series) against the direct pair sums.

The reference is the model's own numpy path (meanfield.interaction.pair_sums: every pair's
exponential), which shares no code with the series. Tolerances: the series is exact up to a
tail below 2^-56 k(1) per pair, so both sides carry round-off only; 1e-12 relative to the
largest velocity is the issue's bound and leaves n eps ~ 1e-13 of room at these sizes.
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy.special import eval_legendre, ive

import meanfield as mf
from meanfield.engines import WeightedVelocity, check_consistency
from meanfield.engines.kernels import NumpyKernel, energy_pair_sum, select_kernel
from meanfield.records import dataset_settings
from meanfield.engines import series
from meanfield.engines.series import TAIL, SeriesAttention, circle_series_tabled, harmonic_sums, series_degree

#: The engines' parallel loops chunk systems over threads: exercised on two.
pytestmark = pytest.mark.usefixtures("two_numba_threads")

BETAS = [0.0, 1.0, 9.0, 40.0]


def _model(beta: float, normalized: bool) -> mf.SelfAttention:
    return mf.SelfAttention(beta, normalized=normalized)


def _tokens(d: int, n: int, seed: int, clustered: bool = False) -> np.ndarray:
    """Uniform tokens, or tight clusters plus stragglers (the regime after clustering)."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(2, n, d))
    if clustered:
        centres = rng.normal(size=(2, 3, d))
        x[:, : n - 5] = centres[:, rng.integers(0, 3, n - 5)] * 20 + x[:, : n - 5]
    return x / np.linalg.norm(x, axis=-1, keepdims=True)


@pytest.mark.parametrize("d", [2, 3])
@pytest.mark.parametrize("normalized", [True, False], ids=["SA", "USA"])
@pytest.mark.parametrize("beta", BETAS)
@pytest.mark.parametrize("clustered", [False, True], ids=["uniform", "clustered"])
def test_series_equals_direct_sum(d, normalized, beta, clustered):
    model = _model(beta, normalized)
    x = _tokens(d, 700, seed=int(10 * beta) + d, clustered=clustered)
    series, direct = SeriesAttention(model, d), NumpyKernel(model)
    reference = direct.attention_output(x)
    scale = np.abs(reference).max()
    np.testing.assert_allclose(series.attention_output(x), reference, rtol=0, atol=1e-12 * scale)
    np.testing.assert_allclose(series.velocity_unchecked(x), direct.velocity_unchecked(x), rtol=0, atol=1e-12 * scale)


@pytest.mark.parametrize("tabled", [True, False], ids=["table", "streamed"])
@pytest.mark.parametrize("normalized", [True, False], ids=["SA", "USA"])
@pytest.mark.parametrize("beta", [0.1, 4.0, 9.0])
def test_circle_series_of_many_small_systems_equals_direct_sum(tabled, normalized, beta, monkeypatch):
    """The phase diagram's regime (37 systems of 32 tokens: chunks of unequal size per thread),
    with the powers kept in a table and, with no room for a table, formed twice."""
    if not tabled:
        monkeypatch.setattr(series, "TABLE_ELEMENTS", 0)
    model = _model(beta, normalized)
    kernel = SeriesAttention(model, 2)
    assert circle_series_tabled(32, 2 * kernel.degree + 1) == tabled
    x = _tokens(2, 32, seed=int(10 * beta), clustered=True)
    x = np.concatenate([x] + [_tokens(2, 32, seed=seed) for seed in range(17)] + [x[:1]])  # 37 systems
    direct = NumpyKernel(model)
    reference = direct.attention_output(x)
    scale = np.abs(reference).max()
    np.testing.assert_allclose(kernel.attention_output(x), reference, rtol=0, atol=1e-12 * scale)
    np.testing.assert_allclose(kernel.step(x, 0.1, project=True), direct.step(x, 0.1, project=True), rtol=0,
                               atol=1e-12)


def test_the_power_table_is_kept_while_it_fits():
    assert circle_series_tabled(32, 61) and circle_series_tabled(1024, 2 * 60 + 1)
    assert not circle_series_tabled(1024, 2 * 63 + 1) and not circle_series_tabled(10**5, 49)


@pytest.mark.parametrize("d", [2, 3])
@pytest.mark.parametrize("beta", [1.0, 40.0])
def test_truncated_series_is_the_kernel(d, beta):
    """The kept degrees rebuild e^{beta (t - 1)} on [-1, 1] to the tail bound (scipy's Bessel + Legendre)."""
    degree = series_degree(mf.SelfAttention(beta), d)
    t = np.linspace(-1.0, 1.0, 2001)
    l = np.arange(degree + 1)
    if d == 2:
        # e^{beta cos phi} = sum_m I_m(beta) e^{i m phi}
        terms = np.where(l == 0, 1, 2)[:, None] * ive(l, beta)[:, None] * np.cos(l[:, None] * np.arccos(t))
    else:
        # e^{beta t} = sum_l (2l+1) i_l(beta) P_l(t), i_l(b) = sqrt(pi / (2 b)) I_{l+1/2}(b)
        terms = ((2 * l + 1) * np.sqrt(np.pi / (2 * beta)) * ive(l + 0.5, beta))[:, None] * eval_legendre(l[:, None], t)
    # the reference's own round-off: degree + 1 terms of size <= k(1) = 1, each to a few eps
    roundoff = 4 * (degree + 1) * np.finfo(float).eps
    np.testing.assert_allclose(terms.sum(axis=0), np.exp(beta * (t - 1.0)), rtol=0, atol=4 * TAIL + roundoff)
    # The degree is the smallest whose discarded tail (the series' terms at t = 1, here from
    # scipy directly, k(1) = 1) is below TAIL: the tail from `degree` on is not.
    more = np.arange(degree + 60)
    if d == 2:
        at_one = np.where(more == 0, 1, 2) * ive(more, beta)
    else:
        at_one = (2 * more + 1) * np.sqrt(np.pi / (2 * beta)) * ive(more + 0.5, beta)
    assert at_one[degree + 1:].sum() <= TAIL
    assert degree == 0 or at_one[degree:].sum() > TAIL


@pytest.mark.parametrize("d, n", [(2, 400), (3, 300)])
@pytest.mark.parametrize("method, diffusion", [("rk4", 0.0), ("euler", 0.1), ("layer", 0.0)])
def test_particle_run_with_series_equals_direct_run(d, n, method, diffusion):
    model = mf.SelfAttention(4.0, diffusion=diffusion)
    x0 = mf.sample_uniform(n, d, 3)[None]
    times = np.array([0.0, 1.0])
    runs = {kernel: mf.simulate_particles(model, x0, times, method=method, dt=0.01, rng=5, kernel=kernel)
            for kernel in ("series", "numpy")}
    assert dataset_settings(runs["series"])["kernel"] == "series"
    assert dataset_settings(runs["numpy"])["kernel"] == "numpy"
    np.testing.assert_allclose(runs["series"].x.values, runs["numpy"].x.values, rtol=0, atol=1e-10)


def test_auto_takes_the_cheaper_sum_and_says_so():
    model = mf.SelfAttention(5.0)
    assert select_kernel(model, _tokens(2, 16, 0)).name == "fused"
    # the paper's phase diagram: 32 tokens, beta up to 9 (the tabled series is the faster there)
    assert select_kernel(mf.SelfAttention(9.0), _tokens(2, 32, 0)).name == "series"
    assert select_kernel(model, _tokens(2, 2000, 0)).name == "series"
    assert select_kernel(model, _tokens(4, 2000, 0)).name == "numpy"  # no series on S^3
    run = mf.simulate_particles(model, mf.sample_uniform(2000, 2, 0), [0.0, 0.01], method="rk4", dt=0.01)
    assert dataset_settings(run)["kernel"] == "series"
    assert dataset_settings(run)["series_degree"] == series_degree(model, 2)


@pytest.mark.parametrize("model, d, message", [
    (mf.SelfAttention(1.0, value=np.eye(2)), 2, "zonal SelfAttention"),
    (mf.ZonalAggregation(np.exp, np.exp), 2, "zonal SelfAttention"),
    (mf.SelfAttention(1.0), 4, "kernel='series'"),
])
def test_series_refuses_what_it_cannot_sum(model, d, message):
    with pytest.raises(ValueError, match=message):
        select_kernel(model, _tokens(d, 10, 0), "series")


def test_harmonic_sums_match_scipy_harmonics():
    """The Cartesian recurrence against scipy's Y_lm (angles, Condon-Shortley phase), up to degree 30."""
    from scipy.special import sph_harm_y

    x = _tokens(3, 50, 4)[0]
    colatitude, longitude = np.arccos(x[:, 2]), np.arctan2(x[:, 1], x[:, 0])
    sums = harmonic_sums(x, 30)
    for l in range(31):
        for m in range(l + 1):
            expected = np.conj(sph_harm_y(l, m, colatitude, longitude)).sum()
            assert abs(sums[l, m] - expected) < 1e-12 * x.shape[0]
    assert np.all(sums[np.triu_indices(31, 1)] == 0)


@pytest.mark.parametrize("d", [2, 3])
@pytest.mark.parametrize("model", [mf.SelfAttention(9.0), mf.SelfAttention(1.0, normalized=False),
                                   mf.SelfAttention(40.0, normalized=False, time_rescaled=True)],
                         ids=["SA", "USA", "USA-rescaled"])
def test_energy_through_the_series_equals_the_pair_sum(d, model):
    """Large n takes the series (energy_pair_sum); small systems the Gram matrices, both the model's pair sum."""
    x = _tokens(d, 2000, 8, clustered=True)
    assert energy_pair_sum(model, x) is not None
    direct = model.log_energy(x[:, :40])
    np.testing.assert_allclose(model.log_energy(x[:, :40], log_pair_sum=energy_pair_sum(model, x[:, :40])), direct,
                               rtol=0, atol=1e-13)
    series_small = np.log(SeriesAttention(model, d).pair_totals(x[:, :40])) + (model.beta if model.normalized else 0)
    np.testing.assert_allclose(series_small - np.log(2 * model.beta * 40 ** 2), direct, rtol=0, atol=1e-13)
    pairs = np.exp(model.beta * (x @ np.swapaxes(x, -1, -2) - (1.0 if model.time_rescaled else 0.0))).sum(axis=(-1, -2))
    through_series = model.log_energy(x, log_pair_sum=energy_pair_sum(model, x))
    np.testing.assert_allclose(through_series, np.log(pairs / (2 * model.beta * 2000 ** 2)), rtol=0, atol=1e-12)


def _weighted_field_by_definition(beta: float, normalized: bool, x: np.ndarray, masses: np.ndarray,
                                  at: np.ndarray | None = None) -> np.ndarray:
    r"""The velocity of :math:`\sum_j m_j \delta_{x_j}` at the atoms (or at the points ``at``), written from its
    definition (one system): :math:`a_i = \sum_j m_j e^{\beta\langle y_i, x_j\rangle} x_j`, over
    :math:`\sum_j m_j e^{\beta\langle y_i, x_j\rangle}` for SA, and its tangent part
    :math:`a_i - \langle a_i, y_i\rangle y_i`, :math:`y = x` by default."""
    y = x if at is None else at
    logits = beta * (y @ x.T)
    shift = logits.max(axis=1, keepdims=True) if normalized else 0.0
    weights = masses[None, :] * np.exp(logits - shift)
    a = weights @ x
    if normalized:
        a /= weights.sum(axis=1, keepdims=True)
    return a - np.sum(a * y, axis=1, keepdims=True) * y


@pytest.mark.parametrize("d", [2, 3])
@pytest.mark.parametrize("normalized", [True, False], ids=["SA", "USA"])
@pytest.mark.parametrize("beta", [1.0, 9.0, 40.0])
@pytest.mark.parametrize("clustered", [False, True], ids=["uniform", "clustered"])
def test_the_series_of_a_weighted_measure_equals_its_definition(d, normalized, beta, clustered):
    """Atoms of unequal masses (a density's quadrature, merged clusters): each point's harmonics enter the
    analysis times its mass. Against the sums written above, to the tolerance of the tokens' test scaled
    by ``1 / (n m_i)``: the argument that bounds the series' error relative to the denominator uses
    the self term ``m_i k(1)`` in it, ``k(1) / n`` for tokens."""
    model = _model(beta, normalized)
    x = _tokens(d, 700, seed=int(10 * beta) + d, clustered=clustered)[0]
    masses = np.random.default_rng(d).dirichlet(np.full(700, 2.0))
    expected = _weighted_field_by_definition(beta, normalized, x, masses)
    scale = (np.exp(beta) if not normalized else 1.0)  # the largest attention output: |a| <= 1 (SA), e^beta (USA)
    tolerance = 1e-12 * scale * np.maximum(1.0, 1.0 / (700 * masses))[:, None]
    error = np.abs(SeriesAttention(model, d).weighted_velocity(x, masses) - expected)
    assert np.all(error <= tolerance), float((error / tolerance).max())


@pytest.mark.parametrize("d, beta, atoms, points", [(2, 9.0, 700, 200), (2, 40.0, 700, 200), (3, 4.0, 3000, 1500)])
@pytest.mark.parametrize("normalized", [True, False], ids=["SA", "USA"])
def test_the_field_near_the_atoms_equals_its_definition(d, beta, atoms, points, normalized, monkeypatch):
    """A cluster reduction's check: the field of atoms of unequal masses at points within about 1e-3 of some of them
    (the reduced atoms), through the series with the points as atoms of no mass (sizes where it pays: the reference is
    not called), against the sums written above; to the weighted test's tolerance with the mass of the atom near
    each point in place of its own (it holds SA's denominator up as the self term does)."""
    model = _model(beta, normalized)
    rng = np.random.default_rng(int(beta) + d)
    x = _tokens(d, atoms, seed=d, clustered=True)[0]
    masses = rng.dirichlet(np.full(atoms, 2.0))
    near = rng.choice(atoms, points, replace=False)
    at = x[near] + 1e-3 * rng.normal(size=(points, d))
    at /= np.linalg.norm(at, axis=1, keepdims=True)
    expected = _weighted_field_by_definition(beta, normalized, x, masses, at)
    velocity = WeightedVelocity(model, d)

    def refused(*_):
        raise AssertionError("the reference was called where the series pays")
    monkeypatch.setattr(mf.SelfAttention, "velocity_field", refused)
    error = np.abs(velocity.field_near_atoms(at, x, masses) - expected)
    scale = np.exp(beta) if not normalized else 1.0
    tolerance = 1e-12 * scale * np.maximum(1.0, 1.0 / (atoms * masses[near]))[:, None]
    assert np.all(error <= tolerance), float((error / tolerance).max())


def test_equal_masses_are_the_tokens_and_doubled_atoms_are_two_tokens():
    """The weighted sum at masses 1/n is the particle velocity; an atom of mass 2/n is two tokens at one point."""
    model = mf.SelfAttention(4.0)
    series = SeriesAttention(model, 3)
    x = _tokens(3, 300, seed=5)[0]
    np.testing.assert_allclose(series.weighted_velocity(x, np.full(300, 1 / 300)),
                               series.velocity_unchecked(x[None])[0], rtol=0, atol=1e-14)
    doubled = np.concatenate([x, x[:50]])
    atoms_masses = np.concatenate([np.full(50, 2.0), np.ones(250)]) / 350
    np.testing.assert_allclose(series.weighted_velocity(x, atoms_masses),
                               series.velocity_unchecked(doubled[None])[0][:300], rtol=0, atol=1e-14)


def test_weighted_atoms_take_the_series_once_it_costs_less_and_the_reference_otherwise():
    zonal = WeightedVelocity(mf.SelfAttention(4.0), 3)
    assert (zonal.engine(4608), zonal.engine(20)) == ("series", "reference")
    for model in (mf.SelfAttention(4.0, value=np.diag([1.0, 2.0, 3.0])), mf.SelfAttention(4.0, query=2 * np.eye(3))):
        assert WeightedVelocity(model, 3).engine(4608) == "reference"  # not zonal: no series
    assert WeightedVelocity(mf.SelfAttention(4.0), 5).engine(4608) == "reference"  # no series on S^4


def test_the_consistency_check_catches_a_weighted_series_off_by_1e_9(monkeypatch):
    model = mf.SelfAttention(9.0)
    x = _tokens(3, 300, seed=2)
    assert check_consistency(model, x)[-1].weighted_velocity < 1e-13
    exact = SeriesAttention.weighted_velocity
    monkeypatch.setattr(SeriesAttention, "weighted_velocity", lambda self, y, m: exact(self, y, m) * (1 + 1e-9))
    with pytest.raises(AssertionError, match="weighted atoms"):
        check_consistency(model, x)
