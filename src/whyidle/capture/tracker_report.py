"""The step tracker's measurements as a :class:`whyidle.Report`, with the same findings and levers.

Per step (host clock, see :mod:`whyidle.capture.tracker`)::

    step      = from asking for this batch to asking for the next
    busy      = device time between the step's marks (CUDA), or on CPU the host time that was
                neither data wait nor a marked copy
    idle      = step - busy, attributed in this order:
                  starvation/input_pipeline  up to the data wait
                  starvation/h2d_copy        up to the marked copy time
                  unattributed/untraced_host the rest (the tracker cannot see launches or syncs)

A cause becomes a finding when it explains ``FindingSettings.min_finding_share_of_window`` of the window
(5%, the TensorBoard plugin's input-pipeline rule). The input-pipeline finding uses the
DataLoader's own settings for its variant: ``num_workers=0`` gives the single-process advice.
"""

from __future__ import annotations

from typing import Any

import msgspec.structs
import numpy as np

from whyidle import __version__
from whyidle.analyses import causes as C
from whyidle.analyses.kernels import KernelStats
from whyidle.analyses.utilization import StepFigures, Utilization
from whyidle.capture.tracker_records import SOURCE_FORMAT, StepRecord, TrackerStats
from whyidle.catalogue import replay_lever
from whyidle.config import Config
from whyidle.diagnosis import Diagnosis
from whyidle.findings.advice import fit_lever
from whyidle.findings.cause_details import with_trace_batch_size
from whyidle.findings.levers import lever_for
from whyidle.findings.model import (
    Evidence,
    Finding,
    Fix,
    Skipped,
    SourceInfo,
    WindowInfo,
)
from whyidle.findings.predict import beyond_explained, predict_from_steps
from whyidle.findings.rules import cause_finding
from whyidle.units import format_ns

__all__ = ["report_from_tracker", "SOURCE_FORMAT"]

def _split(s: StepRecord, device_timing: bool, wait_cause: C.Cause = C.INPUT_PIPELINE) -> tuple[int, dict[C.Cause, int]]:
    """(busy ns, idle ns by cause) of one step; the wait is ``wait_cause``'s (the input pipeline,
    or for a serving loop no request to serve)."""
    dur = max(s.duration_ns, 0)
    if device_timing and s.device_ns is not None:
        busy = min(max(s.device_ns, 0), dur)
    else:
        busy = max(dur - s.data_wait_ns - s.copy_ns, 0)
    idle = dur - busy
    wait = min(max(s.data_wait_ns, 0), idle)
    copy = min(max(s.copy_ns, 0), idle - wait)
    return busy, {wait_cause: wait, C.H2D_COPY: copy, C.UNTRACED_HOST: idle - wait - copy}


def _empty_kernels() -> KernelStats:
    return KernelStats(0, 0, None, 0, 0, None, None, None, 0, 0, ())


def _batch(steps: tuple[StepRecord, ...]) -> int | None:
    values = [s.samples for s in steps if s.samples is not None]
    if not values:
        return None
    v, counts = np.unique(np.array(values), return_counts=True)
    return int(v[np.argmax(counts)])


def _variant(st: TrackerStats) -> str:
    nw = st.loader.num_workers
    if nw is None:
        return ""
    return "single_process" if nw == 0 else "multi_process"


def _seen_here(cause: C.Cause, st: TrackerStats, per_step_ns: float, mean_step_ns: float) -> tuple[str, ...]:
    li = st.loader
    if cause is C.INPUT_PIPELINE:
        if li.num_workers == 0:
            return (
                f"Seen here: {li.kind}(num_workers=0) prepares every batch in the training process; "
                f"the loop waited {format_ns(per_step_ns)} per step for it (step {format_ns(mean_step_ns)}).",
            )
        if li.num_workers is not None:
            return (
                f"Seen here: {li.num_workers} worker(s) cannot keep up; the loop still waited "
                f"{format_ns(per_step_ns)} per step (step {format_ns(mean_step_ns)}).",
            )
        return (f"Seen here: the loop waited {format_ns(per_step_ns)} per step for the next batch (step {format_ns(mean_step_ns)}).",)
    if cause is C.IDLE_HOST:
        return (f"Seen here: the model waited {format_ns(per_step_ns)} per call for a request (call {format_ns(mean_step_ns)} with the wait).",)
    if cause is C.H2D_COPY and li.pin_memory is False:
        return ("Seen here: the DataLoader does not pin memory (pin_memory=False), so copies cannot run asynchronously.",)
    return ()


def _quality(st: TrackerStats, steps: tuple[StepRecord, ...]) -> list[str]:
    quality: list[str] = list(st.notes)
    if len(steps) < len(st.steps):
        quality.append(f"the first {st.skip_first} step(s) are left out (DataLoader worker start-up and first calls)")
    elif st.skip_first and st.steps:
        quality.append(f"only {len(st.steps)} step(s) were tracked: none left out for start-up, so the first may be slow")
    if not st.device_timing:
        quality.append(
            "CPU-side measurement: 'GPU busy' here is the host's compute between batches, not a GPU's; "
            "the data wait and copy times are exact"
        )
    return quality


