"""Hostile inputs for the hardening tests and the fuzz script: seeded mutations of real formats.

Families: ``kineto`` (structure-aware mutations of a Kineto trace: odd numbers, types, nesting,
control characters), ``bytes`` (byte-level damage of a gzip or plain trace), ``counters``
(nvidia-smi / dcgmi logs with odd rows and times), ``nsys`` (an Nsight export with odd values),
``xplane`` (a JAX XPlane capture with odd planes and byte damage),
``report`` (saved JSON reports with odd fields, for ``compare``), ``rocprof`` (rocprofv3 JSON output
with odd values, types, missing fields and truncations). Each generator returns the
file's name and bytes; the caller writes it.
"""

from __future__ import annotations

import copy
import gzip
import json
import random
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

from whyidle.lab.synthetic import training_trace

# Values that have broken readers: past int64, past float64 integers, non-finite, wrong types.
ODD_VALUES: list[Any] = [
    2**63, 2**64 + 7, -(2**63) - 1, 10**30, 1e19, -1e19, 1.8e308, 1e-320, 0.5, -1, 0,
    "inf", "-inf", "nan", "NaN", "1e400", "", "12", "x" * 3000, "\x1b[2J\x1b]8;;http://evil/\x1b\\click\x1b]8;;\x1b\\",
    "line1\nline2\r\x07", True, None, [], [1, [2]], {}, {"a": {"b": 1}}, "\u202egnp.exe",
]
FIELDS = ["ph", "cat", "name", "pid", "tid", "ts", "dur", "args"]
ARG_FIELDS = ["correlation", "stream", "device", "bytes", "blocks per SM", "est. achieved occupancy %", "Call stack", "Input Dims", "name", "labels"]
TOP_FIELDS = ["schemaVersion", "deviceProperties", "distributedInfo", "baseTimeNanoseconds"]


def base_trace(steps: int = 3) -> dict[str, Any]:
    doc: dict[str, Any] = training_trace("starvation", steps=steps)
    return doc


def _deep(n: int) -> str:
    return f"__DEEP_{n}__"  # replaced in the text: json.dumps itself recurses


def _undeep(text: bytes) -> bytes:
    for n in (50, 5000):
        text = text.replace(f'"__DEEP_{n}__"'.encode(), b"[" * n + b"1" + b"]" * n)
    return text


def mutate_kineto(rng: random.Random, doc: dict[str, Any]) -> dict[str, Any]:
    d = copy.deepcopy(doc)
    events = d["traceEvents"]
    for _ in range(rng.randint(1, 4)):
        r = rng.random()
        if r < 0.45 and events:
            ev = rng.choice(events)
            ev[rng.choice(FIELDS)] = rng.choice(ODD_VALUES)
        elif r < 0.65 and events:
            ev = rng.choice(events)
            args = ev.setdefault("args", {})
            if isinstance(args, dict):
                args[rng.choice(ARG_FIELDS)] = rng.choice(ODD_VALUES)
        elif r < 0.8:
            k = rng.choice(TOP_FIELDS)
            if k == "distributedInfo":
                d[k] = {"rank": rng.choice(ODD_VALUES + [0, 3]), "world_size": rng.choice(ODD_VALUES + [10**9, 8])}
            else:
                d[k] = rng.choice(ODD_VALUES)
        elif r < 0.85 and events:
            rng.choice(events)["args"] = _deep(rng.choice([50, 5000]))
        elif r < 0.9 and events:
            del events[rng.randrange(len(events)):]
        elif r < 0.95 and events:
            ev = rng.choice(events)
            ev.pop(rng.choice(FIELDS), None)
        else:
            events.append({"ph": "X", "cat": rng.choice(["kernel", "cpu_op", "cuda_runtime", ["x"], {"y": 1}]), "name": rng.choice(ODD_VALUES),
                           "pid": 0, "tid": 7, "ts": rng.choice(ODD_VALUES), "dur": rng.choice(ODD_VALUES)})
    return d


