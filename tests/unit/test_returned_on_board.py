"""A child that runs one job at a time says `finishing` on its start board (the job
it last saw return), not by a message: the supervisor's ledger must learn it just the
same, before it acts on the child's next message. Real pipes and shared memory; no
process is forked and no database is reached."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from typing import Any, cast

import pytest

from pgworkerd.ipc import (
    Claimed,
    ClaimedJob,
    ControlWriter,
    Done,
    StartBoard,
    StatusReader,
    StatusWriter,
)
from pgworkerd.job import Job
from pgworkerd.supervisor.children import ChildProcess
from pgworkerd.supervisor.ledger import JobState
from pgworkerd.worker.outcome_writer import OutcomeWriter
from pgworkerd.worker.success_buffer import Success, SuccessBuffer


def runtime_for(queue: str, job_max_runtime_s: float | None) -> float:
    return 60.0


@pytest.fixture
def child() -> Iterator[tuple[ChildProcess, StatusWriter]]:
    status_r, status_w = os.pipe()
    control_r, control_w = os.pipe()
    board = StartBoard(1)
    process = ChildProcess(
        pid=-1,  # never signalled here
        pool="default",
        index=1,
        status=StatusReader(status_r),
        control=ControlWriter(control_w, board),
        board=board,
        queues=frozenset({"default"}),
    )
    yield process, StatusWriter(status_w)
    process.close()
    for fd in (status_w, control_r):
        os.close(fd)


def state(process: ChildProcess, job_id: int) -> JobState:
    return process.ledger.jobs[job_id].state


def claimed(first: int, ids: list[int]) -> Claimed:
    jobs = tuple(ClaimedJob(i, uuid.uuid4().hex, "k", "default", None) for i in ids)
    return Claimed(first, 0.0, False, jobs)


def test_the_supervisor_reads_a_returned_job_off_the_board(
    child: tuple[ChildProcess, StatusWriter],
) -> None:
    process, status = child
    status.send(claimed(1, [7, 8]))
    process.read_messages(runtime_for)
    process.board.post_start(1)
    process.board.post_start(2)
    process.sync_starts()
    assert state(process, 8) is JobState.RUNNING
    process.board.post_returned()  # 8 returned: its outcome's write comes next
    process.sync_starts()
    assert state(process, 8) is JobState.FINISHING
    assert process.ledger.jobs[8].deadline() is None


def test_a_return_posted_before_a_message_is_read_before_that_message(
    child: tuple[ChildProcess, StatusWriter], monkeypatch: pytest.MonkeyPatch
) -> None:
    process, status = child
    status.send(claimed(1, [7]))
    process.read_messages(runtime_for)
    process.board.post_start(1)
    process.board.post_returned()
    # The next claim's `claimed` is unread when the supervisor looks: the board's job 1
    # is known, so it is finishing at once.
    status.send(claimed(2, [9]))
    seen: dict[int, JobState] = {}
    real_enter = process._enter

    def enter(message: Any, runtime: Any) -> None:
        job = process.ledger.jobs.get(7)
        if job is not None:
            seen[7] = job.state
        real_enter(message, runtime)

    monkeypatch.setattr(process, "_enter", enter)
    process.read_messages(runtime_for)
    assert seen == {7: JobState.FINISHING}
    status.send(Done((7,)))
    process.read_messages(runtime_for)
    assert set(process.ledger.jobs) == {9} and process.ledger.jobs[9].state is JobState.CLAIMED


def test_an_outcome_writer_that_posts_returns_sends_no_finishing_line() -> None:
    r, w = os.pipe()
    board = StartBoard(1)
    try:
        writer = OutcomeWriter(cast(Any, None), cast(Any, None), StatusWriter(w), SuccessBuffer(10))
        writer.post_returned = board.post_returned
        board.post_start(5)
        job = cast(Job, type("J", (), {"id": 99, "lease": None})())
        assert len(writer.announce([Success(job, None, 1.0)])) == 1
        assert board.returned() == (5,)
        os.set_blocking(r, False)
        with pytest.raises(BlockingIOError):
            os.read(r, 1)  # nothing was written to the pipe
        writer.post_returned = None  # a child with several slots: the message
        writer.announce([Success(job, None, 1.0)])
        assert list(StatusReader(r).read()) != []
    finally:
        board.close()
        os.close(w)
