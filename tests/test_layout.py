"""The architecture as tests: import layers, public exceptions, no import-time side effects."""

from __future__ import annotations

import ast
import importlib
import inspect
import pkgutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

#: Each layer may import only itself and the layers before it.
LAYERS = ["meanfield", "solvers", "validation", "validation.app"]


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def layer_of(module: str) -> str | None:
    """The layer a module belongs to: the longest layer name that prefixes it."""
    matches = [layer for layer in LAYERS if module == layer or module.startswith(layer + ".")]
    return max(matches, key=len) if matches else None


def imported_modules(source: str, module: str, is_package: bool) -> set[str]:
    """Absolute names of the modules ``source`` imports anywhere (top level or in functions)."""
    package = module if is_package else module.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                name = ".".join(base + ([node.module] if node.module else []))
            else:
                name = node.module
            found.add(name)
            found.update(f"{name}.{alias.name}" for alias in node.names)  # "from . import x"
        elif isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", "")) in (
                "import_module", "__import__"):
            found.add("<dynamic import>")
    return found


def violations(source: str, module: str, is_package: bool = False) -> list[str]:
    """Imports of ``module`` that run against the layers."""
    own = LAYERS.index(layer_of(module))
    wrong = []
    for target in imported_modules(source, module, is_package):
        if target == "<dynamic import>":
            wrong.append(f"{module} imports dynamically")
            continue
        layer = layer_of(target)
        if layer is not None and LAYERS.index(layer) > own:
            wrong.append(f"{module} ({layer_of(module)}) imports {target} ({layer})")
    return wrong


def library_modules():
    for top in ("meanfield", "solvers", "validation"):
        for path in sorted((ROOT / top).rglob("*.py")):
            yield path, module_name(path)


def test_no_layer_imports_a_higher_one():
    wrong = [problem for path, module in library_modules()
             for problem in violations(path.read_text(), module, path.name == "__init__.py")]
    assert not wrong, "\n".join(wrong)


@pytest.mark.parametrize("module, source", [
    ("solvers.circle.finite_volumes", "from validation.measures import circle_cdf"),
    ("meanfield.models", "def f():\n    import solvers\n"),
    ("validation.measures", "from .app.config import load_config"),
    ("validation.distances", "from validation.app import run_sweep"),
    ("validation.clusters", "import importlib\nimportlib.import_module('validation.app')"),
], ids=["solvers->validation", "meanfield->solvers-in-a-function", "validation->app-relative",
        "validation->app-absolute", "dynamic"])
def test_the_layer_check_catches_a_violation(module, source):
    assert violations(source, module)


def test_the_application_may_import_everything_below_it():
    source = "import meanfield\nfrom solvers import CircleFV\nfrom validation.distances import distance\n"
    assert not violations(source, "validation.app.sweep")


#: Public subpackages with their own ``__all__`` (and API page): their exceptions are exported there.
SUBPACKAGES = ("validation.app", "meanfield.pretrained")


def exception_classes(package: str):
    root = importlib.import_module(package)
    for info in pkgutil.walk_packages(root.__path__, package + "."):
        owner = next((sub for sub in SUBPACKAGES if info.name.startswith(sub + ".")), None)
        if owner is not None and owner != package:
            continue
        module = importlib.import_module(info.name)
        for name, value in vars(module).items():
            if inspect.isclass(value) and issubclass(value, BaseException) and value.__module__ == info.name:
                yield name, value


@pytest.mark.parametrize("package", ["meanfield", "meanfield.pretrained", "solvers", "validation", "validation.app"])
def test_every_exception_and_warning_the_library_defines_is_exported(package):
    exported = importlib.import_module(package).__all__
    missing = [name for name, _ in exception_classes(package) if name not in exported]
    assert not missing, f"{package} does not export {missing}"


def test_importing_the_library_leaves_the_matplotlib_backend_alone():
    code = ("import matplotlib\nmatplotlib.use('svg')\n"
            "import meanfield, solvers, validation, validation.figures, validation.app, validation.app.experiment_figures\n"
            "print(matplotlib.get_backend())")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip().splitlines()[-1] == "svg"


@pytest.mark.parametrize("old", ["validation.cli", "validation.config", "validation.sweep_config",
                                 "validation.experiment", "validation.sweep", "validation.files",
                                 "validation.validate", "validation.experiment_figures"])
def test_the_module_aliases_of_0_2_are_gone_since_0_3(old):
    sys.modules.pop(old, None)
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module(old)


@pytest.mark.parametrize("name", ["run_experiment", "run_sweep"])
def test_application_names_live_in_validation_app_only(name):
    import validation
    import validation.app

    assert callable(getattr(validation.app, name))
    with pytest.raises(AttributeError, match=name):
        getattr(validation, name)


