"""A model's latency per batch size: read from a CSV or JSON file, or measured on the model itself.

The batching simulator needs one number per batch size: how long one forward pass of a batch of
``k`` requests takes. Measured sizes are usually powers of two; sizes in between are interpolated
linearly (a batch of 3 costs between the measured 2 and 4), and sizes beyond the largest measured
are refused rather than extrapolated. When the file also gives the 90th percentile, the spread
becomes a per-size log-normal jitter (``sigma = ln(p90 / median) / z_0.9``) that the simulator can
apply, since a p99 target is decided by the slow passes, not the median one::

    batch_size,latency_ms,latency_ms_p90        {"latency": {"rows": [{"batch_size": 1,
    1,2.74,3.15                                     "latency_ns_median": 2739200, "latency_ns_p90": ...}]}}
    32,2.91,3.14

``profile_latency(model, example_input)`` measures the curve with torch (CPU or CUDA; CUDA events
on a GPU), imported only when called.
"""

from __future__ import annotations

import csv
import io
import json
import math
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import msgspec

from whyidle.config import Config, ServingSettings
from whyidle.errors import InputError, MissingExtraError, UsageError
from whyidle.findings.fields import FLOAT, INT, STR, Field, Opt, Table, Tup, Value
from whyidle.serving.passes import Row, measure_curve, row_of
from whyidle.sources import read_bytes

__all__ = ["LatencyProfile", "LATENCY", "load_latency", "curve_from_samples", "parse_curve", "profile_function", "profile_latency", "Z_P90", "DEFAULT_BATCH_SIZES"]

# The standard normal's 90th percentile: a log-normal with median m and p90 q has sigma = ln(q/m) / Z_P90.
Z_P90 = 1.2815515655446004
DEFAULT_BATCH_SIZES = (1, 2, 4, 8, 16, 32, 64, 128, 256)

# Column names accepted for the latency, with the factor that turns them into nanoseconds.
_UNITS = {"ns": 1.0, "us": 1e3, "ms": 1e6, "s": 1e9}


class LatencyProfile(msgspec.Struct, frozen=True):
    """Latency of one forward pass per batch size, in nanoseconds (sizes ascending)."""

    batch_sizes: tuple[int, ...]
    median_ns: tuple[float, ...]
    p90_ns: tuple[float, ...] | None = None
    source: str = ""
    device: str = ""
    memory_bytes: int | None = None  # peak memory of the largest batch, when measured
    # every pass timed, per batch size (ns), when measured here or saved with the curve: the
    # simulator draws from them (``spread_table``) instead of assuming a shape for the tail
    samples_ns: tuple[tuple[float, ...], ...] | None = None
    # what the measurement found doubtful: outliers dropped, sizes that never settled, sizes raised
    # to keep the curve monotone (serving/passes.py); the report shows them as warnings
    notes: tuple[str, ...] = ()

    @property
    def max_batch(self) -> int:
        return self.batch_sizes[-1]

    def service_table(self, max_batch: int) -> list[int]:
        """Service time in whole ns for batch sizes 0..max_batch (index 0 unused), interpolated."""
        if max_batch > self.max_batch:
            raise UsageError(f"batch size {max_batch} is beyond the largest measured ({self.max_batch}); measure it first")
        out = [0]
        for k in range(1, max_batch + 1):
            out.append(round(_interp(k, self.batch_sizes, self.median_ns)))
        return out

    def sigma_table(self, max_batch: int) -> list[float]:
        """Log-normal sigma per batch size 0..max_batch from p90/median (0 where p90 is not known)."""
        if self.p90_ns is None:
            return [0.0] * (max_batch + 1)
        sig = [max(math.log(q / m), 0.0) / Z_P90 if m > 0 else 0.0 for m, q in zip(self.median_ns, self.p90_ns)]
        return [0.0] + [_interp(k, self.batch_sizes, sig) for k in range(1, max_batch + 1)]

    def spread_table(self, max_batch: int) -> list[list[float]] | None:
        """Per batch size 0..max_batch, the sorted measured factors (pass time / median), or None.

        A size between two measured ones takes the factors of the next measured size up (the
        spread is a property of the pass, not of the exact batch size).
        """
        if self.samples_ns is None:
            return None
        facs = [sorted(x / m for x in smp) for m, smp in zip(self.median_ns, self.samples_ns)]
        out: list[list[float]] = [[1.0]]
        for k in range(1, max_batch + 1):
            i = next((i for i, b in enumerate(self.batch_sizes) if b >= k), len(self.batch_sizes) - 1)
            out.append(facs[i])
        return out

    def to_dict(self) -> dict[str, Any]:
        """The curve as JSON data (:data:`LATENCY`): what ``--save-latency`` writes and ``--latency`` reads."""
        return LATENCY.write(self)


