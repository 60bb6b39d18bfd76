"""Property: a call of the particle or solver API with any finite parameters either raises one clear
error naming an argument, or returns finite values, or stops with the time it reached
(``StepSizeCollapse``, ``NonFiniteState``) and finite outputs before it. Never NaN reported as a result.

Overflow-prone ranges are drawn on purpose: ``beta`` and ``value`` up to 1e3 (USA's kernel, pure
attention's growth), long intervals, large steps.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import meanfield as mf
from meanfield.errors import StepSizeCollapse
from solvers import CircleFV, CircleSpectral, UnderResolvedWarning

#: The arguments a clear error names (one of them must appear in the message).
ARGUMENT_NAMES = ("beta", "value", "diffusion", "dt", "times", "x0", "method", "normalized", "time_rescaled",
                  "cells", "rho0", "kernel", "prefactor", "alibi")

# Derandomized: the same examples in every run (CI included), so that its time and outcome repeat.
EXAMPLES = settings(max_examples=25, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])

signed = st.one_of(st.floats(-1e3, 1e3, allow_nan=False), st.sampled_from([0.0, -1.0, 1.0, 1e3, -1e3]))
positive = st.one_of(st.floats(0.0, 1e3, allow_nan=False), st.sampled_from([0.0, 1e-300, 700.0, 1e3]))


def check_outcome(call, values_of) -> str:
    """Run ``call``: a clear error, finite values, or a stop with finite outputs. Returns which."""
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)  # numpy's overflow warnings are not an answer
        warnings.simplefilter("ignore", UnderResolvedWarning)  # a flag of the result (a RuntimeWarning)
        try:
            result = call()
        except StepSizeCollapse as stopped:
            assert np.isfinite(stopped.time) and "t=" in str(stopped)  # the time it reached, named
            if stopped.partial is not None:
                assert np.all(np.isfinite(values_of(stopped.partial)))
            return "stopped"
        except (ValueError, TypeError) as error:
            message = str(error)
            assert message and "\n" not in message.strip()
            assert any(name in message for name in ARGUMENT_NAMES), message
            return "refused"
    assert np.all(np.isfinite(values_of(result))), "a result with NaN or infinite values"
    return "finite"


@EXAMPLES
@given(beta=positive, value=signed, normalized=st.booleans(), diffusion=st.sampled_from([0.0, 0.05]),
       method=st.sampled_from(["rk4", "euler", "layer", "dop853"]), stop=st.sampled_from([0.5, 5.0, 50.0]),
       dt=st.sampled_from([0.01, 0.1, 1.0]), d=st.sampled_from([2, 3]), seed=st.integers(0, 5))
def test_particles_on_the_sphere(beta, value, normalized, diffusion, method, stop, dt, d, seed):
    x0 = mf.sample_uniform(6, d, rng=seed)
    if not normalized:  # USA's velocity scales like e^beta: beyond ~30 a run takes e^beta steps (time_rescaled is for that)
        beta = min(beta, 30.0)

    def call():
        model = mf.SelfAttention(beta, normalized=normalized, value=value, diffusion=diffusion)
        return mf.simulate_particles(model, x0, [0.0, stop], method=method if method != "dop853" or not diffusion
                                     else "euler", dt=dt, rng=seed)

    check_outcome(call, lambda ds: ds.x.values)


@EXAMPLES
@given(beta=st.one_of(st.floats(1e-3, 1e3), st.sampled_from([1.0, 1e3])), value=signed,
       rescaled=st.booleans(), method=st.sampled_from(["rk4", "euler", "layer", "dop853"]),
       stop=st.sampled_from([0.5, 5.0, 800.0]), dt=st.sampled_from([0.05, 0.1]), seed=st.integers(0, 5))
def test_pure_attention_in_the_plane(beta, value, rescaled, method, stop, dt, seed):
    x0 = np.random.default_rng(seed).normal(size=(6, 2))

    def call():
        return mf.simulate_particles(mf.PureAttention(value=value, beta=beta, rescaled=rescaled), x0, [0.0, stop],
                                     method=method, dt=dt)

    check_outcome(call, lambda ds: ds.x.values)


@settings(max_examples=12, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(beta=st.one_of(st.floats(0.0, 60.0), st.sampled_from([0.0, 60.0])), value=st.floats(-5.0, 5.0),
       normalized=st.booleans(), diffusion=st.sampled_from([0.0, 0.1]), solver=st.sampled_from([CircleFV, CircleSpectral]),
       amplitude=st.floats(0.0, 0.9), stop=st.sampled_from([0.2, 2.0]))
def test_circle_solvers(beta, value, normalized, diffusion, solver, amplitude, stop):
    def call():
        model = mf.SelfAttention(beta, normalized=normalized, value=value, diffusion=diffusion)
        return solver(model, cells=32).solve(lambda th: 1 + amplitude * np.cos(2 * th), [0.0, stop / 2, stop],
                                            progress=False, max_steps=5_000)

    check_outcome(call, lambda ds: ds.rho.values)


@pytest.mark.parametrize("case", ["USA beta 1e3", "pure attention value 300", "pure attention value 300 in two heads"])
def test_the_overflow_prone_corners_stop_with_their_time(case):
    """The corners the strategies above reach by chance, reached every run: refused up front where the
    growth is known before the run (one shared V), stopped with its time where it is not."""
    x0 = np.random.default_rng(0).normal(size=(6, 2))
    if case == "USA beta 1e3":
        call = lambda: mf.SelfAttention(1e3, normalized=False)  # noqa: E731
        assert check_outcome(call, lambda model: 0.0) == "refused"
    elif case == "pure attention value 300":
        call = lambda: mf.simulate_particles(mf.PureAttention(value=300.0), x0, [0.0, 3.0], method="rk4")  # noqa: E731
        assert check_outcome(call, lambda ds: ds.x.values) == "refused"
    else:
        value = np.stack([180.0 * np.eye(2), 120.0 * np.eye(2)])
        call = lambda: mf.simulate_particles(mf.PureAttention(value=value), x0, [0.0, 3.0], method="rk4")  # noqa: E731
        assert check_outcome(call, lambda ds: ds.x.values) == "stopped"
