"""Every threshold whyidle uses, in one place, with its unit in its name and its origin beside it.

Grouped by the layer that reads them, each group a small frozen value object: :class:`ReadSettings`
(sources), :class:`WindowSettings` (which steps), :class:`AttributionSettings` (analyses),
:class:`FindingSettings` (rules, CI gates), :class:`PredictionSettings` (what-if),
:class:`RenderSettings` (what the report carries), :class:`ServingSettings` (batching). A
:class:`Config` holds one of each (``cfg.read``, ``cfg.attribution``, ...); a function takes the one
it reads where that is all it reads. Nothing reads thresholds from the environment; the command
line's ``--config FILE`` reads a TOML file of the same sections and flat names (commands/_configfile.py).
A field keeps its flat name wherever it is set (names are unique across sections):
``Config(max_gzip_ratio=50)``, ``cfg.with_overrides(skip_first_steps=2)``, ``diagnose(path,
skip_first_steps=2)``; a name that is no field is an error naming the valid ones (fieldcheck.py).

All are frozen ``msgspec.Struct``s, not dataclasses: creating the former 73-field frozen dataclass
cost 2.4 ms of every start of the command line, a Struct 0.03 ms. A default is read from an
instance (``ReadSettings().stream_min_bytes``): on the class, a field's name is its descriptor.

# long: every section with each default's reason beside it; split, the reasons would scatter
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import msgspec

from whyidle.fieldcheck import Checked, Limit, Sectioned, check_fields

__all__ = [
    "AttributionSettings",
    "Config",
    "FindingSettings",
    "PredictionSettings",
    "ReadSettings",
    "RenderSettings",
    "ServingSettings",
    "SweepConfig",
    "WindowSettings",
]


# The range of each numeric field (of every number of a tuple field): (low, high, low excluded).
# They say what the setting means, not what is sensible: a share lies in [0, 1], a percentage in
# [0, 100], a duration, size or count is not negative; a speed-up, a ratio cap or a count that a
# loop divides by or runs to is above 0 or at least 1. Fields not listed: any finite value.
_AT_LEAST_0: Limit = (0, None, False)
_AT_LEAST_1: Limit = (1, None, False)
_ABOVE_0: Limit = (0, None, True)
_SHARE: Limit = (0, 1, False)
_SHARE_ABOVE_0: Limit = (0, 1, True)
_PCT: Limit = (0, 100, False)
_LIMITS: dict[str, Limit] = {
    **dict.fromkeys(
        ("stream_min_bytes", "gzip_ratio_floor_bytes", "skip_first_steps", "steps", "kernel_boundary_max_ns", "sync_wake_tolerance_ns",
         "python_overhead_max_ns", "short_kernel_ns", "fusion_max_kernel_ns", "gemm_tiny_m", "cold_call_min_ns", "jit_min_gaps",
         "min_profiled_steps", "clock_skew_min_ns", "straggler_min_lateness_ns", "uneven_input_min_ratio", "counter_rhythm_min_pauses",
         "serving_wait_min_ns", "evidence_examples", "optimizer_step_per_parameter_min_launches", "sync_calls_min_per_s",
         "whatif_loader_handoff_ns", "whatif_copy_bandwidth_min_bytes", "report_top_gaps", "context_gaps", "work_top_ops",
         "batching_bisection_steps", "latency_budget_ns", "latency_outlier_iqrs", "counter_sm_split_min_range_pct", "max_events_per_gzip_byte",
         "batching_max_sigma"),
        _AT_LEAST_0,
    ),
    **dict.fromkeys(
        ("rocprof_max_bytes", "max_event_bytes", "max_gzip_ratio", "batch_size", "fusion_min_repeats", "first_call_min_ratio",
         "counter_grid_points_per_sample", "whatif_loader_workers", "whatif_loader_speedup", "whatif_tensor_core_factor",
         "whatif_pinned_copy_speedup", "whatif_max_steps", "batching_max_batch_size", "latency_max_windows",
         "latency_outlier_min_factor", "batching_requests"),
        _AT_LEAST_1,
    ),
    **dict.fromkeys(("counters_interval_ms", "traffic_peak_window_ns"), _ABOVE_0),
    **dict.fromkeys(("batching_min_rate_share", "batching_tail_share"), _SHARE_ABOVE_0),
    **dict.fromkeys(
        ("roofline_near_fraction", "cold_start_max_share_of_idle", "counter_rhythm_min_autocorr", "min_finding_share_of_window",
         "unattributed_note_min_share_of_idle", "fp32_math_min_share_of_kernel_time", "small_grid_min_unused_share", "min_busy_fraction",
         "whatif_host_overhead_factor", "whatif_host_overhead_factor_range", "whatif_profiler_gap_quantile",
         "batching_delay_fractions_of_slack", "batching_capacity_tie_share", "batching_share_min_idle_share"),
        _SHARE,
    ),
    **dict.fromkeys(("small_grid_low_occupancy_pct", "counter_busy_min_pct", "counter_sm_active_low_pct", "counter_low_util_mean_pct"), _PCT),
    "counters_utc_offset_min": (-1440, 1440, False),  # a day either side of UTC, as --counters-utc-offset
}


class ReadSettings(msgspec.Struct, frozen=True, metaclass=Checked):
    """How inputs are read (``sources/``): size limits, hostile-input caps, step ranges, counter-log clocks."""

    # --- large traces (sources/kineto_stream.py) ---------------------------------------------
    # Kineto traces larger than this (uncompressed bytes, estimated for gzip) are read in chunks
    # instead of whole: the in-memory decode holds the raw text plus its decoded events, 3.6x the
    # file size (1.86 GB for 0.51 GB, 7.2 GB for 2.0 GB, benchmarks/bench_scale.py), so 256 MiB
    # keeps it under 1 GB; the chunked reader held 0.65 GB for the 2.0 GB trace.
    stream_min_bytes: int = 256 * 1024 * 1024
    # rocprofv3 JSON is read in memory (sources/rocprof.py): the text, one record kind decoded at
    # a time (typed structs of the fields read) and the columns. Measured peaks of a whole
    # diagnosis: the shared MI350X capture (37 MB of text, 43,915 dispatches) 114 MB resident; it
    # tiled 8x (190 MB, 351,320 dispatches) 494 MB, 2.6x the text. 1 GiB of text keeps the peak
    # under about 3 GB; larger captures are refused with a sentence naming rocprofv3 --collection-period.
    rocprof_max_bytes: int = 1024 * 1024 * 1024

    # --- hostile inputs (sources/_io.py, sources/kineto_stream.py; docs/inputs.md) -------------
    # A gzip input may decompress to at most this many times its own size (past the floor
    # below). Real traces inflate 17-30x (30x: kineto/resnet50_num_workers_0, the highest of the
    # shared and H200 traces); 100x leaves a 3x margin, and stops a gzip bomb (deflate can
    # reach 1032x: a 10 MB file holding 10 GB) after 1 GB for 10 MB instead of 10 GB.
    max_gzip_ratio: float = 100.0
    # Below this many decompressed bytes the ratio is not checked: small, very repetitive test
    # and synthetic files compress further than real traces, and 64 MiB is cheap to hold.
    gzip_ratio_floor_bytes: int = 64 * 1024 * 1024
    # The out-of-core reader holds one event (and the JSON before and after the event list)
    # whole; a single event or head larger than this is not a profiler trace (real events are
    # under 100 KB even with long call stacks), so it is refused instead of buffered.
    max_event_bytes: int = 64 * 1024 * 1024
    # Events per compressed byte that the out-of-core reader accepts from a gzip trace (plus
    # 100,000). Memory grows with the events kept, so a bomb of tiny events inside the ratio cap
    # would still cost gigabytes: real traces hold 0.053 kept events per compressed byte (the
    # shared HTA and Kineto traces), whyidle's synthetic lab trace 0.097; 0.5 leaves 5x margin.
    max_events_per_gzip_byte: float = 0.5

    # --- Nsight Systems ------------------------------------------------------------------------
    # Regular expression naming step ranges among NVTX ranges (--step-range). None: the nsys
    # source's default, which recognises ProfilerStep#N and common trainer names (train_step,
    # "step 12", "iteration 7"; see whyidle.sources.nsys.DEFAULT_STEP_PATTERN).
    step_range: str | None = None

    # --- GPU counter logs --------------------------------------------------------------------
    # Time zone of counter logs that write wall-clock times without one (nvidia-smi), in minutes
    # east of UTC. None: the zone of the machine running whyidle.
    counters_utc_offset_min: int | None = None
    # Sampling interval of logs without timestamps (dcgmi dmon), in ms. None: inferred from the
    # energy counter and power when logged, else the tool's 1 s default.
    counters_interval_ms: float | None = None

    def __post_init__(self) -> None:
        check_fields(self, _LIMITS)


class WindowSettings(msgspec.Struct, frozen=True, metaclass=Checked):
    """Which part of the trace is diagnosed (``analyses/window.py``) and its batch size."""

    # --- window ------------------------------------------------------------------------------
    # Steps to drop from the start of the window (cold start). 0 keeps every captured step:
    # torch.profiler's schedule already has a warm-up phase, and dropping steps silently would
    # change the TensorBoard-comparable window.
    skip_first_steps: int = 0
    # Explicit selection of ProfilerStep numbers (None: all that remain after skip_first_steps).
    steps: tuple[int, ...] | None = None
    # Samples per step when the trace does not say (None: derive from the trace if possible).
    batch_size: int | None = None

    def __post_init__(self) -> None:
        check_fields(self, _LIMITS)


class AttributionSettings(msgspec.Struct, frozen=True, metaclass=Checked):
    """How the analyses (``analyses/``, ``ranks/analysis.py``) measure and attribute time."""

    # --- gaps ----------------------------------------------------------------------------------
    # Idle intervals shorter than this between work that was already queued are the device's
    # own per-kernel start-up cost (about 1-4 us between back-to-back kernels on NVIDIA GPUs,
    # measured in the shared V100/A100 traces). They are counted as idle and attributed to
    # kernel boundaries (underfilled work), never to the host.
    kernel_boundary_max_ns: int = 5_000
    # A host sync is taken to have drained the device queue when the launching thread was inside
    # the sync call this close to the moment the device went idle. Host wake-up after a device
    # completion is typically 5-20 us; 2021-schema traces have 1 us resolution.
    sync_wake_tolerance_ns: int = 20_000
    # Host time on the launching thread with no traced op open. Shorter stretches between two ops
    # are the Python interpreter between framework calls (typically 5-50 us per op); longer ones
    # are untraced work (I/O, logging, another library, GIL contention) that the trace cannot
    # name, so they stay unattributed rather than being forced onto a cause.
    python_overhead_max_ns: int = 1_000_000

    # --- kernels -----------------------------------------------------------------------------
    # A kernel shorter than this is "short": it cannot amortise its own launch cost (a
    # cudaLaunchKernel takes 5-10 us of host time; the TensorBoard plugin and HTA both use
    # ~10 us as the small-kernel boundary).
    short_kernel_ns: int = 10_000
    # A kernel whose grid fills the SMs but whose Kineto est. achieved occupancy is below this (and
    # above 0, which means "not computed") holds few warps per SM: under 10% an SM runs fewer than
    # 7 of its 64 warp slots, one 128-thread block per SM reads 6.25%; library GEMMs designed for
    # one CTA of 256 threads per SM read 12.5%, above it.
    small_grid_low_occupancy_pct: float = 10.0

    # --- work model and roofline (analyses/work.py) ------------------------------------------
    # An op reaching at least this fraction of its roofline bound (min(peak, intensity x bandwidth))
    # counts as near the roofline. Half the bound is the line NVIDIA's Nsight Compute roofline
    # guidance and TraceLens use between "near" and "far"; tuned cuBLAS GEMMs at large shapes reach
    # 60-80 % of peak, so a kernel under half its bound has headroom a change of shape or dtype can win.
    roofline_near_fraction: float = 0.5

    # Busy-time findings (findings/work_rules.py). A fusion chain's kernels are each shorter than
    # this: an elementwise/normalisation kernel over a tensor that takes longer already streams
    # at its bandwidth, and fusing it saves the re-read traffic, which the estimate counts anyway;
    # 100 us is 10x the short-kernel line (HTA's small-kernel boundary) and covers a 1 GB/step
    # activation tensor at 3 TB/s split over a layer's ops.
    fusion_max_kernel_ns: int = 100_000
    # A sequence of ops is a fusion candidate when its chain occurs at least this often in the
    # window (a layer's chain repeats per layer and per step; once is not a pattern).
    fusion_min_repeats: int = 2
    # A GEMM with M (its rows: tokens x batch) at or under this is "tiny": tensor-core tiles are
    # 64-128 rows (CUTLASS, cuBLAS), so 16 rows use an eighth of a tile or less; decode batches
    # of a few sequences sit here.
    gemm_tiny_m: int = 16

    # --- trace quality -----------------------------------------------------------------------
    # A single runtime call longer than this among first-call costs (context creation, module
    # loading, first kernel launches) marks a cold start. Warm launches take 5-50 us.
    cold_call_min_ns: int = 1_000_000
    # The first call of an op counts as a first-use cost (lazy module loading, library heuristics,
    # allocator growth) when it took cold_call_min_ns or more and this many times the median of the
    # op's later calls. Warm calls of one op vary by 2-3x with their inputs; first-use costs seen
    # in the H200 cold-start trace (tests/data/h200/cold_start_no_warmup) were 100-10,000x.
    first_call_min_ratio: float = 10.0
    # Cold-start calls covering more than this share of device idle make the capture a cold
    # start: the report says so, and the findings are measured on its warm remainder.
    cold_start_max_share_of_idle: float = 0.5
    # JIT compilation and module loading (nvrtc, cuModuleLoadData, hipModuleLoad, Triton's and
    # CuPy's compilers) in this many gaps of one thread, separated by device work: the job compiles
    # on first use as it runs (underfilled/jit_compile), not once at start-up (a cold start). Two
    # is the least that "repeated" means; one compilation's calls (create, compile, load) fall in
    # one gap.
    jit_min_gaps: int = 2
    # Fewer profiled steps than this get a note asking for more: one step's figures include its
    # one-off costs, and torch.profiler's documented schedule records active=3 steps.
    min_profiled_steps: int = 3
    # Device work that starts more than this before the host call that launched it is clock skew
    # (analyses/trace_checks.py). 2021-schema Kineto traces round to 1 us; on every real trace in
    # the tests a kernel starts 2-50 us after its launch call begins, never before.
    clock_skew_min_ns: int = 1_000

    # --- multi-rank (ranks/analysis.py) -------------------------------------------------------
    # A rank counts as having arrived last at a collective when the earliest rank waited at least
    # this long for it. 100 us is above NCCL's own start-up jitter between ranks (tens of us on
    # one NVLink node) and well below a step's input or sync delays (milliseconds).
    straggler_min_lateness_ns: int = 100_000
    # A straggler's input is "larger" when its leading dimension exceeds the other ranks' median
    # by this fraction (10%: variable-length batches that differ less cost less than the
    # collective jitter above).
    uneven_input_min_ratio: float = 0.10

    # --- GPU counter logs --------------------------------------------------------------------
    # GPU-Util at or above this is a burst, below it a pause. A starving or synchronising job swings
    # between near 0 and near 100 between samples (the playbook's burst-then-pause picture), so the
    # midpoint separates them without tuning.
    counter_busy_min_pct: float = 50.0
    # Counter logs are resampled onto a grid of one point per sampling interval over the log's
    # span. A log whose clock jumps (one sample dated years later) would size that grid by the
    # jump; the grid is capped at this many points per sample (a regular log has about 1, a log
    # with pauses a few) plus 65536, and coarsened past it.
    counter_grid_points_per_sample: int = 64
    # A rhythm is regular when the autocorrelation of the busy/pause signal reaches this at its
    # dominant period (0: noise, 1: perfectly periodic). 0.3 keeps jittered step loops (step time
    # varying by +-20%) and rejects random idle stretches, measured on synthetic logs in the tests.
    counter_rhythm_min_autocorr: float = 0.3
    # ... and when the log shows at least this many pauses: a period is a repetition, and two
    # pauses are one interval between them, which any two idle stretches make.
    counter_rhythm_min_pauses: int = 3
    # Logs with SM activity but no GPU-Util split busy from paused at the midpoint of their own
    # 5th-95th percentile range, as long as that range spans at least this many points; a flatter
    # signal has no bursts to split, and counter_busy_min_pct applies.
    counter_sm_split_min_range_pct: float = 5.0
    # Underfilled: GPU-Util busy (>= counter_busy_min_pct) while DCGM SM activity is below this.
    # NVIDIA's DCGM guide calls SM activity of 0.8 necessary for effective use; below 0.5 at
    # least half the SMs sit idle while "GPU-Util" reads busy.
    counter_sm_active_low_pct: float = 50.0

    # --- inference batching (serving/batching.py, serving/requests.py) ------------------------------
    # A serving loop blocked this long for requests before or inside a batch range had caught up
    # with its traffic (analyses/serving_loop.py): one draining a backlog goes from batch to batch
    # in the loop's own overhead (0.11-0.17 ms between serve_batch ranges in the H200 serving
    # trace), while one waiting for the next request blocks for a share of the gap between
    # arrivals (1.2-8 ms there).
    serving_wait_min_ns: int = 1_000_000

    def __post_init__(self) -> None:
        check_fields(self, _LIMITS)


class FindingSettings(msgspec.Struct, frozen=True, metaclass=Checked):
    """When a rule reports a finding, how much evidence it carries, and the CI gates (``findings/``)."""

    # --- findings ------------------------------------------------------------------------------
    # A problem finding must explain at least this share of the window. 5% follows the
    # TensorBoard plugin's input-pipeline advice, which fires when DataLoader time exceeds 5% of
    # the step; below it a fix is not worth the user's time.
    min_finding_share_of_window: float = 0.05
    # Unattributed idle above this share of device idle gets a quality note naming the capture
    # option that would let whyidle attribute it (issue 17's bar for the shared traces: 10%).
    unattributed_note_min_share_of_idle: float = 0.10
    # Number of example time ranges and gaps listed in each finding's evidence.
    evidence_examples: int = 5

    # --- kernels -----------------------------------------------------------------------------
    # The FP32-math finding fires when FP32 GEMM/convolution kernels take at least this share of
    # kernel time on a device with tensor cores (compute capability >= 7.0).
    fp32_math_min_share_of_kernel_time: float = 0.20
    # The host-overhead finding names a per-parameter optimizer loop when one optimizer.step()
    # launches at least this many kernels (a fused or foreach step launches a handful per
    # parameter group; ResNet-50's 161 parameters give 161+ launches per step in a plain loop).
    optimizer_step_per_parameter_min_launches: int = 50
    # The small-grid finding (analyses/kernel_fill.py) fires when the SM time left idle while
    # kernels ran (grids with fewer blocks than the device has SMs) is at least this share of
    # kernel-busy time, or when kernels with a low est. achieved occupancy take this share.
    # Measured on the real traces: healthy ones leave 1-10% (ResNet50 on V100 1.5%, the H200 lab
    # without a flaw 0.9%, NCCL job 5.3%, B200 LLM prefill 9.8%); the H200 lab at batch 4 leaves
    # 33%, the A100 MPI saxpy (2 blocks on 108 SMs) 98%, the lab's launch-bound loop 97%.
    small_grid_min_unused_share: float = 0.20

    # --- Nsight Systems ------------------------------------------------------------------------
    # The synchronising-call finding fires when cudaDeviceSynchronize/cudaStreamSynchronize calls
    # hold at least min_finding_share_of_window of the window AND happen at least this often per
    # second of window: one sync per step is the usual loss.item(); tens per second means a sync
    # in the inner loop (the playbook's "frequent synchronisation" pattern).
    sync_calls_min_per_s: float = 10.0

    # --- GPU counter logs --------------------------------------------------------------------
    # The low-utilisation finding fires when the time-weighted mean GPU-Util is below this without
    # a regular rhythm (the GPU is mostly idle, not starving in steps).
    counter_low_util_mean_pct: float = 50.0

    # --- CI gates (CLI) ----------------------------------------------------------------------
    fail_on_groups: tuple[str, ...] = ()
    min_busy_fraction: float | None = None

    def __post_init__(self) -> None:
        check_fields(self, _LIMITS)


class PredictionSettings(msgspec.Struct, frozen=True, metaclass=Checked):
    """The what-if predictions' stated assumptions and replay limits (``findings/predict.py``)."""

    # --- what-if predictions (analyses/whatif.py, findings/predict.py) ------------------------
    # Workers assumed for the input-pipeline fix: the lower end of the lever's "start with 4-8".
    whatif_loader_workers: int = 4
    # Host time of a DataLoader __next__ that takes a batch a worker has ready: measured, the
    # median __next__ of the well-fed 8-worker loop of the H200 lab (tests/data/h200/lab_none_cuda,
    # 46-121 us, median 110 us); that trace is not one of the before/after pairs checked.
    whatif_loader_handoff_ns: int = 110_000
    # Batches from existing DataLoader workers made this many times faster (point, optimistic end,
    # pessimistic end): doubling the workers where cores are free is the usual first move; the range
    # spans half again (cores already busy) to four times (cheaper samples). A stated assumption.
    whatif_loader_speedup: tuple[float, float, float] = (2.0, 4.0, 1.5)
    # Host-overhead fix (torch.compile with CUDA graphs, fused ops): host time of the step scaled by
    # this. A stated assumption, not a measurement: CUDA graphs replay the captured launches in one
    # call, but the Python outside the graph, the optimizer and the data handoff stay. The range
    # runs from 0 (all host time gone: the device-bound step) to 0.5 (fusion alone halving launches).
    whatif_host_overhead_factor: float = 0.25
    whatif_host_overhead_factor_range: tuple[float, float] = (0.0, 0.5)
    # FP32 GEMM/convolution -> tensor cores: kernel time divided by this (point, low, high). The high
    # end is the datasheet ratio of dense tensor-core to FP32 peak (V100 FP16 125/15.7 = 8.0, A100
    # TF32 156/19.5 = 8.0, H100 SXM TF32 495/67 = 7.4); the point and low ends are assumptions:
    # real GEMMs rarely reach peak, and memory-bound convolutions gain less.
    whatif_tensor_core_factor: tuple[float, float, float] = (3.0, 1.5, 8.0)
    # Pageable -> pinned host-to-device copy: device copy time divided by this (point, low, high).
    # The high end is measured: 50 MB copies on the H200 of 2026-11-30 ran
    # at 6.4-6.7 GB/s pageable and 54.9-55.4 GB/s pinned, 8.4x (tests/data/h200/run2/lab_h2d_cuda*).
    # The point and the low end are assumptions for slower links (PCIe Gen4 pinned ~25 GB/s against
    # a pageable 6-12 GB/s): pinned is rarely under 2x pageable for batches of megabytes.
    whatif_pinned_copy_speedup: tuple[float, float, float] = (4.0, 2.0, 8.4)
    # When the trace itself has host-to-device copies of both kinds, the point is their measured
    # bandwidth ratio (pinned over pageable; the range above stays), from copies of at least this
    # many bytes: smaller ones are dominated by their fixed cost (the 4-byte copies of the lab
    # traces take 0.8 us, 5 MB/s), so their bytes over time say nothing of the link.
    whatif_copy_bandwidth_min_bytes: int = 1 << 20
    # The replay is a Python loop over the window's events (about 15 ms per replay of the 44,665
    # event ResNet-50 trace, and a report replays up to ten edits): on longer windows it replays
    # this many consecutive steps from the middle of the window, enough for a mean step.
    whatif_max_steps: int = 16
    # The profiler's own host cost (analyses/profcost.py): per record kind (CPU op, runtime call,
    # Python frame, user range), this quantile of the gaps before records of that kind on one
    # thread; that much of each gap (never more) is removed when a prediction is for the untraced
    # run (the flaw lab, measured by the step tracker). Measured: on the H200 lab traces (torch
    # 2.11, record_shapes and with_stack) the 10th percentile gap is 0.7-1.9 us before a CPU op and
    # 0.2-0.4 us before a Python frame, while half the gaps are 2-4x that (code ran between); the
    # 10th rather than the minimum because older traces have 1 us timestamps (0 us gaps). On the
    # six flawed H200 traces with an untraced median beside them, removing it takes a replayed step
    # 14-71 % of the way to the untraced one and never past it: a lower bound (docs/metrics.md).
    whatif_profiler_gap_quantile: float = 0.1
    # A prediction checked against a profiled after-run (whyidle compare, the findings' predictions)
    # assumes torch.profiler's schedule with a warm-up step, which records no CPU ops (torch's
    # _prepare_profiler only starts the device tracer): the warm-up runs at the untraced host speed,
    # and when the fix makes the run device-bound its first profiled step starts behind the device
    # work the warm-up left. Seen in the ResNet-50 num_workers=4 trace: its first step's pageable
    # copy waited 36.5 ms with no device work recorded, its other copies 0.1-0.3 ms.
    whatif_profiled_warmup: bool = True

    def __post_init__(self) -> None:
        check_fields(self, _LIMITS)


