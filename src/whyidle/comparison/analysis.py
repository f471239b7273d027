"""Before/after comparison of two Reports of the same job: what changed, and a verdict.

Pure: two Reports (and, when the traces are at hand, their per-name times) in, a
:class:`Comparison` out. Figures are normalised so that runs with different numbers of steps
compare: per step (the mean over the analysed steps) when both runs have step markers, otherwise
per second of the window. Deltas are ``after - before``.

The verdict names the cause whose idle time fell most ("input starvation removed: -210 ms per
step") or, when nothing fell, the one that grew most, then the largest remaining wait. The CI
gate compares throughput: samples/s when both runs know their batch size, else steps/s, else the
device busy fraction; ``regression`` is the relative drop (0.05 = 5% slower).
"""

from __future__ import annotations

import os
import zlib
from typing import TYPE_CHECKING, Any

from whyidle.analyses import causes as C
from whyidle.analyses.names import NameTimes
from whyidle.comparison.model import Change, Comparison, NameChange, PredictionCheck
from whyidle.config import Config
from whyidle.findings.applied import lever_applied
from whyidle.findings.labels import cause_label
from whyidle.findings.model import DiagnosisData
from whyidle.parallel import Helpers
from whyidle.units import CHANGE, format_ns

if TYPE_CHECKING:
    from whyidle.sources import ReadAhead

__all__ = ["Change", "NameChange", "PredictionCheck", "Comparison", "compare", "compare_reports", "read_side", "parse_regression", "REMOVED_BELOW"]

# A cause counts as removed when what remains is under this share of what it was.
REMOVED_BELOW = 0.1
# Causes and names whose change is under this share of the before step (or window second) are
# too small to name in the verdict.
_NOTABLE = 0.01


def _prediction_check(before: DiagnosisData, after: DiagnosisData, causes: dict[str, Change]) -> PredictionCheck | None:
    """Which fix was applied (the cause whose idle fell most) and how its prediction did."""
    fell = [(k, c.delta or 0.0) for k, c in causes.items() if (c.delta or 0.0) < 0]
    if not fell:
        return None
    key = min(fell, key=lambda kv: kv[1])[0]
    found = [f for f in before.findings if f.key == key and f.prediction is not None]
    after_step = _mean_step(after)
    if not found or after_step is None:
        return None
    f = found[0]
    p = f.prediction
    assert p is not None
    bb, ab = before.utilization.batch_size, after.utilization.batch_size
    if bb and ab and bb != ab:  # the batch changed too: not the change the prediction replayed
        return None
    before_step = _mean_step(before)
    if before_step is not None and after_step > before_step:  # a regression is not the fix applied
        return None
    # the after run must show the change the prediction replayed (the cause's test, findings/applied.py)
    if not lever_applied(f.cause, f.variant, before, after):
        return None
    return PredictionCheck(key, p.lever, p.step_ns_after, after_step, p.step_ns_low, p.step_ns_high)




def parse_regression(text: str) -> float:
    """'5%' -> 0.05; '0.05' -> 0.05. A bare number of 1 or more is refused (did you mean 5%?)."""
    from whyidle.errors import UsageError

    t = text.strip()
    try:
        if t.endswith("%"):
            value = float(t[:-1]) / 100
        else:
            value = float(t)
            if value >= 1:
                raise UsageError(f"max_regression {text}: a bare number is a fraction; did you mean {t}%?", field="max_regression")
    except ValueError:
        raise UsageError(f"max_regression {text!r}: expected a percentage like 5% or a fraction like 0.05", field="max_regression") from None
    if value < 0:
        raise UsageError(f"max_regression {text}: expected 0 or more", field="max_regression")
    return value


def _per_basis(r: DiagnosisData, per_step: bool) -> tuple[float, dict[str, float]]:
    """(divisor, idle ns per cause divided by it) for one report."""
    u = r.utilization
    if per_step:
        n = len(u.steps)
        by = {c.key: sum(s.idle_by_cause_ns[i] for s in u.steps) / n for i, c in enumerate(C.CAUSES)}
        return float(n), by
    secs = max(r.window.duration_ns, 1) / 1e9
    return secs, {c.key: r.idle_by_cause_ns.get(c.key, 0) / secs for c in C.CAUSES}


