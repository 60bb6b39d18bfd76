"""Never call garbage trustworthy: each case a fault tester met, with the behaviour it must have.

Every case below returned non-finite tokens, a bare numpy error or a traceback before, or
reported a run with NaN as "trustworthy" (exit 0).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import warnings

import numpy as np
import pytest
import xarray as xr

import meanfield as mf
from meanfield.errors import NonFiniteState, StepSizeCollapse
from meanfield.limit_geometry import boolean_limit, levels

from test_experiment import _to_toml


def meanfield(*arguments, timeout=300):
    return subprocess.run([sys.executable, "-m", "validation.app.cli", *map(str, arguments)],
                          capture_output=True, text=True, timeout=timeout)


TOKENS = np.random.default_rng(0).normal(size=(16, 2))

#: Two heads whose value matrices differ but add up to 300 I (one head of 300 I, as dynamics): no bound
#: of the growth up front (the rescaling needs one shared V), so the run itself must catch the overflow.
SPLIT_VALUE = np.stack([180.0 * np.eye(2), 120.0 * np.eye(2)])

#: Python calls that overflow: each raises NonFiniteState naming the time, with the finite outputs kept.
OVERFLOWS = {
    "pure attention, value 300 in two heads, rk4": (
        lambda: mf.simulate_particles(mf.PureAttention(value=SPLIT_VALUE), TOKENS, [0, 1, 2, 3], method="rk4"),
        "H \\|\\|V\\|\\|_2 = 360"),
    "pure attention, value 300 in two heads, layer": (
        lambda: mf.simulate_particles(mf.PureAttention(value=SPLIT_VALUE), TOKENS, [0, 3], method="layer"),
        "H \\|\\|V\\|\\|_2 = 360"),
    "pure attention, value 300 in two heads, dop853": (
        lambda: mf.simulate_particles(mf.PureAttention(value=SPLIT_VALUE), TOKENS, [0, 3]),
        "H \\|\\|V\\|\\|_2 = 360"),
    # 1e300 no longer overflows: the stages are normalized by their largest entry (finite tokens, on the sphere)
    "causal attention, prefactor 1e308": (lambda: mf.simulate_particles(mf.CausalAttention(1.0, True, prefactor=1e308),
                                                                        mf.sample_uniform(16, 2, rng=0), [0, 1],
                                                                        method="rk4"), "prefactor = 1e\\+308"),
}


@pytest.mark.parametrize("case", OVERFLOWS, ids=list(OVERFLOWS))
def test_an_overflow_ends_the_run_with_its_time_its_cause_and_the_finite_outputs(case, recwarn):
    call, cause = OVERFLOWS[case]
    with pytest.raises(NonFiniteState, match=f"not finite.*{cause}") as raised:
        call()
    assert isinstance(raised.value, StepSizeCollapse)  # every handler of a stopped run takes it
    partial = raised.value.partial
    assert partial is not None and partial.sizes["time"] >= 1
    assert np.all(np.isfinite(partial.x.values))
    assert float(partial.time[-1]) <= raised.value.time  # the last finite output, or an adaptive step past it
    assert not [w for w in recwarn if issubclass(w.category, RuntimeWarning)]  # one clear error, not numpy's warnings


@pytest.mark.parametrize("method", ["rk4", "layer", "dop853"])
def test_pure_attention_refuses_up_front_a_run_whose_tokens_overflow(method):
    """One shared V: the tokens are e^(tHV) z with z in the start's hull (Thm 3.1), a bound known before any step."""
    with pytest.raises(ValueError, match="times: the tokens grow as e\\^\\(t H V\\), which overflows double precision "
                                         "by t = 3; run the rescaled tokens \\(rescaled=True\\)"):
        mf.simulate_particles(mf.PureAttention(value=300.0), TOKENS, [0, 1, 2, 3], method=method)
    with pytest.raises(ValueError, match="times: the logits .* at t = 1.5"):  # the tokens are finite, their squares not
        mf.simulate_particles(mf.PureAttention(value=300.0), TOKENS, [0, 1.5], method=method)


@pytest.mark.parametrize("value, eigenvalue", [(-100.0, "0"), (-150.0, "-0.5")])
def test_the_rescaled_layer_refuses_a_step_that_reverses_a_direction(value, eigenvalue):
    model = mf.PureAttention(value=value, rescaled=True)
    with pytest.raises(ValueError, match=f"dt = 0.01 is too large.*eigenvalue {eigenvalue} .*use dt <"):
        mf.simulate_particles(model, TOKENS, [0, 3], method="layer", dt=0.01)
    finite = mf.simulate_particles(model, TOKENS, [0, 0.5], method="layer", dt=0.005)  # 1 + dt H V = 0.25 and 0.5
    assert np.all(np.isfinite(finite.x.values))


