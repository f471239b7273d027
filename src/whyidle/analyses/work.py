"""The useful work inside busy time: FLOPs and bytes per op, the roofline, MFU per step.

Each op that carries work (``analyses/flops.py``: GEMMs, convolutions, attention, and the ops
that only move data) is found on its thread from its recorded inputs. Every kernel is given to the
innermost such op its launch call ran inside, and FLOPs are counted once, on the innermost op
with FLOPs that ran kernels (``aten::linear`` holds ``aten::addmm``: the addmm's count, in the
dtype the GEMM ran in, which under autocast is not the linear's)::

    thread  [aten::linear ..........................]   [aten::relu ....]
              [aten::addmm .......................]        [launch]
                  [cudaLaunchKernel]                          |
    stream              [gemm kernel ......]                  [relu kernel]

A kernel whose launch ran in no modelled op (CUDA graphs, compiled regions, custom ops,
a trace without ``record_shapes``) is *unmodelled*: its time is reported, its work never guessed.
Copies, memsets and communication kernels are not compute and are left out.

Per op shape: achieved TFLOP/s and TB/s over its kernels' time, arithmetic intensity
(FLOPs / byte), its bound (compute when the intensity reaches the device's ridge point
``peak / bandwidth``, else memory), and the fraction of that bound reached:
``achieved / min(peak, intensity x bandwidth)`` (for ops without FLOPs: achieved / bandwidth).

Per step: the model FLOPs of the ops that started in the step (on the host: an op launched
late in a step whose kernels run in the next is still the step's work), and **MFU**: the time those
FLOPs would take at the device's peak for each precision, over the step's time (one precision:
model FLOPs / (step time x peak)); several devices multiply the peak. Kernel time, summed over
streams, is split into near-roofline, compute-bound-slow, memory-bound, unrated (a modelled op
whose precision has no peak) and unmodelled. A trace without device kernels (a CPU run) gets the
FLOPs of its ops that started in the window, and no rates.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

import numpy as np
import numpy.typing as npt
import msgspec

from whyidle.analyses.collectives import CommWork, measure_collectives
from whyidle.analyses.flops import OpWork, needs_output, op_work
from whyidle.analyses.links import Links
from whyidle.analyses.nesting import OpenIndex
from whyidle.analyses.peaks import DevicePeak, device_peak
from whyidle.analyses.window import Window
from whyidle.config import Config
from whyidle.timeline.arrays import unique_inverse, unique_sorted
from whyidle.timeline.model import Kind, Timeline

__all__ = ["OpRoof", "StepWork", "WorkSummary", "OpKernels", "OpWorks", "measure_work", "op_kernels", "roof"]

I64 = npt.NDArray[np.int64]
Ints = npt.NDArray[np.integer[Any]]


class OpRoof(msgspec.Struct, frozen=True):
    """One op shape's work and where it sits on the roofline (rates over its kernels' time)."""

    name: str
    inputs: str  # the recorded dims and dtypes, as the trace wrote them
    family: str
    precision: str  # "" for an op that only moves data
    count: int
    flops: int
    nbytes: int
    kernel_ns: int
    tflops: float
    tbps: float
    intensity: float  # FLOPs per byte
    bound: str  # "compute", "memory", or "" (no peak known)
    fraction: float | None  # of the bound reached; None without a peak
    note: str = ""


class StepWork(msgspec.Struct, frozen=True):
    number: int
    duration_ns: int
    flops: int
    mfu: float | None


class WorkSummary(msgspec.Struct, frozen=True, omit_defaults=True):  # comms: absent when None
    """The work model of one diagnosis window; times are kernel time summed over streams."""

    device: str
    peak: DevicePeak | None
    devices_used: int
    flops: int
    nbytes: int
    flops_by_precision: dict[str, int]
    ns_by_precision: dict[str, int]  # kernel time of the ops whose FLOPs count, by precision
    kernel_ns: int
    near_roofline_ns: int
    compute_slow_ns: int
    memory_bound_ns: int
    unrated_ns: int
    unmodelled_ns: int
    duration_ns: int
    mfu: float | None
    steps: tuple[StepWork, ...]
    ops: tuple[OpRoof, ...]
    unmodelled: tuple[tuple[str, int], ...]  # the kernels without a modelled op: (name, ns), longest first
    notes: tuple[str, ...]
    comms: CommWork | None = None  # the collectives' bytes and bus bandwidth (analyses/collectives.py)


class OpWorks:
    """The work of each modelled op, as an index into a table of the distinct works."""

    def __init__(self, table: list[OpWork], index: I64) -> None:
        self.table, self.index = table, index
        self.flops = np.array([w.flops for w in table], dtype=np.int64)[index]
        self.nbytes = np.array([w.nbytes for w in table], dtype=np.int64)[index]
        self.precisions = [w.precision for w in table]  # op i's is precisions[index[i]]

    def __getitem__(self, i: int) -> OpWork:
        return self.table[int(self.index[i])]

    def __len__(self) -> int:
        return int(self.index.size)

    def family_is(self, families: Collection[str]) -> npt.NDArray[np.bool_]:
        """Per op: its work's family is one of ``families`` (tested once per distinct work)."""
        return np.array([w.family in families for w in self.table], dtype=np.bool_)[self.index] if self.table else np.zeros(self.index.size, dtype=np.bool_)