def kineto_input(rng: random.Random, doc: dict[str, Any]) -> tuple[str, bytes]:
    text = _undeep(json.dumps(mutate_kineto(rng, doc), allow_nan=True).encode())
    if rng.random() < 0.15:  # raw text tricks json.dumps cannot write
        text = rng.choice([text + b" garbage", text.replace(b'"ts": ', b'"ts": 1e99999', 1), b"[" * 100_000, text[: rng.randrange(len(text))]])
    if rng.random() < 0.3:
        return "m.json.gz", gzip.compress(text, 1)
    return "m.json", text


def bytes_input(rng: random.Random, doc: dict[str, Any]) -> tuple[str, bytes]:
    text = json.dumps(doc).encode()
    blob = gzip.compress(text, 1) if rng.random() < 0.5 else text
    b = damage(rng, bytearray(blob), rng.randint(1, 8), 64, 16)
    name = "b.json.gz" if blob[:2] == b"\x1f\x8b" else "b.json"
    return name, bytes(b)


def damage(rng: random.Random, b: bytearray, times: int, max_cut: int, max_insert: int) -> bytearray:
    """``b`` damaged ``times`` times in place: a byte changed, a run cut or inserted, the end cut off."""
    for _ in range(times):
        if not b:
            break
        op = rng.random()
        i = rng.randrange(len(b))
        if op < 0.5:
            b[i] = rng.randrange(256)
        elif op < 0.7:
            del b[i : i + rng.randint(1, max_cut)]
        elif op < 0.85:
            b[i:i] = bytes(rng.randrange(256) for _ in range(rng.randint(1, max_insert)))
        else:
            del b[i:]
    return b


_SMI = """# gpu    pwr  gtemp  mtemp     sm    mem    enc    dec    jpg    ofa   mclk   pclk
# Idx      W      C      C      %      %      %      %      %      %    MHz    MHz
"""


def counters_input(rng: random.Random, _doc: Any = None) -> tuple[str, bytes]:
    kind = rng.random()
    if kind < 0.5:
        lines = ["#Date       Time        gpu    pwr  gtemp  mtemp     sm    mem    enc    dec   mclk   pclk",
                 "#YYYYMMDD   HH:MM:SS    Idx      W      C      C      %      %      %      %    MHz    MHz"]
        for i in range(40):
            sec = i % 60
            day = "20240101"
            if rng.random() < 0.05:
                day = rng.choice(["99991231", "00000000", "20241399", "x"])
            sm = rng.choice([str(rng.randint(0, 100))] * 8 + ["-", "nan", "inf", "1e400", "\x1b[2J", "99999999999999999999999"])
            gpu = rng.choice(["0"] * 8 + ["1", "-1", "\x1b]8;;x\x1b\\", "999999999999"])
            lines.append(f"{day}   00:{i // 60:02d}:{sec:02d}    {gpu}     60     40      -     {sm}     10      0      0   1593   1980")
        text = "\n".join(lines) + "\n"
    else:
        head = "#Entity   GPUTL   SMACT\nID\n"
        rows = []
        for _ in range(30):
            rows.append(f"GPU 0   {rng.choice(['50', '-', 'N/A', 'inf', '1e999'])}   {rng.choice(['0.5', '-', 'x'])}")
        if rng.random() < 0.5:
            rows.insert(10, "#Entity   GPUTL   SMACT   DRAMA   EXTRA\nID")
        text = head + "\n".join(rows) + "\n"
    return rng.choice(["gpu.log", "gpu.txt", "gpu.csv"]), text.encode("utf-8", "surrogateescape")