def euclidean_config(output, stop: float, value=1.0) -> dict:
    return {"geometry": "euclidean", "output": str(output), "times": {"stop": stop, "count": 5},
            "model": {"beta": 1.0, "value": value}, "method": {"kind": "particles", "n": 16, "d": 2, "dt": 0.1},
            "initial": {"kind": "gaussian"}}


def test_a_run_whose_tokens_would_overflow_is_refused_before_it_starts(tmp_path):
    config = tmp_path / "run.toml"
    config.write_text(_to_toml(euclidean_config(tmp_path / "out", 800.0)))
    result = meanfield("run", config)
    assert result.returncode == 2 and "times: the tokens grow as e^(t H V)" in result.stderr
    assert "rescaled=True" in result.stderr and not (tmp_path / "out" / "dataset.nc").exists()


def test_a_run_that_overflows_exits_3_keeps_its_finite_outputs_and_says_untrustworthy(tmp_path):
    config = tmp_path / "run.toml"
    split = [[[0.6, 0.0], [0.0, 0.6]], [[0.4, 0.0], [0.0, 0.4]]]  # V = I as dynamics, no bound up front
    config.write_text(_to_toml(euclidean_config(tmp_path / "out", 800.0, split)))
    result = meanfield("run", config)
    assert result.returncode == 3, result.stderr
    assert "not finite" in result.stderr and "t=400" in result.stderr
    report = (tmp_path / "out" / "report.md").read_text()
    assert "UNTRUSTWORTHY" in report and "trustworthy)" not in report
    with xr.open_dataset(tmp_path / "out" / "dataset.nc") as ds:
        assert ds.sizes["time"] == 2 and np.all(np.isfinite(ds.x.values))
        assert ds.attrs["trustworthy"] == 0


def test_stationary_states_refuse_causal_attention_in_one_line(tmp_path):
    config = tmp_path / "stationary.toml"
    config.write_text(_to_toml({"geometry": "circle", "output": str(tmp_path / "out"),
                                "model": {"beta": 4.0, "diffusion": 0.1, "causal": True},
                                "continuation": {"parameter": "diffusion", "start": 0.02, "stop": 0.4, "cells": 64,
                                                 "modes": [1], "max_points": 5}}))
    result = meanfield("stationary", config)
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1 and "causal" in result.stderr and "Traceback" not in result.stderr


def test_the_output_lock_is_held_until_the_figures_and_the_report_are_written(tmp_path, monkeypatch):
    """A second writer started while the first draws its figures is refused, and the first run's files stay."""
    from validation.app import ConfigError, experiment_figures
    from validation.app.cli import main
    from validation.app.experiment import run_experiment

    config = tmp_path / "run.toml"
    config.write_text(_to_toml(euclidean_config(tmp_path / "out", 2.0)))
    refused = []
    draw = experiment_figures.experiment_figures

    def second_writer_then_draw(ds, output, *args, **kwargs):
        with pytest.raises(ConfigError, match="is being written by PID"):
            run_experiment(config, progress=False)
        refused.append(True)
        return draw(ds, output, *args, **kwargs)

    monkeypatch.setattr(experiment_figures, "experiment_figures", second_writer_then_draw)
    assert main(["run", str(config), "--quiet", "--no-animation"]) == 0
    assert refused == [True]
    assert (tmp_path / "out" / "report.md").exists() and (tmp_path / "out" / "dataset.nc").exists()


def circle_checkpoint_config(output) -> dict:
    return {"geometry": "circle", "output": str(output), "times": {"stop": 1.0, "count": 11}, "checkpoint_every": 1,
            "model": {"beta": 4.0}, "method": {"kind": "CircleFV", "cells": 512},
            "initial": {"kind": "perturbed_uniform", "amplitude": 0.1, "mode": 2}}


@pytest.fixture
def small_file_system(tmp_path):
    """A 96 kB tmpfs: room for two checkpoints of the run above, not three (root can mount; CI runs as root)."""
    folder = tmp_path / "small"
    folder.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=96k", "tmpfs", str(folder)], capture_output=True)
    if mounted.returncode:
        pytest.skip(f"cannot mount a small file system here: {mounted.stderr.decode().strip()}")
    yield folder
    subprocess.run(["umount", str(folder)], check=True)