class _CurveRows(Value):
    """The curve's columns as one row per batch size (``samples_per_s`` derived: written, not read back)."""

    words = (
        "[{`batch_size`, `latency_ns_median`, `samples_per_s` (batch_size / median, derived), `latency_ns_p90` (when the curve has it), "
        "`samples_ns` (every timed pass, when kept)}]"
    )

    def enc(self, p: LatencyProfile) -> list[dict[str, Any]]:
        rows = []
        for i, b in enumerate(p.batch_sizes):
            row: dict[str, Any] = {"batch_size": b, "latency_ns_median": p.median_ns[i], "samples_per_s": b / (p.median_ns[i] / 1e9)}
            if p.p90_ns is not None:
                row["latency_ns_p90"] = p.p90_ns[i]
            if p.samples_ns is not None:
                row["samples_ns"] = list(p.samples_ns[i])
            rows.append(row)
        return rows

    def dec(self, v: Any) -> dict[str, Any]:
        if not isinstance(v, list) or not v:
            raise ValueError("expected a list of rows, one per batch size")
        p90 = [r["latency_ns_p90"] for r in v if "latency_ns_p90" in r]
        smp = [r["samples_ns"] for r in v if "samples_ns" in r]
        if len(p90) not in (0, len(v)) or len(smp) not in (0, len(v)):
            raise ValueError("some rows have a p90 or timed passes and others not; expected every row or none")
        sizes: list[int] = []
        medians: list[float] = []
        for r in v:  # each checked as it is read: a failure names its row
            sizes.append(INT.dec(r["batch_size"]))
            if sizes[-1] < 1 or len(sizes) > 1 and sizes[-2] >= sizes[-1]:
                raise ValueError("expected batch sizes from 1 up, ascending")
            medians.append(FLOAT.dec(r["latency_ns_median"]))
            if not medians[-1] >= 1:
                raise ValueError("expected a median latency of 1 ns or more")
        return {
            "batch_sizes": tuple(sizes),
            "median_ns": tuple(medians),
            "p90_ns": tuple(FLOAT.dec(x) for x in p90) if p90 else None,
            "samples_ns": tuple(Tup(FLOAT).dec(x) for x in smp) if smp else None,
        }


LATENCY = Table(
    LatencyProfile,
    Field("source", STR, "where the curve came from (a file, `--curve`, a measurement)"),
    Field("device", STR, "the device it was measured on, when known"),
    Field("memory_bytes", Opt(INT), "peak memory of the largest batch, when measured"),
    Field("notes", Tup(STR), "what the measurement found doubtful (outliers dropped, sizes that never settled): warnings", default=()),
    Field("rows", _CurveRows(), get=lambda p: p),
    build=lambda v: LatencyProfile(**{k: x for k, x in v.items() if k != "rows"}, **v["rows"]),
)


