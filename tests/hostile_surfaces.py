"""Hostile inputs for the surfaces added after issue 14 (issue 24): request logs, Triton traces,
latency curves, Parquet timelines and option values. Seeded mutations of valid inputs, as in
``hostile.py``; each generator returns a file's name and bytes (or, for options, an argv).
"""

from __future__ import annotations

import copy
import csv
import gzip
import io
import json
import random
import sys
from pathlib import Path
from typing import Any

from hostile import ODD_VALUES

# Values a time or a number field has been given by hostile logs, beside hostile.ODD_VALUES.
TIME_VALUES: list[Any] = [*ODD_VALUES, "2024-01-01T00:00:00Z", "2024-13-45T99:00:00", "9999-12-31T23:59:59", "1e300", -1e300, 1.5, "0x10", "1_000", " 7 "]


def _damage(rng: random.Random, blob: bytes) -> bytes:
    """Text tricks a serialiser cannot write: a BOM, stray CR or NUL, truncation, byte flips."""
    b = bytearray(blob)
    r = rng.random()
    if r < 0.2:
        b[:0] = b"\xef\xbb\xbf"
    elif r < 0.4 and b:
        b[rng.randrange(len(b)) : rng.randrange(len(b)) + 1] = rng.choice([b"\r", b"\x00", b"\r\n\r", b'"', b"\xff"])
    elif r < 0.55 and b:
        del b[rng.randrange(len(b)) :]
    elif r < 0.65:
        b += rng.choice([b"[" * 50_000, b"{" * 5_000, b"," + b"9" * 5_000, b"\n" + b"x" * 200_000])
    return bytes(b)


