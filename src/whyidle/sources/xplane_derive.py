"""What an XPlane profile says only across planes and lines: the threads its runtime calls ran
on, copies' directions, and repeated programs as steps.

* The GPU tracer writes the runtime calls (``hipModuleLaunchKernel``, ``cuLaunchKernel``) on
  lines of their own, "Host Threads/<tid>", while the same thread's TraceMe events (the XLA
  executable running its thunks) are on another line. A runtime line is joined to the line
  whose innermost events (those enclosing no other) hold most of its calls, when at least half
  of them and twice as many as any other line's do: the launching thread's work then explains
  the device's gaps::

      py_xla_execute   [ExecuteThunks [loop_fusion] [conv]     ]
      Host Threads/583                 [launch]     [launch]     -> joined

* JAX dispatches asynchronously: the Python thread's ``PjitFunction(f)`` call hands the
  program to PJRT, whose execute threads (``py_xla_execute/...``, one per device) run it and make
  the launches. Those threads only carry out what the Python thread dispatched, so they are read
  as that thread: a device's gap is then explained by what the Python thread was doing (waiting
  in ``block_until_ready``, preparing the next batch), not by an executor idling for work.
* On XLA's CPU backend the program's ops run on host threads and no call carries a correlation
  id: each program run (the ops sharing a ``run_id``) is linked to the dispatch that started it,
  the last ``...LoadedExecutable::Execute...`` call to begin before its first op, by a launch
  record over that call (the Python thread's, so its gaps are explained by what it did).
* A device copy (a ``copyBuffer`` or ``memcpy`` kernel) says nothing of its direction; its
  launch call (``hipMemcpyDtoDAsync``, ``cuMemcpyHtoDAsync``), linked by ``correlation_id``,
  does. The copy is named as Kineto names copies, ``Memcpy DtoD (Device -> Device)``, so that
  the copy analyses read it as they read a PyTorch trace's.
* Steps, when the capture has no step markers: a JAX training or inference loop calls one
  jitted function per step, and each call runs the same compiled XLA module. The Python
  thread's calls of the function it calls most (``PjitFunction(f)``, two or more top-level
  calls) are the steps, each from its call to the next call's start; the last one up to the
  end of its own call (the window then reaches the end of the device work it launched)::

      python   [PjitFunction(f)]......[PjitFunction(f)]......[PjitFunction(f)]
      steps    |------ #1 ------------|------ #2 ------------|-- #3 --|
"""

from __future__ import annotations

import re

import numpy as np

from whyidle.timeline.arrays import unique_sorted
from whyidle.timeline.build import start_order
from whyidle.timeline.model import Kind, Timeline

__all__ = ["name_copies", "with_steps", "join_runtime_threads", "join_executors", "link_cpu_runs"]

_DIRECTION = re.compile(r"(HtoD|DtoH|DtoD|HtoH|PtoP)")
_MEMORY = {"H": "Pinned", "D": "Device", "P": "Device"}
_PJIT = re.compile(r"^PjitFunction\((.+)\)$")
_EXECUTOR = "py_xla_execute"
_DISPATCH = re.compile(r"LoadedExecutable::Execute")


def name_copies(tl: Timeline) -> Timeline:
    """Name each device copy by its launch call's direction (in place; returns ``tl``)."""
    copies = np.flatnonzero((tl.kind == int(Kind.MEMCPY)) & (tl.corr >= 0))
    calls = np.flatnonzero((tl.kind == int(Kind.RUNTIME)) & (tl.corr >= 0))
    if copies.size == 0 or calls.size == 0:
        return tl
    direction: dict[int, str] = {}
    for c, n in zip(tl.corr[calls].tolist(), tl.name[calls].tolist(), strict=True):
        m = _DIRECTION.search(tl.strings[n])
        if m:
            direction[c] = m.group(1)
    ids: dict[str, int] = {}
    for r, c in zip(copies.tolist(), tl.corr[copies].tolist(), strict=True):
        d = direction.get(c)
        if d is None:
            continue
        label = f"Memcpy {d} ({_MEMORY[d[0]]} -> {_MEMORY[d[-1]]})"
        if label not in ids:
            ids[label] = len(tl.strings)
            tl.strings.append(label)
        tl.name[r] = ids[label]
    return tl


