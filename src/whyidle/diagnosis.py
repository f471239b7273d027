"""The public diagnosis: the data of :mod:`whyidle.findings.model` with what a user does with it.

``whyidle.diagnose(...)`` returns a :class:`Diagnosis`: print it for the terminal report, render
or save it in any format. The data (:class:`~whyidle.findings.model.DiagnosisData`) lives in the
findings layer, which imports no renderer; this module sits above both, so the import arrows
point one way (findings -> render -> here)::

    d = whyidle.diagnose("trace.json.gz")
    print(d)                       # the terminal report
    d.save("report.html")          # or .json, .txt, .json.gz (Perfetto), .png, .svg
    again = whyidle.load_report("report.json")   # the same Diagnosis, from a saved JSON report
"""

from __future__ import annotations

import os
from typing import Any

import msgspec

from whyidle.findings.model import DiagnosisData

__all__ = ["Diagnosis", "Report", "Renderable", "as_diagnosis", "load_report"]


class Renderable:
    """What a diagnosis (or a feature's result, such as :class:`whyidle.ranks.model.MultiRankReport`)
    does for a user: print as the terminal report, render and save in any format."""

    __slots__ = ()

    def __str__(self) -> str:
        """The terminal report, 80 columns: ``print(diagnosis)`` shows what ``whyidle diagnose`` prints."""
        from whyidle.render import render

        return str(render(self, "terminal"))

    def render(self, format: str = "terminal", **options: Any) -> str | bytes:
        """The diagnosis as terminal text, json, html, perfetto (bytes), png or svg (bytes);
        ``options`` are the format's own (``width=`` for terminal, ``gzip=`` for perfetto)."""
        from whyidle.render import render

        return render(self, format, **options)

    def save(self, path: str | os.PathLike[str], format: str | None = None, *, columns: bool = False) -> str:
        """Write to ``path`` (format from the suffix: .html, .json, .txt, .json.gz, .png, .svg); returns the format.
        ``columns``: a JSON report in its full form, with every gap and the busy intervals.

        As the command line does: an OutputError when ``path`` is a file the diagnosis was made from
        (the trace, the counter log), and a Perfetto output (.json.gz) is that trace annotated with
        the whyidle track while the file is still there (it reads back as the same diagnosis);
        without it, whyidle's drawing of the diagnosis, which says what it is when read back."""
        from whyidle.errors import require_path
        from whyidle.render import save

        require_path(path, "path")
        inputs = self.input_paths()
        original = inputs[0] if inputs and os.path.isfile(inputs[0]) else None
        return save(self, path, format, columns=columns, inputs=inputs, original=original)[1]

    def input_paths(self) -> tuple[str, ...]:
        """The files this result was read from (what :meth:`save` never overwrites)."""
        return ()

    def to_dict(self, columns: bool = False) -> dict[str, Any]:
        """The JSON report as plain data (docs/json-schema.md); ``columns``: the full form, with
        every gap and each device's busy intervals."""
        from whyidle.render.json import to_dict

        return to_dict(self, columns)


class Diagnosis(DiagnosisData, Renderable, frozen=True):
    """The diagnosis of one profile (see :class:`~whyidle.findings.model.DiagnosisData` for the fields)."""

    def _repr_html_(self) -> str:
        from whyidle.render.html import render_html

        return render_html(self)

    def input_paths(self) -> tuple[str, ...]:
        counters = self.counters.path if self.counters is not None else ""
        return tuple(p for p in (self.source.path, counters) if p)


Report = Diagnosis  # the name before the diagnosis held every gap; the same class


def as_diagnosis(data: DiagnosisData) -> Diagnosis:
    """The public class around diagnosis data (built by a lower layer: a saved report, counter rules)."""
    if isinstance(data, Diagnosis):
        return data
    return Diagnosis(**msgspec.structs.asdict(data))


def load_report(path: str | os.PathLike[str]) -> object:
    """A JSON result saved by whyidle (plain or gzipped): a trace's report as the Diagnosis it was
    made from, every output rendering from it as from the original; a result of another kind
    (``"kind"``: a run folder's, a comparison, a sweep, a batching or serving result) as the reader
    its package registered gives it (``whyidle.load_report`` imports those packages first)."""
    from whyidle.errors import require_path
    from whyidle.findings.saved import load_saved

    require_path(path, "path")
    data = load_saved(path)
    return as_diagnosis(data) if isinstance(data, DiagnosisData) else data
