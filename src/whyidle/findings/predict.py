"""Predictions: what each finding's fix buys, from the what-if replay (analyses/whatif.py).

A lever is a named change with a stated assumption; :func:`lever_edits` turns it into replay
edits (a point and the two ends of the range the assumption allows). :func:`attach_predictions`
gives every finding whose cause has a lever its :class:`Prediction`, and the report the critical
path of the median step. The rules that build findings are untouched: predictions are added after.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, NamedTuple

import msgspec.structs
import numpy as np

from whyidle.analyses import whatif as W
from whyidle.analyses import whatif_path as WP
from whyidle.analyses.links import Links, link_launches
from whyidle.analyses.window import Window
from whyidle.catalogue import replay_lever, replay_levers
from whyidle.config import Config, PredictionSettings
from whyidle.errors import ArgumentError
from whyidle.findings.critical_path import critical_path_summary
from whyidle.findings.model import Finding, Prediction
from whyidle.findings.settings import RuleSettings
from whyidle.timeline.arrays import median
from whyidle.timeline.model import Kind, Timeline

__all__ = [
    "LEVERS",
    "LeverEdits",
    "lever_edits",
    "predict_lever",
    "predict_from_graph",
    "Replays",
    "predict_from_steps",
    "attach_predictions",
    "LeverPredictions",
    "PredictionGraph",
    "prediction_graph",
    "predictions_on",
    "replay_ahead",
    "lever_predictions",
    "levers_of",
    "lever_of",
    "explained_per_step_ns",
    "beyond_explained",
]


class LeverEdits(NamedTuple):
    """What a replay lever changes in the what-if model: the edits of its point and range (the
    lever's advice text is the catalogue's ``Lever``; which replay lever a cause takes is its
    entry's ``replay``)."""

    lever: str  # the change, one phrase
    assumption: str
    point: W.Edit
    low: W.Edit  # the most optimistic end of the range
    high: W.Edit
    batch_factor: float = 1.0

    @property
    def edits(self) -> tuple[W.Edit, W.Edit, W.Edit, W.Edit]:
        """What a prediction replays, in order: no edit (before), the point, the range's ends."""
        return (W.NO_EDIT, self.point, self.low, self.high)


# The replay levers: which one predicts a finding's fix is the catalogue's (``CauseEntry.replay``,
# by variant where the variant's fix is another lever: workers exist already, the lever is faster
# batches, not workers).
LEVERS = ("input_pipeline", "loader_speedup", "h2d_copy", "host_sync", "host_overhead", "fused_optimizer", "batch_size", "fp32_math")
# The fp32 finding's variants name a different fix; the prediction's lever names the same one.
_VARIANT_LABEL = {("fp32_math", "fp16_only"): "tensor cores for FP32 GEMM/convolution (float16 autocast with a GradScaler)"}
# A lever's name in a framework whose words differ from PyTorch's (the advice context's framework).
_IDIOM_LABEL = {
    ("host_sync", "jax"): "values kept on the device (no per-step block_until_ready, jax.device_get or printed arrays)",
    ("host_overhead", "jax"): "more work per dispatch (the whole step jitted, loops in lax.scan): host cost per call cut",
}


def lever_of(f: Finding) -> str | None:
    """The lever that predicts the finding's fix (None: its fix is not replayed)."""
    return replay_lever(f.cause, f.variant)


def lever_edits(lever: str, cfg: PredictionSettings, *, workers: int | None = None, batch_factor: float = 2.0, copy_speedup: float = 0.0) -> LeverEdits:
    """The replay edits for a named lever (see docs/metrics.md, 'What-if predictions').

    ``copy_speedup``: pinned over pageable bandwidth measured in the trace (``Graph.pinned_speedup``;
    0: not measured), the h2d lever's point instead of the configured one."""
    if lever in ("input_pipeline", "loader_speedup"):
        return _loader_lever(lever, cfg, workers)
    if lever == "h2d_copy":
        point, low, high = cfg.whatif_pinned_copy_speedup
        source = f"{high:g}x measured on an H200"
        if copy_speedup > 0:
            point, low, high = max(copy_speedup, 1.0), min(low, copy_speedup), max(high, copy_speedup)
            source = f"{point:.2g}x: this trace's pinned over pageable copy bandwidth"
        return LeverEdits(
            "pinned memory and non_blocking host-to-device copies",
            f"copies no longer block the host (the call costs one launch); a copy from pageable memory runs {point:.2g}x "
            f"faster from pinned memory (range {low:.2g}-{high:.2g}x; {source}), other copies keep their "
            "recorded time",
            W.Edit("h2d_copy", h2d_async=True, pageable_copy_factor=point),
            W.Edit("h2d_copy", h2d_async=True, pageable_copy_factor=high),
            W.Edit("h2d_copy", h2d_async=True, pageable_copy_factor=low),
        )
    if lever == "host_sync":
        return LeverEdits(
            "values kept on the device (no per-step .item()/.cpu()/synchronize)",
            "the syncs no longer wait and the host ops that used what they fetched (launching no device work) are gone; "
            "the range's high end keeps those ops on the host",
            W.Edit("host_sync", sync_removed=True, sync_consumers_removed=True),
            W.Edit("host_sync", sync_removed=True, sync_consumers_removed=True),
            W.Edit("host_sync", sync_removed=True),
        )
    if lever == "host_overhead":
        f = cfg.whatif_host_overhead_factor
        lo, hi = cfg.whatif_host_overhead_factor_range
        return LeverEdits(
            "torch.compile / CUDA graphs (host cost per launch cut)",
            f"host time of the step scaled by {f:g} (range {lo:g}-{hi:g}), kernel time unchanged: a stated assumption, not a measurement",
            W.Edit("host_overhead", host_factor=f),
            W.Edit("host_overhead", host_factor=lo),
            W.Edit("host_overhead", host_factor=hi),
        )
    if lever == "fused_optimizer":
        return LeverEdits(
            "fused optimizer (one multi-tensor kernel instead of a per-parameter loop)",
            "the host time inside Optimizer.step disappears (range: to half of it); its kernels keep their time",
            W.Edit("fused_optimizer", host_factor=0.0, host_region="optimizer"),
            W.Edit("fused_optimizer", host_factor=0.0, host_region="optimizer"),
            W.Edit("fused_optimizer", host_factor=0.5, host_region="optimizer"),
        )
    if lever == "batch_size":
        k = batch_factor
        return LeverEdits(
            f"batch size x{k:g}",
            "host cost per step unchanged; a kernel's time grows with the batch once its blocks fill the SMs "
            "(range: kernels unchanged / all kernels x the batch factor)",
            W.Edit("batch_size", batch_factor=k),
            W.Edit("batch_size", batch_factor=k, batch_growth="none"),
            W.Edit("batch_size", batch_factor=k, batch_growth="all"),
            batch_factor=k,
        )
    if lever == "fp32_math":
        point, low, high = cfg.whatif_tensor_core_factor
        return LeverEdits(
            "tensor cores for FP32 GEMM/convolution (TF32 or bf16 autocast)",
            f"FP32 GEMM/convolution kernels {point:g}x faster (range {low:g}-{high:g}x; {high:g}x is the datasheet peak ratio)",
            W.Edit("fp32_math", gemm_factor=point),
            W.Edit("fp32_math", gemm_factor=high),
            W.Edit("fp32_math", gemm_factor=low),
        )
    raise ArgumentError(f"unknown lever {lever!r}; expected one of {', '.join(LEVERS)}")


def _loader_lever(lever: str, cfg: PredictionSettings, workers: int | None) -> LeverEdits:
    """The DataLoader's levers: workers where the loader runs in the training process, faster
    batches where workers exist already."""
    h = cfg.whatif_loader_handoff_ns
    if lever == "input_pipeline":
        w = workers or cfg.whatif_loader_workers
        return LeverEdits(
            f"DataLoader with {w} worker processes",
            f"the loader's time overlaps compute: each batch costs the host {h / 1e3:.0f} us to take from a worker, "
            f"and a step cannot be shorter than the recorded loader time per batch / {w}",
            W.Edit("input_pipeline", loader_workers=w, loader_handoff_ns=h),
            W.Edit("input_pipeline", loader_workers=w, loader_handoff_ns=0),
            W.Edit("input_pipeline", loader_workers=w, loader_handoff_ns=h),
        )
    point, low, high = cfg.whatif_loader_speedup
    return LeverEdits(
        f"DataLoader batches ready {point:g}x sooner (more workers than now where CPU cores are free, or cheaper samples: "
        "cached preprocessing, packed shards, GPU decoding)",
        f"the workers are the bottleneck: a batch is ready every recorded step; {point:g}x faster (range {high:g}-{low:g}x), "
        f"each costing the host {h / 1e3:.0f} us to take",
        W.Edit("loader_speedup", loader_speedup=point, loader_handoff_ns=h),
        W.Edit("loader_speedup", loader_speedup=low, loader_handoff_ns=0),
        W.Edit("loader_speedup", loader_speedup=high, loader_handoff_ns=h),
    )


class Replays:
    """Replays of one graph, each edit replayed once (shared between the findings of a report):
    the mean step, and the device's backlog at step boundaries of the untraced run."""

    def __init__(self, g: W.Graph) -> None:
        self.g = g
        self._mean: dict[W.Edit, float] = {}
        self._steady: dict[W.Edit, float] = {}
        self._backlog: dict[W.Edit, int] = {}

    def _replay(self, e: W.Edit) -> None:
        self.add(W.replay(self.g, e))

    def add(self, r: W.Replay) -> None:
        """A replay of this graph made elsewhere (the critical path's, with no edit)."""
        e = r.edit
        self._mean[e] = r.mean_step_ns
        self._steady[e] = r.steady_step_ns
        self._backlog[e] = W.backlog_ns(self.g, r)

    def mean(self, e: W.Edit) -> float:
        if e not in self._mean:
            self._replay(e)
        return self._mean[e]

    def steady(self, e: W.Edit) -> float:
        if e not in self._steady:
            self._replay(e)
        return self._steady[e]

    def warmup_backlog(self, e: W.Edit) -> int:
        """The backlog the edited run's unprofiled warm-up step leaves for the first profiled step:
        the untraced replay's backlog when a step first waits for the device, less the wait for
        earlier work the recording's first step already holds (never below 0)."""
        u = msgspec.structs.replace(e, profiler_removed=True)
        if u not in self._backlog:
            self._replay(u)
        return max(0, self._backlog[u] - W.first_wait_excess_ns(self.g))

    def profiled_edit(self, e: W.Edit, warmup: bool) -> W.Edit:
        """The edit whose mean step is a profiled after-run's under ``e`` (see
        :func:`predict_from_graph`): with ``warmup``, ``e`` behind its warm-up step's backlog."""
        if warmup and e != W.NO_EDIT:
            return msgspec.structs.replace(e, carried_backlog_ns=self.warmup_backlog(e))
        return e

    def profiled_steps(self, e: W.Edit, warmup: bool) -> Iterator[None]:
        """Make the replays :meth:`profiled_edit` and its mean step need, yielding after each."""
        if warmup and e != W.NO_EDIT:
            self.warmup_backlog(e)  # the untraced replay
            yield
        pe = self.profiled_edit(e, warmup)
        if pe not in self._mean:
            self._replay(pe)
            yield


def predict_from_graph(g: W.Graph, lv: LeverEdits, batch_size: int | None, cache: Replays | None = None, untraced: bool = False, warmup: bool = False) -> Prediction:
    """Replay the lever's edits on ``g`` and state the result (``cache``: the replays shared
    between the findings of one report).

    The basis of the prediction is the measurement it will be checked against:

    * ``untraced``: before and after are the run without the profiler (its own host time removed,
      analyses/profcost.py), in its steady state (``Replay.steady_step_ns``): a measurement made
      without it (the step tracker's median step);
    * otherwise a profiled after-run (``whyidle compare``); with ``warmup``, recorded with
      torch.profiler's schedule, whose warm-up step records no CPU ops: that step runs at the
      untraced host speed, and when the fix makes the run device-bound, the first profiled step
      starts behind the device work the warm-up left (``Edit.carried_backlog_ns``)."""
    reps = Replays(g) if cache is None else cache
    backlogs: list[int] = []

    def run(e: W.Edit) -> float:
        if untraced:
            return reps.steady(msgspec.structs.replace(e, profiler_removed=True))
        pe = reps.profiled_edit(e, warmup)
        if pe is not e:
            backlogs.append(pe.carried_backlog_ns)
        return reps.mean(pe)

    before, after, low, high = (run(e) for e in lv.edits)
    ends = (low, high)
    assumption = lv.assumption
    if untraced:
        removed = g.profiler.clip(g.host_lo, g.host_hi).total() / max(g.n_steps, 1)
        floors = ", ".join(f"{k.replace('_', ' ')} {v / 1e3:.1f} us" for k, v in g.profiler_floor_ns.items() if v > 0)
        assumption += f"; without the profiler: its own host time removed ({removed / 1e6:.2f} ms per step; per record: {floors or 'none found'})"
    elif backlogs and backlogs[0] > 0:
        assumption += f"; in a profiled after-run the first step starts {backlogs[0] / 1e6:.1f} ms behind the device work of its unprofiled warm-up step"
    return with_batch_size(
        Prediction(
            lever=lv.lever,
            assumption=assumption,
            step_ns_before=before,
            step_ns_after=after,
            step_ns_low=min(after, *ends),
            step_ns_high=max(after, *ends),
            batch_factor=lv.batch_factor,
        ),
        batch_size,
    )


def with_batch_size(p: Prediction, batch_size: int | None) -> Prediction:
    """The prediction with its samples/s for ``batch_size`` samples per step (None: unknown)."""
    sps_b = batch_size * 1e9 / p.step_ns_before if batch_size and p.step_ns_before > 0 else None
    sps_a = batch_size * p.batch_factor * 1e9 / p.step_ns_after if batch_size and p.step_ns_after > 0 else None
    return msgspec.structs.replace(p, samples_per_s_before=sps_b, samples_per_s_after=sps_a)


def _graph(tl: Timeline, cfg: RuleSettings, window: Window, links: Links) -> tuple[W.Graph | None, Window]:
    window = _middle_steps(window, cfg.predictions.whatif_max_steps)
    return W.build_graph(tl, links, window, cfg.attribution.kernel_boundary_max_ns, cfg.predictions.whatif_profiler_gap_quantile, cfg.predictions.whatif_copy_bandwidth_min_bytes), window


def _middle_steps(window: Window, n: int) -> Window:
    """The window cut to ``n`` consecutive steps from its middle (the whole window if shorter)."""
    steps = window.steps
    if len(steps) <= n or n <= 0:
        return window
    i0 = (len(steps) - n) // 2
    sub = steps[i0 : i0 + n]
    return msgspec.structs.replace(window, start_ns=sub[0].start_ns, end_ns=sub[-1].end_ns, steps=sub)


def predict_lever(tl: Timeline, lever: str, cfg: Config | None = None, batch_size: int | None = None, untraced: bool = False, **kw: Any) -> Prediction | None:
    """The prediction for ``lever`` on a trace's timeline, or None when it cannot be replayed
    (no step markers or no linked device work). ``untraced``: see :func:`predict_from_graph`."""
    from whyidle.analyses.window import select_window

    cfg = cfg or Config()
    links = link_launches(tl)
    g, _ = _graph(tl, RuleSettings.of(cfg), select_window(tl, links, cfg.window), links)
    if g is None:
        return None
    if lever == "h2d_copy":
        kw.setdefault("copy_speedup", g.pinned_speedup)
    return predict_from_graph(g, lever_edits(lever, cfg.predictions, **kw), batch_size, untraced=untraced, warmup=cfg.predictions.whatif_profiled_warmup)


class LeverPredictions(msgspec.Struct, frozen=True):
    """Predictions of a window, one per lever (samples/s left out: the batch size scales them),
    and the critical path of its median step (None without steps). What a report's findings take
    their predictions from; a pure function of the timeline and window (:func:`lever_predictions`),
    so it can be computed beside the other analyses."""

    by_lever: dict[str, Prediction]
    critical_path: dict[str, Any] | None


class PredictionGraph(NamedTuple):
    """A window's replay graph (None: no steps or no linked device work), the window cut to the
    steps it replays, the median step's critical path, and the replays made so far (shared by
    every lever's prediction)."""

    graph: W.Graph | None
    window: Window
    critical_path: dict[str, Any] | None
    replays: Replays | None


def prediction_graph(tl: Timeline, window: Window, cfg: RuleSettings, links: Links | None = None) -> PredictionGraph:
    g, window = _graph(tl, cfg, window, link_launches(tl) if links is None else links)
    if g is None:
        return PredictionGraph(None, window, None, None)
    base, replays = W.replay(g), Replays(g)
    replays.add(base)
    return PredictionGraph(g, window, critical_path_summary(g, base, window, tl=tl), replays)


def predictions_on(pg: PredictionGraph, levers: tuple[str, ...], cfg: RuleSettings) -> LeverPredictions:
    """The replays of ``levers`` (names of :data:`LEVERS`) on the graph."""
    g, cache = pg.graph, pg.replays
    if g is None or cache is None:
        return LeverPredictions({}, None)
    by_lever = {name: predict_from_graph(g, lever_edits(name, cfg.predictions, copy_speedup=g.pinned_speedup), None, cache, warmup=cfg.predictions.whatif_profiled_warmup) for name in levers}
    return LeverPredictions(by_lever, pg.critical_path)


def replay_ahead(pg: PredictionGraph, cfg: RuleSettings) -> Iterator[None]:
    """Make the replays of every lever a finding can take, yielding after each, into the graph's
    replays: what a helper process does while the findings are still being made."""
    g, cache = pg.graph, pg.replays
    if g is None or cache is None:
        return
    for name in replay_levers():
        for e in lever_edits(name, cfg.predictions, copy_speedup=g.pinned_speedup).edits:
            yield from cache.profiled_steps(e, cfg.predictions.whatif_profiled_warmup)


def lever_predictions(tl: Timeline, window: Window, levers: tuple[str, ...], cfg: RuleSettings, links: Links | None = None) -> LeverPredictions:
    """The replays of ``levers`` on the window, and the median step's critical path (``links``:
    the timeline's, when already made)."""
    return predictions_on(prediction_graph(tl, window, cfg, links), levers, cfg)


def levers_of(findings: tuple[Finding, ...]) -> tuple[str, ...]:
    """The levers that predict the findings' fixes, once each, in the findings' order."""
    return tuple(dict.fromkeys(name for f in findings if (name := lever_of(f)) is not None))


def attach_predictions(
    tl: Timeline,
    window: Window,
    findings: tuple[Finding, ...],
    batch_size: int | None,
    cfg: RuleSettings,
    basis: LeverPredictions | None = None,
    links: Links | None = None,
    framework: str = "",
) -> tuple[tuple[Finding, ...], dict[str, Any] | None]:
    """Findings with their predictions, and the critical path of the median step (None without
    steps). ``basis``: the window's lever predictions if already computed (for at least the
    findings' levers), else they are replayed here (``links``: the timeline's, when made); ``framework``: the advice context's, which
    names the levers in the job's words."""
    if basis is None:
        basis = lever_predictions(tl, window, levers_of(findings), cfg, links)
    if basis.critical_path is None:
        return findings, None
    out = []
    for f in findings:
        name = lever_of(f)
        if name is None:
            out.append(f)
            continue
        p = with_batch_size(basis.by_lever[name], batch_size)
        label = _VARIANT_LABEL.get((f.cause, f.variant)) or _IDIOM_LABEL.get((name, framework))
        p = msgspec.structs.replace(p, lever=label or p.lever, note=_beyond_note(f, p, name, len(window.steps)))
        out.append(msgspec.structs.replace(f, prediction=p))
    return tuple(out), basis.critical_path


# What else a lever's edit shortens besides its finding's gaps, in words.
_ALSO_SHORTENS = {
    "input_pipeline": "the loader's host time overlaps compute, including loader time outside device-idle gaps (while earlier work still ran)",
    "loader_speedup": "the loader's host time overlaps compute, including loader time outside device-idle gaps (while earlier work still ran)",
    "host_overhead": "it scales all host time in the step, which also closes gaps held by other causes",
    "h2d_copy": "copies from pinned memory also run faster, which shortens busy time",
    "host_sync": "the host ops that used each fetched value go too, which shortens host time outside these gaps",
    "fp32_math": "faster GEMM/convolution kernels shorten busy time",
}


def explained_per_step_ns(f: Finding, n_steps: int) -> float:
    """The time a finding says it explains, per step: its idle time, plus the busy time it concerns
    (an exposed copy, FP32 math)."""
    return (f.idle_ns + max(f.compute_wait_ns, f.affected_busy_ns)) / max(n_steps, 1)


def beyond_explained(recovered_ns: float, explained_ns: float) -> bool:
    """A prediction recovers more per step than its finding explains (2 % and 10 us of slack: the
    replay's rounding and its clock): then a note must say why."""
    return recovered_ns > explained_ns * 1.02 + 10_000


def _beyond_note(f: Finding, p: Prediction, lever: str, n_steps: int) -> str:
    """Why the prediction recovers more than the finding explains (2 % and 10 us of slack), or ''."""
    if p.batch_factor != 1:
        return ""
    recovered = p.step_ns_before - p.step_ns_after
    explained = explained_per_step_ns(f, n_steps)
    if not beyond_explained(recovered, explained):
        return ""
    why = _ALSO_SHORTENS.get(lever, "the replay's critical path shortens by more than these gaps")
    return (
        f"predicts {recovered / 1e6:.2f} ms per step recovered against {explained / 1e6:.2f} ms this finding explains: {why}"
    )


def predict_from_steps(
    durations_ns: list[int], waits_ns: list[int], lever: str, cfg: PredictionSettings, batch_size: int | None = None, workers: int | None = None
) -> Prediction | None:
    """The replay for a step tracker's two-part steps (the wait it measured, then the rest), on
    the median step.

    ``input_pipeline`` (the loader ran in the training process, so its wait is its production
    cost): a step becomes ``max(rest + handoff, wait / workers)``. ``h2d_copy`` (``waits_ns`` =
    the time in ``tracker.copy()`` blocks): a step becomes ``rest`` plus one launch call, taken
    as nothing. Other levers need a trace: None.
    """
    if not durations_ns or lever not in ("input_pipeline", "h2d_copy"):
        return None
    # Medians over the steps: a tracked run on a busy machine has outlier steps.
    d = np.asarray(durations_ns, dtype=np.float64)
    w = np.asarray(waits_ns, dtype=np.float64)
    before = median(d)
    if lever == "input_pipeline":
        lv = lever_edits(lever, cfg, workers=workers)
        n, h = lv.point.loader_workers, lv.point.loader_handoff_ns
        after = median(np.maximum(d - w + h, w / n))
        low = median(np.maximum(d - w, w / n))
    else:
        lv = lever_edits(lever, cfg)
        after = low = median(d - w)
    return Prediction(
        lever=lv.lever,
        assumption=lv.assumption + " (from the step tracker's per-step wait: no dependency graph)",
        step_ns_before=before,
        step_ns_after=after,
        step_ns_low=min(low, after),
        step_ns_high=after,
        samples_per_s_before=batch_size * 1e9 / before if batch_size and before > 0 else None,
        samples_per_s_after=batch_size * 1e9 / after if batch_size and after > 0 else None,
    )
