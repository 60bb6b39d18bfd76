"""Readable gallery thumbnails: a wide multi-panel figure is represented by its first panel.

Sphinx-Gallery scales an example's first figure into its thumbnail whole; a row of four panels
becomes a strip a few pixels high. After the build, each thumbnail whose figure is more than
twice as wide as high is redrawn from the figure's left part (the first panel), centred on a
white thumbnail of the same size.
"""

from __future__ import annotations

from pathlib import Path

#: Figures wider than this (width / height) are a row of panels.
WIDE = 2.0

#: The part of the figure a thumbnail shows: this many heights from the left.
PANEL = 1.35


def redraw_thumbnails(app, exception) -> None:
    if exception is not None or app.builder.name != "html":
        return
    from PIL import Image  # matplotlib's own dependency

    images = Path(app.outdir) / "_images"
    for thumbnail in images.glob("sphx_glr_*_thumb.png"):
        figure = images / thumbnail.name.replace("_thumb.png", "_001.png")
        if not figure.exists():
            continue
        with Image.open(figure) as full, Image.open(thumbnail) as old:
            width, height = full.size
            if width < WIDE * height:
                continue
            panel = full.convert("RGB").crop((0, 0, int(PANEL * height), height))
            panel.thumbnail(old.size)
            canvas = Image.new("RGB", old.size, "white")
            canvas.paste(panel, ((old.size[0] - panel.size[0]) // 2, (old.size[1] - panel.size[1]) // 2))
        canvas.save(thumbnail)


def setup(app):
    app.connect("build-finished", redraw_thumbnails)
    return {"parallel_read_safe": True}
