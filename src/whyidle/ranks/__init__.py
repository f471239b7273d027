"""Multi-rank jobs: a folder with one trace per rank -> :class:`~whyidle.ranks.model.MultiRankReport`.

* :mod:`~whyidle.ranks.run`: ``diagnose_ranks(run_dir)``, each rank diagnosed on its own (local
  processes, or :mod:`~whyidle.ranks.dask` on a Dask cluster), ranks assigned, the cross-rank
  analysis run;
* :mod:`~whyidle.ranks.analysis`: the cross-rank analysis (collectives matched, stragglers,
  exposed communication, step imbalance); :mod:`~whyidle.ranks.scaling`: scaling efficiency and
  what the lost share went to;
* :mod:`~whyidle.ranks.model`: the result and its codec (its saved JSON written and read back);
* its renderers: :mod:`~whyidle.ranks.render_terminal`, :mod:`~whyidle.ranks.render_json`,
  :mod:`~whyidle.ranks.render_html`, :mod:`~whyidle.ranks.files` (one file per rank).

The result's module registers its renderers with :mod:`whyidle.render` and its saved report's
reader with :mod:`whyidle.findings.saved` (the core imports no feature package; the renderers
themselves import on first use). This package's own import is light (no numpy): the command line
asks :func:`is_run_dir` before it reads a trace.
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["is_run_dir"]


def is_run_dir(path: str) -> bool:
    """A folder holding more than one trace: one per rank."""
    from whyidle.sources import find_traces

    p = Path(path)
    return p.is_dir() and len(find_traces(p)) > 1
