"""``--config FILE``: a TOML settings file for every command that builds a Config or reads a
trace (diagnose, compare, batching, serving, run, convert, scaling). Each command honours a
setting from the file, a flag given on the command line beats the file, and every bad file is one
line naming the file, exit 2, with no output written."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import hostile_config
import whyidle
from whyidle.cli import main
from whyidle.commands._configfile import MAX_BYTES, load_config
from whyidle.config import Config
from whyidle.errors import InputError
from whyidle.lab.synthetic import training_trace, write_trace

ENV = dict(os.environ, PYTHONPATH=str(Path(whyidle.__file__).parents[1]))
STARVED = "input_pipeline.single_process"  # the finding of the starved synthetic trace (16.7% of its window)


@pytest.fixture(scope="module")
def trace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A starved training loop, built in code: 5 steps, one input-pipeline finding, gzip 21x."""
    return write_trace(training_trace("starvation"), tmp_path_factory.mktemp("cfg") / "starved.pt.trace.json.gz")


def cli(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    try:
        rc = main([str(a) for a in args])
    except SystemExit as exc:  # argparse's own exit
        rc = int(exc.code or 0)
    out, err = capsys.readouterr()
    return rc, out, err


def settings_file(tmp_path: Path, text: str, name: str = "whyidle.toml") -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


def findings_of(out: str) -> list[str]:
    return [f["id"] for f in json.loads(out)["findings"]]


# -- each command honours the file ---------------------------------------------------------------


@pytest.mark.parametrize("text", ["[findings]\nmin_finding_share_of_window = 0.5\n", "min_finding_share_of_window = 0.5\n"], ids=["table", "flat"])
def test_diagnose_honours_the_finding_threshold(trace: Path, tmp_path: Path, text: str, capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, _ = cli(["diagnose", trace, "--json"], capsys)
    assert rc == 0 and STARVED in findings_of(out)
    rc, out, err = cli(["diagnose", trace, "--json", "--config", settings_file(tmp_path, text)], capsys)
    assert rc == 0, err
    assert STARVED not in findings_of(out), "a 16.7% finding is under a 50% threshold"


def test_diagnose_honours_the_gzip_cap(trace: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cfg = settings_file(tmp_path, "[read]\nmax_gzip_ratio = 5\ngzip_ratio_floor_bytes = 0\n")
    out_file = tmp_path / "report.json"
    rc, out, err = cli(["diagnose", trace, "--config", cfg, "-o", out_file], capsys)
    assert rc == 2 and out == "" and err.count("\n") == 1, err
    assert str(trace) in err and "max_gzip_ratio" in err
    assert not out_file.exists()
    # a legitimately very compressible trace: the cap raised in the file lets it through
    rc, _, err = cli(["diagnose", trace, "--config", settings_file(tmp_path, "[read]\nmax_gzip_ratio = 50\ngzip_ratio_floor_bytes = 0\n", "ok.toml"), "-o", out_file], capsys)
    assert rc == 0 and out_file.exists(), err


def test_compare_honours_the_file(trace: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, err = cli(["compare", trace, trace, "--json"], capsys)
    assert rc == 0, err
    rc, out, err = cli(["compare", trace, trace, "--json", "--config", settings_file(tmp_path, "[read]\nmax_gzip_ratio = 5\ngzip_ratio_floor_bytes = 0\n")], capsys)
    assert rc == 2 and out == "" and "max_gzip_ratio" in err and err.count("\n") == 1, err


def _batching(args: list[str], capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    rc, out, err = cli(["batching", "--curve", "1:2:2.5,8:4:5", "--rate", "100", "--slo-ms", "50", "--json", *args], capsys)
    assert rc == 0, err
    return dict(json.loads(out))


def test_batching_honours_the_file_and_the_flag_beats_it(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cfg = settings_file(tmp_path, "[serving]\nbatching_requests = 400\nbatching_delay_fractions_of_slack = [0.5]\n")
    d = _batching(["--config", cfg], capsys)
    assert d["requests_per_run"] == 400
    assert len({c["settings"]["max_delay_ns"] for c in d["candidates"]} - {0}) == 1, "one delay fraction: one non-zero delay"
    assert _batching(["--config", cfg, "--requests-per-run", "300"], capsys)["requests_per_run"] == 300


def test_batching_takes_its_largest_batch_size_from_the_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``[serving] batching_max_batch_size`` bounds the curve's batch sizes, inline or in a file
    (it was read from a fresh Config, whatever the file said)."""
    cfg = settings_file(tmp_path, "[serving]\nbatching_max_batch_size = 4\n")
    curve = tmp_path / "curve.csv"
    curve.write_text("batch_size,latency_ms\n1,2\n8,4\n")
    for given in (["--curve", "1:2:2.5,8:4:5"], ["--latency", str(curve)]):
        rc, out, err = cli(["batching", *given, "--rate", "100", "--slo-ms", "50", "--json", "--config", cfg], capsys)
        assert rc == 2 and out == "" and err.count("\n") == 1 and "batch size 8" in err and "at most 4" in err, (given, err)
        rc, out, err = cli(["batching", *given, "--rate", "100", "--slo-ms", "50", "--json"], capsys)
        assert rc == 0, err


def _demand_log(tmp_path: Path) -> Path:
    """A request every 100 ms, served alone in 3 ms: the device waits for demand 97% of the time."""
    p = tmp_path / "requests.jsonl"
    p.write_text("".join(json.dumps({"arrival": 0.1 * i, "start": 0.1 * i, "finish": 0.1 * i + 0.003}) + "\n" for i in range(50)))
    return p


def test_serving_honours_the_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    log = _demand_log(tmp_path)
    rc, out, err = cli(["serving", log, "--device-busy", "0.03", "--json"], capsys)
    assert rc == 0 and json.loads(out)["verdict"]["cause"] == "idle_host", err
    rc, out, err = cli(["serving", log, "--device-busy", "0.03", "--json", "--config", settings_file(tmp_path, "min_finding_share_of_window = 1.0\n")], capsys)
    assert rc == 0 and json.loads(out)["verdict"] is None, (err, out[:300])


def test_serving_diagnoses_its_trace_with_the_file(trace: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cfg = settings_file(tmp_path, "[read]\nmax_gzip_ratio = 5\ngzip_ratio_floor_bytes = 0\n")
    rc, out, err = cli(["serving", _demand_log(tmp_path), "--trace", trace, "--config", cfg], capsys)
    assert rc == 2 and str(trace) in err and "max_gzip_ratio" in err, err


def test_run_refuses_a_bad_file_before_the_command_runs(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    cfg = settings_file(tmp_path, "[findings]\nmin_finding_share_of_window = 2\n")
    cmd = [sys.executable, "-m", "whyidle", "run", "--no-sampler", "-o", str(tmp_path / "run"), "--config", str(cfg), "--", sys.executable, "-c", f"open({str(marker)!r}, 'w')"]
    p = subprocess.run(cmd, cwd=tmp_path, env=ENV, capture_output=True, text=True, timeout=120)
    assert p.returncode == 2 and p.stderr.count("\n") == 1 and str(cfg) in p.stderr, p.stderr
    assert "min_finding_share_of_window" in p.stderr and "at most 1" in p.stderr
    assert not marker.exists() and not (tmp_path / "run").exists()


@pytest.mark.skipif(not __import__("importlib").util.find_spec("torch"), reason="needs torch (pip install 'whyidle[torch]')")
def test_run_diagnoses_with_the_file(tmp_path: Path) -> None:
    script = tmp_path / "loop.py"
    script.write_text(
        "import time, torch\n"
        "class Slow(torch.utils.data.Dataset):\n"
        "    def __len__(self): return 16\n"
        "    def __getitem__(self, i): time.sleep(0.01); return torch.ones(4)\n"
        "for x in torch.utils.data.DataLoader(Slow(), batch_size=2): x.sum()\n"
    )
    found = {}
    for name, extra in (("default", []), ("threshold", ["--config", str(settings_file(tmp_path, "min_finding_share_of_window = 1.0\n"))])):
        run = tmp_path / name
        cmd = [sys.executable, "-m", "whyidle", "run", "--no-sampler", "--no-profiler", "-o", str(run), *extra, "--", sys.executable, str(script)]
        p = subprocess.run(cmd, cwd=tmp_path, env=ENV, capture_output=True, text=True, timeout=240)
        assert p.returncode == 0, p.stderr[-2000:]
        found[name] = [f["id"] for f in json.loads((run / "report.json").read_text())["findings"]]
    assert found["default"] and not found["threshold"], found


# -- flags beat the file ---------------------------------------------------------------------------


def _steps(out: str) -> list[int]:
    return list(json.loads(out)["window"]["steps"])


def test_a_flag_beats_the_file(trace: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cfg = settings_file(tmp_path, "[window]\nskip_first_steps = 2\n[findings]\nmin_finding_share_of_window = 0.5\n")
    rc, out, err = cli(["diagnose", trace, "--json", "--config", cfg], capsys)
    assert rc == 0 and _steps(out) == [3, 4, 5], err
    rc, out, err = cli(["diagnose", trace, "--json", "--config", cfg, "--skip-first", "0"], capsys)
    assert rc == 0 and _steps(out) == [1, 2, 3, 4, 5], "--skip-first 0 given: it beats the file's 2"
    assert STARVED not in findings_of(out), "what no flag sets stays the file's"
    rc, out, err = cli(["diagnose", trace, "--json", "--skip-first", "1"], capsys)
    assert rc == 0 and _steps(out) == [2, 3, 4, 5]


def test_fail_on_from_the_file_is_a_gate(trace: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc, _, err = cli(["diagnose", trace, "--json", "--config", settings_file(tmp_path, "[findings]\nfail_on_groups = ['starvation']\n")], capsys)
    assert rc == 1 and "gate failed" in err


# -- bad files: one line naming the file, exit 2, nothing written ---------------------------------

_BAD = [
    ("not TOML", b"[findings\nmin_finding_share_of_window = 0.5\n", "is not TOML"),
    ("not UTF-8", b"max_gzip_ratio = 200 # \xff\xfe\n", "is not UTF-8 text"),
    ("empty", b"", "the file is empty"),
    ("unknown section", b"[finding]\nmin_finding_share_of_window = 0.5\n", "[finding] is not a section of the settings"),
    ("unknown key in a section", b"[read]\nmax_gzip = 200\n", "in [read]: max_gzip is not a field of whyidle.ReadSettings; did you mean max_gzip_ratio?"),
    ("unknown flat key", b"skip_first = 2\n", "skip_first is not a field of whyidle.Config; did you mean skip_first_steps?"),
    ("key in the wrong section", b"[read]\nskip_first_steps = 2\n", "in [read]: skip_first_steps is not a field of whyidle.ReadSettings"),
    ("wrong type", b"[window]\nskip_first_steps = 'two'\n", "in [window]: WindowSettings field skip_first_steps='two': expected int"),
    ("float for an int", b"[render]\nreport_top_gaps = 2.5\n", "RenderSettings field report_top_gaps=2.5: expected int"),
    ("not finite", b"max_gzip_ratio = inf\n", "ReadSettings field max_gzip_ratio=inf: expected float (numbers finite)"),
    ("out of range", b"[findings]\nmin_finding_share_of_window = 1.5\n", "FindingSettings field min_finding_share_of_window=1.5: expected a number at least 0 and at most 1"),
    ("negative", b"max_gzip_ratio = -3\n", "ReadSettings field max_gzip_ratio=-3.0: expected a number at least 1"),
    ("tuple element out of range", b"[predictions]\nwhatif_loader_speedup = [2.0, 0.5, 3.0]\n", "expected each number at least 1"),
    ("a section that is not a table", b"read = 3\n", "read is a section of the settings: expected a table [read] of its fields, found a whole number"),
    ("set twice", b"max_gzip_ratio = 200\n[read]\nmax_gzip_ratio = 300\n", "max_gzip_ratio is set twice, at the top level and in [read]"),
    ("unknown gate group", b"[findings]\nfail_on_groups = ['starving']\n", "fail_on_groups 'starving': expected groups among"),
    ("a date", b"[window]\nbatch_size = 1979-05-27\n", "WindowSettings field batch_size=datetime.date(1979, 5, 27)"),
]


@pytest.mark.parametrize(("data", "says"), [b[1:] for b in _BAD], ids=[b[0] for b in _BAD])
def test_a_bad_file_is_one_line_naming_it(trace: Path, tmp_path: Path, data: bytes, says: str, capsys: pytest.CaptureFixture[str]) -> None:
    cfg = tmp_path / "bad.toml"
    cfg.write_bytes(data)
    out_file = tmp_path / "report.json"
    rc, out, err = cli(["diagnose", trace, "--config", cfg, "-o", out_file], capsys)
    assert rc == 2 and out == "", (rc, out, err)
    assert err.count("\n") == 1 and err.startswith(f"whyidle: error: {cfg}: ") and says in err, err
    assert not out_file.exists()


def test_a_missing_file_a_folder_and_a_fifo(trace: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for path, says in ((tmp_path / "nope.toml", "no such file"), (tmp_path, "is a folder")):
        rc, out, err = cli(["diagnose", trace, "--config", path, "-o", tmp_path / "r.json"], capsys)
        assert rc == 2 and err.count("\n") == 1 and f"{path}: {says}" in err, err
    fifo = tmp_path / "fifo.toml"
    os.mkfifo(fifo)
    p = subprocess.run([sys.executable, "-m", "whyidle", "diagnose", str(trace), "--config", str(fifo)], env=ENV, capture_output=True, text=True, timeout=60)
    assert p.returncode == 2 and "is a FIFO" in p.stderr and p.stderr.count("\n") == 1, p.stderr
    assert not (tmp_path / "r.json").exists()


def test_a_file_too_large_is_refused_before_it_is_decoded(tmp_path: Path) -> None:
    p = tmp_path / "big.toml"
    p.write_bytes(b"# " + b"x" * MAX_BYTES + b"\n")
    with pytest.raises(InputError, match="is larger than 1,048,576 bytes"):
        load_config(p)


def test_every_bad_command_refuses_the_file(trace: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cfg = settings_file(tmp_path, "[serving]\nbatching_requests = 0\n")
    out_file = tmp_path / "out.json"
    for args in (
        ["compare", trace, trace],
        ["batching", "--curve", "1:2,8:4", "--rate", "10", "--slo-ms", "50"],
        ["serving", _demand_log(tmp_path), "--device-busy", "0.1"],
    ):
        rc, out, err = cli([*args, "-o", out_file, "--config", cfg], capsys)
        assert rc == 2 and out == "" and err.count("\n") == 1 and str(cfg) in err and "batching_requests" in err, (args[0], err)
        assert not out_file.exists(), args[0]


# -- the file and the library: one check ----------------------------------------------------------


def test_the_file_gives_the_config_the_library_takes(tmp_path: Path) -> None:
    p = settings_file(tmp_path, "max_gzip_ratio = 200\nsteps = [3, 4]\n[attribution]\nfusion_max_kernel_ns = 50_000\n[predictions]\nwhatif_loader_speedup = [2, 3, 1.5]\n")
    want = Config(max_gzip_ratio=200.0, steps=(3, 4), fusion_max_kernel_ns=50_000, whatif_loader_speedup=(2.0, 3.0, 1.5))
    assert load_config(p) == want
    assert type(load_config(p).read.max_gzip_ratio) is float, "a whole number in the file is a float where the field is"


def test_the_library_refuses_the_same_ranges() -> None:
    from whyidle.errors import ArgumentError

    with pytest.raises(ArgumentError, match="max_gzip_ratio=0.5: expected a number at least 1"):
        Config(max_gzip_ratio=0.5)
    with pytest.raises(ArgumentError, match="min_busy_fraction=2: expected a number at least 0 and at most 1"):
        whyidle.diagnose("unused.json", min_busy_fraction=2)
    assert Config(counters_utc_offset_min=-600).read.counters_utc_offset_min == -600


# -- fuzz: any document or bytes give a Config or one clear line, never a traceback ----------------

_SCALARS = st.one_of(
    st.integers(min_value=-(2**63), max_value=2**63 - 1), st.floats(allow_nan=True), st.booleans(), st.text(max_size=8),
    st.sampled_from(hostile_config.ODD),
)  # fmt: skip
_VALUES = st.one_of(_SCALARS, st.lists(_SCALARS, max_size=4))
_NAMES = st.one_of(st.sampled_from(sorted(hostile_config.FIELDS)), st.sampled_from(["bogus", "read", "steps", "max_gzip"]))


@st.composite
def toml_documents(draw: st.DrawFn) -> str:
    lines = [f"{draw(_NAMES)} = {hostile_config.toml_value(draw(_VALUES))}" for _ in range(draw(st.integers(0, 3)))]
    for section in draw(st.lists(st.sampled_from([*hostile_config.SECTIONS, "nope"]), max_size=3, unique=True)):
        lines.append(f"[{section}]")
        lines += [f"{draw(_NAMES)} = {hostile_config.toml_value(draw(_VALUES))}" for _ in range(draw(st.integers(0, 3)))]
    return "\n".join(lines) + "\n"


def _one_line_or_config(p: Path) -> None:
    try:
        cfg = load_config(p)
    except InputError as exc:
        assert str(exc).startswith(f"{p}: ") and "\n" not in str(exc), str(exc)
    else:
        assert isinstance(cfg, Config)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(toml_documents())
def test_fuzz_documents(tmp_path: Path, doc: str) -> None:
    p = tmp_path / "fuzz.toml"
    p.write_text(doc, encoding="utf-8", errors="surrogatepass")
    _one_line_or_config(p)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.binary(max_size=200))
def test_fuzz_bytes(tmp_path: Path, data: bytes) -> None:
    p = tmp_path / "fuzz.toml"
    p.write_bytes(data)
    _one_line_or_config(p)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(toml_documents())
def test_fuzz_the_command_line(trace: Path, tmp_path: Path, doc: str) -> None:
    """Through ``whyidle diagnose``: exit 0 or 1 with a report, or exit 2 with one line and no file."""
    p = tmp_path / "fuzz.toml"
    p.write_text(doc, encoding="utf-8", errors="surrogatepass")
    out_file = tmp_path / "r.json"
    out_file.unlink(missing_ok=True)
    import contextlib
    import io

    err = io.StringIO()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
        rc = main(["diagnose", str(trace), "--config", str(p), "-o", str(out_file), "--jobs", "1"])
    text = err.getvalue()
    assert "could not be analysed" not in text and "Traceback" not in text, text
    if rc == 2:
        assert text.count("\n") == 1 and str(p) in text and not out_file.exists(), text
    else:
        assert rc in (0, 1) and out_file.exists(), (rc, text)


# -- the settings page and the ranges: one per field -----------------------------------------------


def settings_table() -> str:
    """docs/settings.md's table of every field: its table, default, type and range."""
    from whyidle.config import _LIMITS
    from whyidle.fieldcheck import _limit_text

    rows = ["| field | table | default | type | range |", "|---|---|---|---|---|"]
    for section in hostile_config.SECTIONS:
        obj = getattr(Config(), section)
        for name in type(obj).__struct_fields__:
            limit = _LIMITS.get(name)
            kind = str(type(obj).__annotations__[name]).replace(" | None", " or none")
            rows.append(f"| `{name}` | `[{section}]` | `{getattr(obj, name)!r}` | {kind} | {_limit_text(limit) if limit else 'any'} |")
    return "\n".join(rows) + "\n"


def test_the_settings_page_lists_every_field() -> None:
    page = (Path(__file__).resolve().parents[1] / "docs" / "settings.md").read_text()
    assert settings_table() in page, "docs/settings.md's table is stale; replace it with:\n" + settings_table()


def test_every_number_has_a_declared_range() -> None:
    from whyidle.config import _LIMITS

    for section in hostile_config.SECTIONS:
        cls = type(getattr(Config(), section))
        numeric = {n for n in cls.__struct_fields__ if any(k in str(cls.__annotations__[n]) for k in ("int", "float"))}
        assert numeric <= set(_LIMITS), f"{cls.__name__}: give these fields a range in config.py's _LIMITS: {sorted(numeric - set(_LIMITS))}"


def test_the_example_file_is_the_pages_and_is_read() -> None:
    root = Path(__file__).resolve().parents[1]
    example = root / "examples" / "whyidle.toml"
    assert "```toml\n" + example.read_text() + "```" in (root / "docs" / "settings.md").read_text()
    cfg = load_config(example)
    assert cfg.findings.min_finding_share_of_window == 0.02 and cfg.read.max_gzip_ratio == 400.0


_TIGHT_GZIP = "[read]\nmax_gzip_ratio = 5\ngzip_ratio_floor_bytes = 0\n"


def test_convert_reads_with_the_files_limits(trace: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("pyarrow", reason="whyidle convert needs pyarrow (pip install 'whyidle[parquet]')")
    out_file = tmp_path / "t.parquet"
    rc, _, err = cli(["convert", trace, "-o", out_file, "--config", settings_file(tmp_path, _TIGHT_GZIP)], capsys)
    assert rc == 2 and err.count("\n") == 1 and str(trace) in err and "max_gzip_ratio" in err, err
    assert not out_file.exists()
    rc, _, err = cli(["convert", trace, "-o", out_file, "--config", settings_file(tmp_path, "[read]\nmax_gzip_ratio = 50\ngzip_ratio_floor_bytes = 0\n", "ok.toml")], capsys)
    assert rc == 0 and out_file.exists(), err


def test_scaling_diagnoses_its_traces_with_the_file(trace: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, err = cli(["scaling", "--before", trace, "--after", trace], capsys)
    assert rc == 0 and "Reports: mean step" in out, err
    rc, out, err = cli(["scaling", "--before", trace, "--after", trace, "--config", settings_file(tmp_path, _TIGHT_GZIP)], capsys)
    assert rc == 2 and str(trace) in err and "max_gzip_ratio" in err, err
    rc, out, err = cli(["scaling", "1:100", "2:180", "--config", tmp_path / "missing.toml"], capsys)
    assert rc == 2 and f"{tmp_path / 'missing.toml'}: no such file" in err, err
