"""What a worker child tells its supervisor once a batch's successes are written: the
`done` names each job's outcome and handler time only for a supervisor that counts them
(one serving /metrics: WorkerSpec.report_outcomes). A real pipe, read by the
supervisor's own reader; the write to the database is not part of `written`."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from typing import Any, cast

import pytest

from pgworkerd.ipc import Done, StatusReader, StatusWriter
from pgworkerd.job import Job
from pgworkerd.storage.store import JobStore
from pgworkerd.worker.outcome_writer import OutcomeWriter
from pgworkerd.worker.success_buffer import Success, SuccessBuffer


@pytest.fixture
def pipe() -> Iterator[tuple[int, int]]:
    r, w = os.pipe()
    yield r, w
    os.close(r)
    os.close(w)


def _success(job_id: int) -> Success:
    job = Job(job_id, "k", "q", None, 1, 5, lease_token=uuid.uuid4())
    return Success(job, None, 1.5)


@pytest.mark.parametrize("report", [True, False])
def test_a_done_names_outcomes_only_when_the_supervisor_counts_them(
    pipe: tuple[int, int], report: bool
) -> None:
    r, w = pipe
    writer = OutcomeWriter(
        JobStore(),
        cast(Any, None),  # `written` makes no use of the connection
        StatusWriter(w),
        SuccessBuffer(10),
        report_outcomes=report,
    )
    writer.written([_success(1), _success(2)], kept={1})  # 2's lease was lost
    outcomes = (("succeeded", 0.0015), ("lost", 0.0015)) if report else ()
    assert list(StatusReader(r).read()) == [Done((1, 2), outcomes)]
