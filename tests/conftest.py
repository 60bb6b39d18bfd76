import numpy as np
import pytest


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