def _modelled_ops(tl: Timeline) -> tuple[I64, OpWorks]:
    """The modelled ops (rows, in start order) and their work."""
    rows = np.flatnonzero((tl.kind == int(Kind.CPU_OP)) & (tl.inputs >= 0))
    uniq, inverse = unique_inverse(tl.op_key(rows))
    n_str = len(tl.strings)
    found = [op_work(tl.strings[k // n_str], tl.strings[k % n_str]) for k in uniq.tolist()]
    modelled = np.array([w is not None for w in found], dtype=np.bool_)
    table = [w for w in found if w is not None]
    keep = modelled[inverse]
    rows, index = rows[keep], (np.cumsum(modelled) - 1)[inverse[keep]]
    todo = np.flatnonzero(np.array([needs_output(w) for w in table], dtype=np.bool_)[index]) if table else index[:0]
    if todo.size:
        slot: dict[int, int] = {}  # a better work (one object per distinct count) -> its place in the table
        for j, better in zip(todo.tolist(), _Outputs(tl).works(rows[todo]), strict=True):
            if better is not None:
                if id(better) not in slot:
                    slot[id(better)] = len(table)
                    table.append(better)
                index[j] = slot[id(better)]
    return rows, OpWorks(table, index)


def _parents(tl: Timeline, ops: I64) -> I64:
    """For each op (index into ``ops``), the nearest modelled op enclosing it on its thread (the
    last earlier one still open at its start), -1 if none."""
    parent = np.full(ops.size, -1, dtype=np.int64)
    for lane in unique_sorted(tl.lane[ops]).tolist():
        on = np.flatnonzero(tl.lane[ops] == lane)
        start = tl.start_ns[ops[on]]
        found = OpenIndex(start, tl.end_ns[ops[on]]).last_spanning(np.arange(on.size, dtype=np.int64), start)
        parent[on] = np.where(found >= 0, on[np.maximum(found, 0)], -1)
    return parent


def _counted(flops: I64, own_ns: I64, parent: Ints) -> npt.NDArray[np.bool_]:
    """Which ops' FLOPs count: an op with FLOPs whose subtree ran kernels, unless an op with FLOPs
    inside it counts already (``aten::linear`` holds ``aten::addmm``: the addmm's count). Level by
    level from the deepest, so every op is decided after all the ops inside it."""
    depth = np.zeros(parent.size, dtype=np.int64)
    up = parent.copy()
    while (up >= 0).any():
        depth += up >= 0
        up = np.where(up >= 0, parent[np.maximum(up, 0)], -1)
    sub_ns = own_ns.astype(np.int64).copy()
    inner = np.zeros(parent.size, dtype=np.bool_)
    counted = np.zeros(parent.size, dtype=np.bool_)
    for d in range(int(depth.max(initial=0)), -1, -1):
        level = np.flatnonzero(depth == d)
        counted[level] = (flops[level] > 0) & (sub_ns[level] > 0) & ~inner[level]
        if d:
            np.add.at(sub_ns, parent[level], sub_ns[level])
            inner[parent[level][inner[level] | counted[level]]] = True
    return counted


class _Outputs:
    """Convolutions' work with their output size read from the next op on their thread whose
    first input is [N, C_out, ...] (the batch norm or activation that consumes it), looked for
    among the next ``_LOOK_AHEAD`` ops with recorded inputs. Each inputs text is decoded once,
    each (op, inputs, consumer's inputs) counted once."""

    def __init__(self, tl: Timeline) -> None:
        self.tl = tl
        self.dims: dict[int, list[Any] | None] = {}
        self.done: dict[tuple[int, int, int], OpWork | None] = {}

    def _dims(self, i: int) -> list[Any] | None:
        """The dims of inputs text ``i``, None when they do not decode to a list."""
        if i not in self.dims:
            try:
                d = msgspec.json.decode(self.tl.strings[i])[0]
            except (msgspec.DecodeError, IndexError, TypeError, KeyError):
                d = None
            self.dims[i] = d if type(d) is list else None
        return self.dims[i]

    def works(self, convs: I64) -> list[OpWork | None]:
        """Each convolution's work (rows, in start order), None when no op after it takes its output."""
        tl = self.tl
        out: list[OpWork | None] = [None] * convs.size
        recorded = np.flatnonzero(tl.inputs >= 0)  # in start order
        for lane in unique_sorted(tl.lane[convs]).tolist():
            mine = np.flatnonzero(tl.lane[convs] == lane)
            rec = recorded[tl.lane[recorded] == lane]  # holds the convolutions themselves: not empty
            first = np.searchsorted(tl.start_ns[rec], tl.end_ns[convs[mine]], side="left")
            pos = first[:, None] + np.arange(_LOOK_AHEAD, dtype=np.int64)
            cand = np.where(pos < rec.size, tl.inputs[rec[np.minimum(pos, rec.size - 1)]], -1)
            # The first input's (rank, N, C) of every candidate, as a code; the convolutions' own
            # (rank, N, C_out) looked up among them: the first candidate with the same code takes it.
            codes: dict[tuple[Any, ...], int] = {}
            ids = unique_sorted(cand[cand >= 0])
            cand_code = np.full(len(tl.strings) if ids.size else 0, -1, dtype=np.int64)
            for i in ids.tolist():
                d = self._dims(i)
                d0 = d[0] if d else None
                if type(d0) is list and len(d0) >= 2:
                    cand_code[i] = codes.setdefault((len(d0), _frozen(d0[0]), _frozen(d0[1])), len(codes))
            got = np.where(cand >= 0, cand_code[np.maximum(cand, 0)], -1) if ids.size else np.full(cand.shape, -1, dtype=np.int64)
            own = np.array([self._code(int(r), codes) for r in convs[mine].tolist()], dtype=np.int64)
            match = (got == own[:, None]) & (own[:, None] >= 0)
            which = cand[np.arange(mine.size), np.argmax(match, axis=1)]
            for k, found in zip(mine.tolist(), np.where(match.any(axis=1), which, -1).tolist(), strict=True):
                if found >= 0:
                    out[k] = self._work(int(convs[k]), found)
        return out

    def _code(self, row: int, codes: dict[tuple[Any, ...], int]) -> int:
        """The code of the (rank, N, C_out) a consumer of convolution ``row``'s output starts with, -1 if none can."""
        dims = self._dims(int(self.tl.inputs[row]))
        if not dims or len(dims) < 2 or type(dims[0]) is not list or type(dims[1]) is not list or not dims[0] or not dims[1]:
            return -1
        return codes.get((len(dims[0]), _frozen(dims[0][0]), _frozen(dims[1][0])), -1)

    def _work(self, row: int, consumer: int) -> OpWork | None:
        """Convolution ``row``'s work, its output size the spatial dims of inputs text ``consumer``'s first input."""
        tl = self.tl
        key = (int(tl.name[row]), int(tl.inputs[row]), consumer)
        if key not in self.done:
            d = self._dims(consumer)
            self.done[key] = op_work(tl.name_of(row), tl.inputs_of(row), out_spatial=list(d[0][2:]) if d else None)
        return self.done[key]


def _frozen(x: Any) -> Any:
    """A decoded JSON value as a key that is equal where the values are (lists as tuples)."""
    if type(x) is list:
        return tuple(map(_frozen, x))
    if type(x) is dict:
        return ("{}", frozenset((k, _frozen(v)) for k, v in x.items()))
    return x


# Ops read after a convolution for the one consuming its output (batch norm, activation, add).
_LOOK_AHEAD = 8


def _op_of_launch(tl: Timeline, ops: I64, parent: I64, launches: I64) -> I64:
    """Index into ``ops`` of the innermost modelled op each launch ran inside (same thread), -1 if none."""
    out = np.full(launches.size, -1, dtype=np.int64)
    ok = launches >= 0
    if ops.size == 0 or not ok.any():
        return out
    end = tl.end_ns[ops]
    for lane in unique_sorted(tl.lane[ops]).tolist():
        on = np.flatnonzero(tl.lane[ops] == lane)
        q = np.flatnonzero(ok & (tl.lane[np.maximum(launches, 0)] == lane))
        t = tl.start_ns[launches[q]]
        pos = np.searchsorted(tl.start_ns[ops[on]], t, side="right") - 1
        c = np.where(pos >= 0, on[np.maximum(pos, 0)], -1)
        while True:  # climb out of ops that ended before the launch, to the one still open
            closed = (c >= 0) & (end[np.maximum(c, 0)] <= t)
            if not closed.any():
                break
            c = np.where(closed, parent[np.maximum(c, 0)], c)
        out[q] = c
    return out


def _roof(w: OpWork, kernel_ns: int, peak: DevicePeak | None) -> tuple[float, float, float, str, float | None]:
    """(TFLOP/s, TB/s, intensity, bound, fraction) of ``w`` done in ``kernel_ns``."""
    tflops = w.flops / kernel_ns / 1e3 if kernel_ns else 0.0
    tbps = w.nbytes / kernel_ns / 1e3 if kernel_ns else 0.0
    intensity = w.flops / w.nbytes if w.nbytes else 0.0
    if peak is None or kernel_ns == 0:
        return tflops, tbps, intensity, "", None
    if w.flops == 0:
        return tflops, tbps, intensity, "memory", tbps / peak.mem_tbps
    p = _peak_tflops(peak, w.precision)
    if p is None:
        return tflops, tbps, intensity, "", None
    if w.nbytes == 0 or intensity >= p / peak.mem_tbps:  # no bytes known: only the peak bounds it
        return tflops, tbps, intensity, "compute", tflops / p
    return tflops, tbps, intensity, "memory", tflops / (intensity * peak.mem_tbps)


def _peak_tflops(peak: DevicePeak, precision: str) -> float | None:
    """The peak for ``precision``; TF32 work on a device without TF32 runs at its FP32 rate."""
    p = peak.tflops(precision)
    return peak.tflops("fp32") if p is None and precision == "tf32" else p


def _kernels(tl: Timeline, links: Links, window: Window) -> tuple[I64, I64, I64]:
    """(kernel rows, their time in the window, their launch rows) of compute kernels in the window."""
    dev = links.device_rows
    keep = tl.kind[dev] == int(Kind.KERNEL)
    rows, launch = dev[keep], links.launch_of[keep]
    ns = np.minimum(tl.end_ns[rows], window.end_ns) - np.maximum(tl.start_ns[rows], window.start_ns)
    inside = ns > 0
    return rows[inside], ns[inside], launch[inside]


def _group_roofs(tl: Timeline, ops: Ints, works: OpWorks, op_ns: I64, peak: DevicePeak | None) -> list[OpRoof]:
    """One OpRoof per (name, inputs) among the ops with kernel time, longest first."""
    used = np.flatnonzero(op_ns > 0)
    uniq, inverse = unique_inverse(tl.op_key(ops[used]))
    count = np.bincount(inverse, minlength=uniq.size)
    first = np.full(uniq.size, inverse.size, dtype=np.int64)
    np.minimum.at(first, inverse, np.arange(inverse.size, dtype=np.int64))
    flops, nbytes, group_ns = (np.zeros(uniq.size, dtype=np.int64) for _ in range(3))  # exact sums: int64, not bincount's floats
    np.add.at(flops, inverse, works.flops[used])
    np.add.at(nbytes, inverse, works.nbytes[used])
    np.add.at(group_ns, inverse, op_ns[used])
    out = []
    for g in range(uniq.size):
        i = int(used[first[g]])
        w0, row, ns = works[i], int(ops[i]), int(group_ns[g])
        total = OpWork(int(flops[g]), int(nbytes[g]), w0.precision, w0.family, w0.note)
        tflops, tbps, intensity, bound, fraction = _roof(total, ns, peak)
        out.append(OpRoof(tl.name_of(row), tl.inputs_of(row), w0.family, w0.precision, int(count[g]), total.flops, total.nbytes, ns, tflops, tbps, intensity, bound, fraction, w0.note))
    return sorted(out, key=lambda r: -r.kernel_ns)


def _split(roofs: list[OpRoof], cfg: Config) -> tuple[int, int, int, int]:
    """(near-roofline, compute-bound-slow, memory-bound, unrated) kernel time of the op shapes."""
    near = compute = memory = unrated = 0
    for r in roofs:
        if r.fraction is None:
            unrated += r.kernel_ns
        elif r.fraction >= cfg.attribution.roofline_near_fraction:
            near += r.kernel_ns
        elif r.bound == "compute":
            compute += r.kernel_ns
        else:
            memory += r.kernel_ns
    return near, compute, memory, unrated


def _at_peak_s(by_precision: dict[str, int], peak: DevicePeak | None, n_dev: int) -> float | None:
    """Seconds the FLOPs take at the peak of each precision; None when a precision has no peak."""
    if peak is None:
        return None
    total = 0.0
    for precision, flops in by_precision.items():
        p = _peak_tflops(peak, precision)
        if p is None:
            return None
        total += flops / (p * 1e12 * n_dev)
    return total


def _peak_of(tl: Timeline, kernel_rows: Ints) -> tuple[str, DevicePeak | None, int, list[str]]:
    """(device name, its peaks, devices used, notes)."""
    used = unique_sorted(tl.device_of(kernel_rows)).tolist() if kernel_rows.size else []
    devs = tl.meta.devices
    name = str(devs[0].get("name", "")) if devs else ""
    peak = device_peak(devs[0]) if devs else None
    notes = []
    if len({str(d.get("name", "")) for d in devs}) > 1:
        notes.append("the trace holds different devices; the first one's peaks are used")
    if peak is None:
        what = f"{name or 'the device'} is not in whyidle's table of device peaks" if devs else "the trace names no device"
        notes.append(f"{what}: achieved rates are shown without a fraction of peak")
    return name, peak, max(len(used), 1), notes


def _steps(window: Window, op_start: I64, flops: I64, works: OpWorks, peak: DevicePeak | None, n_dev: int) -> tuple[StepWork, ...]:
    """Each step's model FLOPs (the ops that started in it, on the host) and its MFU."""
    out = []
    for s in window.steps:  # the ops are in start order: a step's are one slice
        a, b = np.searchsorted(op_start, [s.start_ns, s.end_ns], side="left").tolist()
        mine = _sum_by(works.precisions, works.index[a:b], flops[a:b])
        t = _at_peak_s(mine, peak, n_dev)
        dur = s.end_ns - s.start_ns
        out.append(StepWork(s.number, dur, sum(mine.values()), t / (dur / 1e9) if t is not None and dur > 0 else None))
    return tuple(out)


def _started_in(starts: I64, window: Window) -> I64:
    """1 for each op that started in the window (every op when the window is empty), else 0."""
    if window.end_ns <= window.start_ns:
        return np.ones(starts.size, dtype=np.int64)
    return ((starts >= window.start_ns) & (starts < window.end_ns)).astype(np.int64)


def _sum_by(keys: list[str], of: I64, values: I64) -> dict[str, int]:
    """The values summed per key (element i's is ``keys[of[i]]``), for the elements with a value
    above 0, in first-seen order."""
    out: dict[str, int] = {}
    pos = np.flatnonzero(values > 0)
    for k, v in zip(of[pos].tolist(), values[pos].tolist(), strict=True):
        out[keys[k]] = out.get(keys[k], 0) + v
    return out


def measure_work(tl: Timeline, links: Links, window: Window, cfg: Config, kernels: OpKernels | None = None) -> WorkSummary:
    """The work model of the window (pure); ``kernels``: ``op_kernels`` of the same window, when
    the caller has it."""
    ok = kernels if kernels is not None else op_kernels(tl, links, window)
    rows, ns, ops, works, parent = ok.rows, ok.ns, ok.ops, ok.works, ok.parent
    owner = ok.op.copy()
    name, peak, n_dev, notes = _peak_of(tl, rows)
    op_ns = np.zeros(ops.size, dtype=np.int64)
    np.add.at(op_ns, owner[owner >= 0], ns[owner >= 0])
    ran = op_ns
    if not (tl.kind == int(Kind.KERNEL)).any():  # a CPU run: every op in the window did its work on the host
        ran = _started_in(tl.start_ns[ops], window)
        notes.append("no device kernels: the FLOPs are those of every op that started in the window (the whole trace when it has none), run on the host")
    work_flops, work_bytes = works.flops, works.nbytes
    counted = _counted(work_flops, ran, parent)
    # An op with FLOPs counted inside it: its own kernels (outside the inner op) are unmodelled.
    outer = (work_flops > 0) & ~counted
    if outer.any():
        owner[(owner >= 0) & outer[np.maximum(owner, 0)]] = -1
    op_ns[outer] = 0
    counted |= (op_ns > 0) & ~outer  # ops that only move data count where their kernels ran
    flops = work_flops * counted
    by_precision = _sum_by(works.precisions, works.index, flops)
    ns_by_precision = _sum_by(works.precisions, works.index, op_ns * (flops > 0))
    roofs = _group_roofs(tl, ops, works, op_ns, peak)
    near, compute, memory, unrated = _split(roofs, cfg)
    lost = owner < 0
    unmodelled = _sum_by(tl.strings, tl.name[rows[lost]].astype(np.int64), ns[lost])
    if not (tl.inputs >= 0).any():
        notes.append("the trace recorded no input shapes: no op's work is known (profile with record_shapes=True)")
    duration = window.end_ns - window.start_ns
    at_peak = _at_peak_s(by_precision, peak, n_dev)
    if peak is not None and at_peak is None:
        missing = [p for p in by_precision if _peak_tflops(peak, p) is None]
        notes.append(f"{peak.name}'s document gives no {'/'.join(missing)} peak: no MFU")
    return WorkSummary(
        device=name,
        peak=peak,
        devices_used=n_dev,
        flops=int(flops.sum()),
        nbytes=int(work_bytes[counted].sum()),
        flops_by_precision=by_precision,
        ns_by_precision=ns_by_precision,
        kernel_ns=int(ns.sum()),
        near_roofline_ns=near,
        compute_slow_ns=compute,
        memory_bound_ns=memory,
        unrated_ns=unrated,
        unmodelled_ns=int(ns[lost].sum()),
        duration_ns=duration,
        mfu=at_peak / (duration / 1e9) if at_peak is not None and duration > 0 and by_precision else None,
        steps=_steps(window, tl.start_ns[ops], flops, works, peak, n_dev),
        ops=tuple(roofs[: cfg.render.work_top_ops]),
        unmodelled=tuple(sorted(unmodelled.items(), key=lambda kv: -kv[1])[: cfg.render.work_top_ops]),
        notes=tuple(notes),
        comms=measure_collectives(tl, links, window, cfg.render.work_top_ops),
    )


class OpKernels(msgspec.Struct, frozen=True):
    """Each compute kernel of the window with the innermost modelled op its launch ran in: what
    the busy-time findings read (``findings/work_rules.py``)."""

    rows: Ints  # kernel rows, in device start order
    ns: I64  # each kernel's time inside the window
    launch: Ints  # its launch call's row, -1 if none
    op: Ints  # index into ``ops`` and ``works`` of its op, -1 if none
    ops: Ints  # the modelled ops' rows, in start order
    works: OpWorks  # each op's work: works[i]
    parent: Ints  # per op, the nearest modelled op enclosing it on its thread, -1 if none


def op_kernels(tl: Timeline, links: Links, window: Window) -> OpKernels:
    """The window's compute kernels and the modelled op that launched each (pure)."""
    rows, ns, launch = _kernels(tl, links, window)
    ops, works = _modelled_ops(tl)
    parent = _parents(tl, ops)
    op = _op_of_launch(tl, ops, parent, launch)
    # Rows and indices as int32 where the timeline's rows fit: the busy-time rules read this
    # table after the analyses (2 GB trace: 588k kernels, 1.4M ops; 23 MB less to hold).
    small = tl.row_dtype
    return OpKernels(rows.astype(small), ns, launch.astype(small), op.astype(small), ops.astype(small), works, parent.astype(small))


def roof(w: OpWork, kernel_ns: int, peak: DevicePeak | None) -> tuple[float, float, float, str, float | None]:
    """(TFLOP/s, TB/s, intensity, bound, fraction of the bound) of ``w`` done in ``kernel_ns``."""
    return _roof(w, kernel_ns, peak)