def nsys_input(rng: random.Random, tmp: Path) -> Path:
    from nsysbuild import VERSIONS, standard_db

    p = standard_db(tmp / f"n{rng.randrange(10**9)}.sqlite", rng.choice(VERSIONS))
    con = sqlite3.connect(p)
    tables = [r[0] for r in con.execute("select name from sqlite_master where type='table'")]
    for _ in range(rng.randint(1, 3)):
        t = rng.choice(tables)
        cols = [r[1] for r in con.execute(f"pragma table_info('{t}')")]
        if not cols:
            continue
        c = rng.choice(cols)
        v = rng.choice([2**63 - 1, -(2**63), b"\x00\xff", "x", None, 1e19, -5, "\x1b[2J"])
        try:
            con.execute(f'update "{t}" set "{c}" = ? where rowid in (select rowid from "{t}" limit 2)', (v,))
        except sqlite3.Error:
            pass
    con.commit()
    con.close()
    return p


ROC_TABLES = ["kernel_dispatch", "memory_copy", "hip_api", "marker_api"]
ROC_FIELDS = ["start_timestamp", "end_timestamp", "thread_id", "kind", "operation", "correlation_id", "dispatch_info", "stream_id",
              "dst_agent_id", "src_agent_id", "bytes"]
ROC_INFO_FIELDS = ["agent_id", "queue_id", "kernel_id", "grid_size", "workgroup_size"]
ROC_PROCESS_FIELDS = ["metadata", "agents", "kernel_symbols", "strings", "buffer_records"]


def rocprof_base() -> dict[str, Any]:
    """A rocprofv3 JSON document with every record kind whyidle reads (tests/rocbuild.py)."""
    from rocbuild import hip_training

    d = hip_training(steps=2)
    d.hsa("hsa_signal_store_screlease", 1_000_500, 1_000_900)
    d.rccl("ncclAllReduce", 1_000_100, 1_000_400)
    return d.doc()


def _mutate_rocprof_once(rng: random.Random, d: dict[str, Any]) -> None:
    proc = d["rocprofiler-sdk-tool"][0]
    r = rng.random()
    records = proc["buffer_records"][rng.choice(ROC_TABLES)]
    if r < 0.4 and records:
        rng.choice(records)[rng.choice(ROC_FIELDS)] = rng.choice(ODD_VALUES)
    elif r < 0.55 and proc["buffer_records"]["kernel_dispatch"]:
        info = rng.choice(proc["buffer_records"]["kernel_dispatch"])["dispatch_info"]
        info[rng.choice(ROC_INFO_FIELDS)] = rng.choice(ODD_VALUES + [{"handle": rng.choice(ODD_VALUES)}, {"x": rng.choice(ODD_VALUES), "y": 1, "z": 1}])
    elif r < 0.65:
        item = rng.choice(proc["agents"] + proc["kernel_symbols"] + proc["strings"]["marker_api"])
        item[rng.choice(list(item))] = rng.choice(ODD_VALUES)
    elif r < 0.72:
        proc[rng.choice(ROC_PROCESS_FIELDS)] = rng.choice(ODD_VALUES)
    elif r < 0.8 and records:
        rng.choice(records).pop(rng.choice(ROC_FIELDS), None)
    elif r < 0.86:
        proc["strings"]["buffer_records"] = rng.choice([[], ODD_VALUES[:5], [{"kind": 1, "operations": "x"}]])
    elif r < 0.92:
        d["rocprofiler-sdk-tool"] = rng.choice([[], {}, [proc, proc], proc, rng.choice(ODD_VALUES)])
    elif records:
        del records[rng.randrange(len(records)):]


def mutate_rocprof(rng: random.Random, doc: dict[str, Any]) -> dict[str, Any]:
    d = copy.deepcopy(doc)
    for _ in range(rng.randint(1, 4)):
        try:
            _mutate_rocprof_once(rng, d)
        except (KeyError, IndexError, TypeError, AttributeError):
            pass  # an earlier mutation replaced the structure this one walks into
    return d


