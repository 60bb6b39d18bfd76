"""Fail on source markup that reached a built page as text: a directive or a role a parser did not read.

``sphinx -W`` passes a page whose reStructuredText was parsed as Markdown (a directive inside a
MyST page): its ``.. rubric::`` and ``:func:`` arrive as words. This reads every built page's text.
"""

from __future__ import annotations

import html
import re
import sys
from pathlib import Path

#: Markup that has no business in a page's text: an RST directive, or an RST role.
RAW_MARKUP = re.compile(r"(^|\s)\.\. [a-z][a-z-]*::|(^|[\s(])\{?:(func|class|meth|mod|doc|ref|math|attr|data):`")


def raw_markup(page: Path) -> list[str]:
    """The lines of a built page's visible text that hold raw markup (code blocks left out)."""
    text = page.read_text(encoding="utf-8")
    text = re.sub(r"<(pre|script|style)\b.*?</\1>", " ", text, flags=re.S)
    text = html.unescape(re.sub(r"<[^>]+>", " ", text))
    return [line.strip() for line in text.splitlines() if RAW_MARKUP.search(line)]


def main(site: str) -> int:
    offenders = {page: lines for page in sorted(Path(site).rglob("*.html")) if (lines := raw_markup(page))}
    for page, lines in offenders.items():
        print(f"{page}: raw markup in the page's text: {lines[0][:160]!r}", file=sys.stderr)
    return 1 if offenders else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "docs/_build/html"))
