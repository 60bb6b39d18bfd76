"""CircleFV against the properties of docs/theory/model.md and the exact references of sec. 6."""

import dataclasses
import json
import numpy as np
import pytest

import meanfield as mf
from meanfield.errors import StepSizeCollapse
from solvers import CircleFV, UnderResolvedWarning
from validation.references import circle_stationary_density


def bumpy(theta):
    return 1 + 0.3 * np.cos(theta) + 0.2 * np.sin(2 * theta + 0.4)


MODELS = {
    "SA": mf.SelfAttention(4.0),
    "USA": mf.SelfAttention(2.0, normalized=False),
    "Kuramoto": mf.SelfAttention(0.0),
    "repulsive-USA": mf.SelfAttention(2.0, normalized=False, value=-1.0),
    "zonal": mf.ZonalAggregation(lambda s: s + 0.5 * s**2, lambda s: 1 + s),
    "repulsive-zonal": mf.ZonalAggregation(lambda s: -s, lambda s: -np.ones_like(s)),
}


def with_diffusion(model, diffusion):
    if isinstance(model, mf.SelfAttention):
        return dataclasses.replace(model, diffusion=diffusion)
    return mf.ZonalAggregation(model.potential, model.derivative, diffusion)


class StepLog:
    """Observer recording every accepted step."""

    def __init__(self, solver):
        self.solver, self.minimum, self.functional, self.mass = solver, [], [], []

    def __call__(self, t, rho):
        ops = self.solver.operators
        self.minimum.append(rho.min())
        self.functional.append(ops.lyapunov(rho))
        self.mass.append(ops.mass(rho))


# Without diffusion the clusters outgrow the grid on purpose: the scheme keeps these properties
# at every step even then.
@pytest.mark.filterwarnings("ignore::solvers.UnderResolvedWarning")
@pytest.mark.parametrize("diffusion", [0.0, 0.05], ids=["D0", "D0.05"])
@pytest.mark.parametrize("name", list(MODELS))
def test_mass_positivity_and_lyapunov_at_every_step(name, diffusion):
    model = with_diffusion(MODELS[name], diffusion)
    # A tolerance that takes 100 steps or more with either scheme (the implicit one is of order 3).
    solver = CircleFV(model, cells=256, rtol=1e-5 if diffusion == 0 else 1e-8)
    log = StepLog(solver)
    ds = solver.solve(bumpy, np.linspace(0, 3, 4), observer=log)
    settings = json.loads(ds.attrs["settings"])
    assert settings["steps"] >= 100
    # The step is retried when the functional would rise; no retry was needed, so the monotonicity
    # below is the scheme's own, not the guard's.
    assert "lyapunov" not in settings["rejections"]
    np.testing.assert_allclose(log.mass, 1.0, rtol=1e-12)
    assert min(log.minimum) >= 0.0
    if np.isfinite(log.functional[0]):  # NaN: no functional is known for this model
        functional = np.array(log.functional)
        slack = 1e-12 * np.abs(functional).max()
        assert np.diff(functional).max() <= slack


def test_free_energy_of_attractive_usa_decreases_without_step_rejection():
    """The implicit Scharfetter-Gummel step dissipates the free energy by construction."""
    model = mf.SelfAttention(2.0, normalized=False, diffusion=0.05)
    solver = CircleFV(model, cells=512, error_level=None)  # the scheme's own property
    log = StepLog(solver)
    ds = solver.solve(bumpy, np.linspace(0, 10, 3), observer=log)
    assert "lyapunov" not in json.loads(ds.attrs["settings"])["rejections"]
    free_energy = np.array(log.functional)
    assert len(free_energy) > 50
    assert np.diff(free_energy).max() <= 1e-12 * np.abs(free_energy).max()
    assert free_energy[-1] < free_energy[0] - 0.1


@pytest.mark.filterwarnings("ignore::solvers.UnderResolvedWarning")  # monotone even once unresolved
def test_usa_energy_non_decreasing_at_every_step():
    model = mf.SelfAttention(2.0, normalized=False)
    solver = CircleFV(model, cells=512, error_level=None)  # the scheme's own property
    energies = []
    solver.solve(bumpy, [0, 2.0], observer=lambda t, rho: energies.append(solver.operators.energy(rho)))
    energies = np.array(energies)
    assert len(energies) > 100
    assert np.diff(energies).min() >= -1e-12 * energies.max()