def _wait_cause(st: TrackerStats) -> C.Cause:
    return C.IDLE_HOST if st.waits_for == "request" else C.INPUT_PIPELINE


def _figures(steps: tuple[StepRecord, ...], device_timing: bool, wait_cause: C.Cause = C.INPUT_PIPELINE) -> tuple[list[StepFigures], dict[C.Cause, int], int]:
    """(per-step figures, idle ns by cause over the steps, busy ns over the steps)."""
    figures: list[StepFigures] = []
    totals = {c: 0 for c in C.CAUSES}
    busy_total = 0
    for s in steps:
        busy, by_cause = _split(s, device_timing, wait_cause)
        busy_total += busy
        for c, ns in by_cause.items():
            totals[c] += ns
        figures.append(
            StepFigures(
                number=s.number,
                start_ns=s.start_ns,
                end_ns=s.end_ns,
                compute_ns=busy,
                communication_ns=0,
                memcpy_ns=0,
                memset_ns=0,
                idle_ns=s.duration_ns - busy,
                idle_by_cause_ns=tuple(by_cause.get(c, 0) for c in C.CAUSES),
            )
        )
    return figures, totals, busy_total


class _Run(msgspec.Struct, frozen=True):
    """What every finding of one tracked run reads."""

    st: TrackerStats
    steps: tuple[StepRecord, ...]
    figures: tuple[StepFigures, ...]
    window_ns: int
    idle_ns: int
    batch: int | None

    @property
    def mean_step(self) -> float:
        return self.window_ns / len(self.steps) if self.steps else 0.0


def _finding(run: _Run, cause: C.Cause, ns: int, cfg: Config) -> Finding:
    """The finding for the tracker's input-pipeline or copy time (``ns`` over the window)."""
    st, steps, figures, mean_step = run.st, run.steps, run.figures, run.mean_step
    ci = C.cause_index(cause)
    per = [f.idle_by_cause_ns[ci] for f in figures]
    per_step = float(np.mean(per))
    variant = _variant(st) if cause is C.INPUT_PIPELINE else ""
    # The tracker sees a PyTorch loop and its loader, not a trace: the lever's unconditional steps
    # and code, with the worker count the prediction replays and the loop's own batch size.
    lever = fit_lever(lever_for(cause.cause, variant), None, cfg.predictions.whatif_loader_workers)
    label = {C.INPUT_PIPELINE: "DataLoader.__next__ (measured by whyidle.track)", C.IDLE_HOST: "no request: between model calls (measured by whyidle run)"}.get(cause, "tracker.copy() blocks")
    n_steps = sum(1 for v in per if v > 0)
    li = st.loader
    facts: list[tuple[str, Any]] = [
        ("basis", "whyidle.track: host clock per step" + ("; device time from CUDA events" if st.device_timing else "")),
        ("steps", len(steps)),
        ("mean_step_ns", mean_step),
    ]
    if cause is C.INPUT_PIPELINE:
        facts += [("data_wait_share_of_step", per_step / mean_step if mean_step else 0.0)]
        facts += [(k, v) for k, v in (("loader", li.kind), ("num_workers", li.num_workers), ("pin_memory", li.pin_memory)) if v not in (None, "")]
    best = mean_step - per_step
    speedup = mean_step / best if best > 0 else None
    ev = Evidence(
        gap_count=n_steps,
        idle_ns=ns,
        per_step_idle_ns=per_step,
        share_of_step=per_step / mean_step if mean_step else None,
        top_ops=((label, ns, n_steps),),
        python_lines=((st.loop_line, n_steps),) if st.loop_line else (),
        examples=tuple((f.start_ns, f.end_ns, f.idle_by_cause_ns[ci]) for f in sorted(figures, key=lambda f: -f.idle_by_cause_ns[ci])[: cfg.findings.evidence_examples]),
        facts=tuple(facts),
    )
    expected = (
        f"up to {format_ns(per_step)} per step ({per_step / mean_step:.0%} of step time) can be recovered"
        + (f": samples/s up to {speedup:.2f}x" if speedup else "")
        + "; an upper bound, since removing this wait may expose the next one"
    )
    code = with_trace_batch_size(lever.code, run.batch)
    fix = Fix(lever.summary, _seen_here(cause, st, per_step, mean_step) + lever.steps, code, lever.verify, expected, lever.docs)
    finding = cause_finding(cause, lever, variant, ns, run.idle_ns, run.window_ns, ev, fix)
    # The fix is replayed by the cause's replay lever in its variant (the catalogue's), where the
    # tracker's two-part steps can replay it: more workers only where the loader ran in the
    # training process (its wait is then the whole per-batch production cost; with workers the
    # lever is loader_speedup, which needs a trace).
    replayed = replay_lever(cause.cause, variant)
    if replayed is not None:
        waits = [s.data_wait_ns if cause is C.INPUT_PIPELINE else s.copy_ns for s in steps]
        pred = predict_from_steps([s.duration_ns for s in steps], waits, replayed, cfg.predictions, run.batch)
        if pred is not None and beyond_explained(pred.step_ns_before - pred.step_ns_after, per_step):
            # medians against a mean: said, so the two numbers do not read as a contradiction
            pred = msgspec.structs.replace(
                pred,
                note=f"predicts {(pred.step_ns_before - pred.step_ns_after) / 1e6:.2f} ms per step recovered against {per_step / 1e6:.2f} ms "
                "explained: the prediction is made on the median tracked step (a busy machine has outlier steps), the time "
                "explained is the mean over the steps",
            )
        finding = msgspec.structs.replace(finding, prediction=pred)
    return finding


