"""CircleSpectral against exact solutions, its own convergence orders and CircleFV.

The independent references: the Kuramoto equation without noise keeps a Poisson kernel a
Poisson kernel (the Ott-Antonsen manifold of identical oscillators; its cell averages from
the kernel's closed-form antiderivative), the self-consistent stationary state with
diffusion (:func:`validation.references.circle_stationary_density`), and CircleFV with its
Richardson error estimate.
"""

import json

import numpy as np
import pytest

import meanfield as mf
from meanfield.external import UserField
from solvers import CircleFV, CircleSpectral, UnderResolvedWarning
from validation.references import circle_stationary_density

from test_circle_fv import MODELS


def bumpy(theta):
    return 1 + 0.3 * np.cos(theta) + 0.2 * np.sin(2 * theta + 0.4)


def poisson_cell_averages(r: float, phase: float, cells: int) -> np.ndarray:
    r"""Cell averages of :math:`\frac{1}{2\pi}\frac{1 - r^2}{1 - 2r\cos(\theta - \psi) + r^2}` over ``[jh, (j+1)h)``.

    From its antiderivative :math:`F(\theta) = \frac{\theta}{2\pi} + \frac1\pi\arctan\frac{r\sin\theta}{1 - r\cos\theta}`
    (continuous for ``r < 1``).
    """
    edges = np.arange(cells + 1) * 2 * np.pi / cells - phase
    antiderivative = edges / (2 * np.pi) + np.arctan(r * np.sin(edges) / (1 - r * np.cos(edges))) / np.pi
    return np.diff(antiderivative) * cells / (2 * np.pi)


def kuramoto_radius(r0: float, t: float) -> float:
    r"""Noiseless Kuramoto (SA at ``beta = 0``, :math:`v = \mathrm{Im}(e^{-i\theta} m)`) on the Poisson family:
    :math:`\dot r = \frac12 r (1 - r^2)`, so :math:`r^2 = r_0^2 e^t / (1 - r_0^2 + r_0^2 e^t)`."""
    growth = r0 ** 2 * np.exp(t)
    return float(np.sqrt(growth / (1 - r0 ** 2 + growth)))


def test_poisson_kernel_reference_is_the_kuramoto_solution():
    """The reference itself: its cell averages have mass one and the ODE's radius is the first moment's."""
    averages = poisson_cell_averages(0.4, 1.0, 4096)
    h = 2 * np.pi / 4096
    assert h * averages.sum() == pytest.approx(1.0, abs=1e-14)
    centres = (np.arange(4096) + 0.5) * h
    # first moment of the Poisson kernel: r e^{i psi}; from cell averages it is exact once divided by the
    # averaging factor sinc(h/2) (aliases of mode 1 are modes 1 - 4096 k, of size r^4095)
    moment = h * np.sum(averages * np.exp(1j * centres)) / np.sinc(1 / 4096)
    assert moment == pytest.approx(0.4 * np.exp(1j), abs=1e-12)


