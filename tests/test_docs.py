"""The documentation cannot rot: every code block of the README and of the user guide runs here.

Python blocks run page by page, each page in one namespace, in a scratch folder that holds the
repository's ``examples/``, with every warning an error. Shell blocks would take minutes to
hours at their documented sizes (the example configs run at their sizes in test_faults.py):
here every ``meanfield`` command of them must parse with the program's own argument parser and
its config must pass the program's checks, and every ``make`` target must exist.
"""

from __future__ import annotations

import doctest
import importlib
import io
import os
import re
import shlex
import tokenize
import warnings
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs" / "guide").glob("*.md"))]


def blocks(page: Path, language: str) -> list[str]:
    return re.findall(rf"^```{language}\n(.*?)^```", page.read_text(), re.S | re.M)


@pytest.fixture
def scratch(tmp_path):
    (tmp_path / "examples").symlink_to(ROOT / "examples")
    old = Path.cwd()
    os.chdir(tmp_path)
    yield tmp_path
    os.chdir(old)


@pytest.mark.parametrize("page", [p for p in PAGES if blocks(p, "python")], ids=lambda p: p.stem)
def test_every_python_block_of_the_page_runs_clean(page, scratch):
    import matplotlib

    matplotlib.use("Agg")
    namespace: dict = {}
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for block in blocks(page, "python"):
            exec(compile(block, f"{page.name} code block", "exec"), namespace)


@pytest.mark.parametrize("page", [p for p in PAGES if blocks(p, "toml")], ids=lambda p: p.stem)
def test_every_toml_block_of_the_page_is_a_config_that_checks(page, scratch):
    from validation.app.config import check_config, tomllib

    for block in blocks(page, "toml"):
        check_config(tomllib.loads(block), base=scratch)


def shell_commands() -> list[tuple[str, str]]:
    commands = []
    for page in PAGES:
        for block in blocks(page, "bash"):
            for line in block.splitlines():
                line = line.split("#")[0].strip()
                if line:
                    commands.append((page.name, line))
    return commands


@pytest.mark.parametrize("page, line", shell_commands(), ids=lambda v: str(v)[:60])
def test_every_shell_command_is_one_the_programs_accept(page, line):
    from validation.app.cli import build_parser
    from validation.app.config import load_config
    from validation.app.stationary import load_stationary_config
    from validation.app.sweep_config import load_sweep_config

    words = shlex.split(line)
    program = Path(words[0]).name
    if program == "make":
        targets = re.findall(r"^([\w-]+):", (ROOT / "Makefile").read_text(), re.M)
        assert set(words[1:]) <= set(targets), line
    elif program == "meanfield":
        args = build_parser().parse_args(words[1:])
        load = {"run": load_config, "sweep": load_sweep_config, "stationary": load_stationary_config}
        if args.command in load:
            load[args.command](ROOT / args.config)
    elif program in ("pip", "sudo", "source", "python"):
        pass  # installation lines and scripts (the scripts run in test_faults.py)
    else:
        pytest.fail(f"{page}: no check for the command {line!r}")


def test_the_readme_is_short_and_links_nothing_outside_the_repository():
    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) <= 150
    for target in re.findall(r"\]\(([^)]+)\)", text):
        assert target.startswith(("https://arxiv.org/", "https://github.com/borjanG")) or \
            (ROOT / target).exists(), target


def test_no_code_or_page_points_to_documents_outside_the_repository():
    pattern = re.compile(r"shared/docs|MODEL\.md|CAUSAL\.md|ARCHITECTURE\.md")
    files = [ROOT / "README.md", *ROOT.joinpath("docs").rglob("*.md")]
    for package in ("meanfield", "solvers", "validation", "examples"):
        files += ROOT.joinpath(package).rglob("*.py")
    offenders = [str(f.relative_to(ROOT)) for f in files if not {"_build", "auto_examples"} & set(f.parts) and pattern.search(f.read_text())]
    assert not offenders


def test_the_api_reference_lists_every_public_name():
    import meanfield
    import meanfield.pretrained
    import solvers
    import validation
    import validation.app

    for module in (meanfield, meanfield.pretrained, solvers, validation, validation.app):
        page = (ROOT / "docs" / "api" / f"{module.__name__.replace('.', '_')}.rst").read_text()
        listed = re.findall(r"^   (\w+)$", page, re.M)
        assert sorted(listed) == sorted(module.__all__), module.__name__


PACKAGES = ("meanfield", "meanfield.pretrained", "solvers", "validation", "validation.app")


def test_the_examples_in_the_docstrings_run():
    finder = doctest.DocTestFinder()
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    examples = 0
    for package in PACKAGES:
        module = importlib.import_module(package)
        for name in module.__all__:
            for test in finder.find(getattr(module, name), f"{package}.{name}"):
                examples += len(test.examples)
                runner.run(test, out=lambda text: None)
    assert examples > 0  # the collector sees the examples
    assert runner.summarize(verbose=False).failed == 0


def test_docstrings_with_backslashes_are_raw_strings():
    """In a plain string ``\\theta`` is a tab and ``\\beta`` a backspace: TeX must sit in r-strings."""
    offenders = []
    for package in ("meanfield", "solvers", "validation", "benchmarks", "examples"):
        for path in ROOT.joinpath(package).rglob("*.py"):
            for token in tokenize.generate_tokens(io.StringIO(path.read_text()).readline):
                literal = token.string
                if token.type == tokenize.STRING and literal.startswith('"""') and \
                        re.search(r"\\[A-Za-z]", literal.replace("\\\\", "")):
                    offenders.append(f"{path.relative_to(ROOT)}:{token.start[0]}")
    assert not offenders
