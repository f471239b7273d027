"""Settings by layer: a Config holds one small value object per layer, each field keeps its flat
name wherever it is set, and the layer's own object is what the reading code gets."""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import Any

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

import whyidle
from whyidle.config import Config, ReadSettings, WindowSettings
from whyidle.errors import ArgumentError, InputError

from rocbuild import hip_training

SECTIONS = {name: type(getattr(Config(), name)) for name in Config.__struct_fields__}
FIELDS = {f: s for s, cls in SECTIONS.items() for f in cls.__struct_fields__}


def test_each_section_is_a_frozen_value_object_exported_from_whyidle() -> None:
    assert set(SECTIONS) == {"read", "window", "attribution", "findings", "predictions", "render", "serving"}
    for cls in SECTIONS.values():
        assert getattr(whyidle, cls.__name__) is cls and cls.__struct_config__.frozen
        with pytest.raises(AttributeError):
            setattr(cls(), cls.__struct_fields__[0], 1)


def test_field_names_are_unique_across_sections() -> None:
    names = [f for cls in SECTIONS.values() for f in cls.__struct_fields__]
    assert len(names) == len(set(names)) == 74  # 71 + the busy-time findings' three thresholds
    assert not set(names) & set(SECTIONS)


@given(st.sampled_from(sorted(FIELDS)))
def test_a_flat_keyword_sets_the_field_on_its_section(name: str) -> None:
    section = FIELDS[name]
    value = getattr(getattr(Config(), section), name)
    cfg = Config(**{name: value})
    assert getattr(getattr(cfg, section), name) == value
    assert cfg == Config(**{section: SECTIONS[section](**{name: value})}) == Config().with_overrides(**{name: value})
    others = [s for s in SECTIONS if s != section]
    assert all(getattr(cfg, s) is getattr(Config(), s) for s in others)  # untouched sections stay the shared defaults


def test_flat_keywords_apply_over_a_given_section_and_overrides_keep_the_rest() -> None:
    cfg = Config(window=WindowSettings(skip_first_steps=2), batch_size=8, max_gzip_ratio=50)
    assert cfg.window == WindowSettings(skip_first_steps=2, batch_size=8) and cfg.read.max_gzip_ratio == 50
    again = cfg.with_overrides(steps=(3, 4))
    assert again.window == WindowSettings(skip_first_steps=2, steps=(3, 4), batch_size=8) and again.read == cfg.read
    assert pickle.loads(pickle.dumps(again)) == again  # ranks send their Config to worker processes


def test_errors_name_the_key() -> None:
    with pytest.raises(ArgumentError, match="skip_frist_steps is not a field of whyidle.Config; did you mean skip_first_steps") as e:
        Config(skip_frist_steps=1)
    assert e.value.field == "skip_frist_steps"
    with pytest.raises(ArgumentError, match="bogus is not a field of whyidle.ReadSettings") as e:
        ReadSettings(bogus=1)  # type: ignore[call-arg]
    with pytest.raises(ArgumentError, match="ReadSettings field max_gzip_ratio='x'") as e:
        Config().with_overrides(max_gzip_ratio="x")
    assert e.value.field == "max_gzip_ratio"
    with pytest.raises(ArgumentError, match="Config field read=5: expected a whyidle.ReadSettings") as e:
        Config(read=5)  # type: ignore[arg-type]
    assert e.value.field == "read"
    with pytest.raises(ArgumentError, match="keyword arguments only"):
        WindowSettings(1, None, None, 4)  # type: ignore[call-arg]


def test_the_reading_settings_reach_the_reader(tmp_path: Path) -> None:
    """``diagnose(path, rocprof_max_bytes=...)`` is read by the source (it used the defaults)."""
    p = tmp_path / "run.json"
    p.write_bytes(msgspec.json.encode(hip_training().doc()))
    assert len(whyidle.load(p)) > 0
    small: dict[str, Any] = {"stream_min_bytes": 100, "rocprof_max_bytes": 1000}
    with pytest.raises(InputError, match="rocprof_max_bytes"):
        whyidle.load(p, settings=ReadSettings(**small))
    with pytest.raises(InputError, match="rocprof_max_bytes"):
        whyidle.diagnose(p, **small)
    with pytest.raises(ArgumentError, match="settings must be a whyidle.ReadSettings .a Config's .read., not Config"):
        whyidle.load(p, settings=Config())  # type: ignore[arg-type]


def test_the_rules_get_their_three_sections_and_nothing_else(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The pipeline builds one RuleSettings from the Config (its attribution, finding and
    prediction sections, shared) and gives the rules and the predictions that, not the Config."""
    import whyidle.pipeline as P
    from whyidle.findings.settings import RuleSettings
    from whyidle.lab.synthetic import training_trace

    assert RuleSettings.__struct_fields__ == ("attribution", "findings", "predictions")
    p = tmp_path / "t.json"
    p.write_bytes(msgspec.json.encode(training_trace("starvation", steps=4)))
    seen: list[Any] = []
    real_rules, real_predictions = P.apply_rules, P.attach_predictions
    monkeypatch.setattr(P, "apply_rules", lambda a, s: seen.append(s) or real_rules(a, s))
    monkeypatch.setattr(P, "attach_predictions", lambda *a, **k: seen.append(a[4]) or real_predictions(*a, **k))
    cfg = Config(min_finding_share_of_window=0.01, whatif_loader_workers=3, report_top_gaps=3, max_gzip_ratio=50)
    d = whyidle.diagnose(p, config=cfg)
    assert len(seen) == 2 and seen[0] is seen[1] and type(seen[0]) is RuleSettings
    assert (seen[0].attribution, seen[0].findings, seen[0].predictions) == (cfg.attribution, cfg.findings, cfg.predictions)
    assert seen[0].findings is cfg.findings  # the section itself, not a copy
    assert d.findings and len(d.gaps) <= 3


def test_no_rule_module_reads_a_whole_config() -> None:
    """The findings layer takes RuleSettings (or one section); a Config enters it only where it is
    turned into one (settings.py) and in predict_lever, which chooses its own window."""
    import re

    src = Path(whyidle.__file__).parent / "findings"
    allowed = {"settings.py", "predict.py"}
    found = [p.name for p in sorted(src.glob("*.py")) if p.name not in allowed and re.search(r"^from whyidle\.config import .*\bConfig\b", p.read_text(), re.M)]
    assert not found, f"findings modules importing Config (take a RuleSettings or a section instead): {found}"
