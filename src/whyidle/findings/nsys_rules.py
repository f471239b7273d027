"""Nsight Systems findings: the CUDA API calls behind the idle time, attributed gap by gap.

nsys records every CUDA runtime call, so on top of the shared cause findings whyidle names the
calls that created the idle time. Each rule reads the existing gap attribution
(:mod:`whyidle.analyses.gaps`) and charges a gap's time to a call only where the call explains it:

* pageable async copy: gaps whose next device work is a copy from pageable host memory queued by
  ``cudaMemcpyAsync`` (the driver stages it through a bounce buffer, so the "async" copy blocks
  the host and cannot overlap): the part of the gap from the copy call's start to the copy;
* synchronous copy/memset (``cudaMemcpy``, ``cudaMemset``... without ``Async``) and frequent
  ``cudaDeviceSynchronize``/``cudaStreamSynchronize``: the synchronization-attributed time of
  gaps where the launching thread was inside such a call at the gap's start (the call drained the
  queue, so the host time that follows is charged to it) or during the gap's host side.

* blocked host: OS-runtime calls (``futex``, ``poll``, ``sem_wait``, ``read``...; captured with
  ``nsys -t osrt``) covering a gap's host side where the attribution found nothing traced (untraced
  host in training, idle host in inference): evidence of starvation or of too little demand.

Each finding refines a shared cause finding (H2D copy, host sync, untraced or idle host); its
``part_of`` fact says which, so the two are not added up.
"""

from __future__ import annotations

import re
from msgspec.structs import replace
from typing import Any

import numpy as np
import numpy.typing as npt

from whyidle.analyses import causes as C
from whyidle.catalogue import API_FIXES, fill
from whyidle.findings.settings import RuleSettings
from whyidle.findings.advice import hipify
from whyidle.findings.model import Evidence, Finding, Fix
from whyidle.findings.rules import Analyses
from whyidle.timeline.arrays import unique_sorted
from whyidle.timeline.model import Kind
from whyidle.units import format_ns

__all__ = ["nsys_findings"]

I64 = npt.NDArray[np.int64]

_SYNC_COPY = re.compile(r"^(cuda|cu)(Memcpy|Memset)(2D|3D|Peer|ToSymbol|FromSymbol|HtoD|DtoH|DtoD|D8|D16|D32)*(_v\d+)?$")
_SYNC_API = re.compile(r"^(cudaDeviceSynchronize|cudaStreamSynchronize|cuCtxSynchronize|cuStreamSynchronize)(_v\d+)?$")
_DOCS = "docs/inputs.md#nsight-systems"


def _in_idiom(a: Analyses, code: dict[str, str]) -> str:
    """The catalogue's snippet in the job's language (the advice context's idiom): PyTorch, CUDA
    C/C++ (HIP's names on AMD) or CuPy; another idiom gets the C runtime call, which every runtime
    wraps."""
    idiom = a.advice.idiom
    if idiom in ("pytorch", "engine"):
        return code["pytorch"]
    if idiom == "cupy" and "cupy" in code:
        return code["cupy"]
    return hipify(code["cuda"]) if idiom == "hip" else code["cuda"]


def _fix(fid: str, a: Analyses, measured: str, case: str, code: str, ns: int, **values: object) -> Fix:
    """The finding's fix: the measured sentence, then the catalogue's text for ``case``."""
    t = API_FIXES[fid]
    steps = t.steps.get(case, t.steps[""])
    return Fix(
        summary=t.summary,
        steps=(measured, *(fill(x, **values) for x in steps)),
        code=fill(code, **values),
        verify=t.verify,
        expected=f"up to {format_ns(ns)} of device idle; an upper bound",
        docs=_DOCS,
    )


def _calls(a: Analyses, pattern: re.Pattern[str]) -> I64:
    tl = a.tl
    return np.flatnonzero((tl.kind == int(Kind.RUNTIME)) & tl.name_mask(lambda s: bool(pattern.match(s))))


def _overlap_per_gap(a: Analyses, rows: I64, lo: I64, hi: I64) -> I64:
    """For each gap, ns of [lo, hi) covered by ``rows`` on the gap's launching thread."""
    g = a.gaps
    tl = a.tl
    out = np.zeros(len(g), dtype=np.int64)
    for lane in unique_sorted(g.thread_lane[g.thread_lane >= 0]):
        sel = np.flatnonzero(g.thread_lane == lane)
        r = rows[tl.lane[rows] == lane]
        if r.size == 0:
            continue
        iv = tl.union(r)
        out[sel] = iv.overlap(lo[sel], hi[sel])
    return out


