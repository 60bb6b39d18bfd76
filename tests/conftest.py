import os

import numba
import numpy as np
import pytest
from threadpoolctl import threadpool_limits


def pytest_configure(config):
    """One of several test processes sharing the cores (``make test`` runs one per CPU): its
    numba kernels and BLAS run on one thread, so that the processes do not oversubscribe the
    cores (tests that check the threaded paths ask for threads with ``two_numba_threads``)."""
    if os.environ.get("PYTEST_XDIST_WORKER"):
        numba.set_num_threads(1)
        config._blas_limit = threadpool_limits(limits=1, user_api="blas")


@pytest.fixture
def two_numba_threads():
    """Numba's parallel loops on two threads (as many as numba has, if fewer) for the test: the
    chunking of systems over threads is exercised even where the suite runs one thread per process."""
    previous = numba.get_num_threads()
    numba.set_num_threads(min(2, numba.config.NUMBA_NUM_THREADS))
    yield
    numba.set_num_threads(previous)


@pytest.fixture
def rng():
    return np.random.default_rng(20261122)


@pytest.fixture
def assert_half_rate():
    """Check of a mean_field_convergence study: at each given time the fitted rate's interval holds -1/2
    and lies below -0.2 (the distance does decay: a saturated study has rates near 0)."""
    def check(study, times):
        for t in times:
            row = study.sel(time=t)
            interval = (float(row.rate), float(row.rate_low), float(row.rate_high))
            assert row.rate_low <= -0.5 <= row.rate_high and row.rate_high < -0.2, (t, interval)
    return check


@pytest.fixture
def config_file(tmp_path):
    """``write(template, **replace)``: a TOML file from a template (``{output}`` filled in), strings replaced."""
    def write(template: str, **replace: str):
        text = template.format(output=tmp_path / "out")
        for old, new in replace.items():
            text = text.replace(old, new)
        path = tmp_path / "config.toml"
        path.write_text(text)
        return path
    return write