@pytest.mark.filterwarnings("ignore::solvers.UnderResolvedWarning")  # the coarse grids, on purpose
def test_spectral_convergence_on_the_exact_kuramoto_solution():
    """Error against N falls geometrically (like r(t)^{N/2}): each refinement gains more digits than the last power law."""
    r0, phase, t = 0.3, 1.0, 1.0
    model = mf.SelfAttention(0.0)
    start = lambda th: (1 - r0 ** 2) / (1 - 2 * r0 * np.cos(th - phase) + r0 ** 2)  # noqa: E731
    sizes = [8, 16, 24, 32]
    errors = []
    for n in sizes:
        ds = CircleSpectral(model, cells=n, rtol=1e-13).solve(start, [0.0, t], progress=False, underresolved="continue")
        exact = poisson_cell_averages(kuramoto_radius(r0, t), phase, n)
        errors.append(np.abs(ds.rho.values[-1] - exact).max())
    orders = np.diff(-np.log(errors)) / np.diff(np.log(sizes))
    assert np.all(np.diff(orders) > 1.0), (errors, orders)  # the algebraic order keeps rising
    # bounded by the modes the grid cannot hold: 2 sum_{k >= N/2} r^k / (2 pi) = r^{N/2} / (pi (1 - r))
    r = kuramoto_radius(r0, t)
    for n, error in zip(sizes, errors):
        assert error < r ** (n // 2) / (np.pi * (1 - r)), (n, error, r ** (n // 2))


# The order of the semi-discrete system in time: its few modes under-resolve the density on purpose.
@pytest.mark.filterwarnings("ignore::solvers.UnderResolvedWarning")
@pytest.mark.parametrize("model, cells, sizes, tableau", [
    (mf.SelfAttention(0.0), 8, (12, 24, 48, 96), "dormand_prince"),
    (mf.SelfAttention(0.0), 8, (6, 8, 12, 16), "dormand_prince_853"),
    (mf.SelfAttention(1.0, diffusion=0.1), 20, (24, 48, 96, 192), "dormand_prince"),
    (mf.SelfAttention(1.0, normalized=False, diffusion=0.1), 20, (96, 192, 384), "dormand_prince")],
    ids=["Kuramoto-DP5", "Kuramoto-DP853", "SA-D0.1", "USA-D0.1"])
def test_order_in_time(model, cells, sizes, tableau):
    """Fixed steps (the tolerance never rejects them): the pair's order (5 for Dormand-Prince
    5(4), with diffusion integrated exactly; 8 for 8(5,3)).

    Few modes, so that the stability bound (steps below y_I/(N/2 max|v|)) admits steps whose
    error stands well above round-off; the step counts are those in the asymptotic range.
    """
    solver = CircleSpectral(model, cells=cells, rtol=1e6, tableau=tableau)
    start = lambda th: 1 + 0.6 * np.cos(th) + 0.3 * np.sin(2 * th)  # noqa: E731
    finals = {}
    for steps in (*sizes, 8 * sizes[-1]):
        ds = solver.solve(start, np.linspace(0.0, 3.0, steps + 1), first_step=3.0 / steps, progress=False,
                          underresolved="continue")
        settings = json.loads(ds.attrs["settings"])
        assert (settings["steps"], settings["rejected_steps"]) == (steps, 0)
        finals[steps] = ds.rho.values[-1]
    errors = [np.abs(finals[n] - finals[8 * sizes[-1]]).max() for n in sizes]
    assert min(errors) > 1e-13, errors  # measured well above round-off (1e-16 of a density of order 1)
    order = -np.polyfit(np.log(sizes), np.log(errors), 1)[0]
    assert order >= solver.tableau.order - 0.3, (errors, order)



@pytest.mark.parametrize("tableau", ["dormand_prince", "dormand_prince_853"])
def test_interpolated_outputs_meet_the_exact_kuramoto_solution_and_cost_no_steps(tableau):
    """``outputs="interpolated"``: 60 outputs inside the steps of a run asked for its end only.

    Against the Poisson family (exact): at every output the error is within the steps' local
    errors (rtol times the deviation each) plus one more for the interpolant, whose error is
    of the embedded solution's order. The steps are those of the run with two output times,
    so its right-hand sides and final state are the same, to the bit. The bound is the tolerance's
    guarantee; stability holds these steps, so the errors are far below it (about 1e-11), while a
    wrong fraction of a step would be off by about 1e-3 (the extension's order: tests/test_integration.py).
    """
    r0, phase, cells, rtol = 0.3, 1.0, 128, 1e-6
    model = mf.SelfAttention(0.0)
    start = poisson_cell_averages(r0, phase, cells)
    times = np.linspace(0.0, 1.5, 61)
    solver = CircleSpectral(model, cells=cells, rtol=rtol, tableau=tableau, outputs="interpolated")
    ds = solver.solve(start, times, progress=False)
    settings = json.loads(ds.attrs["settings"])
    assert settings["outputs"] == "interpolated"
    exact = np.array([poisson_cell_averages(kuramoto_radius(r0, t), phase, cells) for t in times])
    deviation = np.abs(exact - 1 / (2 * np.pi)).max(axis=1)
    errors = np.abs(ds.rho.values - exact).max(axis=1) / deviation
    assert errors.max() <= (settings["steps"] + 1) * rtol, (errors.max(), settings["steps"])
    ends_run = solver.solve(start, times[[0, -1]], progress=False)
    ends = json.loads(ends_run.attrs["settings"])
    assert (ends["steps"], ends["rejected_steps"]) == (settings["steps"], settings["rejected_steps"])
    if tableau == "dormand_prince":  # its interpolant needs no more stages
        assert ends["rhs_evaluations"] == settings["rhs_evaluations"]
    else:  # 8(5,3)'s needs three in each step that holds an output
        assert ends["rhs_evaluations"] < settings["rhs_evaluations"] <= ends["rhs_evaluations"] + 3 * settings["steps"]
    np.testing.assert_array_equal(ends_run.rho.values[-1], ds.rho.values[-1])
    stepped = CircleSpectral(model, cells=cells, rtol=rtol, tableau=tableau).solve(start, times, progress=False)
    assert json.loads(stepped.attrs["settings"])["steps"] >= 60 > settings["steps"]


def test_interpolated_outputs_are_refused_where_there_is_no_dense_output():
    with pytest.raises(ValueError, match="outputs must be 'stepped' or 'interpolated', got 'dense'"):
        CircleSpectral(mf.SelfAttention(1.0), cells=32, outputs="dense")
    with pytest.raises(ValueError, match="tableau 'merson' has none"):
        CircleSpectral(mf.SelfAttention(1.0), cells=32, tableau="merson", outputs="interpolated")
    with pytest.raises(ValueError, match="no dense output with diffusion=0.1"):
        CircleSpectral(mf.SelfAttention(1.0, diffusion=0.1), cells=32, outputs="interpolated")

#: A smooth external field with a potential: P_x (1/2, 0) = (1/2) grad_S x_1.
TILT = UserField(lambda x: np.broadcast_to(np.array([0.5, 0.0]), x.shape).copy(), lambda x: x[..., 0], name="tilt")

ZONAL_MODELS = {
    **{name: MODELS[name] for name in ("SA", "USA", "Kuramoto", "repulsive-USA", "zonal")},
    "general-SA": mf.SelfAttention(2.0, query=np.array([[1.0, 0.3], [0.0, 0.8]]), value=np.array([[1.0, 0.2], [-0.1, 0.9]])),
    "two-heads-USA": mf.SelfAttention(1.0, normalized=False, query=np.stack([np.eye(2), np.diag([1.0, 0.5])]),
                                      value=np.stack([np.eye(2), np.eye(2)])),
    "tilted-USA": mf.SelfAttention(1.0, normalized=False, external=TILT),
    "tilted-SA": mf.SelfAttention(2.0, external=TILT),
}


def with_diffusion(model, diffusion):
    if isinstance(model, mf.SelfAttention):
        return mf.SelfAttention(model.beta, normalized=model.normalized, diffusion=diffusion, query=model.query,
                                key=model.key, value=model.value, external=model.external)
    return mf.ZonalAggregation(model.potential, model.derivative, diffusion)


#: Every model with and without diffusion; the general paths at D = 0 (their finite volumes are
#: the slowest, 9 and 17 s) run with the slow tests, their D = 0.05 twins by default.
SMOOTH_CASES = [pytest.param(name, diffusion, id=f"{name}-D{diffusion:g}",
                             marks=[pytest.mark.slow] if name in ("general-SA", "two-heads-USA") and diffusion == 0 else [])
                for name in ZONAL_MODELS for diffusion in (0.0, 0.05)]


@pytest.mark.parametrize("name, diffusion", SMOOTH_CASES)
def test_equals_circle_fv_within_the_combined_error_estimates(name, diffusion):
    """Smooth runs: |spectral - FV| within FV's Richardson estimate (second order) plus the spectral one.

    The Richardson estimate is the FV error up to its higher-order remainder: a 10 % margin for it.
    """
    model = with_diffusion(ZONAL_MODELS[name], diffusion)
    times = [0.0, 0.25, 0.5]
    fine, coarse = (CircleFV(model, cells=n, rtol=1e-9, error_level=None).solve(bumpy, times, progress=False).rho.values
                    for n in (512, 256))
    on_32 = lambda rho: rho.reshape(3, 32, -1).mean(axis=-1)  # noqa: E731  (cell averages of 32 cells)
    fv_estimate = np.abs(on_32(coarse) - on_32(fine)).max() / 3
    spectral = CircleSpectral(model, cells=128, rtol=1e-10).solve(bumpy, times, progress=False).rho.values
    rougher = CircleSpectral(model, cells=96, rtol=1e-10).solve(bumpy, times, progress=False).rho.values
    spectral_estimate = np.abs(on_32(spectral) - on_32(rougher)).max()  # against a run with fewer modes
    difference = np.abs(on_32(spectral) - on_32(fine)).max()
    assert difference <= 1.1 * fv_estimate + spectral_estimate + 1e-12, (difference, fv_estimate, spectral_estimate)


#: With diffusion, a free energy is known for the gradient flows, none for SA (lyapunov NaN).
@pytest.mark.parametrize("name, functional", [("SA", False), ("USA", True), ("Kuramoto", True),
                                              ("repulsive-USA", True), ("zonal", True), ("general-SA", False)])
def test_mass_is_exact_and_the_lyapunov_functional_never_rises(name, functional):
    model = with_diffusion(ZONAL_MODELS[name], 0.05)
    ds = CircleSpectral(model, cells=128).solve(bumpy, np.linspace(0.0, 3.0, 31), progress=False)
    np.testing.assert_allclose(ds.mass.values, 1.0, rtol=0, atol=1e-14)
    np.testing.assert_allclose(2 * np.pi / 128 * ds.rho.values.sum(axis=1), 1.0, rtol=0, atol=1e-13)
    values = ds.lyapunov.values
    if not functional:
        assert np.isnan(values).all()
        return
    assert np.isfinite(values).all()
    assert np.all(np.diff(values) <= 1e-12 * np.abs(values[:-1])), np.diff(values)


@pytest.mark.parametrize("model", [mf.SelfAttention(2.0, diffusion=0.2),
                                   mf.SelfAttention(1.0, normalized=False, diffusion=0.3)], ids=["SA", "USA"])
def test_long_time_state_is_the_self_consistent_stationary_state(model):
    """Spectral accuracy where FV gets (kh)^2: 64 cells reach the reference's own floor.

    The floor is the reference's: its cell averages are Richardson-extrapolated midpoint sums,
    off by O(h_fine^4) ~ 5e-12 of max rho.
    """
    start = lambda th: 1 + 0.5 * np.cos(th)  # noqa: E731
    ds = CircleSpectral(model, cells=64, rtol=1e-10).solve(start, [0.0, 100.0, 150.0], progress=False)
    rho = ds.rho.values
    assert np.abs(rho[-1] - rho[-2]).max() < 1e-10
    fine = 4096
    reference = circle_stationary_density(model, fine, start((np.arange(fine) + 0.5) * 2 * np.pi / fine))
    coarser = circle_stationary_density(model, fine // 2, start((np.arange(fine // 2) + 0.5) * 4 * np.pi / fine))
    # cell averages by the midpoint rule on both references, Richardson-extrapolated past its O(h_fine^2) error
    averages = (4 * reference.reshape(64, -1).mean(axis=1) - coarser.reshape(64, -1).mean(axis=1)) / 3
    assert np.abs(rho[-1] - averages).max() < 1e-10 * reference.max()


def test_under_resolution_warns_once_and_is_recorded():
    solver = CircleSpectral(mf.SelfAttention(9.0), cells=64)
    with pytest.warns(UnderResolvedWarning, match="increase cells") as record:
        # four outputs past the collapse (t = 3.5): further on the garbage series only slows the steps
        ds = solver.solve(lambda th: 1 + 0.1 * np.cos(4 * th), np.linspace(0, 5, 11), progress=False)
    assert len([w for w in record if issubclass(w.category, UnderResolvedWarning)]) == 1
    since = ds.attrs["underresolved_since"]
    assert 0 < since <= 4
    np.testing.assert_array_equal(ds.resolved.values, ds.time.values < since)
    beyond = ds.time.values >= since  # each output from there on fails the error level or is negative
    largest = ds.rho.values.max(axis=1)[beyond]
    assert np.all((ds.error_estimate.values[beyond] > solver.error_level * largest) |
                  (ds.min_density.values[beyond] < 0)), (ds.error_estimate.values, ds.min_density.values)


def test_dataset_contract_and_continuation():
    model = mf.SelfAttention(1.0, diffusion=0.1)
    solver = CircleSpectral(model, cells=64)
    ds = solver.solve(bumpy, [0.0, 0.5, 1.0], progress=False)
    assert ds.rho.dims == ("time", "theta")
    for name in ("mass", "energy", "lyapunov", "min_density", "spectral_tail", "resolved"):
        assert ds[name].dims == ("time",)
    np.testing.assert_allclose(ds.theta.values, (np.arange(64) + 0.5) * 2 * np.pi / 64)
    assert json.loads(ds.attrs["settings"])["solver"] == "CircleSpectral"
    # cell averages in, cell averages out: a run continued from its last output takes the same path
    first = solver.solve(bumpy, [0.0, 0.5], progress=False)
    settings = json.loads(first.attrs["settings"])
    second = solver.solve(first.rho.values[-1], [0.5, 1.0], continued=True, first_step=settings["next_step"],
                          progress=False)
    np.testing.assert_allclose(second.rho.values[-1], ds.rho.values[-1], rtol=0, atol=1e-13)


def test_array_initial_density_is_read_as_cell_averages():
    """The cell averages of the FV grid give back the same coefficients: a FV state converts exactly."""
    solver = CircleSpectral(mf.SelfAttention(1.0), cells=32)
    averages = CircleFV(mf.SelfAttention(1.0), cells=32).initial_density(bumpy)
    ds = solver.solve(averages, [0.0, 0.1], progress=False)
    np.testing.assert_allclose(ds.rho.values[0], averages, rtol=0, atol=1e-14)


@pytest.mark.parametrize("kwargs, error, message", [
    ({"cells": 33}, ValueError, "even"),
    ({"cells": 4}, ValueError, "cells"),
    ({"cells": 64.0}, TypeError, "cells"),
    ({"rtol": 0.0}, ValueError, "rtol"),
    ({"tableau": "rk4"}, ValueError, "error estimate"),
    ({"interaction": "fast"}, ValueError, "interaction must be"),
])
def test_bad_arguments_are_named(kwargs, error, message):
    with pytest.raises(error, match=message):
        CircleSpectral(mf.SelfAttention(1.0), **kwargs)


def test_an_unresolved_kernel_is_refused_with_the_cells_it_needs():
    with pytest.raises(ValueError, match=r"does not resolve the kernel.*use cells >= (\d+)") as info:
        CircleSpectral(mf.SelfAttention(400.0), cells=64)
    needed = int(str(info.value).rsplit(">= ", 1)[1].rstrip(")"))
    CircleSpectral(mf.SelfAttention(400.0), cells=needed)  # accepted
    with pytest.raises(ValueError, match="2 x 2"):
        CircleSpectral(mf.SelfAttention(1.0, query=np.eye(3)))


def test_with_diffusion_the_bound_holds_every_damped_mode_and_lifts_the_fastest_modes_limit():
    """The stability bound in integrating-factor form: at the bound's step the stepper itself,
    on each mode k = 1 .. N/2 advected at k max|v| and decaying at D k^2, amplifies none; it is
    the undamped bound without diffusion and above it with (infinite where the damping of every
    mode outweighs its advection: then a long step is checked)."""
    speed = 0.2
    for diffusion in (0.0, 0.05, 1.0):
        solver = CircleSpectral(mf.SelfAttention(5.0, diffusion=diffusion), cells=64)
        k = np.arange(1.0, 33.0)
        step = min(0.999 * solver._stable_step(speed), 50.0)
        stepper = mf.integration.ExplicitRungeKutta(solver.tableau, lambda q: 1j * k * speed * q,
                                                    decay=diffusion * k ** 2 if diffusion else None)
        assert np.abs(stepper.advance(np.ones(32, complex), step)[0]).max() <= 1 + 1e-12
        undamped = solver.tableau.imaginary_stability / (32 * speed)
        assert (solver._stable_step(speed) == undamped) if diffusion == 0 else (solver._stable_step(speed) > 1.5 * undamped)


def test_with_diffusion_steps_beyond_the_fastest_modes_limit_keep_the_error_of_rtol():
    """SA beta = 5, D = 0.05 at rtol 1e-3: fewer steps than the undamped bound allows, and the
    deviation's L2 error (against the same modes at rtol 1e-10) below steps x rtol x its norm,
    what local error control allows when the errors of the steps add up. The bound is loose by
    design (the estimate is the fourth-order member's, the fifth-order solution is kept): what
    it catches is a step beyond stability, whose growing fast modes leave errors of order one."""
    model, rtol, end = mf.SelfAttention(5.0, diffusion=0.05), 1e-3, 5.0
    initial = lambda theta: 1 + 0.1 * np.cos(theta) + 0.05 * np.sin(3 * theta + 0.4)
    run = CircleSpectral(model, cells=40, rtol=rtol).solve(initial, [0.0, end], progress=False)
    reference = CircleSpectral(model, cells=40, rtol=1e-10).solve(initial, [0.0, end], progress=False)
    solver = CircleSpectral(model, cells=40)
    coefficients = [solver.coefficients_of_averages(ds.rho.values[-1]) for ds in (run, reference)]
    steps = json.loads(run.attrs["settings"])["steps"]
    fastest = max(np.abs(solver.velocity(c)).max() for c in coefficients)
    assert steps < end / (solver.tableau.imaginary_stability / (20 * fastest))
    error = solver._deviation_norm(coefficients[0] - coefficients[1])
    assert error <= steps * rtol * solver._deviation_norm(coefficients[1])