def cell_average_to(rho_fine, cells):
    return rho_fine.reshape(cells, -1).mean(axis=1)


@pytest.mark.parametrize("model", [mf.SelfAttention(1.0), mf.SelfAttention(1.0, normalized=False, diffusion=0.1)],
                         ids=["SA-D0", "USA-D0.1"])
def test_second_order_in_space_in_the_max_norm(model):
    """Smooth extrema included: the limiter acts only for positivity, so it never clips them."""
    times = [0.0, 0.5]
    sizes = [32, 64, 128, 256]
    reference = CircleFV(model, cells=2048, rtol=1e-9, error_level=None).solve(bumpy, times).rho.values[-1]
    errors = []
    for n in sizes:
        rho = CircleFV(model, cells=n, rtol=1e-9, error_level=None).solve(bumpy, times).rho.values[-1]
        errors.append(np.abs(rho - cell_average_to(reference, n)).max())
    order = -np.polyfit(np.log(sizes), np.log(errors), 1)[0]
    assert order >= 1.8, (errors, order)


@pytest.mark.parametrize("model", [mf.SelfAttention(2.0, normalized=False, diffusion=0.1),
                                   mf.SelfAttention(3.0, diffusion=0.05)], ids=["USA", "SA"])
def test_third_order_in_time_with_diffusion(model):
    """One step per output interval (the tolerance never rejects it): the scheme's own order."""
    solver = CircleFV(model, cells=128, rtol=1e6, error_level=None)
    finals = {}
    for steps in (8, 16, 32, 64, 512):
        ds = solver.solve(bumpy, np.linspace(0.0, 1.0, steps + 1), first_step=1.0 / steps)
        settings = json.loads(ds.attrs["settings"])
        assert (settings["steps"], settings["rejected_steps"]) == (steps, 0)
        finals[steps] = ds.rho.values[-1]
    sizes = [8, 16, 32, 64]
    errors = [np.abs(finals[n] - finals[512]).max() for n in sizes]
    order = -np.polyfit(np.log(sizes), np.log(errors), 1)[0]
    assert order >= solver.implicit_substeps - 0.2, (errors, order)


def measured_growth_rate(model, k, amplitude=1e-6, duration=2.0):
    ds = CircleFV(model).solve(lambda th: 1 + amplitude * np.cos(k * th), [0.0, duration])
    modes = np.abs(np.fft.rfft(ds.rho.values, axis=1)[:, k])
    return np.log(modes[1] / modes[0]) / duration


@pytest.mark.parametrize("diffusion, grows", [(0.45, True), (0.55, False)])
def test_noisy_kuramoto_threshold(diffusion, grows):
    measured = measured_growth_rate(mf.SelfAttention(0.0, diffusion=diffusion), 1)
    assert (measured > 0) == grows
    # Spatial error (kh)^2/12 = 3e-6 relative; tests/test_growth_rates.py checks 1e-4 in general.
    assert measured == pytest.approx(0.5 - diffusion, rel=1e-4)


@pytest.mark.parametrize("model", [mf.SelfAttention(2.0, diffusion=0.2),
                                   mf.SelfAttention(1.0, normalized=False, diffusion=0.3)], ids=["SA", "USA"])
def test_long_time_state_is_the_self_consistent_stationary_state(model):
    start = lambda th: 1 + 0.5 * np.cos(th)  # noqa: E731
    fine = 2048
    theta_fine = (np.arange(fine) + 0.5) * 2 * np.pi / fine
    reference = circle_stationary_density(model, fine, start(theta_fine))
    errors = []
    for cells in (64, 128):
        ds = CircleFV(model, cells=cells, rtol=1e-6, error_level=None).solve(start, [0.0, 100.0, 150.0])
        rho = ds.rho.values
        # Reached the stationary state, far below the discretization error measured next.
        assert np.abs(rho[-1] - rho[-2]).max() < 1e-7
        errors.append(np.abs(rho[-1] - cell_average_to(reference, cells)).max() / reference.max())
    # Second-order discretization error: small, and falling about fourfold per refinement.
    assert errors[1] < 2e-3 and errors[0] / errors[1] > 3.0, errors


def test_under_resolution_warns_once_and_is_recorded():
    solver = CircleFV(mf.SelfAttention(9.0), cells=64)
    with pytest.warns(UnderResolvedWarning, match="increase cells") as record:
        ds = solver.solve(lambda th: 1 + 0.1 * np.cos(4 * th), np.linspace(0, 20, 11))
    assert len([w for w in record if issubclass(w.category, UnderResolvedWarning)]) == 1
    since = ds.attrs["underresolved_since"]
    assert 0 < since <= 20
    np.testing.assert_array_equal(ds.resolved.values, ds.time.values < since)


