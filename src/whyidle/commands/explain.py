"""whyidle explain [CAUSE]: print a cause's page (how whyidle finds it, the fix, how to verify).

The pages ship with the package (``whyidle/data/causes``, see :mod:`whyidle.pages`), so this
works offline, as the HTML report does, which embeds the same pages. CAUSE is a group
(``starvation``) or a ``group/cause`` key as the reports print it (``starvation/h2d_copy``);
without one, the pages are listed. The page is printed as its Markdown text, which reads as
plain text and pipes into a Markdown viewer.
"""

from __future__ import annotations

import argparse
from typing import Any

from whyidle.output import write_stdout
from whyidle.pages import PAGES, page_name, page_text, page_title

__all__ = ["add_parser", "run", "EXAMPLES"]

EXAMPLES = """\
  whyidle explain                                # list the pages
  whyidle explain starvation                     # the page of a group of causes
  whyidle explain starvation/h2d_copy            # a cause as the reports name it: its group's page
"""


def add_parser(sub: Any) -> None:
    p = sub.add_parser("explain", help="print the page about a cause of idle time (offline)")
    p.add_argument("cause", nargs="?", metavar="CAUSE", help=f"one of {', '.join(PAGES)}, or a group/cause key from a report")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    if args.cause is None:
        width = max(len(n) for n in PAGES)
        lines = [f"  {n:<{width}}  {page_title(n)}" for n in PAGES]
        write_stdout("The cause pages (whyidle explain CAUSE prints one):\n" + "\n".join(lines) + "\n")
        return 0
    write_stdout(page_text(page_name(args.cause)))
    return 0