def report_from_tracker(st: TrackerStats, config: Config | None = None) -> Diagnosis:
    """Build the Diagnosis for a tracked run (pure: no I/O)."""
    cfg = config or Config()
    steps = st.selected()
    quality = _quality(st, steps)
    figures, totals, busy_total = _figures(steps, st.device_timing, _wait_cause(st))
    window_ns = sum(s.duration_ns for s in steps)
    batch = _batch(steps)
    util = Utilization.busy_only(
        window_ns, 1, busy_total, tuple(figures), batch, "tracker: samples in each batch" if batch is not None else ""
    )
    run = _Run(st, steps, tuple(figures), window_ns, util.idle_ns, batch)
    threshold = cfg.findings.min_finding_share_of_window * window_ns
    findings = [
        _finding(run, cause, totals[cause], cfg) for cause in (_wait_cause(st), C.H2D_COPY) if not (totals[cause] <= 0 or totals[cause] < threshold)
    ]
    findings.sort(key=lambda f: -f.idle_ns)
    skipped = (
        Skipped(
            "synchronization, underfilled",
            "the step tracker sees data wait and marked copies only; profile with whyidle.handler() to name host syncs and launch overhead",
        ),
    )
    if not steps:
        quality.append("no step was tracked: nothing to diagnose")
    start = steps[0].start_ns if steps else 0
    end = steps[-1].end_ns if steps else 0
    return Diagnosis(
        source=SourceInfo(
            path="live run (whyidle.track)",
            format=SOURCE_FORMAT,
            version=__version__,
            devices=(st.device,),
            rank=None,
            world_size=None,
            training=st.waits_for != "request",
            workload="serving" if st.waits_for == "request" else "",
            workload_evidence=("steps are model calls with no optimizer step (whyidle run --window)",) if st.waits_for == "request" else (),
        ),
        window=WindowInfo(
            start_ns=start,
            end_ns=start + window_ns if steps else end,
            basis="steps measured by whyidle.track (host clock)",
            steps=tuple(s.number for s in steps),
            all_steps=tuple(s.number for s in st.steps),
        ),
        utilization=util,
        kernels=_empty_kernels(),
        idle_by_cause_ns={c.key: int(totals[c]) for c in C.CAUSES},
        gap_count=sum(1 for f in figures if f.idle_ns > 0),
        findings=tuple(findings),
        skipped=skipped,
        gaps=(),
        quality=tuple(quality),
        cold_start=False,
        no_device_activity=not steps,
        extra={"tracker": _tracker_dict(st)},
    )


def _tracker_dict(st: TrackerStats) -> dict[str, Any]:
    sel = st.selected()
    li = st.loader
    return {
        "device": st.device,
        "device_timing": st.device_timing,
        "loop_line": st.loop_line,
        "skip_first": st.skip_first,
        "loader": {
            "kind": li.kind,
            "num_workers": li.num_workers,
            "pin_memory": li.pin_memory,
            "batch_size": li.batch_size,
            "prefetch_factor": li.prefetch_factor,
            "persistent_workers": li.persistent_workers,
        },
        "steps": [
            {
                "number": s.number,
                "duration_ns": s.duration_ns,
                "data_wait_ns": s.data_wait_ns,
                "copy_ns": s.copy_ns,
                "device_ns": s.device_ns,
                "samples": s.samples,
            }
            for s in st.steps
        ],
        "samples_per_s": _rate(sel, True),
        "steps_per_s": _rate(sel, False),
    }


def _rate(steps: tuple[StepRecord, ...], samples: bool) -> float | None:
    t = sum(s.duration_ns for s in steps)
    if not steps or t <= 0:
        return None
    if not samples:
        return len(steps) / (t / 1e9)
    if any(s.samples is None for s in steps):
        return None
    return sum(s.samples or 0 for s in steps) / (t / 1e9)