def test_a_full_disk_while_checkpointing_is_one_line_exit_1_and_keeps_the_written_segments(tmp_path,
                                                                                         small_file_system):
    config = tmp_path / "run.toml"
    output = small_file_system / "out"
    config.write_text(_to_toml(circle_checkpoint_config(output)))
    result = meanfield("run", config, "--no-animation")
    assert result.returncode == 1, result.stderr
    assert result.stderr.count("\n") == 1 and "could not write" in result.stderr and "full" in result.stderr
    kept = sorted(p.name for p in (output / "checkpoint").iterdir())
    assert kept and all(name.startswith("segment_") for name in kept)  # no partial file left


def test_netcdfs_report_of_a_failed_write_becomes_an_os_error_naming_the_file(tmp_path):
    from validation.app.files import write_atomically

    def failing(temporary):
        temporary.write_bytes(b"half")
        raise RuntimeError("NetCDF: HDF error")

    with pytest.raises(OSError, match="could not write .*data.nc \\(NetCDF: HDF error; .*bytes left"):
        write_atomically(tmp_path / "data.nc", failing)
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(RuntimeError, match="a bug"):  # other errors are not taken for the disk's
        write_atomically(tmp_path / "data.nc", lambda temporary: (_ for _ in ()).throw(RuntimeError("a bug")))


def stationary_config(output, **continuation) -> dict:
    return {"geometry": "circle", "output": str(output), "model": {"beta": 4.0, "diffusion": 0.1},
            "continuation": {"parameter": "diffusion", "start": 0.02, "stop": 0.4, **continuation}}


@pytest.mark.parametrize("continuation, message", [
    ({"cells": 100_000_000}, "continuation.cells = 100000000 with .* needs about .* GiB"),
    ({"cells": 32, "modes": [100]}, "continuation.modes \\[100\\] are not resolved: continuation.cells = 32 holds "
                                    "Fourier modes up to 16"),
], ids=["a grid beyond memory", "a mode the grid aliases"])
def test_stationary_refuses_what_run_refuses_before_any_work(tmp_path, continuation, message):
    config = tmp_path / "stationary.toml"
    config.write_text(_to_toml(stationary_config(tmp_path / "out", **continuation)))
    result = meanfield("stationary", config, timeout=60)
    assert result.returncode == 2 and result.stderr.count("\n") == 1
    assert re.search(message, result.stderr), result.stderr


def test_a_study_beyond_memory_is_refused_naming_seeds():
    from validation import mean_field_convergence

    with pytest.raises(ValueError, match="seeds = 1000000000 over 2 sizes .* needs about .* GiB.*fewer seeds"):
        mean_field_convergence(mf.SelfAttention(1.0), lambda th: 1 + 0 * th, sizes=[8, 16], seeds=10**9)


# ---------------------------------------------------------------- the smaller faults, one line each
def test_boolean_limit_takes_a_datasets_one_head_matrix_and_refuses_nan():
    ds = mf.simulate_particles(mf.PureAttention(value=1.0, beta=4.0), TOKENS[:6, :1], [0.0, 1.0], method="rk4",
                               attention=True)
    matrix = ds.attention.values[-1]
    assert matrix.shape[0] == 1
    assert boolean_limit(matrix) == boolean_limit(matrix[0])
    with pytest.raises(ValueError, match="attention contains NaN"):
        boolean_limit(np.full((3, 3), np.nan))
    with pytest.raises(ValueError, match="values contains NaN"):
        levels([0.0, np.nan, 1.0], 1e-3)


@pytest.mark.parametrize("observable", [mf.mean_inner_product, mf.diameter], ids=["mean inner product", "diameter"])
def test_the_collapse_observables_refuse_tokens_off_the_sphere(observable):
    with pytest.raises(ValueError, match="unit"):
        observable(2.0 * mf.sample_uniform(5, 3, rng=0))
    assert np.isfinite(observable(mf.sample_uniform(5, 3, rng=0)))


def test_line_fv_refuses_logits_that_overflow_naming_times():
    from solvers import LineFV

    solver = LineFV(mf.PureAttention(value=1.0, rescaled=True), (-1.0, 1.0), cells=50)
    with pytest.raises(ValueError, match="times: the logits .* at t = 400 .*end the run before t = 354"):
        solver.solve(lambda z: 1 + 0 * z, [0.0, 400.0])