def _sync_gaps(a: Analyses, rows: I64, cfg: RuleSettings) -> tuple[npt.NDArray[np.bool_], int]:
    """Gaps a call of ``rows`` drained or held, and the synchronization time attributed to them."""
    g = a.gaps
    tol = cfg.attribution.sync_wake_tolerance_ns
    at_start = _overlap_per_gap(a, rows, g.start_ns - tol, g.start_ns + tol) > 0
    during = _overlap_per_gap(a, rows, g.start_ns, g.host_end_ns) > 0
    sync_col = g.slices[:, C.cause_index(C.HOST_SYNC)]
    hit = (at_start | during) & (sync_col > 0)
    return hit, int(sync_col[hit].sum())


def _finding(
    fid: str, ns: int, gaps: int, a: Analyses, facts: list[tuple[str, Any]], fix: Fix, *, title: str = "", cause: C.Cause | None = None
) -> Finding:
    """The finding ``fid`` (its title and the cause it refines from the catalogue's ``API_FIXES``
    unless given)."""
    t = API_FIXES[fid]
    cause = cause or C.cause(t.cause)
    title = title or t.title[""]
    idle = a.utilization.idle_ns
    cap = a.utilization.capacity_ns
    facts.append(("part_of", cause.key))
    return Finding(
        id=fid,
        group=cause.group,
        cause=fid.split(".", 1)[-1],
        title=title,
        idle_ns=ns,
        share_of_idle=ns / idle if idle else 0.0,
        share_of_window=ns / cap if cap else 0.0,
        evidence=Evidence(gaps, ns, None, None, (), (), (), tuple(facts)),
        fix=fix,
    )


def _pageable(a: Analyses, cfg: RuleSettings) -> Finding | None:
    g, tl = a.gaps, a.tl
    ok = g.next_row >= 0
    if not ok.any():
        return None
    nxt = np.where(ok, g.next_row, 0)
    launch = np.where(g.launch_row >= 0, g.launch_row, 0)
    is_pageable = ok & (tl.kind[nxt] == int(Kind.MEMCPY)) & tl.name_mask(lambda s: "Pageable" in s)[nxt]
    is_async = (g.launch_row >= 0) & tl.name_mask(lambda s: "Async" in s)[launch]
    hit = is_pageable & is_async
    # the device waited from the copy call's start (the host staging the pageable buffer) to the
    # copy; what came before the call belongs to the gap's other causes
    waited = g.end_ns - np.maximum(g.start_ns, np.where(g.launch_row >= 0, tl.start_ns[launch], g.end_ns))
    ns = int(np.maximum(waited, 0)[hit].sum())
    if ns <= 0 or ns < cfg.findings.min_finding_share_of_window * a.utilization.capacity_ns:
        return None
    copies = np.flatnonzero((tl.kind == int(Kind.MEMCPY)) & tl.name_mask(lambda s: "Pageable" in s))
    nbytes = int(tl.nbytes[copies][tl.nbytes[copies] > 0].sum())
    facts: list[tuple[str, Any]] = [("pageable_copies", int(copies.size)), ("pageable_bytes", nbytes), ("gaps_before_pageable_copy", int(hit.sum()))]
    fid = "api.pageable_memcpy"
    measured = (
        f"{int(hit.sum())} device-idle gaps ({format_ns(ns)}) end with a cudaMemcpyAsync from pageable host memory: the driver "
        "stages it through a bounce buffer and the host waits, so nothing overlaps."
    )
    fix = _fix(fid, a, measured, a.advice.idiom, _in_idiom(a, API_FIXES[fid].code), ns, workers=cfg.predictions.whatif_loader_workers)
    return _finding(fid, ns, int(hit.sum()), a, facts, fix)


def _sync_copies(a: Analyses, cfg: RuleSettings) -> Finding | None:
    g = a.gaps
    rows = _calls(a, _SYNC_COPY)
    if rows.size == 0 or len(g) == 0:
        return None
    hit, ns = _sync_gaps(a, rows, cfg)
    if ns <= 0 or ns < cfg.findings.min_finding_share_of_window * a.utilization.capacity_ns:
        return None
    names = sorted({a.tl.name_of(int(r)) for r in rows})
    facts: list[tuple[str, Any]] = [("calls", int(rows.size)), ("apis", ", ".join(names)), ("gaps", int(hit.sum()))]
    fid = "api.sync_memcpy"
    measured = (
        f"{int(rows.size)} synchronous calls ({', '.join(names)}) held the launching thread for {format_ns(ns)} of device idle: "
        "each waits for all queued work and for the copy itself."
    )
    fix = _fix(fid, a, measured, a.advice.idiom, API_FIXES[fid].code[""], ns)
    return _finding(fid, ns, int(hit.sum()), a, facts, fix)