def _mean_step(r: DiagnosisData) -> float | None:
    t = r.utilization.step_times_ns
    return float(t.mean()) if t.size else None


def _names(b: dict[str, int], a: dict[str, int], db: float, da: float, limit: int, floor_ns: float) -> tuple[NameChange, ...]:
    out = [NameChange(n, b.get(n, 0) / db, a.get(n, 0) / da) for n in set(b) | set(a)]
    out = [x for x in out if abs(x.delta_ns) >= floor_ns]
    out.sort(key=lambda x: (-abs(x.delta_ns), x.name))
    return tuple(out[:limit])


def _signed(ns: float) -> str:
    return ("\u2212" if ns < 0 else "+") + format_ns(abs(ns), CHANGE)


def _verdict(causes: dict[str, Change], unit: str, scale: float | None) -> str:
    floor = _NOTABLE * scale if scale else 0.0
    deltas = [(k, c.delta or 0.0) for k, c in causes.items()]
    fell = min(deltas, key=lambda kv: kv[1], default=("", 0.0))
    grew = max(deltas, key=lambda kv: kv[1], default=("", 0.0))
    parts = []
    now = "remaining"
    if fell[1] < 0 and abs(fell[1]) > floor and abs(fell[1]) >= grew[1]:
        k, d = fell
        before = causes[k].before or 0.0
        after = causes[k].after or 0.0
        word = "removed" if after <= REMOVED_BELOW * before else "reduced"
        parts.append(f"{cause_label(k)} {word}: {_signed(d)} {unit}")
    elif grew[1] > floor:
        parts.append(f"{cause_label(grew[0])} grew: {_signed(grew[1])} {unit}")
        now = "now"
    else:
        parts.append(f"no idle cause changed by more than {format_ns(floor, CHANGE)} {unit}" if floor else "no idle cause changed")
    remaining = max(((k, c.after or 0.0) for k, c in causes.items()), key=lambda kv: kv[1], default=("", 0.0))
    if remaining[1] > 0:
        label = "the largest remaining wait is" if now == "remaining" else "the largest wait is now"
        parts.append(f"{label} {cause_label(remaining[0])}, {format_ns(remaining[1], CHANGE)} {unit}")
    else:
        parts.append("no idle time remains")
    return "; ".join(parts)


def compare_reports(
    before: DiagnosisData,
    after: DiagnosisData,
    before_names: NameTimes | None = None,
    after_names: NameTimes | None = None,
    limit: int = 10,
) -> Comparison:
    """Compare two reports of the same job (see the module docstring for the bases).

    The per-name times default to the diagnoses' own (``DiagnosisData.name_times``)."""
    before_names = before_names if before_names is not None else before.name_times
    after_names = after_names if after_names is not None else after.name_times
    bu, au = before.utilization, after.utilization
    per_step = bool(bu.steps) and bool(au.steps)
    basis = "per step" if per_step else "per second of window"
    unit = "per step" if per_step else "per second"
    db, b_by = _per_basis(before, per_step)
    da, a_by = _per_basis(after, per_step)
    by_cause = {c.key: Change(b_by[c.key], a_by[c.key]) for c in C.CAUSES if b_by[c.key] or a_by[c.key]}
    by_group: dict[str, Change] = {}
    for g in C.GROUPS:
        keys = [c.key for c in C.CAUSES if c.group == g]
        bg, ag = sum(b_by[k] for k in keys), sum(a_by[k] for k in keys)
        if bg or ag:
            by_group[g] = Change(bg, ag)
    step = Change(_mean_step(before), _mean_step(after))
    scale = step.before if per_step else 1e9
    notes: list[str] = []
    if not per_step:
        notes.append("one run has no step markers: idle figures are per second of the window, not per step")
    if before.source.devices and after.source.devices and set(before.source.devices) != set(after.source.devices):
        notes.append(f"the runs used different devices ({', '.join(sorted(set(before.source.devices)))} vs {', '.join(sorted(set(after.source.devices)))})")
    if bu.batch_size and au.batch_size and bu.batch_size != au.batch_size:
        notes.append(f"the batch size changed ({bu.batch_size} -> {au.batch_size}): compare samples/s, not step time")

    sps = Change(bu.samples_per_s, au.samples_per_s)
    stp = Change(bu.steps_per_s, au.steps_per_s)
    busy = Change(bu.busy_fraction, au.busy_fraction)
    regression: float | None
    if sps.before and sps.after:
        tb, regression = "samples/s", 1 - sps.after / sps.before
    elif stp.before and stp.after:
        tb, regression = "steps/s", 1 - stp.after / stp.before
    elif busy.before:
        tb, regression = "device busy fraction", 1 - (busy.after or 0.0) / busy.before
    else:
        tb, regression = "", None

    kernels: tuple[NameChange, ...] = ()
    ops: tuple[NameChange, ...] = ()
    names_note = ""
    if before_names is not None and after_names is not None:
        nb = float(before_names.steps) if per_step and before_names.steps else max(before_names.window_ns, 1) / 1e9
        na = float(after_names.steps) if per_step and after_names.steps else max(after_names.window_ns, 1) / 1e9
        floor = _NOTABLE * (scale or 0.0) / 10
        kernels = _names(before_names.kernels_ns, after_names.kernels_ns, nb, na, limit, floor)
        ops = _names(before_names.ops_ns, after_names.ops_ns, nb, na, limit, floor)
    else:
        names_note = "kernel and op changes need per-name times from both runs (a JSON report saved before whyidle kept them has none)"
    return Comparison(
        before_path=before.source.path,
        after_path=after.source.path,
        basis=basis,
        step_time_ns=step,
        steps_per_s=stp,
        samples_per_s=sps,
        busy_fraction=busy,
        idle_ns=Change(sum(b_by.values()), sum(a_by.values())),
        idle_by_group_ns=by_group,
        idle_by_cause_ns=by_cause,
        kernels=kernels,
        ops=ops,
        names_note=names_note,
        throughput_basis=tb,
        regression=regression,
        verdict=_verdict(by_cause, unit, scale),
        notes=tuple(notes),
        prediction=_prediction_check(before, after, by_cause),
        **_work_changes(before, after),
    )