def test_rectangular_queries_and_keys_are_the_head_dimension():
    """d_head = 2 < d = 4, two heads: the velocity against a direct evaluation, the engines against it."""
    rng = np.random.default_rng(0)
    q, k, v = rng.normal(size=(2, 2, 4)), rng.normal(size=(2, 2, 4)), rng.normal(size=(2, 4, 4))
    model = mf.SelfAttention(1.0, query=q, key=k, value=v)
    x = mf.sample_uniform(20, 4, rng=0)
    a = np.zeros_like(x)
    for h in range(2):
        logits = (x @ q[h].T) @ (x @ k[h].T).T
        weights = np.exp(logits - logits.max(axis=1, keepdims=True))
        a += (weights / weights.sum(axis=1, keepdims=True)) @ x @ v[h].T
    np.testing.assert_allclose(model.velocity(x), a - np.sum(a * x, axis=1, keepdims=True) * x, atol=1e-14)
    assert model.logit_bound == pytest.approx(max(np.linalg.norm(q[h].T @ k[h], 2) for h in range(2)))
    from meanfield.engines import check_consistency
    check_consistency(model, x[None])
    with pytest.raises(ValueError, match="query and key must have the same shape"):
        mf.SelfAttention(1.0, query=q)  # the key, the identity, would need k = d


def run_config(tmp_path, changes) -> subprocess.CompletedProcess:
    config = {"geometry": "circle", "output": str(tmp_path / "out"), "times": {"stop": 1.0, "count": 3},
              "model": {"beta": 1.0}, "method": {"kind": "CircleFV", "cells": 64},
              "initial": {"kind": "perturbed_uniform"}}
    config.update(changes)  # whole sections: a key of another method would be refused first
    path = tmp_path / "run.toml"
    path.write_text(_to_toml(config))
    return meanfield("run", path, timeout=120)


@pytest.mark.parametrize("changes, message", [
    ({"times": {"stop": float("inf"), "count": 3}}, "times.stop must be a finite number, got inf"),
    ({"geometry": "euclidean", "method": {"kind": "particles", "n": 8, "d": 2},
      "initial": {"kind": "gaussian", "std": float("inf")}}, "initial.std must be a finite number, got inf"),
    ({"method": {"kind": "CircleFV", "cells": 2.5}}, "method.cells must be an integer, got 2.5"),
    ({"geometry": "sphere", "method": {"kind": "SphereSpectralParticles", "lmax": 15, "quadrature_lmax": 100000}},
     "method.quadrature_lmax = 100000 .* needs about"),
], ids=["infinite stop", "infinite std", "a float for an integer", "the atoms' grid beyond memory"])
def test_a_bad_key_is_one_line_naming_it_and_nothing_else(tmp_path, changes, message):
    result = run_config(tmp_path, changes)
    assert result.returncode == 2, result.stderr
    assert result.stderr.count("\n") == 1 and re.search(message, result.stderr), result.stderr


def test_help_shows_each_default_once():
    text = meanfield("validate", "--help").stdout
    assert "(default: None)" not in text and "(default: False)" not in text
    assert text.count("default: 112 on the") == 1 and "(default: output/validate)" in text


def test_an_underresolved_run_stops_at_its_first_underresolved_output(tmp_path):
    """USA beta = 5 on S^2 at the default lmax: it used to run on for 15 minutes to densities of -1500."""
    from solvers import SphereSpectral

    with pytest.warns(Warning, match="under-resolved from t=0.4.*the run ends at this output"):  # the default
        ds = SphereSpectral(mf.SelfAttention(5.0, normalized=False)).solve(
            lambda p: 1 + 0.1 * p[..., 2] * p[..., 0], np.linspace(0, 1.6, 17), progress=False)
    assert ds.time.values[-1] == pytest.approx(0.4) and not ds.resolved.values[-1] and ds.resolved.values[:-1].all()
    config = tmp_path / "run.toml"
    config.write_text(_to_toml({"geometry": "sphere", "output": str(tmp_path / "out"),
                                "times": {"stop": 1.6, "count": 17}, "model": {"beta": 5.0, "normalized": False},
                                "method": {"kind": "SphereSpectral"},
                                "initial": {"kind": "perturbed_uniform", "amplitude": 0.1, "mode": 2}}))
    result = meanfield("run", config, "--no-animation")
    assert result.returncode == 3 and "ends at its first under-resolved output" in result.stderr
    with xr.open_dataset(tmp_path / "out" / "dataset.nc") as ds:
        assert ds.time.values[-1] == pytest.approx(0.4) and ds.attrs["trustworthy"] == 0


