"""whyidle demo: diagnose a starved training loop, apply the suggested fix, show before/after.

With torch installed it is live: the flaw lab's job runs on this machine (CUDA if present, else
CPU) with its DataLoader in the training process, whyidle's step tracker diagnoses it, the lever
the finding names is pulled (DataLoader workers), the job runs again, and samples/s before and
after are printed, with a check that the losses are unchanged.

Without torch (``pip install whyidle`` alone) it diagnoses whyidle's bundled example instead: a
SYNTHETIC trace written by whyidle's host/device model (``whyidle.lab.synthetic``), labelled as
such, and prints the command that enables the live demo.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import textwrap
from pathlib import Path
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from whyidle.capture import torch_available
from whyidle.commands import _types as T

if TYPE_CHECKING:
    from whyidle.capture.tracker import StepRecord

__all__ = ["add_parser", "run", "live_demo", "synthetic_demo"]

LIVE_INSTALL = "pip install 'whyidle[torch]'"


EXAMPLES = """\
  whyidle demo                 # live on this machine (needs torch), else the bundled synthetic example
  whyidle demo --device cpu --steps 20
  whyidle demo --synthetic --json
"""


def add_parser(sub: Any) -> None:
    p = sub.add_parser("demo", help="diagnose a starved training loop, apply the fix, show samples/s before and after")
    p.add_argument("--synthetic", action="store_true", help="use the bundled synthetic example even when torch is installed")
    p.add_argument("--device", default="auto", help="live demo device: auto (default), cpu or cuda")
    p.add_argument("--steps", type=T.integer(1, 100_000), default=12, help="tracked steps per run of the live demo (default 12)")
    p.add_argument("--json", action="store_true", help="print the before/after reports as JSON")
    p.add_argument("--width", type=T.WIDTH, default=100, help="terminal width (default 100)")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    if args.steps < 3:
        from whyidle.errors import UsageError

        raise UsageError("--steps must be at least 3 (the first step is left out as start-up)")
    if args.synthetic or not torch_available():
        return synthetic_demo(args, torch_missing=not args.synthetic)
    return live_demo(args)


def _fmt_rate(v: float | None) -> str:
    return f"{v:,.0f}" if v is not None else "n/a"


def _emit_json(payload: dict[str, Any]) -> None:
    import msgspec

    sys.stdout.write(msgspec.json.format(msgspec.json.encode(payload), indent=2).decode() + "\n")


def live_demo(args: argparse.Namespace) -> int:
    from whyidle.capture.tracker_report import report_from_tracker
    from whyidle.lab.job import apply_fix, run_job, spec_for
    from whyidle.lab.run import pick_device, run_lab
    from whyidle.render.json import report_to_dict
    from whyidle.render.terminal import render_terminal

    dev = pick_device(args.device)
    spec = spec_for("starvation", dev, steps=args.steps, profile_steps=0)
    say = (lambda *a: None) if args.json else print
    intro = (
        f"whyidle demo: a live training run on {dev.upper()} - a small MLP on synthetic batches, each waiting "
        f"{spec.io_latency_s * 1e3:.0f} ms on (simulated) storage, loaded by a DataLoader with num_workers=0. "
        f"whyidle.track(loader) measures {spec.steps} steps (the first is left out as start-up)."
    )
    if dev == "cpu":
        intro += " With no GPU here, 'Busy' below is the CPU's compute between batches."
    say(textwrap.fill(intro, width=args.width) + "\n")
    before = run_lab("starvation", dev, spec=spec)
    b_report = before.tracker_report
    assert b_report is not None
    say(render_terminal(b_report, width=args.width, color=sys.stdout.isatty() and not args.json))
    if not b_report.findings:
        print("whyidle demo: the starved run showed no finding; nothing to fix (a very fast machine?)", file=sys.stderr)
        return 1
    top = b_report.findings[0]
    fixed_spec, change = apply_fix(spec, top.id)
    say(f"Applying the suggested fix for '{top.id}': {change}\n")
    after_run = run_job(fixed_spec)
    a_report = report_from_tracker(after_run.tracker_stats)
    b_sel, a_sel = before.run.tracker_stats.selected(), after_run.tracker_stats.selected()
    b_wait = sum(s.data_wait_ns for s in b_sel) / max(len(b_sel), 1)
    a_wait = sum(s.data_wait_ns for s in a_sel) / max(len(a_sel), 1)
    same = before.run.losses == after_run.losses
    from whyidle.lab.predict import median_step_ns, predict_fix

    pred, _ = predict_fix(spec, before.run)
    med_b, med_a = median_step_ns(before.run), median_step_ns(after_run)
    measured_x = med_b / med_a if med_a > 0 else None
    # one basis for every rate and ratio: the median tracked step (a busy machine has outlier steps)
    rate_b, rate_a = (spec.batch_size * 1e9 / med if med > 0 else None for med in (med_b, med_a))
    if args.json:
        _emit_json(
            {
                "mode": "live",
                "device": dev,
                "fix": change,
                "samples_per_s": {"before": rate_b, "after": rate_a, "basis": "batch size / median tracked step"},
                "data_wait_ns_per_step": {"before": b_wait, "after": a_wait},
                "losses_identical": same,
                "speedup": {
                    "predicted": pred.speedup if pred else None,
                    "predicted_step_ns": pred.step_ns_after if pred else None,
                    "measured": measured_x,
                    "basis": "median tracked step, before / after",
                },
                "before": report_to_dict(b_report),
                "after": report_to_dict(a_report),
            }
        )
        return 0
    left = ", ".join(f.id for f in a_report.findings) or "none"
    b_work, a_work = _mean(b_sel, _work_ns), _mean(a_sel, _work_ns)
    print("Before -> after the fix (same model, same data; rates from the median tracked step):")
    print(f"  samples/s          {_fmt_rate(rate_b)} -> {_fmt_rate(rate_a)}" + (f"  (x{measured_x:.2f})" if measured_x else ""))
    print(f"  median step        {med_b / 1e6:.1f} ms -> {med_a / 1e6:.1f} ms")
    if pred is not None and measured_x is not None:
        print(
            f"  predicted          {pred.step_ns_after / 1e6:.1f} ms (x{pred.speedup:.2f}) from the starved run alone, "
            f"with {pred.lever}; error {(pred.speedup - measured_x) / measured_x:+.0%}"
        )
    print(f"  data wait per step {b_wait / 1e6:.1f} ms -> {a_wait / 1e6:.1f} ms")
    print(f"  compute per step   {b_work / 1e6:.1f} ms -> {a_work / 1e6:.1f} ms  (step time less data wait and copies)")
    print(f"  findings           {', '.join(f.id for f in b_report.findings)} -> {left}")
    print(f"  losses             {'bitwise identical' if same else 'DIFFERENT'} across the {len(before.run.losses)} steps")
    if pred is not None and measured_x is not None:
        for line in gain_note(pred.speedup, measured_x, b_work, a_work):
            print(textwrap.fill(line, width=args.width))
    print("\nIn your own loop:\n" + textwrap.indent(OWN_LOOP, "    "))
    return 0


OWN_LOOP = """tracker = whyidle.track(loader)
for batch in tracker:
    train_step(batch)
