"""The sweep's search: batch size first, then one lever at a time, each kept only when it helps.

Batch size (stage ``batch_size``)::

    lo, 2lo, 4lo, ...   double while trials succeed, up to hi
      stop at the plateau: the best samples/s of the last ``plateau_tries`` trials gains less than
                           ``plateau_gain`` over the trial before them (Triton Model Analyzer's
                           rule: 5% minimum gain over its last tries)
      or at the edge:      a trial runs out of memory (status oom, or killed by the OOM killer),
                           crashes or times out
    at a memory edge reached while still gaining: bisect between the last good and the failed
    batch ``bisect_steps`` times (rounded down to a multiple of ``batch_multiple``)
    chosen batch: the smallest one within ``plateau_gain`` of the best samples/s (the knee)

Levers (``num_workers``, ``pin_memory``, ..., ``checkpointing``), in order, each at the current
best configuration: every listed value is tried; a value is kept when its trial succeeds, passes
the quality guard (precision and compile change numerics: sweep/guard.py, against the fp32 run of
the same batch) and beats the current samples/s by ``keep_gain``. ``accumulation`` k holds the
effective batch constant (micro-batch = effective / k). Activation checkpointing, when it runs,
is tried again at the batch that ran out of memory: freed memory may allow a larger batch that
wins.

Pure apart from the injected runner: the same trials in the same order for the same results
(tests drive it with sweep/fakes.FakeRunner and check exact sequences).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import msgspec

from whyidle.catalogue import sweep_knobs
from whyidle.config import SweepConfig
from whyidle.sweep.guard import Guard, check_guard
from whyidle.sweep.runner import TrialRunner
from whyidle.sweep.trial import LEVERS, Trial, TrialResult

__all__ = ["Space", "Entry", "BatchOutcome", "Sweep", "run_sweep", "plateaued", "levers_for_findings", "PLATEAU_RULE"]

PLATEAU_RULE = (
    "doubling stops when the best samples/s of the last {tries} trials gains less than {gain:.0%} over the trial before them "
    "(Triton Model Analyzer's 5% minimum-gain rule); the chosen batch is the smallest within {gain:.0%} of the best"
)
_NUMERIC = ("precision", "compile")



class Space(msgspec.Struct, kw_only=True):
    """What to search: the batch range and each lever's values (the first is the baseline)."""

    batch_lo: int
    batch_hi: int
    levers: dict[str, list[Any]] = msgspec.field(default_factory=dict)
    order: list[str] = msgspec.field(default_factory=lambda: ["batch_size", *LEVERS])
    seed: int = 0
    device: str = "auto"

    def baseline(self) -> Trial:
        fields = {k: v[0] for k, v in self.levers.items() if v}
        return Trial(batch_size=self.batch_lo, seed=self.seed, device=self.device, **fields)


class Entry(msgspec.Struct, kw_only=True):
    """One trial of the sweep, with why it ran and what was decided."""

    stage: str  # batch_size, a lever name, "guard baseline" or "checkpointing+batch"
    result: TrialResult
    decision: str = ""
    kept: bool = False
    guard: Guard | None = None


class BatchOutcome(msgspec.Struct, kw_only=True):
    chosen: int | None = None
    best: int | None = None  # the batch with the highest samples/s
    plateau: bool = False
    edge: int | None = None  # the first batch that failed
    edge_status: str | None = None
    rule: str = ""


class Sweep(msgspec.Struct, kw_only=True):
    """What a sweep did: every trial with its decision, the batch outcome, the recommendation, and
    the rules it ran under (its JSON, read back: :mod:`whyidle.sweep.codec`)."""

    space: Space
    rules: SweepConfig = msgspec.field(default_factory=SweepConfig)
    entries: list[Entry] = []
    batch: BatchOutcome = msgspec.field(default_factory=BatchOutcome)
    best: TrialResult | None = None  # the recommended configuration's trial
    baseline: TrialResult | None = None  # the first successful trial of the baseline config
    notes: list[str] = []

    @property
    def trials(self) -> list[TrialResult]:
        return [e.result for e in self.entries]


def plateaued(rates: Sequence[float], cfg: SweepConfig) -> bool:
    """The best of the last ``plateau_tries`` rates gains less than ``plateau_gain`` over the one before."""
    k = cfg.plateau_tries
    if len(rates) <= k:
        return False
    return max(rates[-k:]) < rates[-k - 1] * (1 + cfg.plateau_gain)