# ---------------------------------------------------------------- continuation
def test_a_branch_retries_a_step_that_strays_and_follows_its_loop_to_the_other_bifurcation():
    """SA beta = 3, D = 0.15, mode 2 over beta: it ended at beta = 2.485 with 'beta must be >= 0'
    (a Newton iterate refused), and with long steps jumped between branches."""
    from solvers.stationary.bifurcation import bifurcation_diagram

    diagram = bifurcation_diagram(mf.SelfAttention(3.0, diffusion=0.15), "beta", (0.5, 10.0), cells=256, modes=[2],
                                  progress=False)
    first, second = diagram.bifurcation_value.values[1:]
    for branch in (1, 2):
        assert diagram.end.values[branch].startswith("returned to the uniform state")
        values = diagram.beta.values[diagram.on_branch.values == branch]
        assert values.min() == pytest.approx(first, abs=2e-3) and values.max() == pytest.approx(second, abs=2e-3)


def test_a_branch_ends_exactly_at_the_end_of_the_interval():
    from solvers.stationary.continuation import branch_from_uniform
    from solvers.stationary.circle import CircleStationary

    problem = CircleStationary(mf.SelfAttention(0.0, diffusion=0.3), 128)  # Kuramoto: mode 1 at D = 1/2
    branch = branch_from_uniform(problem, 1, 0.5, (0.15, 0.65), progress=False)
    assert branch.end.startswith("reached the end of the interval")
    assert branch.points[-1].value == pytest.approx(0.15, abs=1e-12)


def test_a_fold_is_located_to_newtons_tolerance():
    r"""W = cos + 0.6 cos 2 (a subcritical mode-1 pitchfork in D): the fold against the self-consistency
    :math:`\rho \propto e^{(r_1\cos\theta + b r_2\cos 2\theta)/D}`, :math:`r_k = \int\cos k\theta\,\rho`,
    solved here for ``(D, r_2)`` at each :math:`r_1` and maximised over :math:`r_1` (the discrete
    stationary states are that Gibbs form on the cells, so the two agree to the quadrature's round-off)."""
    from scipy.optimize import fsolve, minimize_scalar

    from solvers.stationary.continuation import branch_from_uniform
    from solvers.stationary.circle import CircleStationary

    b = 0.6
    model = mf.ZonalAggregation(lambda s: s + b * (2 * s**2 - 1), lambda s: 1 + 4 * b * s, diffusion=0.3)
    branch = branch_from_uniform(CircleStationary(model, 128), 1, 0.5, (0.05, 1.5), progress=False)
    assert len(branch.folds) == 1
    located = branch.points[branch.folds[0]].value

    theta = 2 * np.pi * np.arange(2048) / 2048

    def diffusion_at(r1):
        def equations(unknowns):
            diffusion, r2 = unknowns
            gibbs = np.exp((r1 * np.cos(theta) + b * r2 * np.cos(2 * theta)) / diffusion)
            gibbs /= gibbs.sum()
            return [gibbs @ np.cos(theta) - r1, gibbs @ np.cos(2 * theta) - r2]
        with warnings.catch_warnings():  # "not making good progress": at round-off, below the tolerance
            warnings.simplefilter("ignore", RuntimeWarning)
            return fsolve(equations, (0.5, 0.0), xtol=1e-14)[0]

    fold = -minimize_scalar(lambda r1: -diffusion_at(r1), bounds=(0.01, 0.6), method="bounded",
                            options={"xatol": 1e-12}).fun
    assert located == pytest.approx(fold, abs=1e-8)
    assert max(point.value for point in branch.points) == located  # the largest D on the branch is the fold


def test_critical_configuration_says_how_far_it_started_and_warns_when_it_merged_tokens():
    """Repulsive USA, 12 tokens on S^2: from the end state at T = 200 Newton moved tokens by more than 1 and
    made some coincide (an index-13 saddle of fewer points, returned silently before); from T = 2000 it
    finds the icosahedron (a local optimum: index 0) next to its start."""
    from meanfield.landscape import critical_configuration

    model = mf.SelfAttention(1.0, value=-1.0, normalized=False)
    x0 = mf.sample_uniform(12, 3, rng=0)
    early = mf.simulate_particles(model, x0, [0.0, 200.0]).x.values[-1]
    with pytest.warns(RuntimeWarning, match="coincident tokens .* that the start held apart"):
        merged = critical_configuration(model, early)
    assert merged.displacement > 1.0 and merged.start_gradient_norm > 1e3 * merged.gradient_norm
    late = mf.simulate_particles(model, x0, [0.0, 2000.0]).x.values[-1]
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        icosahedron = critical_configuration(model, late)
    assert icosahedron.index == 0 and icosahedron.displacement < 1e-3
    gram = np.sort(np.round(icosahedron.x @ icosahedron.x.T, 6).ravel())
    assert np.allclose(np.unique(gram), [-1.0, -1 / np.sqrt(5), 1 / np.sqrt(5), 1.0], atol=1e-6)


