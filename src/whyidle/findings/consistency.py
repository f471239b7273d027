"""Every number agrees with every other: the contradictions a careful reader would catch.

:func:`contradictions` reads a diagnosis and returns, in words, each place where its parts
disagree: a prediction that recovers more than its finding explains without saying why, cause
shares that do not add up to the idle time, a ranked finding worth nothing, a sentence quoting a
number other than its field's, a snippet whose lever is not its prediction's, a raw address from
the trace in what a user reads. The test suite runs it on every diagnosis it makes
(``tests/conftest.py``); it is pure, so a user can run it on a saved report too.
"""

from __future__ import annotations

import re
from whyidle.findings.model import DiagnosisData, Finding
from whyidle.findings.predict import beyond_explained, explained_per_step_ns
from whyidle.units import format_ms, format_ns

__all__ = ["contradictions"]

# A heap address as CPython prints it in a repr ("<... object at 0x7fa3c...>").
_ADDRESS = re.compile(r"\bat 0x[0-9a-f]{6,}")
# A quantity of nothing, said of a finding the report ranks.
_NOTHING = re.compile(r"(?<![\d.])0(\.0+)? (ns|us|ms|s)\b(?! per)")
_WORKERS = re.compile(r"DataLoader with (\d+) worker processes")
# A lever's placeholder the advice did not fill (findings/advice.py fit_lever).
_PLACEHOLDER = re.compile(r"\{(workers|optimizer|optimizer_flag)\}")


def _texts(f: Finding) -> list[str]:
    fx = f.fix
    return [f.title, fx.summary, *fx.steps, fx.expected, *(n for n, _, _ in f.evidence.top_ops)]


def _prediction(f: Finding, n_steps: int) -> list[str]:
    p = f.prediction
    if p is None:
        return []
    out = []
    if p.batch_factor == 1 and not p.note:
        recovered = p.step_ns_before - p.step_ns_after
        explained = explained_per_step_ns(f, n_steps)
        if beyond_explained(recovered, explained):
            out.append(f"{f.id}: predicts {recovered / 1e6:.2f} ms per step recovered against {explained / 1e6:.2f} ms explained, without saying why")
    if p.recommended == (p.step_ns_after > p.step_ns_before * 0.995):
        out.append(f"{f.id}: recommended is {p.recommended} for a step of {p.step_ns_before:.0f} -> {p.step_ns_after:.0f} ns")
    m = _WORKERS.search(p.lever)
    if m and "num_workers=" in f.fix.code and f"num_workers={m.group(1)}" not in f.fix.code:
        out.append(f"{f.id}: the prediction replays {m.group(1)} workers, the snippet sets another num_workers")
    if "float16" in p.lever and "bfloat16" in f.fix.code and "float16)" not in f.fix.code.replace("bfloat16)", ""):
        out.append(f"{f.id}: the prediction replays float16, the snippet uses bfloat16")
    return out


def _finding(f: Finding, d: DiagnosisData, n_steps: int) -> list[str]:
    out = []
    weight = f.idle_ns + f.compute_wait_ns + f.affected_busy_ns
    if weight <= 0:
        out.append(f"{f.id}: ranked with no time (idle, compute wait and busy time all 0)")
    if not 0 <= f.share_of_idle <= 1 + 1e-9 or not 0 <= f.share_of_window <= 1 + 1e-9:
        out.append(f"{f.id}: a share outside 0..1 (of idle {f.share_of_idle}, of the window {f.share_of_window})")
    per_step = f.evidence.per_step_idle_ns
    quoted = [fmt(v) for v in (f.idle_ns, per_step) if v is not None for fmt in (format_ms, format_ns)]
    if f.idle_ns and f.basis == "" and not any(q in f.fix.expected for q in quoted):
        out.append(f"{f.id}: its expected effect quotes neither its idle time ({format_ns(f.idle_ns)}) nor its time per step: {f.fix.expected!r}")
    if f.est_saving_ns > f.affected_busy_ns:
        out.append(f"{f.id}: estimated to save {format_ns(f.est_saving_ns)} of the {format_ns(f.affected_busy_ns)} of busy time it concerns")
    if f.est_saving_ns and (format_ns(f.est_saving_ns) not in f.fix.expected or "estimate" not in f.fix.expected):
        out.append(f"{f.id}: its expected effect does not quote its estimated saving ({format_ns(f.est_saving_ns)}) as an estimate")
    for text in (*_texts(f), f.fix.code):
        if (hole := _PLACEHOLDER.search(text)) is not None:
            out.append(f"{f.id}: an unfilled placeholder {hole.group(0)} in {text[:80]!r}")
    for text in _texts(f):
        if _ADDRESS.search(text):
            out.append(f"{f.id}: a raw address from the trace in {text[:80]!r}")
        nothing = _NOTHING.search(text)
        if nothing is not None:
            out.append(f"{f.id}: a ranked finding quotes {nothing.group(0)!r}: {text[:100]!r}")
    return out + _prediction(f, n_steps)


def contradictions(d: DiagnosisData) -> tuple[str, ...]:
    """Every contradiction between the parts of ``d``, in words ('' if none)."""
    out: list[str] = []
    u = d.utilization
    by_cause = sum(d.idle_by_cause_ns.values())
    if d.gap_columns is not None or d.window.basis != "counter log":
        if by_cause != u.idle_ns and d.gap_count:
            out.append(f"the causes hold {by_cause} ns of idle, the utilisation {u.idle_ns} ns")
        if u.busy_ns + u.idle_ns != u.capacity_ns and d.window.basis != "counter log":
            out.append(f"busy {u.busy_ns} + idle {u.idle_ns} != the window's capacity {u.capacity_ns} ns")
    groups: dict[str, int] = d.idle_by_group_ns
    if u.idle_ns > 0 and sum(groups.values()) != by_cause:
        out.append("the groups' idle does not add up to the causes'")
    n_steps = max(len(d.window.steps), 1)
    for f in d.findings:
        out += _finding(f, d, n_steps)
    return tuple(out)
