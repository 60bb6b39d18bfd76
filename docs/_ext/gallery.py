"""The gallery runs each example script at its quick size and shows the figures it writes.

The scripts are command-line programs: they save their figures as PNG files in an output folder
and close them, so the gallery reads the files back instead of the open matplotlib figures.
"""

from __future__ import annotations

import shutil
import tomllib
from pathlib import Path

DOCS = Path(__file__).resolve().parents[1]
ROOT = DOCS.parent
SIZES = DOCS / "gallery_sizes.toml"


def output_folder(script: str | Path) -> Path:
    return DOCS / "_build" / "gallery_output" / Path(script).stem


def quick_sizes() -> dict[str, list[str]]:
    """Script name -> its quick-size arguments (with ``{out}`` and ``{config}`` placeholders)."""
    return {name: entry["arguments"] for name, entry in tomllib.loads(SIZES.read_text()).items()}


def script_arguments(script: str | Path, out: Path) -> list[str]:
    """The quick-size arguments of an example script, writing into ``out``.

    ``{config}`` is a copy of ``examples/lost_in_the_middle.toml`` whose output goes to ``out``
    (written only for a script that takes it).
    """
    arguments = quick_sizes()[Path(script).name]
    config = out / "settings.toml"
    if any("{config}" in a for a in arguments):
        config.write_text((ROOT / "examples" / "lost_in_the_middle.toml").read_text()
                          .replace('output = "../output/', f'output = "{out}/'))
    return [a.format(out=out, config=config) for a in arguments]


def quick_arguments(gallery_conf, script_vars) -> list[str]:
    """sphinx-gallery's `reset_argv`: a fresh output folder and the script's quick arguments."""
    out = output_folder(script_vars["src_file"])
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    return script_arguments(script_vars["src_file"], out)


def png_scraper(block, block_vars, gallery_conf) -> str:
    """The PNG files the script wrote (sorted by name), copied where sphinx-gallery wants them.

    Each figure gets the page's full width (a multi-panel figure is unreadable as a thumbnail in
    a row of several).
    """
    from sphinx_gallery.scrapers import figure_rst

    written = sorted(output_folder(block_vars["src_file"]).rglob("*.png"))  # each script is one block
    paths = []
    for png, target in zip(written, block_vars["image_path_iterator"]):
        shutil.copyfile(png, target)
        paths.append(target)
    return "".join(figure_rst([path], gallery_conf["src_dir"]) for path in paths)