class RenderSettings(msgspec.Struct, frozen=True, metaclass=Checked):
    """How much of the diagnosis the report carries and renders: gaps with context, op shapes."""

    # --- findings ------------------------------------------------------------------------------
    # Largest gaps carried with their full CPU context into the report.
    report_top_gaps: int = 50
    # Largest gaps whose CPU context (op before, Python line, open runtime call) the diagnosis's
    # gap columns carry, for the Perfetto track's arguments. 2,000 keeps the lookup near 30 ms
    # on traces with 10^5 gaps (measured: about 15 us a gap on the ResNet-50 trace).
    context_gaps: int = 2000

    # --- work model and roofline (analyses/work.py) ------------------------------------------
    # The work report lists this many op shapes (the longest kernel time first); every op counts
    # in the totals.
    work_top_ops: int = 25

    def __post_init__(self) -> None:
        check_fields(self, _LIMITS)


class ServingSettings(msgspec.Struct, frozen=True, metaclass=Checked):
    """The inference batching simulator and latency timing (``serving/``)."""

    # --- inference batching (serving/batching.py, serving/requests.py) ------------------------------
    # Candidate queue delays, as fractions of what the SLO leaves after a batch of one (longer
    # would break the SLO by itself at low traffic). Halvings cover 3% to 50% of the slack: the
    # capacity changes smoothly with the delay, so finer steps moved it by under 2% on the H200
    # curve (tests/data/h200/measured.json).
    batching_delay_fractions_of_slack: tuple[float, ...] = (1 / 32, 1 / 16, 1 / 8, 1 / 4, 1 / 2)
    # Capacity search: doubling from batching_min_rate_share of the service bound to the first
    # rate that misses the SLO, then bisection steps on the rate in log space; 9 steps narrow a
    # doubling to 0.14%.
    batching_bisection_steps: int = 9
    # The largest batch size a latency curve may list: the simulator tables the service time of
    # every size up to the largest (a curve with batch size 1e8 took 22 s, then failed). Triton's
    # max_batch_size and vLLM's max_num_seqs are in the hundreds to low thousands; 65,536 is far
    # above any served model's batch and tables in milliseconds.
    batching_max_batch_size: int = 65_536
    batching_min_rate_share: float = 1e-3
    # A rate meets the objective only if the last this-share of the simulated requests meets it
    # too: an overloaded queue grows through the run and shows at its end first, while the whole
    # run's percentile is diluted by the calm start (a quarter: 5,000 of 20,000 requests still
    # give a p99 from 50 samples above it).
    batching_tail_share: float = 0.25
    # Candidates within this share of the best capacity count as equally good; among them the
    # one with the lowest percentile at the observed rate is recommended (capacity from 12
    # bisection steps is known to 0.2%; 2% leaves room for the noise of a finite run).
    batching_capacity_tie_share: float = 0.02
    # Largest log-normal spread drawn from a latency curve's p90/median (sigma = ln(p90/median) /
    # 1.2816). 0.75 allows a p90 2.6x the median; the H200 curve's largest is 0.42 (batch 16: p90
    # 1.7x the median), while a CPU curve timed on this shared 2-core machine showed p90 140x
    # the median (preemption, not the model), whose log-normal mean would be 1,600x the median.
    batching_max_sigma: float = 0.75
    # Sharing the device (MPS, MIG, a smaller GPU) is advised only when one instance at the observed
    # rate leaves at least this share of the time idle: the smallest MIG slice is 1/7 of an
    # A100/H100/H200 (1g profiles, serving/instances.py), so less idle time than that cannot hold
    # even one slice's worth of other work, while a co-tenant's kernels still add to this
    # service's tail latency.
    batching_share_min_idle_share: float = 1 / 7
    # Timing a latency curve (serving/passes.py, `whyidle batching --measure`): passes are timed in
    # windows until the sweep's steady rule holds (SweepConfig: the last 3 windows' medians within
    # 10%), at most this many windows per batch size (perf_analyzer's --max-trials default, 10)
    # and, once three windows are in, no longer than this per batch size (perf_analyzer's default
    # measurement interval, 5 s).
    latency_max_windows: int = 10
    latency_budget_ns: int = 5_000_000_000
    # A pass is an outlier, dropped from the curve and counted in its notes, when it lies beyond
    # Tukey's far-out fence (Q3 + 3 x IQR) and above this many times its batch size's median: the
    # H200 curve's p90 reaches 1.7x its median (batch 16, tests/data/h200/measured.json), the
    # device's own spread; the CPU passes of issue 25 at 60x the median (2.99 ms against 0.05 ms)
    # were the scheduler's, on a shared 2-core host.
    latency_outlier_iqrs: float = 3.0
    latency_outlier_min_factor: float = 2.0
    # Requests simulated per run (synthetic traffic; a replayed log is tiled up to this).
    batching_requests: int = 20_000
    # Window for a request log's peak arrival rate: 1 s, the granularity at which serving
    # dashboards (Prometheus rate(), Triton's metrics) report request rates.
    traffic_peak_window_ns: int = 1_000_000_000

    def __post_init__(self) -> None:
        check_fields(self, _LIMITS)


