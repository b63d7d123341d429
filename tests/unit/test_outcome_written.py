"""What a worker says once a batch of successes is written (OutcomeWriter.written): the
`done` of every job of the batch, each `succeeded` or `lost` by whether its lease held,
and a warning for each lost one; the whole batch (its usual case) and a batch with some
leases lost take different paths."""

from __future__ import annotations

import logging
import os
import uuid
from collections.abc import Iterator

import pytest

from pgworkerd.ipc import Done, Idle, StatusWriter
from pgworkerd.ipc.messages import decode
from pgworkerd.job import Job
from pgworkerd.storage.store import JobStore
from pgworkerd.worker.connection import WorkerConnection
from pgworkerd.worker.outcome_writer import OutcomeWriter
from pgworkerd.worker.success_buffer import Success, SuccessBuffer


@pytest.fixture
def pipe() -> Iterator[tuple[int, int]]:
    r, w = os.pipe()
    yield r, w
    os.close(r)
    os.close(w)


def _writer(fd: int) -> OutcomeWriter:
    # written() uses neither the store nor the connection: it only logs and says.
    connection: WorkerConnection = None  # type: ignore[assignment]
    return OutcomeWriter(JobStore("pgworkerd"), connection, StatusWriter(fd), SuccessBuffer(10))


def _successes(ids: list[int]) -> list[Success]:
    return [
        Success(Job(i, "k", "q", None, 1, 5, lease_token=uuid.UUID(int=i)), None, i * 1.5)
        for i in ids
    ]


def _said(fd: int) -> list[object]:
    return [decode(line) for line in os.read(fd, 65536).splitlines()]


def test_every_lease_held_says_done_succeeded_then_the_next_message(
    pipe: tuple[int, int], caplog: pytest.LogCaptureFixture
) -> None:
    r, w = pipe
    _writer(w).written(_successes([1, 2, 3]), {3, 1, 2}, then=Idle())
    assert _said(r) == [
        Done((1, 2, 3), (("succeeded", 0.0015), ("succeeded", 0.003), ("succeeded", 0.0045))),
        Idle(),
    ]
    assert not [rec for rec in caplog.records if rec.levelno >= logging.WARNING]


def test_lost_leases_say_lost_and_warn_for_each(
    pipe: tuple[int, int], caplog: pytest.LogCaptureFixture
) -> None:
    r, w = pipe
    _writer(w).written(_successes([1, 2, 3]), {2})
    assert _said(r) == [
        Done((1, 2, 3), (("lost", 0.0015), ("succeeded", 0.003), ("lost", 0.0045))),
    ]
    warned = [rec for rec in caplog.records if "lease lost; outcome discarded" in rec.getMessage()]
    assert len(warned) == 2
