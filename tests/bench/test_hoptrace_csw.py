"""bench/hoptrace.py's BENCH_HOPS_CSW: a worker's step from its claim's return to its
handler, with the involuntary context switches in between."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from bench import hoptrace


def test_one_line_per_claim_that_reaches_its_handler(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "csw.txt"
    monkeypatch.setenv("BENCH_HOPS_CSW", str(out))
    hoptrace._csw_mark("wk_handler")  # no claim returned before it: nothing
    hoptrace._csw_mark("wk_claim_back")
    hoptrace._csw_mark("wk_handler")
    hoptrace._csw_mark("wk_handler")  # the same claim is not counted twice
    [line] = out.read_text().splitlines()
    pid, _at, step_ms, cpu_ms, switches = line.split()
    assert int(pid) == os.getpid()
    assert float(step_ms) >= 0 and float(cpu_ms) >= 0 and int(switches) >= 0