def with_steps(tl: Timeline) -> Timeline:
    """``tl`` with steps from the most repeated jitted function, unless it has step markers."""
    if (tl.kind == int(Kind.STEP)).any():
        return tl
    ops = np.flatnonzero(tl.kind == int(Kind.CPU_OP))
    pjit = ops[tl.name_mask(lambda s: bool(_PJIT.match(s)), ops)]
    if pjit.size < 2:
        return tl
    keys = tl.lane[pjit].astype(np.int64) * (len(tl.strings) + 1) + tl.name[pjit]
    uniq, counts = np.unique(keys, return_counts=True)
    if counts.max() < 2:
        return tl
    calls = pjit[keys == uniq[np.argmax(counts)]]
    calls = calls[np.argsort(tl.start_ns[calls], kind="stable")]
    s, e = tl.start_ns[calls], tl.end_ns[calls]
    top = np.ones(calls.size, dtype=np.bool_)  # a call made inside another (a nested jit) is no step
    top[1:] = s[1:] >= np.maximum.accumulate(e)[:-1]
    calls, s, e = calls[top], s[top], e[top]
    if calls.size < 2:
        return tl
    ends = np.append(s[1:], e[-1])
    func = _PJIT.match(tl.strings[int(tl.name[calls[0]])])
    label = func.group(1) if func else "jit"
    tl.meta.quality.append(
        f"no step markers: the {calls.size} calls of the jitted function {label} on the Python thread are the steps"
    )
    lanes = np.full(calls.size, tl.lane[calls[0]], dtype=np.int32)
    return _add_rows(tl, s, ends, lanes, [f"{label} step #{i}" for i in range(1, calls.size + 1)], Kind.STEP)


def _add_rows(tl: Timeline, start: np.ndarray, end: np.ndarray, lane: np.ndarray, names: list[str], kind: Kind, corr: np.ndarray | None = None) -> Timeline:
    n = start.size
    ids: dict[str, int] = {s: i for i, s in enumerate(tl.strings)}
    strings = list(tl.strings)
    name_ids = np.empty(n, dtype=np.int32)
    for j, s in enumerate(names):
        if s not in ids:
            ids[s] = len(strings)
            strings.append(s)
        name_ids[j] = ids[s]
    extra: dict[str, np.ndarray] = {
        "start_ns": start.astype(np.int64),
        "end_ns": end.astype(np.int64),
        "lane": lane.astype(np.int32),
        "kind": np.full(n, int(kind), dtype=np.int8),
        "name": name_ids,
    }
    if corr is not None:
        extra["corr"] = corr.astype(np.int64)
    def joined(c: str) -> np.ndarray:
        old = getattr(tl, c)
        add = extra[c] if c in extra else np.full(n, np.nan if old.dtype.kind == "f" else -1, dtype=old.dtype)
        return np.concatenate([old, add.astype(old.dtype, copy=False)])

    start, end = joined("start_ns"), joined("end_ns")
    order = start_order(start, end)
    cols = {"start_ns": start[order], "end_ns": end[order]}
    del start, end
    for c in Timeline.COLUMNS[2:]:  # one column joined and reordered at a time
        cols[c] = joined(c)[order]
    return Timeline(**cols, lanes=tl.lanes, strings=strings, meta=tl.meta)


def join_executors(tl: Timeline) -> Timeline:
    """Read PJRT's execute threads as the Python thread that dispatched to them (in place)."""
    ops = np.flatnonzero(tl.kind == int(Kind.CPU_OP))
    pjit = ops[tl.name_mask(lambda s: bool(_PJIT.match(s)), ops)]
    if pjit.size == 0:
        return tl
    lanes, counts = np.unique(tl.lane[pjit], return_counts=True)
    python = int(lanes[np.argmax(counts)])
    executors = [i for i, ln in enumerate(tl.lanes) if ln.name.startswith(_EXECUTOR) and i != python]
    if executors:
        tl.lane[np.isin(tl.lane, executors)] = python
        tl.meta.quality.append(
            f"JAX dispatch: the work of {len(executors)} XLA execute threads is read as the Python thread's "
            f"({tl.lanes[python].label}), which dispatched it"
        )
    return tl


