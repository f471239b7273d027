"""The one data model: a columnar timeline of intervals, and the interval algebra over it."""

from whyidle.timeline.build import TimelineBuilder
from whyidle.timeline.model import Kind, Lane, LaneKind, Timeline, TimelineMeta

__all__ = ["Kind", "Lane", "LaneKind", "Timeline", "TimelineMeta", "TimelineBuilder"]
