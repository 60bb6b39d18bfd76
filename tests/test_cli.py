"""The command line: the main job end to end (small), and bad input."""

import subprocess
import sys

import pytest
import xarray as xr

from validation.app.cli import main
from validation.app.files import LOCK


def test_validate_writes_report_data_and_figures(tmp_path):
    status = main(["validate", "--sizes", "16,32", "--seeds", "3", "--quiet", "--output", str(tmp_path)])
    assert status == 0
    for name in ("report.md", "circle.nc", "sphere.nc", "circle_density.png", "circle_rate.png",
                 "sphere_density.png", "sphere_rate.png", "energy.png"):
        assert (tmp_path / name).stat().st_size > 1000 or name == "report.md"
    report = (tmp_path / "report.md").read_text()
    assert "| circle |" in report and "| sphere |" in report
    study = xr.open_dataset(tmp_path / "circle.nc")
    assert study.distance.dims == ("size", "seed", "time") and study.attrs["geometry"] == "circle"
    # no temporary files left behind; the lock file stays (a second writer is refused through it)
    assert [p.name for p in tmp_path.glob(".*")] == [LOCK]


@pytest.mark.parametrize("arguments, message", [
    (["validate", "--sizes", "16"], "sizes"),
    (["validate", "--seeds", "1"], "seeds"),
    (["validate", "--sizes", "a,b"], "integers"),
    (["validate", "--sizes", "512..64"], "doubling range"),
])
def test_bad_validate_arguments_exit_2(arguments, message, tmp_path):
    result = subprocess.run([sys.executable, "-m", "validation.app.cli", *arguments, "--output", str(tmp_path)],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 2
    assert message in result.stderr


def test_validate_sizes_accept_a_doubling_range():
    from validation.app.cli import _int_list
    assert _int_list("64..1024") == [64, 128, 256, 512, 1024]
    assert _int_list("64..1000") == [64, 128, 256, 512]
    assert _int_list("16,32") == [16, 32]