def link_cpu_runs(tl: Timeline) -> Timeline:
    """``tl`` with a launch record per XLA CPU program run, over the call that dispatched it."""
    work = np.flatnonzero((tl.kind == int(Kind.KERNEL)) & (tl.corr >= 0))
    ops = np.flatnonzero(tl.kind == int(Kind.CPU_OP))
    calls = ops[tl.name_mask(lambda s: bool(_DISPATCH.search(s)), ops)]  # in start order
    if work.size == 0 or calls.size == 0:
        return tl
    runs, first = np.unique(tl.corr[work], return_index=True)  # rows are in start order: first op of each run
    at = np.searchsorted(tl.start_ns[calls], tl.start_ns[work[first]], side="right") - 1
    ok = at >= 0
    if not ok.any():
        return tl
    rows = calls[at[ok]]
    return _add_rows(
        tl, tl.start_ns[rows], tl.end_ns[rows], tl.lane[rows], [f"XLA CPU dispatch ({tl.strings[int(n)]})" for n in tl.name[rows]],
        Kind.RUNTIME, runs[ok],
    )  # fmt: skip


def join_runtime_threads(tl: Timeline) -> Timeline:
    """Move each runtime-only thread's calls onto the thread whose work holds them (in place)."""
    host = tl.kind >= 16
    runtime = tl.kind == int(Kind.RUNTIME)
    lanes_all = unique_sorted(tl.lane[host])
    only_runtime = [int(ln) for ln in lanes_all if runtime[tl.lane == ln].all()]
    leaves = {int(ln): _leaves(tl, int(ln)) for ln in lanes_all if int(ln) not in only_runtime}
    joined = 0
    order = list(leaves)
    for r in only_runtime:
        rows = np.flatnonzero(tl.lane == r)
        if not order:
            break
        s, e = tl.start_ns[rows], tl.end_ns[rows]
        span = np.stack([_enclosing(*leaves[ln], s, e) for ln in order])  # lanes x calls
        best = np.argmin(span, axis=0)
        held = np.isfinite(span.min(axis=0))
        wins = np.bincount(best[held], minlength=len(order))
        top = np.argsort(wins)[::-1]
        if 2 * wins[top[0]] < rows.size or (top.size > 1 and wins[top[0]] < 2 * wins[top[1]]):
            continue
        tl.lane[rows] = order[int(top[0])]
        joined += 1
    if joined:
        tl.meta.quality.append(f"{joined} runtime-call threads joined to the threads whose XLA work holds their calls")
    return tl


def _leaves(tl: Timeline, lane: int) -> tuple[np.ndarray, np.ndarray]:
    """(start, end) of a thread's events that enclose no other (the rows are in start order)."""
    rows = np.flatnonzero((tl.lane == lane) & (tl.kind >= 16) & (tl.kind != int(Kind.STEP)))
    s, e = tl.start_ns[rows], tl.end_ns[rows]
    leaf = np.ones(rows.size, dtype=np.bool_)
    leaf[:-1] = s[1:] >= e[:-1]
    return s[leaf], e[leaf]


def _enclosing(ls: np.ndarray, le: np.ndarray, s: np.ndarray, e: np.ndarray) -> np.ndarray:
    """Per interval [s, e): the length of the leaf [ls, le) (sorted, disjoint) holding it, inf if none."""
    out = np.full(s.size, np.inf)
    if ls.size == 0:
        return out
    i = np.maximum(np.searchsorted(ls, s, side="right") - 1, 0)
    ok = (ls[i] <= s) & (le[i] >= e)
    out[ok] = (le[i] - ls[i])[ok]
    return out