def test_step_collapse_keeps_what_was_computed():
    solver = CircleFV(mf.SelfAttention(4.0), cells=128)
    with pytest.raises(StepSizeCollapse, match="t=") as info:
        solver.solve(bumpy, [0.0, 0.01, 0.02, 5.0], max_steps=40)
    partial = info.value.partial
    assert partial.sizes["time"] == 3 and 0.02 <= info.value.time < 5.0
    assert np.all(np.isfinite(partial.rho.values))


def test_dataset_contract():
    model = mf.SelfAttention(1.0)
    ds = CircleFV(model, cells=64).solve(bumpy, [0.0, 0.5])
    assert ds.rho.dims == ("time", "theta")
    for name in ("mass", "energy", "min_density", "cluster_width", "resolved"):
        assert ds[name].dims == ("time",)
    assert mf.model_from_dict(ds.attrs["model"]).to_dict() == model.to_dict()
    np.testing.assert_allclose(ds.theta.values, (np.arange(64) + 0.5) * 2 * np.pi / 64)


def test_array_initial_density_is_normalized():
    ds = CircleFV(mf.SelfAttention(1.0), cells=32).solve(np.full(32, 7.0), [0.0, 0.1])
    np.testing.assert_allclose(ds.rho.values[0], 1 / (2 * np.pi), rtol=1e-15)


@pytest.mark.parametrize("cells, error", [(0, ValueError), (-4, ValueError), (2.5, TypeError), ("64", TypeError)])
def test_bad_cell_count(cells, error):
    with pytest.raises(error, match="cells"):
        CircleFV(mf.SelfAttention(1.0), cells=cells)


@pytest.mark.parametrize("rho0, message", [
    (np.full(32, -1.0), "nonnegative"),
    (np.full(32, np.nan), "NaN"),
    (np.zeros(32), "zero mass"),
    (np.ones(31), "shape"),
    (lambda th: np.cos(th), "nonnegative"),
])
def test_bad_initial_density(rho0, message):
    with pytest.raises(ValueError, match=message) as info:
        CircleFV(mf.SelfAttention(1.0), cells=32).solve(rho0, [0.0, 1.0])
    assert "rho0" in str(info.value)


def test_decreasing_times_are_refused():
    with pytest.raises(ValueError, match="times"):
        CircleFV(mf.SelfAttention(1.0), cells=32).solve(bumpy, [1.0, 0.0])


def test_interaction_paths_are_checked():
    """General matrices take the general path; the zonal path and the wrong dimension are refused by name."""
    assert type(CircleFV(mf.SelfAttention(1.0, query=2 * np.eye(2)), cells=32).operators).__name__ == \
        "GeneralCircleOperators"
    with pytest.raises(ValueError, match="interaction='zonal'"):
        CircleFV(mf.SelfAttention(1.0, query=2 * np.eye(2)), cells=32, interaction="zonal")
    with pytest.raises(ValueError, match="3 x 3"):
        CircleFV(mf.SelfAttention(1.0, query=np.eye(3)), cells=32)
    with pytest.raises(ValueError, match="interaction must be"):
        CircleFV(mf.SelfAttention(1.0), cells=32, interaction="fast")


def test_diffusion_imposes_no_parabolic_step_restriction():
    cells, diffusion, t_end = 4096, 0.05, 10.0
    ds = CircleFV(mf.SelfAttention(5.0, diffusion=diffusion), cells=cells).solve(bumpy, [0.0, t_end])
    parabolic_steps = t_end / ((2 * np.pi / cells) ** 2 / (2 * diffusion))  # explicit-diffusion step count
    assert json.loads(ds.attrs["settings"])["steps"] < 0.01 * parabolic_steps


