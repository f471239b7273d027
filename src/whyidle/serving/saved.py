"""The batching tuner's and the request-log diagnosis's JSON, read back: ``"kind": "batching"``
(:class:`BatchingReport`, written from :data:`BATCHING`) and ``"kind": "serving"``
(:class:`~whyidle.serving.requests.ServingDiagnosis`, written from its table,
:data:`~whyidle.serving.requests.SERVING`).

Each result's fields are declared once, beside its type (``LATENCY`` in latency.py,
``BATCHING_RESULT`` in batching.py, ``STATS`` in traffic.py, ``SERVING`` in requests.py): writer,
reader and the schema doc (``whyidle schema``) follow from the tables. The readers are
registered with the core by :mod:`whyidle.serving.register`. Files saved before the results had
a ``schema_version`` are read as 1.0.
"""

from __future__ import annotations

from typing import Any

import msgspec

from whyidle import __version__
from whyidle.errors import TraceFormatError
from whyidle.findings.fields import STR, Dict, Field, Opt, Rec, Struct, Table
from whyidle.findings.saved import check_version, read_saved
from whyidle.serving.batching import BATCHING_RESULT, BatchingResult
from whyidle.serving.instances import InstanceAdvice
from whyidle.serving.latency import LATENCY, LatencyProfile
from whyidle.serving.requests import SERVING, SERVING_SCHEMA, ServingDiagnosis
from whyidle.serving.servers import all_servers

__all__ = ["BatchingReport", "BATCHING_SCHEMA", "BATCHING", "decode_batching", "decode_serving"]

# The batching result's schema: fields are only added within a major version.
BATCHING_SCHEMA = "1.0"


class BatchingReport(msgspec.Struct, frozen=True):
    """What ``whyidle batching`` reports: the tuner's result, the latency curve it simulated, and
    the advice on instances (None when not asked for)."""

    result: BatchingResult
    profile: LatencyProfile
    advice: InstanceAdvice | None = None

    def to_dict(self) -> dict[str, Any]:
        """The report as JSON data (:data:`BATCHING`)."""
        return BATCHING.write(self)


BATCHING = Table(
    BatchingReport,
    Field("schema_version", STR, f'`"{BATCHING_SCHEMA}"`', get=lambda r: BATCHING_SCHEMA, derived=True),
    Field("tool", Dict(STR), "`{name, version}`", get=lambda r: {"name": "whyidle", "version": __version__}, derived=True),
    Field("kind", STR, '`"batching"`', get=lambda r: "batching", derived=True),
    Field("latency", Rec(LATENCY), "the latency curve simulated", attr="profile"),
    Field("result", Rec(BATCHING_RESULT), flat=True),
    Field(
        "settings", Opt(Dict(STR)), "the recommendation as each server's configuration (`triton`, `torchserve`, `ray_serve`, `vllm`); null without one",
        get=lambda r: all_servers(r.result.best.settings) if r.result.best else None, derived=True,
    ),  # fmt: skip
    Field("instances", Opt(Struct(InstanceAdvice, whole=True)), "instances, MPS and MIG advice; null when not asked for", attr="advice"),
)


def _version(d: dict[str, Any], supported: str, where: str, what: str) -> None:
    check_version(str(d.get("schema_version", "1.0")), supported, where, what)


def decode_batching(d: dict[str, Any], where: str = "<dict>") -> BatchingReport:
    """A batching report from its JSON's dict; raises TraceFormatError naming ``where`` and the field."""
    _version(d, BATCHING_SCHEMA, where, "batching result")
    out: BatchingReport = read_saved(BATCHING, d, where, "batching result")
    res = out.result
    for name, cands in (("candidates", res.candidates), ("frontier", res.frontier), ("baseline", (res.baseline,)), ("best", (res.best,))):
        for c in cands:
            if c is not None and (c.settings.max_batch < 1 or c.settings.instances < 1):
                raise TraceFormatError(where, f"is a whyidle batching result whose field {name} holds a setting below 1 (max_batch {c.settings.max_batch}, instances {c.settings.instances})")
    return out


# The figures a log gives only with start times (serving/traffic.py): all of them, or none.
_WITH_START = (
    "queue_depth_mean", "queue_depth_max", "wait_p50_ns", "wait_p99_ns", "batches", "mean_batch", "server_busy_ns",
    "idle_requests_waiting_ns", "left_behind_batches", "left_behind_busy_ns", "arrivals_to_idle_server",
)  # fmt: skip


def decode_serving(d: dict[str, Any], where: str = "<dict>") -> ServingDiagnosis:
    """A request-log diagnosis from its JSON's dict (its undefined rates, written null, read back as NaN)."""
    _version(d, SERVING_SCHEMA, where, "serving diagnosis")
    out: ServingDiagnosis = read_saved(SERVING, d, where, "serving diagnosis", finite=False)
    given = [getattr(out.stats, k) is not None for k in _WITH_START]
    if any(given) and not all(given):
        missing = _WITH_START[given.index(False)]
        raise TraceFormatError(where, f"is a whyidle serving diagnosis whose field stats.{missing} is null beside figures that need start times too")
    return out