#: The imports the library makes inside functions, each with its reason; any other belongs at the top.
LOCAL_IMPORTS = {
    "meanfield/engines/kernels.py": ({".series", ".fused", ".causal_series"}, "numba engines: importing one starts numba"),
    "meanfield/integration/runs.py": ({"scipy.integrate"}, "slow to import; only DOP853 runs need it"),
    "meanfield/limit_geometry.py": ({"scipy.cluster.hierarchy"}, "slow to import; one function needs it"),
    "meanfield/sampling.py": ({"scipy.optimize"}, "sweep workers import the module, never this function"),
    "meanfield/particles.py": ({".datasets", ".engines.frames"},
                               "sweep workers never build a dataset (it imports xarray); the frames' pass starts numba"),
    "meanfield/reduction.py": ({"xarray", "scipy.sparse", "scipy.sparse.csgraph", "scipy.spatial", "scipy.spatial.distance"},
                               "sweep workers import meanfield and never reduce clusters"),
    "meanfield/euclidean_particles.py": ({"xarray"}, "sweep workers never build a dataset"),
    "meanfield/random_weights.py": ({"xarray"}, "sweep workers never build a dataset"),
    "meanfield/frequencies.py": ({"scipy.integrate"}, "sweep workers never integrate the Ott-Antonsen equations"),
    "meanfield/graphs.py": ({"scipy", "scipy.sparse.csgraph"}, "sweep workers never build a graph"),
    "solvers/__init__.py": ({".causal", ".chain", ".circle.auto", ".circle.bbgky", ".circle.collapse", ".circle.finite_volumes",
                             ".circle.frequencies", ".circle.graphon", ".circle.lagrangian", ".circle.lorentzian", ".circle.positional",
                             ".circle.spectral",
                             ".consistency",
                             ".line.finite_volumes",
                             ".line.lagrangian", ".methods", ".noise.circle", ".noise.sphere", ".resolution",
                             ".sphere.particles", ".sphere.spectral", ".sphere.zonal", ".sphere.rings"}, "lazy public names (module __getattr__): the table of solvers.methods is read "
                                   "without them"),
    "solvers/methods.py": ({"solvers", ".chain", ".handover"}, "the table is data; a solver's module loads when it is built"),
    "solvers/sphere/grid.py": ({"shtns"}, "its C library prints on import: stdout is redirected around it"),
    "validation/__init__.py": ({"."}, "lazy public names (module __getattr__)"),
    "validation/app/__init__.py": ({"."}, "lazy public names (module __getattr__)"),
    "validation/app/cli.py": ({".experiment", ".experiment_figures", ".stationary", ".sweep", ".sweep_config",
                               ".validate", "solvers", "validation.figures"}, "each command imports its own modules"),
    "validation/app/stationary.py": ({"solvers.stationary.bifurcation", "solvers.stationary.circle", "solvers.stationary.sphere",
                                      "solvers.sphere.grid", "validation.stationary_figures"},
                                     "the stationary command's own modules"),
    "validation/app/sweep.py": ({"array_api_strict", "cupy", "jax", "torch", "dask.distributed", "distributed.config",
                                 "xarray"}, "optional libraries, and workers start without xarray"),
    "validation/app/sweep_config.py": ({".preflight"}, "it builds solvers, which sweep workers never need"),
}


def function_level_imports(source: str) -> set[str]:
    """Modules imported inside function bodies (``from .x import y`` as ``.x``)."""
    found = set()

    def visit(node, in_function: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.Import) and in_function:
                found.update(alias.name for alias in child.names)
            elif isinstance(child, ast.ImportFrom) and in_function:
                found.add("." * child.level + (child.module or ""))
            else:
                visit(child, in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)))

    visit(ast.parse(source), False)
    return found


def test_imports_inside_functions_are_the_declared_ones():
    undeclared = {}
    for path, _ in library_modules():
        name = path.relative_to(ROOT).as_posix()
        extra = function_level_imports(path.read_text()) - LOCAL_IMPORTS.get(name, (set(), ""))[0]
        if extra:
            undeclared[name] = sorted(extra)
    assert not undeclared, f"imports inside functions without a declared reason (move them to the top): {undeclared}"


def test_the_local_import_check_finds_one():
    source = "import numpy\n\ndef f():\n    if True:\n        from .series import x\n    return x\n"
    assert function_level_imports(source) == {".series"}


def test_every_package_of_the_library_is_in_the_wheel():
    """pyproject.toml lists the packages by name: a subpackage left out installs editable but not as a wheel."""
    from validation.app.config import tomllib  # tomli before Python 3.11

    listed = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    found = {module_name(init) for top in ("meanfield", "solvers", "validation")
             for init in (ROOT / top).rglob("__init__.py") if "__pycache__" not in init.parts}
    assert found == listed
