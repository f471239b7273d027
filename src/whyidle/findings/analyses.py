"""The analyses of one timeline, as the rules read them (built by ``whyidle.pipeline.analyse``)."""

from __future__ import annotations

import msgspec

from whyidle.analyses.advice_context import AdviceContext
from whyidle.analyses.context import ThreadIndex
from whyidle.analyses.gaps import Gaps
from whyidle.analyses.kernels import KernelStats
from whyidle.analyses.links import Links
from whyidle.analyses.quality import Quality
from whyidle.analyses.utilization import Utilization
from whyidle.analyses.window import Window
from whyidle.analyses.work import OpKernels, WorkSummary
from whyidle.timeline.model import Timeline

__all__ = ["Analyses"]


class Analyses(msgspec.Struct, frozen=True):
    """Everything the rules read."""

    tl: Timeline
    window: Window
    gaps: Gaps
    utilization: Utilization
    kernels: KernelStats
    quality: Quality
    index: ThreadIndex
    links: Links
    advice: AdviceContext  # what the job is and already does: the only input advice branches on
    work: WorkSummary | None = None  # FLOPs, bytes, roofline, MFU (None: no device work)
    op_kernels: OpKernels | None = None  # each kernel's launching op, the work model's (the busy-time rules read it)
