"""What the launching thread did outside traced ops: Python frames, user ranges and OS calls.

Ops and runtime calls say what the framework did; the rest of a thread's time is described by
*context* records: ``python_function`` frames (``with_stack=True``), ``user_annotation`` / NVTX
ranges, and (Nsight Systems) OS-runtime and MPI calls. At each instant the **innermost** open
record names the work::

    python  [ main ........................................................ ]
                [ decode_and_normalise ....... ]   [ forward ........ ]
                    [ numpy _var ]                      (aten ops)
    class    user  user     data       user          dispatch ...

Each record gets a class from its name:

* ``wait``: blocked until something else happens: a lock or condition (``queue.get``), a socket
  or pipe (``recv``, ``poll``, ``select``, ``epoll_wait``), a sleep;
* ``ranks``: an MPI call (``MPI_Recv``, ``MPI_Barrier``...): waiting on or talking to other ranks;
* ``cold``: a first-use cost: JIT compilation (NVRTC, Triton, Inductor), autotuning, importing a
  module;
* ``data``: data decoding and preprocessing: numpy, PIL, OpenCV, torchvision transforms,
  tokenizers, pandas, and ranges named so (``decode``, ``preprocess``, ``augment``...);
* ``dispatch``: framework code between ops: torch, serving engines, attention libraries, C++
  scopes in NVTX ranges (``KernelExecutor::runFusion``);
* ``framework``: the machinery that runs a model (``nn.Module.__call__``, diffusers and accelerate
  hooks): dispatch that is never the data work around it;
* ``user``: the program's own code (any other file);
* neutral records (built-ins and the standard library, ``contextlib``) take the class of the
  record they are called from.

A frame is named by its library and module (the path) and by its function: a function named for
data work (``preprocess``, ``read_video_pyav``, ``collate``) is data work in a framework's file too
(``transformers/pipelines/video_classification.py: preprocess``).

The enclosing frames count too: under a data frame, the user's and a library's frames are that
data work (``preprocess`` -> ``read_video_pyav`` -> untraced decoding, with only ``astype`` and
``np.stack`` recognised at the leaves), except the framework machinery, which stays dispatch with
everything it runs (a feature extractor's forward inside ``preprocess``). Waits, MPI calls and
first-use costs keep their class wherever they are.

User code is the job's own host work when it runs for ``AttributionSettings.python_overhead_max_ns`` (1 ms)
or longer without a traced op; shorter stretches are the interpreter between framework calls
(dispatch).
"""

from __future__ import annotations

import re

import msgspec
import numpy as np
import numpy.typing as npt

from whyidle.timeline.intervals import Intervals
from whyidle.timeline.model import OFF_CPU, Kind, Timeline
from whyidle.timeline.arrays import one_of

__all__ = [
    "WorkClass",
    "ContextSets",
    "context_sets",
    "context_rows",
    "innermost_segments",
    "classes_of_strings",
    "classify",
    "SERVING_ENGINE",
    "SERVING_NAME",
]

I64 = npt.NDArray[np.int64]


class WorkClass:
    NEUTRAL = 0
    WAIT = 1
    RANKS = 2
    COLD = 3
    DATA = 4
    DISPATCH = 5
    USER = 6
    FRAMEWORK = 7  # dispatch that runs a model: never part of the data work around it