def _interp(k: int, xs: Sequence[int], ys: Sequence[float]) -> float:
    if k <= xs[0]:
        return float(ys[0])  # below the smallest measured size: no cheaper than it
    for i in range(1, len(xs)):
        if k <= xs[i]:
            x0, x1 = xs[i - 1], xs[i]
            return float(ys[i - 1] + (ys[i] - ys[i - 1]) * (k - x0) / (x1 - x0))
    return float(ys[-1])


def _make(path: object, rows: list[Row], max_batch_size: int | None = None, **meta: Any) -> LatencyProfile:
    """The profile of ``rows``, checked; ``max_batch_size``: ``ServingSettings.batching_max_batch_size``
    (None: its default)."""
    if not rows:
        raise InputError(path, "holds no latency rows; expected batch_size and a latency per batch size")
    rows.sort()
    sizes = [r[0] for r in rows]
    if len(set(sizes)) != len(sizes):
        raise InputError(path, f"lists a batch size twice ({sizes}); expected one latency per batch size")
    if sizes[0] < 1 or any(r[1] <= 0 or not math.isfinite(r[1]) for r in rows):
        raise InputError(path, "has a batch size below 1 or a latency that is not a positive number")
    cap = ServingSettings().batching_max_batch_size if max_batch_size is None else max_batch_size
    if sizes[-1] > cap:
        raise InputError(path, f"has batch size {sizes[-1]}; expected at most {cap} (the simulator tables every size up to the largest)")
    if any(r[2] is not None and not (math.isfinite(r[2]) and r[2] > 0) for r in rows) or any(r[3] and not all(math.isfinite(x) and x > 0 for x in r[3]) for r in rows):
        raise InputError(path, "has a p90 latency or a timed pass that is not a positive finite number")
    q90 = [r[2] for r in rows]
    p90 = tuple(float(q) for q in q90 if q is not None) if all(q is not None for q in q90) else None
    smp = [r[3] for r in rows]
    samples = tuple(x for x in smp if x) if all(smp) else None
    return LatencyProfile(tuple(sizes), tuple(float(r[1]) for r in rows), p90, samples_ns=samples, **meta)


def _latency_of(row: dict[str, Any], p90: bool) -> float | None:
    """The latency in ns from a row whose key names its unit (latency_ms, latency_ns_median, ...)."""
    for key, value in row.items():
        k = key.strip().lower().replace("-", "_")
        if not k.startswith("latency") or value in (None, ""):
            continue
        parts = k.split("_")
        unit = next((p for p in parts if p in _UNITS), None)
        is_p90 = "p90" in parts
        if unit is None or is_p90 != p90 or any(p.startswith("p") and p[1:].isdigit() and p != "p90" for p in parts):
            continue
        return float(value) * _UNITS[unit]
    return None


def _rows_from(path: object, raw: list[dict[str, Any]]) -> list[Row]:
    out: list[Row] = []
    for i, row in enumerate(raw):
        try:
            bs = int(float(row.get("batch_size", row.get("batch", ""))))
            med = _latency_of(row, p90=False)
            q90 = _latency_of(row, p90=True)
            raw_smp = row.get("samples_ns")
            smp = tuple(float(x) for x in raw_smp) if isinstance(raw_smp, list) and raw_smp else None
        except (TypeError, ValueError, OverflowError):
            raise InputError(path, f"row {i + 1}: expected an integer batch_size and a latency number") from None
        if med is None:
            raise InputError(path, f"row {i + 1}: no latency column; expected e.g. latency_ms, latency_us or latency_ns_median")
        out.append((bs, med, q90, smp))
    return out