def rocprof_input(rng: random.Random, doc: dict[str, Any]) -> tuple[str, bytes]:
    """rocprofv3 JSON output with odd values, types and missing fields, or truncated, plain or gzip."""
    text = json.dumps(mutate_rocprof(rng, doc), allow_nan=True).encode()
    if rng.random() < 0.2:
        text = rng.choice([text[: rng.randrange(len(text))], text + b" trailing", text.replace(b'"start_timestamp": ', b'"start_timestamp": 1e99999', 1)])
    if rng.random() < 0.3:
        return "r.json.gz", gzip.compress(text, 1)
    return rng.choice(["r.json", "results.json", "r"]), text




_ODD_INTS = [2**63 - 1, 2**64 - 1, 2**63, 0, 1, 10**18, 7]


def _odd_plane(rng: random.Random) -> bytes:
    """A plane whose values have broken readers: offsets and timestamps past int64 or negative,
    stats of the wrong type, metadata ids nothing defines, odd names."""
    from xplanebuild import f_bytes, f_double, f_int

    stat = f_int(1, rng.choice([1, 2, 99])) + rng.choice(
        [f_int(4, rng.choice(_ODD_INTS)), f_double(2, rng.choice([1e308, -0.0, float("nan")])), f_bytes(5, "x" * 10), f_int(7, 12345)]
    )
    ev = f_int(1, rng.choice([1, 2, 77])) + f_int(2, rng.choice(_ODD_INTS)) + f_int(3, rng.choice(_ODD_INTS)) + f_bytes(4, stat)
    if rng.random() < 0.2:
        ev += f_int(5, 3)  # num_occurrences as well
    line = f_int(1, rng.choice(_ODD_INTS)) + f_bytes(2, rng.choice(["Stream #1", "XLA Ops", "\x1b[2J", ""])) + f_int(3, rng.choice(_ODD_INTS))
    line += b"".join(f_bytes(4, ev) for _ in range(rng.randint(0, 3)))
    meta = f_bytes(4, f_int(1, 1) + f_bytes(2, f_int(1, 1) + f_bytes(2, rng.choice(["k", "$a.py:1 f", "cuLaunchKernel", "PjitFunction(f)", "\u202e"]))))
    smeta = f_bytes(5, f_int(1, 1) + f_bytes(2, f_int(1, 1) + f_bytes(2, rng.choice(["correlation_id", "step_num", "device_vendor"]))))
    name = rng.choice(["/device:GPU:0", "/device:GPU:99999999999999999999", "/host:CPU", "/device:TPU:1", ""])
    return f_int(1, 0) + f_bytes(2, name) + f_bytes(3, line) + meta + smeta + f_bytes(6, stat)


def xplane_input(rng: random.Random, _doc: Any = None) -> tuple[str, bytes]:
    """An XPlane capture (tests/xplanebuild.py) with odd planes added, then byte damage at times."""
    from xplanebuild import f_bytes, jax_gpu_capture

    raw = bytearray(jax_gpu_capture(steps=2))
    for _ in range(rng.randint(0, 2)):
        raw += f_bytes(1, _odd_plane(rng))
    if rng.random() < 0.6:
        damage(rng, raw, rng.randint(1, 6), 32, 12)
    if rng.random() < 0.2:
        return "x.xplane.pb.gz", gzip.compress(bytes(raw), 1)
    return rng.choice(["x.xplane.pb", "x.xplane.pb", "capture.bin"]), bytes(raw)


FAMILIES: dict[str, Callable[..., tuple[str, bytes]]] = {
    "kineto": kineto_input, "bytes": bytes_input, "counters": counters_input, "rocprof": rocprof_input, "xplane": xplane_input,
}  # fmt: skip