_WAIT_RE = re.compile(
    r"built-in method (acquire|wait|poll|select|recv|recv_into|recvfrom|recv_multipart|accept|control|get) of "
    r"(_thread\.|select\.|_socket\.|socket|zmq|_multiprocessing|_queue)|"
    r"^<built-in function (select|poll|sleep|epoll_wait)>|"
    r"^(threading\.py|queue\.py|selectors\.py|multiprocessing/(connection|queues|synchronize)\.py)\(\d+\): "
    r"(wait|get|select|_recv|recv|recv_bytes|_poll|poll|acquire|_wait_for_tstate_lock|join)$|"
    r"zmq/.*\((\d+)\): (recv|recv_multipart|poll|_poll)|"
    # OS-runtime calls (Nsight Systems) that block a thread
    r"^(futex|sem_wait|sem_timedwait|pthread_cond_wait|pthread_cond_timedwait|pthread_mutex_lock|pthread_join|"
    r"poll|ppoll|epoll_wait|epoll_pwait|select|pselect6?|read|recv|recvfrom|recvmsg|accept4?|wait|waitpid|"
    r"nanosleep|clock_nanosleep|usleep|sleep)$"
)
_RANKS_RE = re.compile(r"^P?MPI_\w+$|^(shmem|nvshmem)_\w*(barrier|wait|quiet)", re.I)
_COLD_RE = re.compile(
    r"compil(e|ing|ation)(?!d)|nvrtc|nvJitLink|autotun|cuModuleLoad|cuLibraryLoad|<frozen importlib\._bootstrap|"
    r"torch/_dynamo/convert_frame\.py|torch/_inductor/compile_fx\.py|triton/compiler/|torch/utils/cpp_extension\.py|"
    r"flashinfer/jit/",
    re.I,
)
# Called on every op or every launch (cached look-ups), not compilation.
_COLD_PATHS = ("torch/_jit_internal.py", "torch/compiler/", "torch/jit/", "triton/runtime/", "flashinfer/autotuner.py")
_DATA_PATH_RE = re.compile(
    r"^(numpy|PIL|cv2|scipy|pandas|pyarrow|h5py|decord|av|librosa|soundfile|imageio|skimage|albumentations|"
    r"webdataset|tokenizers|datasets|json|pickle|gzip|zlib|csv|lzma|bz2|tarfile|zipfile)/|"
    r"^(json|pickle|gzip|csv|lzma|bz2|tarfile|zipfile|wave)\.py\(|"
    r"(^|/)(torchvision/(transforms|io|datasets)|torchaudio|transformers/(tokenization|image_processing|feature_extraction)"
    r"|nvidia/dali)|"
    r"built-in (method|function) \w+ of (numpy|PIL|cv2|_pickle|zlib)|<built-in (method|function) \w+ of \w+\.ndarray"
)
_DATA_WORD_RE = re.compile(r"(?i:preprocess|decod(e|ing)|augment|tokeni[sz]|normali[sz]|collate|resiz|load_image|read_image)")
# Every match of the two case-insensitive patterns above contains one of these (lower case). Such a
# pattern has no literal prefix for the regex engine to look for, so it is tried at every
# position of the name (2 us a name, 4 of the 5 ms that classifying the B200 trace's 921 Python
# frames took); a substring test rules most names out first (tests/test_startup.py checks hints
# against matches generated from the patterns).
_COLD_HINTS = ("compil", "nvrtc", "nvjitlink", "autotun", "cumoduleload", "culibraryload", "importlib", "convert_frame", "cpp_extension", "flashinfer/jit")
_DATA_WORD_HINTS = ("preprocess", "decod", "augment", "tokeni", "normali", "collate", "resiz", "load_image", "read_image")
# A function named for data work, in any file (a framework's pipeline too) but a serving engine's,
# whose model runner "_preprocess"es each batch's input ids (engine overhead). Not "decode" alone:
# an LLM's decode phase is not decoding data.
_DATA_FUNC_RE = re.compile(
    r"\(\d+\): _*(preprocess|read_video|read_image|read_audio|load_image|load_video|load_audio|decode_(image|video|audio|jpeg)|"
    r"augment|collate|tokeni[sz])\w*$"
)
# What runs a model: a module's call and the hooks wrapped around its forward.
_FRAMEWORK_RE = re.compile(
    r"^torch/nn/modules/module\.py\(\d+\): (_call_impl|_wrapped_call_impl|__call__)$|^nn\.Module: |"
    r"^(diffusers/hooks/|accelerate/hooks\.py\()"
)
_DISPATCH_RE = re.compile(
    r"^(torch|whyidle|vllm|sglang|flashinfer|flash_attn|xformers|transformers|triton|apex|deepspeed|megatron|"
    r"lightning|pytorch_lightning|accelerate|peft|nvfuser|thunder|jax|jaxlib|cupy|tensorrt|tensorrt_llm|"
    r"onnxruntime|text_generation_server|ts|lmdeploy|torchvision|torchaudio|timm|fairscale|bitsandbytes)/|"
    r"pybind11|of Tensor object|of torch\.|torch\._C|^<built-in function _?(linear|conv\w*|dropout|layer_norm|"
    r"scaled_dot_product_attention|_has_torch_function\w*|_disabled_torch_function_impl|is_autocast\w*|_cuda\w+)>|"
    r"::|^## Call CompiledFxGraph|^nccl:|^c10d::|^execute_context"
)
_NEUTRAL_RE = re.compile(
    r"^<built-in|^<frozen |^<string>|^(threading|typing|enum|contextlib|functools|abc|copy|dataclasses|"
    r"weakref|inspect|types|operator|warnings|os|posixpath|genericpath|_collections_abc|collections/__init__|"
    r"logging/__init__|queue|selectors|traceback|linecache|re|sre_\w+|random|math|numbers|string)\.py\(|^(collections|logging|importlib|re|asyncio|concurrent)/"
)
# Serving engines and servers: their frames or ranges make a trace a serving workload.
SERVING_ENGINE = re.compile(
    r"^(vllm|sglang|text_generation_server|lmdeploy|tensorrt_llm|ray/serve|tritonserver|triton_python_backend_utils|"
    r"uvicorn|fastapi|starlette|grpc|aiohttp|flask)/|^ts/(torch_handler|model_service_worker|service)|"
    r"^(model_service_worker|triton_python_backend_utils)\.py\("
)
# A range or user function named for serving requests ("serve_batch", "handle_request").
SERVING_NAME = re.compile(r"(?i)(^|[^a-z])(serve|serving|server|handle_request|requests?)([^a-z]|$)")