print(tracker.report())          # this report; tracker.report().save("report.html") for HTML"""


def _mean(steps: Sequence[StepRecord], value: Callable[[StepRecord], int]) -> float:
    return sum(value(s) for s in steps) / max(len(steps), 1)


def _work_ns(s: StepRecord) -> int:
    return max(s.duration_ns - s.data_wait_ns - s.copy_ns, 0)


def gain_note(predicted: float, measured: float, b_work: float, a_work: float) -> list[str]:
    """Why the measured speed-up beat the prediction, when it did by more than 5 % (the prediction
    replays the loader's wait overlapping compute; the compute between batches was taken as is)."""
    if not (measured > predicted * 1.05 and a_work < b_work):
        return []
    return [
        f"The measurement beats the prediction because the compute between batches also fell, from {b_work / 1e6:.1f} "
        f"to {a_work / 1e6:.1f} ms per step: with num_workers=0 the training process also did the loading "
        "(building each batch), which the workers now do in other processes. The prediction counts only the wait."
    ]


def synthetic_demo(args: argparse.Namespace, torch_missing: bool) -> int:
    from whyidle.pipeline import diagnose
    from whyidle.lab.synthetic import training_trace, write_trace
    from whyidle.render.json import report_to_dict
    from whyidle.render.terminal import render_terminal

    with tempfile.TemporaryDirectory() as d:
        before = diagnose(write_trace(training_trace("starvation"), Path(d) / "synthetic_starved.pt.trace.json.gz"))
        after = diagnose(write_trace(training_trace("none"), Path(d) / "synthetic_fixed.pt.trace.json.gz"))
    b, a = before.utilization, after.utilization
    if args.json:
        _emit_json(
            {
                "mode": "synthetic",
                "note": "SYNTHETIC traces written by whyidle's host/device model, not recorded on a GPU",
                "samples_per_s": {"before": b.samples_per_s, "after": a.samples_per_s},
                "before": report_to_dict(before),
                "after": report_to_dict(after),
            }
        )
        return 0
    if torch_missing:
        print(f"torch is not installed, so this demo diagnoses a bundled example; for the live demo: {LIVE_INSTALL}\n")
    print("SYNTHETIC example: a trace written by whyidle's host/device model (NOT recorded on a GPU) of a")
    print("training loop whose DataLoader runs in the training process (num_workers=0).\n")
    print(render_terminal(before, width=args.width, color=sys.stdout.isatty()))
    print("After the fix (SYNTHETIC as well: workers prepare batches ahead; same model):")
    print(f"  GPU busy   {b.busy_fraction:.1%} -> {a.busy_fraction:.1%}")
    if b.samples_per_s and a.samples_per_s:
        print(f"  samples/s  {b.samples_per_s:,.0f} -> {a.samples_per_s:,.0f} ({a.samples_per_s / b.samples_per_s:.2f}x)")
    print(f"  findings   {', '.join(f.id for f in before.findings) or 'none'} -> {', '.join(f.id for f in after.findings) or 'none'}")
    if torch_missing:
        print(f"\nTo run this live on your machine (CPU is enough): {LIVE_INSTALL} && whyidle demo")
    return 0
