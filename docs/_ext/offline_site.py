"""Warn (an error under ``-W``) when a built page loads a script or a stylesheet from the network.

Links to other sites are fine; what a page *loads* must come with the site, so that it
renders offline (MathJax, the theme, the gallery). The one exception is MathJax from its CDN
where ``scripts/setup.sh docs`` could not keep a copy (no npm): that fallback is chosen in
``conf.py`` and announced by the set-up.
"""

from __future__ import annotations

import re
from pathlib import Path

from sphinx.util import logging

logger = logging.getLogger(__name__)

#: ``<script src="http...">`` and ``<link rel="stylesheet" href="http...">`` (either order of attributes).
REMOTE = re.compile(r"<script[^>]*\bsrc=\"(https?://[^\"]*)\"|<link(?=[^>]*rel=\"stylesheet\")[^>]*\bhref=\"(https?://[^\"]*)\"")


def check(app, exception) -> None:
    if exception is not None or app.builder.format != "html":
        return
    fallback = app.config.mathjax_path
    # The pages of this build's documents (an incremental build keeps older pages around).
    pages = [Path(app.builder.get_outfilename(name)) for name in sorted(app.env.found_docs)]
    for page in (page for page in pages if page.is_file()):
        for match in REMOTE.finditer(page.read_text(encoding="utf-8")):
            if (match.group(1) or match.group(2)).startswith(fallback):
                continue
            logger.warning("%s loads %s from the network: the site would not render offline",
                           page.relative_to(app.outdir), match.group(0))


def setup(app):
    app.connect("build-finished", check)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
