"""The cause pages: one Markdown page per group of causes, shipped inside the package.

The pages live in ``whyidle/data/causes/<group>.md`` (the repository's ``docs/causes/`` points
there; there is one copy) and are read with :mod:`importlib.resources`, so they are there in a
wheel, a zip import or an editable checkout alike, with no network: the HTML report embeds them,
``whyidle explain CAUSE`` prints them, and the terminal report names that command.

A finding's ``fix.docs`` holds the name of its page (``"starvation"``) or, for findings about an
input format rather than a cause (counter logs, Nsight Systems), a section of the repository's
docs (``"docs/inputs.md#nsight-systems"``). Every finding's group has a page, so the renderers
pick the page by ``finding.group``.

A cause registered at run time (``CATALOGUE.register``) brings its section with
:func:`register_section`: it is appended to its group's page wherever the page is shown.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from functools import lru_cache
from importlib import resources

from whyidle.catalogue import BUSY_FINDINGS, CATALOGUE, GROUPS
from whyidle.errors import UsageError

__all__ = ["PAGES", "page_name", "page_text", "page_title", "explain_command", "register_section", "unregister_section", "section_registered"]

PAGES: tuple[str, ...] = GROUPS  # one page per group of causes



def page_name(cause: str) -> str:
    """The page of a group (``starvation``) or of a ``group/cause`` key (``starvation/h2d_copy``).

    Raises :class:`UsageError` naming the valid pages for anything else.
    """
    name = cause.strip().lower().replace("-", "_").replace(" ", "_")
    if name in PAGES:
        return name
    e = CATALOGUE.get(name) or next((b for b in BUSY_FINDINGS if b.key == name), None)
    if e is not None:
        return e.group
    raise UsageError(
        f"no page for {cause!r}; the pages are {', '.join(PAGES)} (a group/cause key such as "
        "starvation/input_pipeline names its group's page)"
    )


# Sections of causes registered at run time: cause key -> Markdown, appended to its group's page.
_SECTIONS: dict[str, str] = {}


@lru_cache(maxsize=None)
def _shipped(page: str) -> str:
    return (resources.files("whyidle") / "data" / "causes" / f"{page}.md").read_text(encoding="utf-8")


def page_text(name: str) -> str:
    """The Markdown text of a page, from the installed package, with the sections of the
    causes of its group registered at run time."""
    page = page_name(name)
    extra = [text.strip() for key, text in _SECTIONS.items() if page_name(key) == page]
    return "\n\n".join([_shipped(page).rstrip(), *extra]) + "\n" if extra else _shipped(page)


def register_section(key: str, markdown: str) -> None:
    """Add the doc section of a cause in the catalogue (its ``group/cause`` key must appear in
    it, in backticks, as in the shipped pages)."""
    page_name(key)  # a UsageError for a key not in the catalogue
    if f"`{key}`" not in markdown:
        raise ValueError(f"the section of {key!r} must name its key in backticks (`{key}`)")
    _SECTIONS[key] = markdown


def unregister_section(key: str) -> None:
    del _SECTIONS[key]


@contextmanager
def section_registered(key: str, markdown: str) -> Iterator[str]:
    """The cause pages with ``key``'s section for the duration of the block."""
    register_section(key, markdown)
    try:
        yield key
    finally:
        unregister_section(key)


def page_title(name: str) -> str:
    """The page's first heading, without its ``#``."""
    for line in page_text(name).splitlines():
        if line.startswith("# "):
            return line[2:].strip()
    return page_name(name)


def explain_command(name: str) -> str:
    """The command line that prints the page offline."""
    return f"whyidle explain {page_name(name)}"
