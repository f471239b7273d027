"""Predicted vs measured: each lab flaw's fix, predicted from the flawed run, then measured.

On CUDA the prediction replays the flawed run's trace (analyses/whatif.py); on CPU, where the lab
has no device trace, it replays the step tracker's per-step data wait (findings.predict). The
measured figure is always the step tracker's samples/s, before and after, without the profiler.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass, replace
from typing import Any

from whyidle.config import Config
from whyidle.errors import ArgumentError
from whyidle.findings.model import Prediction
from whyidle.findings.predict import predict_from_steps, predict_lever
from whyidle.lab.job import LabSpec, apply_fix

__all__ = ["FIXABLE", "PredictedFix", "lab_fix", "predict_fix", "run_fix", "median_step_ns", "recorded_pairs", "recorded_labfix"]

# The flaws with a lever the lab can pull, and the lever's name in findings.predict.
FIXABLE = {"starvation": "input_pipeline", "h2d": "h2d_copy", "sync": "host_sync", "smallbatch": "batch_size", "launch": "fused_optimizer"}
# The batch size the smallbatch fix moves to.
SMALLBATCH_FIXED = 128


def lab_fix(spec: LabSpec) -> tuple[LabSpec, str, str, dict[str, Any]]:
    """(fixed spec, what changed, lever name, lever options) for the spec's flaw."""
    lever = FIXABLE.get(spec.flaw)
    if lever is None:
        raise ArgumentError(f"the lab has no fix for flaw {spec.flaw!r}; flaws with one: {', '.join(FIXABLE)}")
    if spec.flaw == "smallbatch":
        fixed = replace(spec, batch_size=SMALLBATCH_FIXED)
        return fixed, f"batch size {spec.batch_size} -> {SMALLBATCH_FIXED}", lever, {"batch_factor": SMALLBATCH_FIXED / spec.batch_size}
    if spec.flaw == "launch":
        return replace(spec, fused_optimizer=True), "AdamW(fused=True) instead of foreach=False", lever, {}
    fixed, change = apply_fix(spec, lever)
    return fixed, change, lever, ({"workers": fixed.num_workers} if lever == "input_pipeline" else {})


@dataclass(frozen=True)
class PredictedFix:
    flaw: str
    device: str
    change: str
    basis: str  # "trace" or "tracker"
    prediction: Prediction | None
    measured_before: float | None  # tracker samples/s
    measured_after: float | None
    median_step_ns: tuple[float, float] | None = None  # tracker median step, before and after
    batch_factor: float = 1.0
    recorded_speedup: float | None = None  # the measured speed-up as a saved run reported it

    @property
    def measured_speedup(self) -> float | None:
        """Samples/s after / before, from the tracker's median steps (a busy machine has outliers)."""
        if self.recorded_speedup is not None:
            return self.recorded_speedup
        if self.median_step_ns is not None and self.median_step_ns[1] > 0:
            return self.batch_factor * self.median_step_ns[0] / self.median_step_ns[1]
        b, a = self.measured_before, self.measured_after
        return a / b if a and b else None

    @property
    def error(self) -> float | None:
        """(predicted - measured) / measured speed-up."""
        m = self.measured_speedup
        return (self.prediction.speedup - m) / m if self.prediction is not None and m else None

    def line(self) -> str:
        p = self.prediction
        pred = f"predicted x{p.speedup:.2f} (range x{p.batch_factor * p.step_ns_before / p.step_ns_high:.2f}-x{p.batch_factor * p.step_ns_before / p.step_ns_low:.2f})" if p else "no prediction"
        m = self.measured_speedup
        meas = f"measured x{m:.2f}" if m else "not measured"
        err = f", error {self.error:+.0%}" if self.error is not None else ""
        return f"{self.flaw:<11} {self.device}: {self.change}: {pred}, {meas}{err} [{self.basis}]"


def predict_fix(spec: LabSpec, run: Any, trace_path: Any = None, cfg: Config | None = None) -> tuple[Prediction | None, str]:
    """The prediction of the flaw's fix from the flawed run: (prediction, basis)."""
    cfg = cfg or Config()
    _, _, lever, kw = lab_fix(spec)
    if trace_path is not None:
        from whyidle.sources import load

        # Measured by the step tracker, without the profiler: the untraced basis.
        return predict_lever(load(trace_path), lever, cfg, batch_size=spec.batch_size, untraced=True, **kw), "trace"
    st = run.tracker_stats
    sel = st.selected() if st is not None else ()
    return predict_from_steps([s.duration_ns for s in sel], [s.data_wait_ns if lever == "input_pipeline" else s.copy_ns for s in sel], lever, cfg.predictions, spec.batch_size, workers=kw.get("workers")), "tracker"