@pytest.mark.parametrize("cells", [3, 8, 257])
def test_periodic_tridiagonal_solves_against_the_dense_matrix(cells):
    """The implicit steps' and the stationary preconditioner's periodic solves against numpy's dense solve of the
    assembled matrix (corners included); the factored one, many right-hand sides, equals the one-shot bit for bit."""
    from solvers.circle.operators import CyclicTridiagonal, solve_cyclic_tridiagonal

    rng = np.random.default_rng(cells)
    sub, sup = rng.normal(size=cells), rng.normal(size=cells)
    diag = rng.normal(size=cells) + 4.0 * np.sign(rng.normal(size=cells))
    matrix = np.diag(diag) + np.diag(sub[1:], -1) + np.diag(sup[:-1], 1)
    matrix[0, -1] += sub[0]
    matrix[-1, 0] += sup[-1]
    factored = CyclicTridiagonal(sub, diag, sup)
    for rhs in rng.normal(size=(3, cells)):
        expected = np.linalg.solve(matrix, rhs)
        once = solve_cyclic_tridiagonal(sub, diag, sup, rhs)
        np.testing.assert_allclose(once, expected, rtol=1e-10, atol=1e-12 * np.abs(expected).max())
        np.testing.assert_array_equal(factored.solve(rhs), once)


def _array_form_flux_divergence(deviation, velocity, uniform, width):
    """The upwind flux divergence written with whole-array operations (the scheme as documented)."""
    rho = uniform + deviation
    half_slope = np.clip(0.25 * (np.roll(deviation, -1, axis=-1) - np.roll(deviation, 1, axis=-1)), -rho, rho)
    east, west = rho + half_slope, rho - half_slope
    flux = velocity * np.where(velocity > 0, east, np.roll(west, -1, axis=-1))
    return (flux - np.roll(flux, 1, axis=-1)) / width


def test_the_compiled_flux_divergence_is_the_array_form_bit_for_bit():
    """Random deviations of every scale, negative densities (the limiter's bounds cross), zero and
    negative velocities, a family's rows with one velocity for every row."""
    rng = np.random.default_rng(0)
    for trial in range(300):
        cells = int(rng.integers(8, 100))
        operators = CircleFV(mf.SelfAttention(1.0), cells=cells, error_level=None).operators
        shape = (cells,) if trial % 2 else (int(rng.integers(1, 4)), cells)
        deviation = 10.0 ** rng.uniform(-12, 1) * rng.normal(size=shape) * (rng.random(shape) < 0.8)
        if trial % 3 == 0:
            deviation -= 0.5
        velocity = rng.normal(size=shape) * (rng.random(shape) < 0.9)
        if trial % 5 == 0 and len(shape) == 2:
            velocity = velocity[:1]
        expected = _array_form_flux_divergence(deviation, velocity, operators.uniform, operators.width)
        assert np.array_equal(operators.flux_divergence(deviation, velocity), expected)


def test_the_compiled_clipped_jumps_are_the_array_form_bit_for_bit():
    """SA's potential jumps across the faces, clipped at |c| h: NaN kept, as ``np.clip`` keeps it."""
    from solvers.circle.operators import _clipped_jumps

    rng = np.random.default_rng(1)
    for trial in range(200):
        values = 10.0 ** rng.uniform(-8, 2) * rng.normal(size=(int(rng.integers(1, 4)), int(rng.integers(8, 100))))
        if trial % 7 == 0:
            values[0, 3] = np.nan
        factor, bound = rng.normal(), 10.0 ** rng.uniform(-3, 1)
        expected = np.clip(factor * (np.roll(values, -1, axis=-1) - values), -bound, bound)
        np.testing.assert_array_equal(_clipped_jumps(values, factor, bound), expected)


@pytest.mark.parametrize("cells", [16, 64, 256, 512])
def test_the_convolution_is_the_fft_pair_on_every_grid(cells):
    """Small grids take the circulant matrix, large ones the FFT pair: both are the circular
    convolution with the kernel's spectrum, to round-off, for one density and for a stack."""
    from solvers.circle.operators import CircleOperators

    rng = np.random.default_rng(cells)
    operators = CircleOperators(mf.SelfAttention(4.0), cells)
    lopsided = rng.normal(size=cells // 2 + 1) + 1j * rng.normal(size=cells // 2 + 1)  # an odd part: C != C^T
    for symbol in (operators.gradient_symbol, operators.potential_symbol, operators.energy_symbol, lopsided):
        for values in (rng.normal(size=cells), rng.normal(size=(3, cells))):
            expected = np.fft.irfft(symbol * np.fft.rfft(values), cells)
            # both are sums bounded by sum|symbol| max|v|: their round-off is a few ulps of that bound
            np.testing.assert_allclose(operators.convolve(values, symbol), expected, rtol=0,
                                       atol=8 * np.finfo(float).eps * np.abs(symbol).sum() * np.abs(values).max())