def _rows(rng: random.Random) -> tuple[list[str], list[dict[str, Any]]]:
    keys = rng.choice([
        ["arrival", "start", "finish"], ["arrival_ms", "start_ms", "finish_ms", "batch_id"],
        ["arrival_time", "first_scheduled_time", "finished_time"], ["received_ns", "done_ns"], ["Arrival-Time", "End Time"],
    ])  # fmt: skip
    rows, t = [], 1.0
    for i in range(rng.randint(1, 40)):
        t += rng.random()
        vals = [t, t + 0.1, t + 0.3, i // 4][: len(keys)]
        if len(keys) == 2:
            vals = [t, t + 0.3]
        rows.append(dict(zip(keys, vals)))
    for _ in range(rng.randint(0, 4)):
        row = rng.choice(rows)
        r = rng.random()
        if r < 0.7:
            row[rng.choice(keys)] = rng.choice(TIME_VALUES)
        elif r < 0.85:
            row.pop(rng.choice(keys), None)
        else:
            row[rng.choice(["x", "batch", "", "arrival_us", "finish_s"])] = rng.choice(TIME_VALUES)
    return keys, rows


def _csv(keys: list[str], rows: list[dict[str, Any]]) -> bytes:
    out = io.StringIO()
    w = csv.DictWriter(out, fieldnames=sorted({k for r in rows for k in r} | set(keys)))
    w.writeheader()
    for r in rows:
        w.writerow({k: ("" if v is None else v) for k, v in r.items()})
    return out.getvalue().encode("utf-8", "surrogatepass")


def requests_input(rng: random.Random, _doc: Any = None) -> tuple[str, bytes]:
    """A request log (JSON lines, a JSON list or CSV) with odd values, keys and bytes."""
    keys, rows = _rows(rng)
    form = rng.choice(["jsonl", "json", "csv"])
    if form == "jsonl":
        blob = "\n".join(json.dumps(r) for r in rows).encode()
    elif form == "json":
        blob = json.dumps(rows).encode()
    else:
        blob = _csv(keys, rows)
    blob = _damage(rng, blob)
    if rng.random() < 0.15:
        return f"r.{form}.gz", gzip.compress(blob, 1)
    return f"r.{form}", blob


_STAMPS = ["REQUEST_START", "QUEUE_START", "COMPUTE_START", "COMPUTE_INPUT_END", "COMPUTE_OUTPUT_START", "COMPUTE_END", "REQUEST_END"]


def triton_input(rng: random.Random, _doc: Any = None) -> tuple[str, bytes]:
    """A Triton trace (``--trace-config level=TIMESTAMPS``) with odd entries and timestamps."""
    entries: list[Any] = []
    for i in range(rng.randint(1, 20)):
        t = 1_000_000 * (i + 1)
        entries.append({"id": i, "model_name": "m", "timestamps": [{"name": n, "ns": t + 1000 * j} for j, n in enumerate(_STAMPS)]})
        if rng.random() < 0.3:
            entries.append({"id": i, "parent_id": 0})
    for _ in range(rng.randint(1, 4)):
        e = rng.choice([x for x in entries if isinstance(x, dict)] or [{}])
        r = rng.random()
        stamps = [t for t in e.get("timestamps") or () if isinstance(t, dict)] if isinstance(e.get("timestamps"), list) else []
        if r < 0.35 and stamps:
            rng.choice(stamps)[rng.choice(["ns", "name"])] = rng.choice(TIME_VALUES)
        elif r < 0.55:
            e["timestamps"] = rng.choice(ODD_VALUES)
        elif r < 0.7:
            e["id"] = rng.choice(ODD_VALUES)
        elif r < 0.85 and isinstance(e.get("timestamps"), list):
            e["timestamps"].append(rng.choice(ODD_VALUES))
        else:
            entries[rng.randrange(len(entries))] = rng.choice(ODD_VALUES)
    return "triton.json", _damage(rng, json.dumps(entries).encode()) if rng.random() < 0.3 else json.dumps(entries).encode()


def latency_input(rng: random.Random, _doc: Any = None) -> tuple[str, bytes]:
    """A latency curve (CSV or JSON rows) with odd batch sizes, latencies and samples."""
    rows: list[dict[str, Any]] = [{"batch_size": b, "latency_ms": 2 + b / 16, "latency_ms_p90": 2.5 + b / 16} for b in (1, 2, 4, 8, 16)]
    for _ in range(rng.randint(1, 3)):
        row = rng.choice(rows)
        row[rng.choice(["batch_size", "latency_ms", "latency_ms_p90", "samples_ns", "latency_us"])] = rng.choice(
            [*ODD_VALUES, 10**8, 65_537, 0, -3, [1.0, "x"], [float("inf")], list(range(3))]
        )
    if rng.random() < 0.5:
        text = json.dumps(rng.choice([rows, {"rows": rows}, {"latency": {"rows": rows, "device": rng.choice(ODD_VALUES), "memory_bytes": rng.choice(ODD_VALUES)}}]))
        return "curve.json", _damage(rng, text.encode()) if rng.random() < 0.3 else text.encode()
    return "curve.csv", _damage(rng, _csv(["batch_size", "latency_ms"], rows))


def parquet_input(rng: random.Random, good: Path) -> tuple[str, bytes]:
    """A Parquet timeline (``whyidle convert`` output) with tampered metadata, columns or bytes."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    r = rng.random()
    if r < 0.3:
        b = bytearray(good.read_bytes())
        for _ in range(rng.randint(1, 6)):
            i = rng.randrange(len(b))
            b[i] = rng.randrange(256)
        return "t.parquet", bytes(b)
    table = pq.read_table(good)
    meta = json.loads(table.schema.metadata[b"whyidle.timeline"])
    if r < 0.65:
        side = copy.deepcopy(meta)
        key = rng.choice(["format_version", "strings", "lanes", "meta"])
        if key in ("strings", "lanes") and side[key] and rng.random() < 0.6:
            if rng.random() < 0.5:
                del side[key][rng.randrange(len(side[key])) :]
            else:
                side[key][rng.randrange(len(side[key]))] = rng.choice(ODD_VALUES)
        elif key == "meta" and rng.random() < 0.7:
            side["meta"][rng.choice([*side["meta"], "bogus"])] = rng.choice(ODD_VALUES)
        else:
            side[key] = rng.choice(ODD_VALUES)
        table = table.replace_schema_metadata({b"whyidle.timeline": json.dumps(side).encode()})
    else:
        col = rng.choice(["start_ns", "end_ns", "lane", "kind", "name", "stack", "corr", "grid"])
        values = table.column(col).to_numpy().copy()
        if rng.random() < 0.3:
            arr = pa.array([str(v) for v in values])  # another type
        else:
            if values.size:
                info = np.iinfo(values.dtype)
                values[rng.randrange(values.size)] = rng.choice([-2, -1, min(10**6, int(info.max)), 127, int(info.max), int(info.min)])
            arr = pa.array(values)
        table = table.set_column(table.schema.get_field_index(col), col, arr)
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink)
    return "t.parquet", sink.getvalue().to_pybytes()


# Option values that have broken commands: non-finite, out of range, not numbers, absurd ranges.
OPTION_VALUES = ["inf", "-inf", "nan", "NaN", "1e400", "1e20", "-5", "0", "-0", "1e-320", "99999999999999999999", "abc", "", "3-1",
                 "1-100000000", "0x10", "1_000", " 5", "5,", ",", "1,nan", "0.5", "-1", "2", "\x1b[2J", "9" * 5000]

# Options that name files or outputs (fuzzed by the file families, never written here), or run user code.
_SKIP = {"--baseline", "-o", "--output", "--save-latency", "--counters", "--trace", "--requests", "--latency", "--measure", "--module", "--target", "--step-range"}


def fuzzable_options(parser: Any, command: str) -> list[str]:
    """The options of ``command`` that take a value (typed or parsed by the command itself)."""
    sub = next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction").choices[command]
    return sorted(o for a in sub._actions if a.option_strings and a.nargs != 0 and not a.choices for o in a.option_strings[-1:] if o not in _SKIP)


def option_argv(rng: random.Random, bases: dict[str, list[str]], parser: Any) -> list[str]:
    """A command line with one or two option values taken from OPTION_VALUES."""
    command = rng.choice(sorted(bases))
    argv = [command, *bases[command]]
    for _ in range(rng.randint(1, 2)):
        argv += [rng.choice(fuzzable_options(parser, command)), rng.choice(OPTION_VALUES)]
    if command == "run":  # the program comes last, after its options
        argv += ["--", sys.executable, "-c", "pass"]
    return argv
