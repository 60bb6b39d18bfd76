"""SphereSpectral's error estimate against the true error (a run at 2 lmax + 1), and when it warns.

The claim (``SphereSpectral.error_estimate``): the recorded ``error_estimate`` is within a
factor 3 of the true max-norm error whenever that error is above ``1e-6`` of ``max rho`` (below
it the steps' error, ``rtol``'s, is of the same size), and the run is declared under-resolved
(the warning) no later than the first output whose true error passes ``error_level = 1e-3`` of
``max rho``. Checked on three clustering runs (SA at two temperatures, USA); outputs where the
reference's own estimate is not ten times below the error checked are left out.
"""

import warnings

import numpy as np
import pytest

import meanfield as mf
from solvers import SphereSpectral, UnderResolvedWarning

CLAIMED_FROM = 1e-6


def bumps(x):
    return np.exp(2 * x[..., 0]) + np.exp(2.5 * x[..., 1]) + 0.5 * np.exp(3 * x[..., 2])


def tilted(x):
    return 1 + 0.3 * x[..., 0] + 0.2 * x[..., 1] * x[..., 2] + 0.15 * (x[..., 2] ** 2 - x[..., 0] * x[..., 1])


CLUSTERING = {
    "SA-beta4": (mf.SelfAttention(4.0), bumps, 15, np.linspace(0.0, 2.25, 10)),
    "SA-beta9": (mf.SelfAttention(9.0), tilted, 23, np.linspace(0.0, 6.0, 13)),
    "USA-beta3": (mf.SelfAttention(3.0, normalized=False), tilted, 23, np.linspace(0.0, 1.0, 11)),
}


@pytest.mark.parametrize("name", list(CLUSTERING))
def test_estimate_is_within_three_of_the_true_error_and_warns_in_time(name):
    model, rho0, lmax, times = CLUSTERING[name]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UnderResolvedWarning)
        run = SphereSpectral(model, lmax=lmax, rtol=1e-10).solve(rho0, times, progress=False,
                                                                  underresolved="continue")
        reference = SphereSpectral(model, lmax=2 * lmax + 1, rtol=1e-10).solve(rho0, times, progress=False,
                                                                                underresolved="continue")
    grid, fine = SphereSpectral(model, lmax=lmax).grid, SphereSpectral(model, lmax=2 * lmax + 1).grid
    true = np.array([np.abs(grid.values_on(grid.analyse(rho), fine) - exact).max()
                     for rho, exact in zip(run.rho.values, reference.rho.values)])
    scale = reference.rho.values.max(axis=(1, 2))
    true, estimate = true / scale, run.error_estimate.values / scale
    trusted = reference.error_estimate.values / scale < true / 10
    claimed = trusted & (true > CLAIMED_FROM)
    assert claimed.sum() >= 3, true  # the runs reach the claimed range
    ratio = estimate[claimed] / true[claimed]
    assert np.all((ratio > 1 / 3) & (ratio < 3)), np.c_[times[claimed], true[claimed], ratio]
    beyond = times[true > 1e-3]
    since = run.attrs["underresolved_since"]
    if beyond.size:
        assert since <= beyond[0], (since, beyond[0])
    if np.isfinite(since):  # and not while the error is well below the level
        assert true[times == since][0] > 1e-3 / 3, (since, true)


def test_error_level_none_keeps_the_tail_criterion():
    model = mf.SelfAttention(4.0)
    with pytest.warns(UnderResolvedWarning, match="top 10% of degrees"):
        ds = SphereSpectral(model, lmax=15, error_level=None).solve(bumps, [0.0, 1.0, 2.0], progress=False)
    assert np.isfinite(ds.error_estimate.values).all()
    with pytest.raises(ValueError, match="error_level"):
        SphereSpectral(model, lmax=15, error_level=-1.0)
