"""bench/worker_abab.py: a run whose jobs ran out inside its window is refused, not
reported as a rate (round 15 printed 0 jobs/s with `--jobs 60000` at ~18k jobs/s)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from bench import worker_abab


def test_jobs_left_at_the_windows_end_pass() -> None:
    worker_abab.check_supply(succeeded_at_end=59_999, inserted=60_000, window_s=8)


def test_every_job_done_by_the_windows_end_is_refused_naming_the_count() -> None:
    with pytest.raises(worker_abab.RanOut, match="all 60,000 jobs were done before the 8 s"):
        worker_abab.check_supply(succeeded_at_end=60_000, inserted=60_000, window_s=8)


def test_main_says_so_on_one_line_and_exits_2(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    def run_that_ran_out(*args: Any, **kwargs: Any) -> dict[str, float]:
        worker_abab.check_supply(succeeded_at_end=60_000, inserted=60_000, window_s=8)
        raise AssertionError("not reached")

    monkeypatch.setattr(worker_abab, "one_run", run_that_ran_out)
    assert worker_abab.main([str(tmp_path), "--pairs", "1"]) == 2
    out = capsys.readouterr()
    assert out.out == ""
    assert out.err.count("\n") == 1
    assert out.err.startswith("A1: all 60,000 jobs were done")