def may_contain(name: str, hints: tuple[str, ...]) -> bool:
    """False only where a case-insensitive pattern whose every match contains one of ``hints``
    (lower case) cannot match ``name``: an ASCII name with none of them. (Under ``re.I`` a
    non-ASCII character can match an ASCII letter, the Kelvin sign a k; those names go to the
    pattern.)"""
    if not name.isascii():
        return True
    low = name.lower()
    for h in hints:  # a loop: any() over a generator took twice as long
        if h in low:
            return True
    return False


def classify(name: str) -> int:
    """The :class:`WorkClass` of one context record, from its name."""
    if _WAIT_RE.search(name):
        return WorkClass.WAIT
    if _RANKS_RE.search(name):
        return WorkClass.RANKS
    if may_contain(name, _COLD_HINTS) and _COLD_RE.search(name) and not name.startswith(_COLD_PATHS):
        return WorkClass.COLD
    if _FRAMEWORK_RE.search(name):
        return WorkClass.FRAMEWORK
    if _DATA_PATH_RE.search(name) or (_DATA_FUNC_RE.search(name) and not SERVING_ENGINE.search(name)):
        return WorkClass.DATA
    if _DISPATCH_RE.search(name):
        return WorkClass.DISPATCH
    if may_contain(name, _DATA_WORD_HINTS) and _DATA_WORD_RE.search(name):
        return WorkClass.DATA
    if _NEUTRAL_RE.search(name):
        return WorkClass.NEUTRAL
    return WorkClass.USER