def _sync_calls(a: Analyses, cfg: RuleSettings) -> Finding | None:
    g = a.gaps
    rows = _calls(a, _SYNC_API)
    if rows.size == 0 or len(g) == 0:
        return None
    hit, ns = _sync_gaps(a, rows, cfg)
    window_s = a.window.duration_ns / 1e9
    per_s = rows.size / window_s if window_s > 0 else 0.0
    if ns <= 0 or ns < cfg.findings.min_finding_share_of_window * a.utilization.capacity_ns:
        return None
    names = sorted({a.tl.name_of(int(r)) for r in rows})
    frequent = per_s >= cfg.findings.sync_calls_min_per_s
    facts: list[tuple[str, Any]] = [
        ("calls", int(rows.size)),
        ("calls_per_s", round(per_s, 2)),
        ("apis", ", ".join(names)),
        ("gaps", int(hit.sum())),
        ("frequent", frequent),
    ]
    fid = "api.sync_calls"
    measured = (
        f"{int(rows.size)} calls ({per_s:.1f} per second) left the device idle for {format_ns(ns)} in {int(hit.sum())} gaps: the host "
        "waited for the queue to empty, then had to refill it."
    )
    fix = _fix(fid, a, measured, a.advice.idiom, _in_idiom(a, API_FIXES[fid].code), ns)
    title = fill(API_FIXES[fid].title["frequent" if frequent else ""], apis="/".join(names), per_s=f"{per_s:.0f}")
    return _finding(fid, ns, int(hit.sum()), a, facts, fix, title=title)


# OS-runtime calls that block a thread until something else happens: a lock or condition (a
# data-loader queue), a descriptor (a pipe from a worker, a socket), or a timer.
_BLOCKING_OSRT = re.compile(
    r"^(futex|sem_wait|sem_timedwait|pthread_cond_wait|pthread_cond_timedwait|pthread_mutex_lock|pthread_join|"
    r"poll|ppoll|epoll_wait|epoll_pwait|select|pselect6?|read|recv|recvfrom|recvmsg|accept4?|wait|waitpid|"
    r"nanosleep|clock_nanosleep|usleep|sleep)$"
)


def _blocked_host(a: Analyses, cfg: RuleSettings) -> Finding | None:
    g, tl = a.gaps, a.tl
    rows = np.flatnonzero((tl.kind == int(Kind.ANNOTATION)) & tl.name_mask(lambda s: bool(_BLOCKING_OSRT.match(s))))
    if rows.size == 0 or len(g) == 0:
        return None
    serving = g.workload.kind == "serving"
    cause = C.IDLE_HOST if serving else C.UNTRACED_HOST
    nothing = g.slices[:, C.cause_index(C.UNTRACED_HOST)] + g.slices[:, C.cause_index(C.IDLE_HOST)]
    per_gap = np.minimum(_overlap_per_gap(a, rows, g.start_ns, g.host_end_ns), nothing)
    ns = int(per_gap.sum())
    if ns <= 0 or ns < cfg.findings.min_finding_share_of_window * a.utilization.capacity_ns:
        return None
    # which calls: overlap of each call name with the gaps' host side, on the launching threads
    by_name: dict[str, int] = {}
    hit = np.flatnonzero(per_gap > 0)
    for r in rows.tolist():
        lane = tl.lane[r]
        sel = hit[g.thread_lane[hit] == lane]
        if sel.size == 0:
            continue
        ov = np.minimum(g.host_end_ns[sel], tl.end_ns[r]) - np.maximum(g.start_ns[sel], tl.start_ns[r])
        got = int(np.maximum(ov, 0).sum())
        if got:
            name = tl.name_of(r)
            by_name[name] = by_name.get(name, 0) + got
    calls = ", ".join(f"{k} {format_ns(v)}" for k, v in sorted(by_name.items(), key=lambda kv: -kv[1])[:5])
    group = "starvation" if g.training else "insufficient_demand" if serving else "unattributed"
    facts: list[tuple[str, Any]] = [("blocking_calls", calls), ("gaps", int(hit.size))]
    fid = "api.blocked_host"
    case = "training" if g.training else "serving" if serving else ""
    code = API_FIXES[fid].code["training_pytorch" if g.training and a.advice.pytorch else ""]
    measured = f"During {format_ns(ns)} of device idle the launching thread sat in blocking OS calls ({calls})."
    fix = _fix(fid, a, measured, case, code, ns, workers=cfg.predictions.whatif_loader_workers, workload=g.workload.kind.replace("_", "-"))
    f = _finding(fid, ns, int(hit.size), a, facts, fix, cause=cause)
    return replace(f, group=group)


def nsys_findings(a: Analyses, cfg: RuleSettings) -> tuple[Finding, ...]:
    """The API-level findings for an Nsight Systems capture (empty for other sources)."""
    if a.tl.meta.source_format != "nsys" or a.quality.no_device_activity or len(a.gaps) == 0:
        return ()
    out = [f for f in (_pageable(a, cfg), _sync_copies(a, cfg), _sync_calls(a, cfg), _blocked_host(a, cfg)) if f is not None]
    return tuple(out)