class Config(msgspec.Struct, frozen=True, metaclass=Sectioned):
    """Every setting, one value object per layer. Each field of a section is also a keyword of
    its own: ``Config(skip_first_steps=2)`` is ``Config(window=WindowSettings(skip_first_steps=2))``."""

    read: ReadSettings = ReadSettings()
    window: WindowSettings = WindowSettings()
    attribution: AttributionSettings = AttributionSettings()
    findings: FindingSettings = FindingSettings()
    predictions: PredictionSettings = PredictionSettings()
    render: RenderSettings = RenderSettings()
    serving: ServingSettings = ServingSettings()

    if TYPE_CHECKING:  # the flat keywords (Sectioned routes them to their section)

        def __init__(
            self,
            *,
            read: ReadSettings = ...,
            window: WindowSettings = ...,
            attribution: AttributionSettings = ...,
            findings: FindingSettings = ...,
            predictions: PredictionSettings = ...,
            render: RenderSettings = ...,
            serving: ServingSettings = ...,
            **fields: object,
        ) -> None: ...

    def with_overrides(self, **overrides: object) -> Config:
        """A copy with the named fields replaced: ``cfg.with_overrides(skip_first_steps=2)``.

        A name that is not a field is a UsageError that suggests the closest fields and lists them
        all (a misspelt option must not pass silently, nor fail as a bare TypeError).
        """
        return Config(**{**msgspec.structs.asdict(self), **overrides})

    def __post_init__(self) -> None:
        check_fields(self)


