"""Exposed host-to-device copies: copy time with no kernel on the device (analyses/copies.py),
and the finding that ranks it beside the idle causes (findings/copy_rules.py)."""

from __future__ import annotations

import json

import whyidle
from whyidle.analyses.copies import exposed_h2d_copies
from whyidle.config import Config
from whyidle.findings.copy_rules import exposed_copy_finding
from whyidle.findings.settings import RuleSettings
from whyidle.findings.saved import report_from_dict
from whyidle.timeline import Kind

from tlbuild import TL, US

PAGEABLE = "Memcpy HtoD (Pageable -> Device)"
PINNED = "Memcpy HtoD (Pinned -> Device)"


def _steps_with_a_blocking_copy() -> TL:
    """Two 1000 us steps: a 600 us pageable copy with no kernel, then 300 us of kernels."""
    t = TL()
    for n, s in enumerate((0, 1000)):
        t.step(n + 1, s, s + 1000)
        t.work(PAGEABLE, s + 10, s + 610, launch_at=s + 5, launch_dur=610, kind=Kind.MEMCPY, launch_name="cudaMemcpyAsync")
        t.work("gemm", s + 620, s + 920, launch_at=s + 612)
    return t


def test_exposed_time_is_copy_time_without_a_kernel_on_the_same_device() -> None:
    t = TL()
    t.work(PAGEABLE, 0, 100, kind=Kind.MEMCPY)  # 100 us, a kernel on another stream covers 30 of it
    t.work("k", 70, 130, stream=8)
    t.work(PINNED, 200, 260, kind=Kind.MEMCPY)  # fully exposed, pinned
    t.work("Memcpy DtoH (Device -> Pageable)", 300, 400, kind=Kind.MEMCPY)  # not host-to-device
    t.work(PAGEABLE, 500, 540, kind=Kind.MEMCPY, device=1)  # another device: its own kernels only
    t.work("k1", 0, 1000, device=0, stream=9)  # busy all along on device 0 ... would hide device 0's copies
    ex = exposed_h2d_copies(t.build(), 0, 1000 * US, ((0, 520 * US), (520 * US, 1000 * US)))
    # device 0's copies are all under k1; device 1's 40 us copy is exposed and pageable
    assert (ex.exposed_ns, ex.pageable_ns, ex.copies) == (40 * US, 40 * US, 3)
    assert ex.per_step_ns == (20 * US, 20 * US)  # 500-520 and 520-540


def test_partly_hidden_copy_and_pinned_share() -> None:
    t = TL()
    t.work(PAGEABLE, 0, 100, kind=Kind.MEMCPY)
    t.work("k", 70, 130, stream=8)
    t.work(PINNED, 200, 260, kind=Kind.MEMCPY)
    ex = exposed_h2d_copies(t.build(), 0, 300 * US)
    assert (ex.exposed_ns, ex.pageable_ns, ex.copy_ns) == (130 * US, 70 * US, 160 * US)


def test_finding_needs_its_share_of_the_window() -> None:
    cfg = RuleSettings.of(Config())
    t = TL()
    t.work(PAGEABLE, 0, 40, kind=Kind.MEMCPY)
    t.work("k", 40, 1000)
    ex = exposed_h2d_copies(t.build(), 0, 1000 * US)
    assert ex.exposed_ns == 40 * US and exposed_copy_finding(ex, 1000 * US, cfg) is None  # 4 % < 5 %
    f = exposed_copy_finding(exposed_h2d_copies(t.build(), 0, 500 * US), 500 * US, cfg)  # 8 %
    assert f is not None and f.key == "starvation/h2d_copy" and f.variant == "exposed"
    assert (f.idle_ns, f.compute_wait_ns, f.share_of_window) == (0, 40 * US, 0.08)


def test_blocking_pageable_copy_ranks_first_and_round_trips_through_json(tmp_path) -> None:  # type: ignore[no-untyped-def]
    r = whyidle.diagnose(_steps_with_a_blocking_copy().build())
    f = r.findings[0]
    assert f.key == "starvation/h2d_copy" and f.compute_wait_ns == 2 * 600 * US
    assert all(f.idle_ns + f.compute_wait_ns >= g.idle_ns + g.compute_wait_ns for g in r.findings)
    assert "pin_memory=True" in f.fix.code and f.evidence.per_step_idle_ns == 600 * US
    out = tmp_path / "r.json"
    r.save(str(out))
    back = report_from_dict(json.loads(out.read_text()), str(out))
    assert back.findings[0].key == f.key and back.findings[0].compute_wait_ns == f.compute_wait_ns