_SPLIT = ("near_roofline_ns", "compute_slow_ns", "memory_bound_ns", "unmodelled_ns")


def _work_changes(before: DiagnosisData, after: DiagnosisData) -> dict[str, Any]:
    """MFU before and after, and each class of kernel time as a share of kernel time (the split
    only where both runs have a work model)."""
    b, a = before.work, after.work
    mfu = Change(b.mfu if b else None, a.mfu if a else None)
    if b is None or a is None or b.kernel_ns <= 0 or a.kernel_ns <= 0:
        return {"mfu": mfu, "kernel_split": {}}
    return {"mfu": mfu, "kernel_split": {k.removesuffix("_ns"): Change(getattr(b, k) / b.kernel_ns, getattr(a, k) / a.kernel_ns) for k in _SPLIT}}


def read_side(
    source: str | os.PathLike[str] | DiagnosisData, config: Config | None = None, *, read_ahead: ReadAhead | None = None, helpers: Helpers = Helpers()
) -> DiagnosisData:
    """One side of a comparison: a diagnosis as is, a saved JSON report loaded, or a trace diagnosed.

    ``read_ahead`` and ``helpers`` are :func:`whyidle.sources.read`'s (the command line reads
    both inputs at once and decodes with a second process)."""
    if isinstance(source, DiagnosisData):
        return source
    from pathlib import Path

    from whyidle.findings.saved import load_report, looks_like_report

    p = Path(source)
    if p.is_file():
        with p.open("rb") as f:
            head = f.read(1 << 16)
        if head.startswith(b"\x1f\x8b"):  # the first 512 bytes of what it decompresses to
            try:
                head = zlib.decompressobj(wbits=31).decompress(head, 512)
            except zlib.error:
                head = b""  # the reader says what is wrong with it
        if looks_like_report(head[:512]):
            return load_report(p)
    from whyidle.pipeline import diagnose
    from whyidle.sources import read

    cfg = config or Config()
    return diagnose(read(source, None, helpers, read_ahead=read_ahead, settings=cfg.read), cfg)


def compare(
    before: str | os.PathLike[str] | DiagnosisData, after: str | os.PathLike[str] | DiagnosisData, config: Config | None = None, *, limit: int = 10
) -> Comparison:
    """Compare two runs of the same job: each a trace, a saved JSON report or a diagnosis."""
    return compare_reports(read_side(before, config), read_side(after, config), limit=limit)