class SweepConfig(msgspec.Struct, frozen=True):
    """The rules of ``whyidle sweep`` (sweep/search.py, sweep/measure.py, sweep/guard.py)."""

    # --- steady state (one trial) --------------------------------------------------------------
    # Measured steps are grouped in windows of at least this many steps and this much time;
    # samples/s is computed per window. Scheduler noise on a busy 2-core host is milliseconds
    # per step (measured: 5-step windows of 0.3 ms steps spread +-90% while 8 agents shared the
    # machine), so a window lasts at least 200 ms.
    window_steps: int = 5
    window_min_ns: int = 200_000_000
    # A trial is steady when the last `steady_windows` windows' samples/s lie within this share of
    # their median (max - min <= tolerance x median). Triton's perf_analyzer declares a measurement
    # stable when its last 3 windows agree within --stability-percentage, default 10%.
    steady_windows: int = 3
    steady_tolerance: float = 0.10

    # --- plateau (the batch search) ------------------------------------------------------------
    # Doubling stops when the best samples/s of the last `plateau_tries` trials gains less than
    # `plateau_gain` over the trial before them. Triton's Model Analyzer uses a 5% minimum gain
    # (THROUGHPUT_MINIMUM_GAIN) over its last 4 tries (THROUGHPUT_MINIMUM_CONSECUTIVE_*_TRIES);
    # a training trial costs seconds, not a perf_analyzer window, so two tries after the reference.
    plateau_gain: float = 0.05
    plateau_tries: int = 2
    # At the memory edge (a batch ran out of memory while the previous one still gained), the
    # search bisects between the two this many times (each bisection halves the uncertainty).
    bisect_steps: int = 2
    # Bisected batch sizes are rounded down to a multiple of this (tensor-core friendly shapes;
    # NVIDIA's performance guide asks for multiples of 8 for fp16/bf16 GEMMs).
    batch_multiple: int = 8

    # --- levers --------------------------------------------------------------------------------
    # A lever is kept only when it beats the configuration it would replace by at least this
    # share of samples/s (the same 5% as the plateau: smaller gains are within the run-to-run
    # spread of a short trial on a shared machine).
    keep_gain: float = 0.05

    # --- quality guard -------------------------------------------------------------------------
    # Losses compared with the fp32 baseline: the first this many steps (same seed, same batches).
    guard_steps: int = 20
    # A lever that changes numerics fails the guard when any of those losses deviates from the
    # baseline by more than this share of the baseline loss. bf16 autocast on the lab MLP (CPU,
    # batch 512) deviated 0.07% over 18 steps (measured with examples/sweep_lab.py); torch.testing's
    # own bf16 tolerance is rtol 1.6e-2 per op, and a loss curve compounds steps, so 5%: a lever
    # beyond it trains differently, not just with rounding noise.
    guard_max_rel_dev: float = 0.05
