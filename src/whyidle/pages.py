"""The cause pages: one Markdown page per group of causes, shipped inside the package.

The pages live in ``whyidle/data/causes/<group>.md`` (the repository's ``docs/causes/`` points
there; there is one copy) and are read with :mod:`importlib.resources`, so they are there in a
wheel, a zip import or an editable checkout alike, with no network: the HTML report embeds them,
``whyidle explain CAUSE`` prints them, and the terminal report names that command.

A finding's ``fix.docs`` holds the name of its page (``"starvation"``) or, for findings about an
input format rather than a cause (counter logs, Nsight Systems), a section of the repository's
docs (``"docs/inputs.md#nsight-systems"``). Every finding's group has a page, so the renderers
pick the page by ``finding.group``.
"""

from __future__ import annotations

from functools import lru_cache
from importlib import resources

from whyidle.catalogue import BUSY_CAUSES, CATALOGUE, GROUPS
from whyidle.errors import UsageError

__all__ = ["PAGES", "page_name", "page_text", "page_title", "explain_command"]

PAGES: tuple[str, ...] = GROUPS  # one page per group of causes

_KEYS = {e.key: e.group for e in (*CATALOGUE, *BUSY_CAUSES)}


def page_name(cause: str) -> str:
    """The page of a group (``starvation``) or of a ``group/cause`` key (``starvation/h2d_copy``).

    Raises :class:`UsageError` naming the valid pages for anything else.
    """
    name = cause.strip().lower().replace("-", "_").replace(" ", "_")
    if name in PAGES:
        return name
    if name in _KEYS:
        return _KEYS[name]
    raise UsageError(
        f"no page for {cause!r}; the pages are {', '.join(PAGES)} (a group/cause key such as "
        "starvation/input_pipeline names its group's page)"
    )


@lru_cache(maxsize=None)
def page_text(name: str) -> str:
    """The Markdown text of a page, from the installed package."""
    return (resources.files("whyidle") / "data" / "causes" / f"{page_name(name)}.md").read_text(encoding="utf-8")


def page_title(name: str) -> str:
    """The page's first heading, without its ``#``."""
    for line in page_text(name).splitlines():
        if line.startswith("# "):
            return line[2:].strip()
    return page_name(name)


def explain_command(name: str) -> str:
    """The command line that prints the page offline."""
    return f"whyidle explain {page_name(name)}"