class ContextSets(msgspec.Struct, frozen=True):
    """One thread's time by the class of its innermost context record (disjoint sets)."""

    wait: Intervals
    ranks: Intervals
    cold: Intervals
    data: Intervals  # data work, and user code running >= python_overhead_max_ns without an op
    dispatch: Intervals  # framework code, and short stretches of user code
    covered: Intervals  # union of all context records of the thread
    # The innermost segments themselves (for evidence): start, end, class, timeline row.
    seg_start: I64 = msgspec.field(default_factory=lambda: np.empty(0, dtype=np.int64))
    seg_end: I64 = msgspec.field(default_factory=lambda: np.empty(0, dtype=np.int64))
    seg_class: npt.NDArray[np.int8] = msgspec.field(default_factory=lambda: np.empty(0, dtype=np.int8))
    seg_row: I64 = msgspec.field(default_factory=lambda: np.empty(0, dtype=np.int64))
    # Scheduled out (nsys SCHED_EVENTS), when the capture has it: blocked or preempted.
    off_cpu: Intervals = msgspec.field(default_factory=Intervals.empty)
    has_sched: bool = False


_CONTEXT_KINDS = (int(Kind.PYTHON), int(Kind.ANNOTATION))


def _resolve(ptr: I64, done: npt.NDArray[np.bool_]) -> I64:
    """Follow pointers until each reaches an entry marked done (-1 stays -1): pointer jumping."""
    ptr = ptr.copy()
    for _ in range(64):  # each round doubles the distance followed; pointers only go back in time
        ext = np.append(ptr, -1)
        pending = (ptr >= 0) & ~np.append(done, True)[ptr]
        if not pending.any():
            return ptr
        ptr[pending] = ext[ptr[pending]]
    ptr[(ptr >= 0) & ~np.append(done, True)[ptr]] = -1  # a cycle would be a bug; never an endless loop
    return ptr


_INHERITS_DATA = (WorkClass.NEUTRAL, WorkClass.USER, WorkClass.DISPATCH)


def innermost_segments(
    starts: I64, ends: I64, classes: npt.NDArray[np.int8]
) -> tuple[I64, I64, npt.NDArray[np.int8], I64]:
    """Exclusive time of each record (its span minus its children): (start, end, class, record).

    Records are intervals sorted by start, longest first on ties, nested as call frames are.
    Walking their starts and
    ends in time order, the innermost open record after a start is that record, and after an end
    it is whatever was innermost just before that record started: a pointer to an earlier event,
    resolved for all events at once by pointer jumping. Neutral records take the class of the
    record they are called from (user at the top); user, dispatch and neutral records inside a
    data record are data work (see the module docstring); framework machinery reads as dispatch.
    ``record`` is the position of the owner.
    """
    sel = np.flatnonzero(ends > starts)  # records of no length own no time
    if sel.size < starts.size:
        t0, t1, cls, who = innermost_segments(starts[sel], ends[sel], classes[sel])
        return t0, t1, cls, sel[who]
    n = int(starts.size)
    if n == 0:
        z = np.empty(0, dtype=np.int64)
        return z, z, np.empty(0, dtype=np.int8), z
    k = np.arange(n, dtype=np.int64)
    times = np.concatenate((starts, ends))
    is_start = np.concatenate((np.ones(n, dtype=np.bool_), np.zeros(n, dtype=np.bool_)))
    rec = np.concatenate((k, k))
    # At equal times: ends before starts, inner ends first, outer starts first.
    order = np.lexsort((np.where(is_start, rec, -rec - 1), times))
    ev_t, ev_start, ev_rec = times[order], is_start[order], rec[order]
    pos = np.empty(2 * n, dtype=np.int64)
    pos[order] = np.arange(2 * n, dtype=np.int64)
    start_pos = pos[:n]
    idx = np.arange(2 * n, dtype=np.int64)
    ptr = _resolve(np.where(ev_start, idx, start_pos[ev_rec] - 1), ev_start)
    owner = np.where(ptr >= 0, ev_rec[np.maximum(ptr, 0)], -1)
    # Effective classes: a neutral record takes its parent's (the owner just before it started).
    parent = np.where(start_pos > 0, owner[np.maximum(start_pos - 1, 0)], -1)
    own = classes != WorkClass.NEUTRAL
    cptr = _resolve(np.where(own, k, parent), own)
    eff = np.where(cptr >= 0, classes[np.maximum(cptr, 0)], WorkClass.USER).astype(np.int8)
    # The nearest record, itself or enclosing, whose class no data frame around it changes: a
    # data frame there makes the user, dispatch and neutral records in between data work.
    fixed = ~np.isin(classes, _INHERITS_DATA)
    bptr = _resolve(np.where(fixed, k, parent), fixed)
    in_data = (bptr >= 0) & (classes[np.maximum(bptr, 0)] == WorkClass.DATA)
    eff[in_data] = WorkClass.DATA
    eff[eff == WorkClass.FRAMEWORK] = WorkClass.DISPATCH
    t0, t1, who = ev_t[:-1], ev_t[1:], owner[:-1]
    keep = (t1 > t0) & (who >= 0)
    # Records that are not nested (a range that outlives the frame it began in) can leave an
    # owner that has already ended: that time is nobody's.
    w = np.maximum(who, 0)
    keep &= (t0 >= starts[w]) & (t1 <= ends[w])
    return t0[keep], t1[keep], eff[who[keep]], who[keep]