def parse_curve(text: str, max_batch_size: int | None = None) -> LatencyProfile:
    """A curve written inline, ``BATCH:MEDIAN_MS[:P90_MS],...`` (``whyidle batching --curve``;
    the form the demand finding writes from a trace's own batches), e.g. ``1:3.49:3.66,8:4.06``.
    ``max_batch_size``: the largest batch size it may list (``ServingSettings.batching_max_batch_size``;
    None: its default)."""
    rows: list[Row] = []
    for part in (p.strip() for p in text.split(",")):
        bits = part.split(":")
        try:
            if not 2 <= len(bits) <= 3:
                raise ValueError(part)
            rows.append((int(bits[0]), float(bits[1]) * 1e6, float(bits[2]) * 1e6 if len(bits) == 3 else None, None))
        except (ValueError, OverflowError):
            raise UsageError(f"--curve {text!r}: expected BATCH:MEDIAN_MS[:P90_MS] pairs separated by commas, e.g. 1:3.5,8:4.1") from None
    try:
        return _make("--curve", rows, max_batch_size, source="--curve")
    except InputError as exc:
        raise UsageError(f"--curve {text!r} {exc.problem}") from None


def load_latency(path: str | Path, max_batch_size: int | None = None) -> LatencyProfile:
    """Read a latency curve: CSV (batch_size, latency_<unit>[, latency_<unit>_p90]) or JSON.
    ``max_batch_size``: the largest batch size it may list (``ServingSettings.batching_max_batch_size``;
    None: its default).

    JSON: a list of rows, ``{"rows": [...]}`` (what ``whyidle batching --measure`` writes), or a
    file with a ``"latency"`` section holding that (tests/data/h200/measured.json).
    """
    p = Path(path)
    try:  # a regular file only, gzip within its limit (whyidle.sources.read_bytes)
        text = read_bytes(p, expected="a latency curve").decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise InputError(p, f"is not UTF-8 text (byte {exc.start}); expected a latency curve (CSV or JSON)") from None
    try:
        return _parse_latency(p, text, max_batch_size)
    except RecursionError:
        raise InputError(p, "nests JSON too deeply; expected a list of rows") from None
    except csv.Error as exc:
        raise InputError(p, f"is not a CSV ({exc}); expected batch_size and a latency column") from None


def _parse_latency(p: Path, text: str, max_batch_size: int | None) -> LatencyProfile:
    stripped = text.lstrip()
    meta: dict[str, Any] = {"source": str(p)}
    if stripped.startswith(("{", "[")):
        try:
            doc = json.loads(text)
        except ValueError as exc:
            raise InputError(p, f"is not valid JSON ({exc})") from None
        if isinstance(doc, dict) and isinstance(doc.get("latency"), dict):
            doc = doc["latency"]
        if isinstance(doc, dict):
            meta["device"] = str(doc.get("device") or doc.get("model") or "")
            if isinstance(doc.get("memory_bytes"), int):
                meta["memory_bytes"] = doc["memory_bytes"]
            if isinstance(doc.get("notes"), list):
                meta["notes"] = tuple(str(n) for n in doc["notes"])
            doc = doc.get("rows")
        if not isinstance(doc, list) or not all(isinstance(r, dict) for r in doc):
            raise InputError(p, "expected a JSON list of rows with batch_size and a latency, or {\"rows\": [...]}")
        return _make(p, _rows_from(p, doc), max_batch_size, **meta)
    reader = csv.DictReader(io.StringIO(text, newline=""))
    if not reader.fieldnames or "batch_size" not in [f.strip() for f in reader.fieldnames]:
        raise InputError(p, "expected a CSV header with batch_size and a latency column (e.g. latency_ms)")
    return _make(p, _rows_from(p, [{k.strip(): v for k, v in r.items() if k} for r in reader]), max_batch_size, **meta)


def curve_from_samples(samples: dict[int, list[float]], source: str = "", device: str = "") -> LatencyProfile:
    """A curve from every timed pass per batch size (ns): median, p90 and the passes themselves."""
    return _make(source or "samples", [row_of(bs, times) for bs, times in samples.items()], source=source, device=device)


