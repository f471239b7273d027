"""The analyses behind a Report, for renderers that draw more than the Report holds.

A Report carries the largest gaps only; the HTML timeline and the Perfetto track need every gap.
They take the Timeline the report was made from when the caller still has it (the CLI does), and
otherwise read the trace again from ``report.source.path``. The window is re-selected from the
report's own steps, so the gaps are the report's; a mismatch (the file changed, or the report
was made with other thresholds) is returned as a note rather than hidden.
"""

from __future__ import annotations

import os
from dataclasses import replace

from whyidle.config import Config
from whyidle.findings.model import Report
from whyidle.findings.rules import Analyses
from whyidle.timeline.model import Timeline

__all__ = ["analyses_for"]


def analyses_for(report: Report, timeline: Timeline | None = None, config: Config | None = None) -> tuple[Analyses | None, str]:
    """(the analyses, '') or (None, why they are unavailable); never raises for a missing file."""
    from whyidle.pipeline import analyse
    from whyidle.errors import WhyidleError

    tl = timeline
    if tl is None:
        path = report.source.path
        if not path or not os.path.isfile(path):
            return None, f"the trace {path or '(unknown)'} is not available, so only the largest gaps can be shown"
        from whyidle.sources import load

        try:
            tl = load(path)
        except WhyidleError as exc:
            return None, f"the trace could not be read again ({exc})"
    cfg = replace(config or Config(), skip_first_steps=0, steps=report.window.steps or None)
    try:
        a = analyse(tl, cfg)
    except WhyidleError as exc:
        return None, f"the trace could not be analysed again ({exc})"
    if len(a.gaps) != report.gap_count or a.window.start_ns != report.window.start_ns:
        return a, (
            f"the trace now gives {len(a.gaps)} gaps where the report has {report.gap_count} "
            "(the file changed, or the report used other thresholds); the timeline shows the trace as it is now"
        )
    return a, ""