def gzip_bomb(path: Path, inflated_bytes: int, body: bytes = b" ", last_member_bytes: int = 0) -> Path:
    """A Kineto-looking gzip file that inflates to about ``inflated_bytes``, made in a moment.

    One 16 MiB member of ``body`` repeated, compressed once and written many times (gzip readers
    inflate every member): a 4 GiB bomb is about 4 MB. The blank space sits inside a string of
    the first event by default; ``body`` can be whole events instead. The size field at the end
    is the last member's: ``last_member_bytes`` > 0 makes that member that large (so the size
    estimate sends the file to the out-of-core reader), else it is tiny (the in-memory reader).
    """
    unit = (body * ((16 << 20) // len(body) + 1))[: (16 << 20) // len(body) * len(body)]
    member = gzip.compress(unit, 9, mtime=0)
    string = body == b" "
    head = b'{"traceEvents": [{"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 1, "dur": 1, "args": {"name": "' if string else b'{"traceEvents": ['
    tail = b'"}}]}' if string else b'{"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 1, "dur": 1}]}'
    with open(path, "wb") as f:
        f.write(gzip.compress(head, mtime=0))
        for _ in range(max(inflated_bytes // len(unit), 1)):
            f.write(member)
        last = gzip.GzipFile(fileobj=f, mode="wb", compresslevel=1, mtime=0)
        left = max(last_member_bytes - len(tail), 0)
        while left > 0:
            last.write(unit[:left])
            left -= len(unit)
        last.write(tail)
        last.close()
    return path


def run_bounded(cmd: list[str], limit_bytes: int, timeout_s: float, **kw: Any) -> dict[str, Any]:
    """Run ``cmd``, polling the resident memory of its whole process tree (workers included);
    kill the tree past ``limit_bytes`` or ``timeout_s``. Returns rc, stdout, stderr, peak_bytes,
    killed (a reason or "")."""
    import subprocess
    import time

    import psutil

    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, **kw)
    proc = psutil.Process(p.pid)
    peak, killed, t0 = 0, "", time.monotonic()
    import threading

    out: dict[str, bytes] = {}

    def drain(name: str, stream: Any) -> None:
        out[name] = stream.read()

    threads = [threading.Thread(target=drain, args=(n, s)) for n, s in (("out", p.stdout), ("err", p.stderr))]
    for t in threads:
        t.start()
    while p.poll() is None:
        try:
            tree = [proc, *proc.children(recursive=True)]
            rss = 0
            for q in tree:
                try:
                    rss += q.memory_info().rss
                except psutil.Error:
                    pass
            peak = max(peak, rss)
            over = "memory" if rss > limit_bytes else "time" if time.monotonic() - t0 > timeout_s else ""
            if over:
                killed = over
                for q in reversed(tree):
                    try:
                        q.kill()
                    except psutil.Error:
                        pass
        except psutil.Error:
            pass
        time.sleep(0.01)
    for t in threads:
        t.join()
    return {"rc": p.returncode, "stdout": out.get("out", b"").decode(errors="replace"), "stderr": out.get("err", b"").decode(errors="replace"),
            "peak_bytes": peak, "killed": killed}


def _paths(v: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix] if prefix else []
    if isinstance(v, dict):
        for k, x in v.items():
            out += _paths(x, prefix + (k,))
    elif isinstance(v, list):
        for i, x in enumerate(v[:3]):
            out += _paths(x, prefix + (i,))
    return out


def report_input(rng: random.Random, report: dict[str, Any]) -> tuple[str, bytes]:
    """A saved JSON report (``whyidle diagnose -o r.json``) with a few fields set to odd values."""
    d = copy.deepcopy(report)
    paths = _paths(d)
    for _ in range(rng.randint(1, 3)):
        path = rng.choice(paths)
        try:
            cur = d
            for k in path[:-1]:
                cur = cur[k]
            cur[path[-1]] = copy.deepcopy(rng.choice(ODD_VALUES))  # a copy: one list placed twice and then mutated would hold itself
        except (KeyError, IndexError, TypeError):
            pass
    return "r.json", json.dumps(d).encode()