def levers_for_findings(finding_ids: Sequence[str]) -> list[str]:
    """The sweep stages a report's findings name, in the findings' order, without repeats."""
    out: list[str] = []
    for fid in finding_ids:
        for lever in sweep_knobs(fid.split(".", 1)[0]):  # the catalogue's (CauseEntry.sweep)
            if lever not in out:
                out.append(lever)
    return out


def _gain(a: TrialResult, b: TrialResult) -> float:
    assert a.samples_per_s is not None and b.samples_per_s is not None
    return a.samples_per_s / b.samples_per_s - 1


def _down(n: int, multiple: int) -> int:
    return n - n % multiple if n >= 2 * multiple else n


class _Search:
    def __init__(
        self,
        space: Space,
        runner: TrialRunner,
        cfg: SweepConfig,
        on_entry: Callable[[Entry], None] | None,
        on_start: Callable[[str, Trial], None] | None = None,
    ) -> None:
        self.space, self.runner, self.cfg, self.on_entry, self.on_start = space, runner, cfg, on_entry, on_start
        self.sweep = Sweep(space=space, rules=cfg)
        self.memo: dict[str, TrialResult] = {}

    def run(self, trial: Trial, stage: str) -> tuple[TrialResult, Entry | None]:
        key = trial.key()
        if key in self.memo:
            return self.memo[key], None
        if self.on_start is not None:
            self.on_start(stage, trial)
        res = self.runner.run(trial)
        self.memo[key] = res
        e = Entry(stage=stage, result=res)
        self.sweep.entries.append(e)
        if self.sweep.baseline is None and res.ok:
            self.sweep.baseline = res
        return res, e

    def emit(self, e: Entry | None) -> None:
        if e is not None and self.on_entry is not None:
            self.on_entry(e)

    # -- the batch stage ----------------------------------------------------------------------
    def batch_stage(self, base: Trial) -> TrialResult | None:
        cfg, sp = self.cfg, self.space
        ok: list[TrialResult] = []
        edge: TrialResult | None = None
        plateau = False
        b = sp.batch_lo
        while b <= sp.batch_hi:
            r, e = self.run(msgspec.structs.replace(base, batch_size=b), "batch_size")
            if not r.ok:
                edge = r
                self._say(e, f"{r.status}: the edge of the batch search")
                break
            ok.append(r)
            plateau = plateaued([x.samples_per_s or 0.0 for x in ok], cfg)
            self._say(e, "plateau reached" if plateau else "")
            if plateau:
                break
            b *= 2
        if edge is not None and edge.status in ("oom", "killed") and ok and not plateau:
            good, bad = ok[-1].trial.batch_size, edge.trial.batch_size
            for _ in range(cfg.bisect_steps):
                mid = _down((good + bad) // 2, cfg.batch_multiple)
                if mid <= good or mid >= bad:
                    break
                r, e = self.run(msgspec.structs.replace(base, batch_size=mid), "batch_size")
                if r.ok:
                    ok.append(r)
                    good = mid
                    self._say(e, "bisecting the memory edge: fits")
                else:
                    bad = mid
                    self._say(e, f"bisecting the memory edge: {r.status}")
        rule = PLATEAU_RULE.format(tries=cfg.plateau_tries, gain=cfg.plateau_gain)
        out = self.sweep.batch = BatchOutcome(plateau=plateau, rule=rule)
        if edge is not None:
            out.edge, out.edge_status = edge.trial.batch_size, edge.status
        if not ok:
            return None
        top = max(ok, key=lambda x: x.samples_per_s or 0.0)
        floor = (top.samples_per_s or 0.0) / (1 + cfg.plateau_gain)
        chosen = min((x for x in ok if (x.samples_per_s or 0.0) >= floor), key=lambda x: x.trial.batch_size)
        out.best, out.chosen = top.trial.batch_size, chosen.trial.batch_size
        for e in self.sweep.entries:
            if e.stage == "batch_size" and e.result is chosen:
                e.kept = True
                e.decision = (e.decision + "; " if e.decision else "") + "chosen batch size"
        return chosen

    def _say(self, e: Entry | None, text: str) -> None:
        if e is not None:
            e.decision = text
        self.emit(e)

    # -- a lever stage ------------------------------------------------------------------------
    def candidate(self, cur: Trial, lever: str, value: Any) -> Trial | None:
        if lever == "accumulation":
            k = int(value)
            eff = cur.effective_batch
            if k < 1 or eff % k:
                return None
            return msgspec.structs.replace(cur, batch_size=eff // k, accumulation=k)
        if lever in ("persistent_workers", "prefetch_factor") and cur.num_workers == 0:
            return None  # DataLoader ignores (or rejects) them without worker processes
        return msgspec.structs.replace(cur, **{lever: value})

    def guard(self, cand: Trial, res: TrialResult) -> Guard:
        base = msgspec.structs.replace(cand, precision="fp32", compile="off")
        b, e = self.run(base, "guard baseline")
        self._say(e, "the fp32 run the quality guard compares against")
        if not b.ok:
            return Guard(checked=False, passed=False, message=f"not checked: the fp32 baseline failed ({b.status}); not recommended")
        return check_guard(b.losses, res, self.cfg)

    def lever_stage(self, lever: str, values: list[Any], current: TrialResult) -> TrialResult:
        for v in values:
            cand = self.candidate(current.trial, lever, v)
            if cand is None or cand.key() == current.trial.key() or cand.key() in self.memo:
                continue
            r, e = self.run(cand, lever)
            assert e is not None
            if lever in _NUMERIC and (cand.precision != "fp32" or cand.compile != "off") and r.ok:
                e.guard = self.guard(cand, r)
            current = self.decide(e, current)
        return current

    def decide(self, e: Entry, current: TrialResult) -> TrialResult:
        r = e.result
        if not r.ok:
            e.decision = f"{r.status}: not kept"
        elif e.guard is not None and not e.guard.passed:
            e.decision = f"fails the quality guard ({e.guard.message}): never recommended"
        else:
            g = _gain(r, current)
            if g >= self.cfg.keep_gain:
                e.kept, e.decision = True, f"kept: {g:+.1%} samples/s"
                current = r
            else:
                e.decision = f"not kept: {g:+.1%} samples/s (needs {self.cfg.keep_gain:+.0%})"
        self.emit(e)
        return current

    def checkpoint_bigger(self, current: TrialResult) -> TrialResult:
        """Checkpointing on, at the batch that ran out of memory without it."""
        edge = self.sweep.batch.edge
        if edge is None or self.sweep.batch.edge_status not in ("oom", "killed") or edge <= current.trial.batch_size:
            return current
        cand = msgspec.structs.replace(current.trial, checkpointing=True, batch_size=edge // current.trial.accumulation or 1)
        if cand.key() in self.memo:
            return current
        _, e = self.run(cand, "checkpointing+batch")
        assert e is not None
        return self.decide(e, current)


def run_sweep(
    space: Space,
    runner: TrialRunner,
    cfg: SweepConfig | None = None,
    on_entry: Callable[[Entry], None] | None = None,
    on_start: Callable[[str, Trial], None] | None = None,
) -> Sweep:
    """Search ``space`` with ``runner``; ``on_start`` hears of each trial as it starts (its stage
    and configuration), ``on_entry`` as it is decided."""
    cfg = cfg or SweepConfig()
    s = _Search(space, runner, cfg, on_entry, on_start)
    current_trial = space.baseline()
    current: TrialResult | None = None
    for stage in space.order:
        if stage == "batch_size":
            chosen = s.batch_stage(current.trial if current is not None else current_trial)
            if chosen is None:
                s.sweep.notes.append("no batch size ran: the sweep stops (see the first trial's message)")
                break
            current = chosen  # built on the levers kept so far, when a report put them first
            continue
        values = space.levers.get(stage, [])
        if len(values) < 2 and not (current is None and values):
            continue
        if current is None:
            r, e = s.run(current_trial, "baseline")
            s._say(e, "the starting configuration")
            if not r.ok:
                s.sweep.notes.append("the starting configuration failed: the sweep stops")
                break
            current = r
        current = s.lever_stage(stage, values, current)
        if stage == "checkpointing" and any(e.stage == "checkpointing" and e.result.ok for e in s.sweep.entries):
            current = s.checkpoint_bigger(current)
    s.sweep.best = current
    if current is not None:
        for e in s.sweep.entries:
            if e.result is current:
                e.kept = True
    return s.sweep
