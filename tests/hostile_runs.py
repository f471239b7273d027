"""Hostile run folders (issue 24): what ``whyidle diagnose RUN_DIR`` (``whyidle.ranks.run``) is given
when a job's traces are gathered by hand or by a broken script. Seeded, as in ``hostile.py``.

A folder holds one to six entries, each one of: a good rank trace (plain or gzip, with or without
``distributedInfo``, its world size odd or disagreeing), a trace of another run (other steps, a
clock a day later), a structure-aware mutation (``hostile.mutate_kineto``), an empty file,
garbage, a saved report, a counter log or an XPlane capture under a trace's name, a symlink (to a
trace, dangling, to itself, to a folder), a FIFO, a folder, an unreadable file; names with
newlines, escape sequences, right-to-left marks, 200 characters or a leading dash, and rank
numbers that repeat or do not fit an int64.
"""

from __future__ import annotations

import copy
import gzip
import json
import os
import random
from pathlib import Path
from typing import Any

import hostile

_NAMES = [
    "rank{k}.json", "job_rank-{k}.json.gz", "trace.{k}.json", "rank{k}.pt.trace.json", "rank0.json", "-rank{k}.json",
    "rank{k}\nx.json", "\x1b[2Jrank{k}.json", "\u202erank{k}.json", "r" * 200 + "{k}.json", "rank99999999999999999999{k}.json",
    "rank{k}.JSON", ".rank{k}.json", "rank {k}.json.gz",
]  # fmt: skip
_KINDS = ["good"] * 6 + ["other_run", "mutated", "mutated", "empty", "garbage", "report", "counters", "xplane",
                          "symlink", "dangling", "loop", "dirlink", "fifo", "folder", "unreadable"]  # fmt: skip


def _trace(rng: random.Random, doc: dict[str, Any], k: int, n: int) -> dict[str, Any]:
    d = copy.deepcopy(doc)
    r = rng.random()
    if r < 0.6:
        d["distributedInfo"] = {"rank": k, "world_size": n, "backend": "nccl"}
    elif r < 0.8:
        d["distributedInfo"] = {"rank": rng.choice([k, 0, -1, 2**63, "1", None]), "world_size": rng.choice([n, 1, 10**9, 0, "x", None])}
    return d


def _other_run(rng: random.Random, k: int, n: int) -> dict[str, Any]:
    d = hostile.base_trace(rng.randint(1, 5))
    shift = rng.choice([86_400e6, 1e3, -5e5])
    for ev in d["traceEvents"]:
        if isinstance(ev.get("ts"), (int, float)):
            ev["ts"] = ev["ts"] + shift
    d["distributedInfo"] = {"rank": k, "world_size": rng.choice([n, n + 3])}
    return d


def _file_bytes(rng: random.Random, kind: str, doc: dict[str, Any], ctx: dict[str, Any], k: int, n: int) -> bytes:
    if kind == "good":
        return json.dumps(_trace(rng, doc, k, n)).encode()
    if kind == "other_run":
        return json.dumps(_other_run(rng, k, n)).encode()
    if kind == "mutated":
        return hostile._undeep(json.dumps(hostile.mutate_kineto(rng, _trace(rng, doc, k, n))).encode())
    if kind == "empty":
        return b""
    if kind == "report":
        return bytes(ctx["report"])
    if kind == "counters":
        return hostile.counters_input(rng)[1]
    if kind == "xplane":
        return hostile.xplane_input(rng)[1]
    return rng.randbytes(rng.randint(1, 2000))  # garbage


def _entry(rng: random.Random, folder: Path, kind: str, doc: dict[str, Any], ctx: dict[str, Any], k: int, n: int) -> None:
    name = rng.choice(_NAMES).format(k=k)
    if kind == "xplane":
        name = f"host{k}.xplane.pb"  # an XPlane file makes the folder a JAX capture: only XPlane files count
    p = folder / name
    if p.exists() or p.is_symlink():
        p = folder / f"{k}_{name}"
    others = [q for q in folder.iterdir() if q.is_file() and not q.is_symlink()]
    if kind == "symlink" and others:
        p.symlink_to(rng.choice(others).name)
    elif kind == "dangling":
        p.symlink_to(f"missing{k}.json")
    elif kind == "loop":
        p.symlink_to(p.name)
    elif kind == "dirlink":
        p.symlink_to(".")
    elif kind == "fifo" and hasattr(os, "mkfifo"):
        os.mkfifo(p)
    elif kind == "folder":
        p.mkdir()
        (p / "rank0.json").write_text(json.dumps(_trace(rng, doc, 0, n)))
    else:
        data = _file_bytes(rng, "good" if kind in ("symlink", "fifo", "unreadable") else kind, doc, ctx, k, n)
        p.write_bytes(gzip.compress(data, mtime=0) if name.endswith(".gz") else data)
        if kind == "unreadable":
            p.chmod(0)  # root reads it still: then it is one more rank


def run_folder_input(rng: random.Random, doc: dict[str, Any], ctx: dict[str, Any], folder: Path) -> Path:
    """A hostile run folder at ``folder`` (created); ``ctx["report"]``: a saved report's bytes."""
    folder.mkdir()
    n = rng.randint(1, 6)
    for k in range(n):
        _entry(rng, folder, rng.choice(_KINDS), doc, ctx, k, n)
    return folder


def snapshot(folder: Path) -> dict[str, bytes]:
    """The bytes of every regular file in the folder (symlinks, FIFOs and folders by kind only)."""
    out: dict[str, bytes] = {}
    for p in sorted(folder.iterdir()):
        if p.is_symlink():
            out[p.name] = b"-> " + os.readlink(p).encode("utf-8", "surrogateescape")
        elif p.is_dir():
            out[p.name] = b"<dir> " + repr(snapshot(p)).encode()
        elif p.is_file():
            st = p.stat()
            out[p.name] = p.read_bytes() if os.access(p, os.R_OK) else f"<unreadable {st.st_mode:o} {st.st_size}>".encode()
        else:
            out[p.name] = b"<special>"
    return out
