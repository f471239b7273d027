"""Option values and library arguments (issue 24): an option value the command cannot use is one
line and exit 2 from the parser; the library raises whyidle errors for wrong argument types and
keeps the command line's promise never to overwrite an input. Each test fails without its fix."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest

import hostile
import whyidle
from whyidle.cli import main
from whyidle.config import Config
from whyidle.errors import ArgumentError, OutputError, UsageError, WhyidleError

ENV = dict(os.environ, PYTHONPATH=str(Path(whyidle.__file__).parents[1]))


@pytest.fixture(scope="module")
def trace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    p = tmp_path_factory.mktemp("opt") / "t.json"
    p.write_text(json.dumps(hostile.base_trace(3)))
    return p


_BAD = [
    (["batching", "--curve", "1:2,8:4", "--rate", "10", "--slo-ms", "inf"], "argument --slo-ms: 'inf' is not a finite number"),
    (["batching", "--curve", "1:2,8:4", "--rate", "10", "--slo-ms", "nan"], "argument --slo-ms: 'nan' is not a finite number"),
    (["batching", "--curve", "1:2,8:4", "--rate", "10", "--slo-ms", "50", "--delays-ms", "0,nan"], "argument --delays-ms: 'nan' is not a finite number"),
    (["batching", "--curve", "1:2,8:4", "--rate", "inf", "--slo-ms", "50"], "argument --rate: 'inf' is not a finite number"),
    (["batching", "--curve", "1:2,8:4", "--rate", "1e-320", "--slo-ms", "50"], "argument --rate: '1e-320': expected a number at least 1e-06"),
    (["batching", "--curve", "1:2,8:4", "--rate", "10", "--burstiness", "1e-320", "--slo-ms", "50"], "argument --burstiness: '1e-320': expected a number at least 0.001"),
    (["batching", "--curve", "1:2,8:4", "--rate", "10", "--slo-ms", "50", "--max-batch", "0"], "argument --max-batch: '0': expected a whole number at least 1"),
    (["serving", "LOG", "--slo-ms", "-1"], "argument --slo-ms: '-1': expected a number above 0"),
    (["diagnose", "TRACE", "--counters-utc-offset", "100000000"], "argument --counters-utc-offset: '100000000': expected a whole number at least -1,440 and at most 1,440"),
    (["diagnose", "TRACE", "--counters-interval-ms", "nan"], "argument --counters-interval-ms: 'nan' is not a finite number"),
    (["diagnose", "TRACE", "--counters-interval-ms", "1e20"], "argument --counters-interval-ms: '1e20': expected a number above 0 and at most 86,400,000"),
    (["diagnose", "TRACE", "--counters-interval-ms", "-5"], "argument --counters-interval-ms: '-5': expected a number above 0"),
    (["diagnose", "TRACE", "--width", "-3"], "argument --width: '-3': expected a whole number at least 20"),
    (["batching", "--curve", "1:2,8:4", "--rate", "10", "--slo-ms", "50", "--seed", "-1"], "argument --seed: '-1': expected a whole number at least 0"),
    (["diagnose", "TRACE", "--steps", "1-100000000"], "--steps 1-100000000 names 100000000 steps; at most 100000"),
]


@pytest.mark.parametrize(("args", "says"), _BAD, ids=[f"{i}-{says.split(':')[0]}" for i, (_, says) in enumerate(_BAD)])
def test_option_values_are_one_line_and_exit_2(trace: Path, args: list[str], says: str, capsys: pytest.CaptureFixture[str]) -> None:
    args = [str(trace) if a in ("TRACE", "LOG") else a for a in args]
    try:
        rc = main(args)
    except SystemExit as exc:  # argparse's own exit
        rc = int(exc.code or 0)
    out, err = capsys.readouterr()
    assert rc == 2 and out == "", (rc, out, err)
    assert err.count("\n") == 1 and says in err, err


def test_steps_range_costs_nothing_in_memory(trace: Path) -> None:
    r = hostile.run_bounded([sys.executable, "-m", "whyidle", "diagnose", str(trace), "--steps", "1-100000000"], 512 << 20, 30, env=ENV)
    assert not r["killed"] and r["rc"] == 2 and r["stderr"].count("\n") == 1, (r["killed"], r["stderr"][-500:])


@pytest.mark.parametrize("source", [5, None, b"t.json", 1.5, ["t.json"]])
def test_diagnose_refuses_what_is_not_a_path(source: Any) -> None:
    with pytest.raises(ArgumentError, match=f"source must be a path .* not {type(source).__name__}"):
        whyidle.diagnose(source)


def test_diagnose_refuses_a_config_that_is_not_one(trace: Path) -> None:
    with pytest.raises(ArgumentError, match="config must be a whyidle.Config, not int"):
        whyidle.diagnose(trace, config=5)  # type: ignore[arg-type]
    with pytest.raises(ArgumentError, match="path must be a path"):
        whyidle.load_report(5)  # type: ignore[arg-type]


def test_config_refuses_unknown_fields_and_wrong_types() -> None:
    with pytest.raises(UsageError, match="bogus is not a field of whyidle.Config") as e:
        Config(bogus=1)  # type: ignore[call-arg]
    assert isinstance(e.value, WhyidleError) and e.value.field == "bogus"
    for field, value in [("max_gzip_ratio", "x"), ("max_gzip_ratio", float("nan")), ("skip_first_steps", 1.5), ("skip_first_steps", True),
                         ("steps", (1, "a")), ("step_range", 5), ("counters_interval_ms", float("inf"))]:
        with pytest.raises(ArgumentError, match=f"field {field}=") as e:
            Config(**{field: value})
        assert e.value.field == field
    with pytest.raises(ArgumentError, match="field max_gzip_ratio="):
        Config().with_overrides(max_gzip_ratio="y")
    ok = Config(max_gzip_ratio=50, steps=(3, 4), counters_interval_ms=None, batching_delay_fractions_of_slack=(0.5,))
    assert ok.read.max_gzip_ratio == 50 and ok.window.steps == (3, 4)


def test_save_never_overwrites_the_diagnosed_trace(trace: Path, tmp_path: Path) -> None:
    t = tmp_path / "t.json"
    t.write_bytes(trace.read_bytes())
    d = whyidle.diagnose(t)
    before = t.read_bytes()
    for fmt in (None, "json", "html"):
        with pytest.raises(OutputError, match="is the input"):
            d.save(t, fmt)
    assert t.read_bytes() == before
    link = tmp_path / "link.json"
    link.symlink_to(t)
    with pytest.raises(OutputError):
        d.save(link)
    assert t.read_bytes() == before
    assert d.save(tmp_path / "r.json") == "json"
    again = whyidle.load_report(tmp_path / "r.json")
    with pytest.raises(OutputError):
        again.save(t)  # a report read back still knows the trace it came from
    assert t.read_bytes() == before


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full")
@pytest.mark.parametrize("args", [["--help"], ["--version"], ["diagnose", "--help"]])
def test_help_and_version_to_a_full_disk_are_an_error(args: list[str]) -> None:
    import subprocess

    with open("/dev/full", "w") as full:
        r = subprocess.run([sys.executable, "-m", "whyidle", *args], stdout=full, stderr=subprocess.PIPE, text=True, env=ENV, timeout=60)
    assert r.returncode == 2 and r.stderr == "whyidle: error: cannot write the output <stdout> (No space left on device); the output is incomplete\n", r
