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


def test_the_default_backlog_lasts_the_pause_and_the_window_at_the_fastest_rate(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The fixed default of 60,000 ran out inside an 8 s window even for the defaults row."""
    inserted: list[int] = []

    def run(*args: Any, jobs: int, **kwargs: Any) -> dict[str, float]:
        inserted.append(jobs)
        raise worker_abab.RanOut("stop here")

    monkeypatch.setattr(worker_abab, "one_run", run)
    worker_abab.main([str(tmp_path), "--pairs", "1", "--window", "8"])
    worker_abab.main([str(tmp_path), "--pairs", "1", "--window", "8", "--jobs", "1000"])
    pause_and_window_s = worker_abab.STARTUP_S + 8
    assert inserted[0] >= 38_000 * pause_and_window_s  # round 16's fastest tuned run
    assert inserted[0] == worker_abab.default_jobs(8)
    assert inserted[1] == 1000
