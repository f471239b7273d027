"""docs/json-schema.md is generated from the codecs' field tables (``whyidle schema``): the
committed page must be what the code writes and reads, so a field added to a codec without
regenerating the page fails here, with the command to run."""

from __future__ import annotations

from pathlib import Path

import pytest

import whyidle

from whyidle.cli import main
from whyidle.commands.schema import markdown
from whyidle.findings.codec import DIAGNOSIS, encode
from whyidle.findings.fields import INT, Field, Table
from whyidle.ranks.model import CROSS_RANK, MULTI_RANK

DOC = Path(__file__).parents[1] / "docs" / "json-schema.md"


def test_the_committed_schema_doc_is_the_generated_one() -> None:
    assert DOC.read_text(encoding="utf-8") == markdown(), (
        "docs/json-schema.md differs from the codecs' field tables: regenerate it with\n"
        "    PYTHONPATH=src python3 -m whyidle schema > docs/json-schema.md"
    )


def test_whyidle_schema_prints_the_page(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["schema"]) == 0
    assert capsys.readouterr().out == markdown()


def test_every_written_field_is_in_the_doc() -> None:
    """Each key of a written report (full form) has its row: the doc cannot miss a field, since
    both come from one table."""
    text = markdown()
    saved = whyidle.load_report(Path(__file__).parent / "data" / "saved" / "v1_0_full.json")
    assert isinstance(saved, whyidle.Diagnosis)
    for key in encode(saved, columns=True):
        assert f"| `{key}` |" in text, key
    for table, prefix in ((MULTI_RANK, ""), (CROSS_RANK, "cross_rank.")):
        for f in table.fields:
            assert f"`{prefix}{f.key}" in text, f.key  # `cross_rank`: its fields have the rows


def test_a_field_added_later_says_since_which_version() -> None:
    t = Table(dict, Field("a", INT, "first"), Field("b", INT, "added", since="1.1", default=0))
    assert t.rows() == [("`a`", "first"), ("`b`", "added (since 1.1)")]
    assert t.read({"a": 1}) == {"a": 1, "b": 0}  # a report saved before it loads with its default
    assert {f.key for f in DIAGNOSIS.fields} >= {"findings", "gap_columns", "work"}
