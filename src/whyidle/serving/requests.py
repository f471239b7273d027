"""Why a serving GPU is idle, from a request log (and the device's busy time, when known).

Three causes, each measured as a share of the log's window (first arrival to last finish):

=================================  ==========================================================
``insufficient_demand/idle_host``  no request in the system (none queued, none running): the
                                   GPU idles because requests are scarce. Same cause key as the
                                   trace attribution's idle serving host.
``underfilled/small_batches``      run time of batches sent while other requests had already
                                   arrived and were left waiting, with fewer requests than the
                                   largest batch the server ran: the server batches badly
                                   (max batch too small, no dynamic batching, one-at-a-time
                                   loop), so each pass pays its fixed cost for few requests.
``starvation/host_pipeline``       batches running (start to finish in the log) while the device
                                   is idle: server busy share minus device busy share. The time
                                   around the model inside the server's span (decoding,
                                   tokenisation, pre/post-processing, copies). Needs the device's
                                   busy share (a trace, a counter log, or a number).
=================================  ==========================================================

The verdict is the cause with the largest share, when it reaches ``min_finding_share_of_window``.
Time with requests queued and nothing running (the batcher holding them for a fuller batch) is
reported beside these as the batching delay.
"""

from __future__ import annotations

import msgspec

from whyidle import __version__
from whyidle.config import Config
from whyidle.findings.fields import FLOAT, INT, STR, Dict, Field, Opt, Rec, Table, Tup
from whyidle.serving.requestlog import RequestLog
from whyidle.serving.traffic import STATS, RequestStats, analyse_requests
from whyidle.units import MS2, format_ns

__all__ = ["ServingCause", "ServingDiagnosis", "SERVING", "SERVING_SCHEMA", "diagnose_requests"]


class ServingCause(msgspec.Struct, frozen=True):
    group: str
    cause: str
    time_ns: int
    share_of_window: float
    what: str  # what was measured, with numbers
    lever: str  # what to change

    @property
    def key(self) -> str:
        return f"{self.group}/{self.cause}"


class ServingDiagnosis(msgspec.Struct, frozen=True):
    stats: RequestStats
    device_busy_share: float | None
    device_busy_basis: str
    causes: tuple[ServingCause, ...]  # every measured cause, largest first
    verdict: ServingCause | None  # the largest, if it reaches the threshold
    skipped: tuple[str, ...]
    tuner_command: str  # the whyidle batching command with the log's numbers

    def to_dict(self) -> dict[str, object]:
        """The diagnosis as JSON data (:data:`SERVING`)."""
        return SERVING.write(self)


# The serving diagnosis's schema: fields are only added within a major version. Its JSON saved
# before it had one (no `schema_version`) is read as 1.0.
SERVING_SCHEMA = "1.0"

CAUSE = Table(
    ServingCause,
    Field("group", STR),
    Field("cause", STR, '`"group/cause"` is the key, as in a trace\'s report'),
    Field("time_ns", INT),
    Field("share_of_window", FLOAT),
    Field("what", STR, "what was measured, with numbers"),
    Field("lever", STR, "what to change"),
)

SERVING = Table(
    ServingDiagnosis,
    Field("schema_version", STR, f'`"{SERVING_SCHEMA}"`', get=lambda d: SERVING_SCHEMA, derived=True),
    Field("tool", Dict(STR), "`{name, version}`", get=lambda d: {"name": "whyidle", "version": __version__}, derived=True),
    Field("kind", STR, '`"serving"`', get=lambda d: "serving", derived=True),
    Field("stats", Rec(STATS), "the request log's figures (times in ns, shares 0..1)"),
    Field("device_busy_share", Opt(FLOAT), "the device's busy share, when known (a trace, a counter log, `--device-busy`)"),
    Field("device_busy_basis", STR, "where it came from, in words"),
    Field("causes", Tup(Rec(CAUSE)), "every measured cause, largest first"),
    Field("verdict", Opt(Rec(CAUSE)), "the largest cause when it reaches `min_finding_share_of_window`; else null"),
    Field("skipped", Tup(STR), "causes that could not be measured, with the reason"),
    Field("tuner_command", STR, "the `whyidle batching` command with the log's numbers"),
)


def diagnose_requests(
    log: RequestLog,
    *,
    device_busy_share: float | None = None,
    device_busy_basis: str = "",
    slo_ms: float | None = None,
    max_batch: int | None = None,
    cfg: Config | None = None,
) -> ServingDiagnosis:
    cfg = cfg or Config()
    st = analyse_requests(log, cfg, max_batch)
    skipped: list[str] = []
    causes: list[ServingCause] = []
    slo = f" --slo-ms {slo_ms:g}" if slo_ms else " --slo-ms SLO"
    tuner = f"whyidle batching --latency CURVE.csv --requests {log.source}{slo}"
    demand_share = st.share(st.idle_no_request_ns)
    causes.append(ServingCause(
        "insufficient_demand", "idle_host", st.idle_no_request_ns, demand_share,
        f"no request was queued or running for {demand_share:.0%} of the window: {st.rate_per_s:.1f} requests/s "
        f"(burstiness {st.burstiness:.2f}), {st.concurrency_mean:.2f} in the system on average",
        "More demand per GPU: raise client concurrency, consolidate models or services on fewer GPUs, or share "
        f"the GPU (MPS/MIG); then tune batching for the latency target: {tuner}",
    ))
    if st.left_behind_busy_ns is None:
        skipped.append("underfilled/small_batches: the log has no start times, so batches and queues are unknown")
    else:
        sh = st.share(st.left_behind_busy_ns)
        causes.append(ServingCause(
            "underfilled", "small_batches", st.left_behind_busy_ns, sh,
            f"{st.left_behind_batches} of {st.batches} batches were sent while other requests waited, with room "
            f"for more (largest batch run: {max(st.batch_sizes)}); mean batch {st.mean_batch:.2f}, "
            f"p99 queue wait {format_ns(st.wait_p99_ns or 0, MS2)}",
            f"Batch what is waiting: enable dynamic batching or raise its max batch size, and tune it: {tuner}",
        ))
    if device_busy_share is None:
        skipped.append("starvation/host_pipeline: the device's busy share is unknown (give a trace, a counter log or --device-busy)")
    elif st.server_busy_ns is None:
        skipped.append("starvation/host_pipeline: the log has no start times, so the server's busy time is unknown")
    else:
        server = st.share(st.server_busy_ns)
        gap = max(server - device_busy_share, 0.0)
        causes.append(ServingCause(
            "starvation", "host_pipeline", int(gap * st.window_ns), gap,
            f"the server ran batches {server:.0%} of the window but the device was busy {device_busy_share:.0%} "
            f"({device_busy_basis or 'as given'}): the rest of the server's time went to work around the model",
            "Take host work off the request path: decode/tokenise in worker processes or on the GPU, pin and copy "
            "inputs asynchronously, and profile one request (whyidle diagnose) to see which host op it is",
        ))
    causes.sort(key=lambda c: -c.time_ns)
    top = causes[0] if causes and causes[0].share_of_window >= cfg.findings.min_finding_share_of_window else None
    return ServingDiagnosis(st, device_busy_share, device_busy_basis, tuple(causes), top, tuple(skipped), tuner)