def profile_function(
    run_batch: Callable[[int], object],
    batch_sizes: Sequence[int] = DEFAULT_BATCH_SIZES,
    *,
    warmup: int = 5,
    iters: int = 20,
    source: str = "",
    clock: Callable[[], int] = time.perf_counter_ns,
    cfg: Config | None = None,
) -> LatencyProfile:
    """Time ``run_batch(k)`` per batch size with ``clock`` after warm-up, in windows of ``iters``
    passes until steady, outliers dropped, the curve monotone (serving/passes.py); the kept passes
    are in ``samples_ns`` and what was doubtful in ``notes``.

    For a model outside torch, or the exact function a server calls per batch (the real batcher's
    ``run_batch``), so the curve holds what the server pays: input assembly, the call, its variance.
    """
    if iters < 1 or warmup < 0 or not batch_sizes or min(batch_sizes) < 1:
        raise UsageError("profiling needs iters >= 1, warmup >= 0 and batch sizes >= 1")

    def time_pass(bs: int) -> float:
        t0 = clock()
        run_batch(bs)
        return float(clock() - t0)

    rows, notes = measure_curve(time_pass, batch_sizes, warmup=warmup, iters=iters, cfg=cfg)
    what = source or f"measured: {getattr(run_batch, '__name__', 'function')}"
    return _make("profile_function", rows, source=f"{what}, windows of {iters} passes until steady after {warmup} warm-up", device="cpu", notes=tuple(notes))


def profile_latency(
    model: Any,
    example_input: Any,
    batch_sizes: Sequence[int] = DEFAULT_BATCH_SIZES,
    *,
    warmup: int = 5,
    iters: int = 20,
    device: str | None = None,
) -> LatencyProfile:
    """Measure one forward pass per batch size after warm-up (torch; CPU or CUDA), until steady.

    ``example_input`` is one request's input with a leading batch dimension of 1; a batch of ``k``
    repeats it ``k`` times along dimension 0. On CUDA each pass is timed with CUDA events (the
    device's own clock, as tests/data/h200/measured.json's curve was); on CPU with
    ``time.perf_counter_ns``. The model runs under ``torch.inference_mode()``. Passes are timed in
    windows until steady, outliers dropped and the curve kept monotone (serving/passes.py); the
    kept passes (``samples_ns``) let the simulator draw the measured spread, tail included.
    """
    try:
        import torch
    except ImportError as exc:
        raise MissingExtraError("Latency profiling", "torch", "torch") from exc

    if iters < 1 or warmup < 0 or not batch_sizes or min(batch_sizes) < 1:
        raise UsageError("profile_latency needs iters >= 1, warmup >= 0 and batch sizes >= 1")
    dev = torch.device(device) if device else next((p.device for p in model.parameters()), torch.device("cpu"))
    model = model.to(dev).eval()
    x1 = example_input.to(dev)
    source = f"measured: {type(model).__name__}"

    def batch_of(bs: int) -> Any:
        return x1.repeat(bs, *([1] * (x1.dim() - 1)))

    with torch.inference_mode():
        if dev.type != "cuda":
            xs = {bs: batch_of(bs) for bs in batch_sizes}
            return profile_function(lambda bs: model(xs[bs]), batch_sizes, warmup=warmup, iters=iters, source=source)
        held: dict[int, Any] = {}  # one batch on the device at a time: the peak is the current size's

        def time_pass(bs: int) -> float:
            if bs not in held:
                held.clear()
                torch.cuda.reset_peak_memory_stats(dev)
                held[bs] = batch_of(bs)
            start = torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
            end = torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
            start.record()
            model(held[bs])
            end.record()
            end.synchronize()
            return float(start.elapsed_time(end) * 1e6)

        rows, notes = measure_curve(time_pass, batch_sizes, warmup=warmup, iters=iters)
        peak = int(torch.cuda.max_memory_allocated(dev))  # the largest size's, measured last
    source += f", windows of {iters} passes until steady after {warmup} warm-up"
    return _make("profile_latency", rows, source=source, device=torch.cuda.get_device_name(dev), memory_bytes=peak, notes=tuple(notes))
