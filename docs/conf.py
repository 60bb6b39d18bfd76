"""Sphinx configuration: the site is built offline (no inventory is fetched) and nitpicky."""

from __future__ import annotations

import sys
from pathlib import Path

DOCS = Path(__file__).resolve().parent
ROOT = DOCS.parent
sys.path.insert(0, str(DOCS / "_ext"))  # the local extensions

from importlib.metadata import version as _version  # noqa: E402

project = "meanfield-attention"
author = "the meanfield-attention developers"
copyright = "2026, " + author
release = version = _version("meanfield-attention")

extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "sphinx.ext.mathjax",
    "numpydoc",
    "myst_parser",
    "sphinx_copybutton",
    "sphinx_gallery.gen_gallery",
    "config_reference",  # docs/_ext: the TOML reference generated from the config schema
    "offline_site",  # docs/_ext: no page loads a script or stylesheet from the network
    "gallery_thumbnails",  # docs/_ext: a multi-panel figure's thumbnail shows its first panel
]

source_suffix = {".rst": "restructuredtext", ".md": "markdown"}
exclude_patterns = ["_build", "**sg_execution_times.rst"]  # left by builds that wrote the page
templates_path = ["_templates"]

myst_enable_extensions = ["dollarmath", "amsmath", "colon_fence", "deflist"]
myst_heading_anchors = 3

autosummary_generate = True
autodoc_default_options = {"members": True}
autodoc_member_order = "bysource"
autodoc_typehints = "none"  # the numpydoc sections state the types; annotations would link off-site
numpydoc_show_class_members = False
numpydoc_xref_param_type = False
# Every documented function and class states its parameters and what it returns (and has a
# docstring at all): checked at build time, so `make docs -W` fails on a gap.
numpydoc_validation_checks = {"PR01", "PR02", "RT01", "GL08"}

# No inventory is fetched at build time, so names of other projects cannot resolve: only ours must.
nitpicky = True
nitpick_ignore_regex = [
    (r"py:.*", r"(numpy|np|xarray|xr|scipy|dask|distributed|matplotlib|collections|typing|pathlib|"
               r"os|concurrent|numbers|array_api_compat|zarr|shtns|tqdm|threading|enum)(\..*)?"),
    (r"py:class", r"(int|float|bool|str|bytes|complex|tuple|list|dict|set|object|callable|None|"
                  r"Exception|Warning|RuntimeError|ValueError|TypeError|KeyboardInterrupt|"
                  r"SystemExit|BaseException|UserWarning|RuntimeWarning|Path|ndarray|Dataset|"
                  r"DataArray|Generator|array_like|array|optional|sequence|mapping|iterable)"),
]

html_theme = "pydata_sphinx_theme"
html_title = f"meanfield-attention {release}"
html_static_path: list[str] = []
# MathJax from the copy `scripts/setup.sh docs` keeps in the environment (an offline site);
# without it Sphinx's default, MathJax from its CDN.
_MATHJAX = Path(sys.prefix) / "share" / "docs-static"
if (_MATHJAX / "mathjax" / "tex-mml-chtml.js").is_file():
    html_static_path.append(str(_MATHJAX))
    mathjax_path = "mathjax/tex-mml-chtml.js"
html_theme_options = {
    "navigation_with_keys": False,
    "show_toc_level": 2,
    "header_links_before_dropdown": 6,
}
html_show_sourcelink = False


sphinx_gallery_conf = {
    "examples_dirs": str(ROOT / "examples"),
    "gallery_dirs": "auto_examples",
    "filename_pattern": r".*\.py$",
    "reset_argv": "gallery.quick_arguments",
    "image_scrapers": ("gallery.png_scraper",),
    "download_all_examples": False,
    "remove_config_comments": True,
    "within_subsection_order": "FileNameSortKey",
    "plot_gallery": "True",
    "capture_repr": (),
    "show_memory": False,
    # The computation-times page loads jQuery and DataTables from CDNs; the gallery pages say
    # which size each script runs at.
    "write_computation_times": False,
}
