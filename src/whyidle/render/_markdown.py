"""A cause page as HTML for the report: headings, paragraphs, lists, code; nothing that fetches.

The page is parsed by markdown-it-py (CommonMark; a dependency of rich, so always installed) with
raw HTML off, so any ``<`` in the page is escaped text, as are code blocks. Links become their
text: the pages link to other files of the repository, which the reader of an offline report
does not have. Images are off (nothing is fetched). The page's title (its ``#`` heading) is
dropped, since the report shows it in the ``<summary>`` above the page, and the other headings
move down to ``h5``/``h6`` to sit under the finding's own headings.
"""

from __future__ import annotations

from functools import lru_cache

from markdown_it import MarkdownIt
from markdown_it.token import Token

from whyidle.pages import page_text

__all__ = ["markdown_html", "page_html"]


def _parser() -> MarkdownIt:
    return MarkdownIt("commonmark", {"html": False}).disable("image")


def _offline(tokens: list[Token]) -> list[Token]:
    """Drop the title and links (keeping their text); move the other headings down."""
    out: list[Token] = []
    skip = False
    for t in tokens:
        if t.type == "heading_open" and t.tag == "h1" and not out:
            skip = True
            continue
        if skip:
            skip = t.type != "heading_close"
            continue
        if t.type in ("heading_open", "heading_close"):
            t.tag = "h5" if t.tag in ("h1", "h2") else "h6"
        if t.children:
            t.children = [c for c in t.children if c.type not in ("link_open", "link_close")]
        out.append(t)
    return out


def markdown_html(text: str) -> str:
    """Markdown text as escaped, link-free HTML."""
    md = _parser()
    return str(md.renderer.render(_offline(md.parse(text)), md.options, {}))


def page_html(name: str) -> str:
    """A cause page (see :mod:`whyidle.pages`) as HTML; the same page renders once per process
    (by its text: a section registered since renders it again)."""
    return _cached_html(page_text(name))


@lru_cache(maxsize=None)
def _cached_html(text: str) -> str:
    return markdown_html(text)