def _correlated_with_the_query(rng, count, d):
    """Mean-zero values V = xi I with the query 3 xi I: E V = 0, but E[V a_QK(x)] != 0."""
    xi = rng.standard_normal(count)[:, None, None]
    eye = np.eye(d)[None]
    return 3 * xi * eye, np.broadcast_to(eye, (count, d, d)).copy(), xi * eye


def _slightly_shifted(rng, count, d):
    """V = 0.03 I + N(0, 1/d): a mean 4096 draws at d = 3 did not tell from zero."""
    eye = np.broadcast_to(np.eye(d), (count, d, d)).copy()
    return eye, eye.copy(), 0.03 * np.eye(d) + rng.standard_normal((count, d, d)) / np.sqrt(d)


def _written_for_three_dimensions(rng, count, d):
    return rng.standard_normal((count, 3, 3)), rng.standard_normal((count, 3, 3)), rng.standard_normal((count, 3, 3))


@pytest.mark.parametrize("sampler, d, message", [
    (_correlated_with_the_query, 3, r"the mean field E\[V a_QK\(x\)\] at uniform tokens is .* standard errors"),
    (_slightly_shifted, 3, r"at d = 3, E V is .* standard errors from zero"),
    (_written_for_three_dimensions, 16, r"cannot be sampled at the tokens' dimension d = 16: .* returned Q of shape "
                                        r"\(\d+, 3, 3\); expected \(\d+, 16, 16\)"),
])
def test_the_homogenized_limit_refuses_laws_it_does_not_cover(sampler, d, message):
    """The diffusive limit needs E[V a_QK(x)] = 0 (the derivation's centring), not E V = 0 alone, at the
    tokens' dimension; before, these ran and the chain and the limit SDE differed by 10-12 standard errors."""
    limit = mf.HomogenizedLimit(1.0, mf.SampledWeights(sampler, sampler.__name__))
    with pytest.raises(ValueError, match=message):
        mf.simulate_homogenized(limit, mf.sample_uniform(4, d, rng=0), [0.0, 0.1], dt=0.05)


def test_a_centred_sampled_law_independent_of_the_attention_is_accepted():
    def wigner(rng, count, d):
        return (rng.standard_normal((count, d, d)), rng.standard_normal((count, d, d)),
                rng.standard_normal((count, d, d)) / np.sqrt(d))

    limit = mf.HomogenizedLimit(1.0, mf.SampledWeights(wigner, "wigner"))
    ds = mf.simulate_homogenized(limit, mf.sample_uniform(4, 5, rng=0), [0.0, 0.1], dt=0.05, seed=1, progress=False)
    assert np.all(np.isfinite(ds.x.values))


def test_usa_at_a_beta_no_explicit_pair_can_afford_is_refused_up_front():
    """USA at beta = 20 to t = 1 ran for hours (its stiffness e^beta needs ~8e7 DOP853 steps); it is refused in
    one line naming time_rescaled, which runs the same flow in units of e^beta in a second."""
    x0 = mf.sample_uniform(12, 3, rng=0)
    with pytest.raises(ValueError, match=r"times: USA at beta = 20 is stiff: .* about 10\^7.9\d* steps .* "
                                         r"time_rescaled=True"):
        mf.simulate_particles(mf.SelfAttention(20.0, normalized=False), x0, [0.0, 1.0], progress=False)
    rescaled = mf.simulate_particles(mf.SelfAttention(20.0, normalized=False, time_rescaled=True), x0, [0.0, 1.0],
                                     progress=False)
    assert np.all(np.isfinite(rescaled.x.values))
    # the estimate is the run's own order: beta = 10 to t = 10 takes a number of steps near e^10 * 10 / 6
    run = mf.simulate_particles(mf.SelfAttention(10.0, normalized=False), x0, [0.0, 10.0], progress=False)
    steps = json.loads(run.attrs["settings"])["steps"]
    assert 0.2 < steps / (np.exp(10.0) * 10 / 6) < 2.0
