"""job.progress(): what a handler may report, and what reaches the sink."""

from __future__ import annotations

import math
import uuid

import pytest

from pgworkerd import progress
from pgworkerd.job import Job


class Recorder:
    def __init__(self) -> None:
        self.reports: list[tuple[int, uuid.UUID, float, str | None]] = []

    def report(self, job_id: int, token: uuid.UUID, percent: float, stage: str | None) -> None:
        self.reports.append((job_id, token, percent, stage))


def job(token: uuid.UUID | None) -> Job:
    return Job(id=3, kind="k", queue="q", payload={}, attempt=1, max_attempts=5, lease_token=token)


@pytest.mark.parametrize(
    "percent",
    [
        *(-0.1, 100.5, math.nan, math.inf, -math.inf, "50", None, True, [1]),
        # Both raised OverflowError (math.isfinite); the second's repr is refused too.
        pytest.param(10**400, id="10**400"),
        pytest.param(-(10**5000), id="-10**5000"),
    ],
    ids=repr,
)
def test_a_percent_outside_0_to_100_or_not_a_number_raises(percent: object) -> None:
    with pytest.raises(ValueError, match="progress needs a percent from 0 to 100"):
        job(uuid.uuid4()).progress(percent)  # type: ignore[arg-type]


def test_a_stage_must_be_text() -> None:
    with pytest.raises(ValueError, match="stage must be a string or None, got int"):
        job(uuid.uuid4()).progress(5, 3)  # type: ignore[arg-type]


def test_reports_reach_the_installed_sink_cleaned() -> None:
    recorder = Recorder()
    token = uuid.uuid4()
    previous = progress.install(recorder)
    try:
        job(token).progress(0)
        job(token).progress(50, "a\x00b")
        job(token).progress(100, "s" * 500)
        job(None).progress(10)  # no lease (built by hand): nothing to fence a write by
    finally:
        progress.install(previous)
    assert recorder.reports == [
        (3, token, 0.0, None),
        (3, token, 50.0, "a\\u0000b"),
        (3, token, 100.0, "s" * progress.MAX_STAGE_CHARS),
    ]


def test_without_a_sink_progress_only_checks() -> None:
    previous = progress.install(None)
    try:
        job(uuid.uuid4()).progress(30, "fine")
        with pytest.raises(ValueError):
            job(uuid.uuid4()).progress(300)
    finally:
        progress.install(previous)