def context_rows(tl: Timeline, lane: int) -> I64:
    """One thread's context records (Python frames, ranges, OS calls), by start, longest first."""
    rows = np.flatnonzero((tl.lane == lane) & one_of(tl.kind, _CONTEXT_KINDS))
    rows = rows[~tl.name_mask(lambda s: s == OFF_CPU, rows)]  # scheduling state: a set of its own (hostops)
    s, t = tl.start_ns[rows], tl.end_ns[rows]
    ds, dd = np.diff(s), np.diff(t - s)
    if ((ds > 0) | ((ds == 0) & (dd <= 0))).all():  # in that order already, as a built Timeline's rows are
        return rows
    return rows[np.lexsort((-(t - s), s))]


def context_sets(
    tl: Timeline, lane: int, class_of_name: npt.NDArray[np.int8], python_overhead_max_ns: int, ops: Intervals | None = None
) -> ContextSets:
    """The context sets of one thread (``class_of_name``: :func:`classify` of every string).

    ``ops``: the thread's time inside traced ops, which splits runs of user code (a user frame
    that calls an op is not running its own code meanwhile).
    """
    rows = context_rows(tl, lane)
    if rows.size == 0:
        e = Intervals.empty()
        return ContextSets(e, e, e, e, e, e)
    s, t = tl.start_ns[rows], tl.end_ns[rows]
    seg_s, seg_e, seg_c, seg_k = innermost_segments(s, t, class_of_name[tl.name[rows]])

    def of(c: int) -> Intervals:
        m = seg_c == c
        return Intervals.union_of(seg_s[m], seg_e[m])

    user = of(WorkClass.USER)
    if ops is not None:
        user = user - ops
    long_user = user.lengths >= python_overhead_max_ns
    data = of(WorkClass.DATA) | Intervals(user.start[long_user], user.end[long_user])
    dispatch = of(WorkClass.DISPATCH) | Intervals(user.start[~long_user], user.end[~long_user])
    covered = Intervals.union_of(s, t)
    return ContextSets(of(WorkClass.WAIT), of(WorkClass.RANKS), of(WorkClass.COLD), data, dispatch, covered, seg_s, seg_e, seg_c, rows[seg_k])


def classes_of_strings(tl: Timeline) -> npt.NDArray[np.int8]:
    """:func:`classify` of every string of the timeline (strings of other kinds are harmless)."""
    used = np.zeros(len(tl.strings), dtype=np.bool_)
    ctx = one_of(tl.kind, _CONTEXT_KINDS)
    used[tl.name[ctx]] = True
    out = np.zeros(len(tl.strings), dtype=np.int8)
    for i in np.flatnonzero(used).tolist():
        out[i] = classify(tl.strings[i])
    return out