def run_fix(flaw: str, device: str, steps: int | None = None) -> PredictedFix:
    """Run the flawed job (with a trace on CUDA), predict its fix, run the fixed job, compare."""
    from whyidle.lab.job import run_job, spec_for

    spec = spec_for(flaw, device, steps=steps)
    fixed, change, _, _ = lab_fix(spec)
    with tempfile.TemporaryDirectory(prefix="whyidle-fix-") as tmp:
        before = run_job(spec, trace_dir=tmp if device == "cuda" else None)
        pred, basis = predict_fix(spec, before, before.trace_path if device == "cuda" else None)
    after = run_job(replace(fixed, profile_steps=0))
    b = before.tracker_stats.samples_per_s if before.tracker_stats is not None else None
    a = after.tracker_stats.samples_per_s if after.tracker_stats is not None else None
    med = (median_step_ns(before), median_step_ns(after))
    return PredictedFix(flaw, device, change, basis, pred, b, a, med if all(m > 0 for m in med) else None, fixed.batch_size / spec.batch_size)


def median_step_ns(run: Any) -> float:
    """Median duration of a lab run's tracked steps (the first left out), 0 if none."""
    st = run.tracker_stats
    steps = sorted(s.duration_ns for s in st.selected()) if st is not None else []
    return float(steps[len(steps) // 2]) if steps else 0.0


# The lever each recorded pair pulled (scripts/device_measure.py's names) -> findings.predict's.
_RECORDED_LEVER = {"input_pipeline": "input_pipeline", "h2d_copy": "h2d_copy", "host_sync": "host_sync", "batch_size": "batch_size", "fused_optimizer": "fused_optimizer"}


def recorded_pairs(measured_json: Any, cfg: Config | None = None) -> list[PredictedFix]:
    """Predicted vs measured for the before/after pairs of a ``measured.json`` written by
    ``scripts/device_measure.py`` (its traces beside it): each fix predicted from the before
    trace alone, checked against the tracker's median steps before and after."""
    import json
    from pathlib import Path

    from whyidle.sources import load

    path = Path(measured_json)
    pairs = json.loads(path.read_text()).get("pairs", {})
    out = []
    for flaw, pair in pairs.items():
        before, after = pair.get("before"), pair.get("after")
        if not before or not after or not before.get("trace"):
            continue
        lever = _RECORDED_LEVER.get(after.get("lever", ""))
        if lever is None:
            continue
        kw: dict[str, Any] = {}
        bf = after["job"]["batch_size"] / before["job"]["batch_size"]
        if lever == "batch_size":
            kw["batch_factor"] = bf
        if lever == "input_pipeline":
            kw["workers"] = after["job"]["num_workers"]
        trace = path.parent / before["trace"]
        pred = predict_lever(load(trace), lever, cfg, batch_size=before["job"]["batch_size"], untraced=True, **kw)
        med = (float(before["step_ns_median"]), float(after["step_ns_median"]))
        out.append(PredictedFix(flaw, "recorded", after.get("change", lever), "trace", pred, before.get("samples_per_s"), after.get("samples_per_s"), med, bf))
    return out


def recorded_labfix(labfix_json: Any, trace_dir: Any, cfg: Config | None = None, untraced: bool = True) -> list[PredictedFix]:
    """Predicted vs measured for a saved ``whyidle lab --flaw all --fix --json`` run: each fix
    predicted afresh from the flawed job's trace in ``trace_dir`` (``lab_<flaw>.pt.trace.json.gz``,
    as ``whyidle lab --record-all`` writes them; the same job, another run of it), checked against
    the measured speed-up the saved run reported (the step tracker's, untraced). Flaws without a
    trace are left out."""
    import json
    from pathlib import Path

    from whyidle.lab.job import spec_for
    from whyidle.sources import load

    out = []
    for row in json.loads(Path(labfix_json).read_text()):
        trace = Path(trace_dir) / f"lab_{row['flaw']}.pt.trace.json.gz"
        if row.get("device") != "cuda" or not trace.is_file():
            continue
        spec = spec_for(row["flaw"], "cuda")
        fixed, change, lever, kw = lab_fix(spec)
        pred = predict_lever(load(trace), lever, cfg, batch_size=spec.batch_size, untraced=untraced, **kw)
        sps = row.get("measured_samples_per_s") or [None, None]
        out.append(PredictedFix(row["flaw"], "recorded", change, "trace" if untraced else "trace, profiled basis", pred, sps[0], sps[1], None, fixed.batch_size / spec.batch_size, row.get("measured_speedup")))
    return out
