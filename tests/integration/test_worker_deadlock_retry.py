"""A worker's outcome statement that the server rolls back as a deadlock's victim is
written again on the same connection: the connection was fine, only its transaction
ended. Its completion releases the job's workflow dependents in a trigger, so an
application transaction that holds a dependent and then waits for the job's row (a
cancel or a completion of its own, docs/workflows.md) crosses it. Psycopg makes a
deadlock (40P01) an OperationalError, which the worker took for a lost connection: it
logged "database connection lost", reconnected and warmed up before writing again."""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

import pgworkerd
from pgworkerd.ipc import Done, Finishing, StatusWriter
from pgworkerd.ipc.messages import decode
from pgworkerd.storage.store import JobStore
from pgworkerd.worker.connection import TRANSACTION_RETRIES
from pgworkerd.worker.outcome_writer import OutcomeWriter
from pgworkerd.worker.success_buffer import Success, SuccessBuffer
from tests.integration.store_helpers import claim
from tests.integration.test_worker_warm import worker_connection

Conn = psycopg.Connection[Any]


@pytest.fixture
def pipes() -> Iterator[tuple[tuple[int, int], tuple[int, int]]]:
    wake, status = os.pipe(), os.pipe()
    yield wake, status
    for fd in (*wake, *status):
        os.close(fd)


def _state(conn: Conn, job_id: int) -> str:
    row = conn.execute("SELECT state FROM pgworkerd.jobs WHERE id = %s", [job_id]).fetchone()
    assert row is not None
    return str(row[0])


def _wait_blocked(conn: Conn, pid: int) -> None:
    deadline = time.monotonic() + 10
    while True:
        row = conn.execute("SELECT cardinality(pg_blocking_pids(%s)) > 0", [pid]).fetchone()
        if row and row[0]:
            return
        assert time.monotonic() < deadline, "the worker's outcome never waited for a lock"
        time.sleep(0.01)


def test_an_outcome_rolled_back_by_a_deadlock_is_written_again_on_the_same_connection(
    db_dsn: str,
    conn: Conn,
    store: JobStore,
    pipes: tuple[tuple[int, int], tuple[int, int]],
    caplog: pytest.LogCaptureFixture,
) -> None:
    (wake_r, _), (status_r, status_w) = pipes
    parent = pgworkerd.enqueue(conn, "k", {})
    dependent = pgworkerd.enqueue(conn, "k", {}, after=[parent])
    [job] = claim(store, conn)
    assert job.id == parent and _state(conn, dependent) == "waiting"

    with (
        caplog.at_level(logging.INFO, logger="pgworkerd.worker"),
        worker_connection(db_dsn, store, wake_fd=wake_r) as connection,
        psycopg.connect(db_dsn) as application,
    ):
        worker_conn = connection.get()
        pid = worker_conn.info.backend_pid
        # The worker's backend looks for the deadlock (a while after it began to wait,
        # time for the application to close the cycle); the application's never does
        # first, so the worker's statement is the one rolled back.
        worker_conn.execute("SET deadlock_timeout = '300ms'")
        application.execute("SET deadlock_timeout = '1min'")
        application.execute("SELECT FROM pgworkerd.jobs WHERE id = %s FOR UPDATE", [dependent])

        writer = OutcomeWriter(store, connection, StatusWriter(status_w), SuccessBuffer(10))
        writer.successes.succeeded(Success(job, None, 1.0), 0.001)
        failed: list[BaseException] = []

        def flush() -> None:
            try:
                writer.flush()
            except BaseException as exc:  # reported by the assertion below
                failed.append(exc)

        flushing = threading.Thread(target=flush)
        flushing.start()
        # The completion has locked the parent's row, and its trigger waits for the
        # dependent's, which the application holds; the application now waits for the
        # parent's row: a cycle, which the worker's backend breaks by rolling back.
        _wait_blocked(conn, pid)
        application.execute("SELECT FROM pgworkerd.jobs WHERE id = %s FOR UPDATE", [parent])
        time.sleep(0.1)  # the worker's second try waits for the application's locks
        application.commit()
        flushing.join(10)
        assert not flushing.is_alive() and not failed

        # No reconnect: the same backend, the first connection.
        assert connection.get().info.backend_pid == pid
        assert connection.epoch == 1
        records = list(caplog.records)  # not the line of worker_connection's close

    # Written once: `finishing`, then `done` succeeded, said once each.
    said = [decode(line) for line in os.read(status_r, 65536).splitlines()]
    assert said == [Finishing((parent,)), Done((parent,), (("succeeded", 0.001),))]
    assert _state(conn, parent) == "succeeded"
    assert _state(conn, dependent) == "queued"  # released by the second try's trigger

    assert not [r for r in records if "connection lost" in r.getMessage()]
    retried = [r for r in records if r.getMessage().startswith("deadlock detected")]
    assert [(r.levelno, r.getMessage()) for r in retried] == [
        (logging.WARNING, "deadlock detected; retrying the outcomes on the same connection")
    ]
    assert retried[0].pgworkerd_fields["sqlstate"] == "40P01"


def test_a_transaction_fault_at_every_try_ends_in_a_reconnect_after_the_bounded_retries(
    db_dsn: str,
    store: JobStore,
    pipes: tuple[tuple[int, int], tuple[int, int]],
    caplog: pytest.LogCaptureFixture,
) -> None:
    # A statement_timeout (57014) that fires at every try on this connection: retried
    # on it TRANSACTION_RETRIES times, then the connection is dropped and reopened as
    # for any fault (the new one has no such timeout, and the write goes through).
    (wake_r, _), (_, status_w) = pipes
    tries: list[int] = []

    def write(c: Conn) -> int:
        tries.append(c.info.backend_pid)
        c.execute("SELECT pg_sleep(0.05)")
        return c.info.backend_pid

    with (
        caplog.at_level(logging.WARNING, logger="pgworkerd.worker"),
        worker_connection(db_dsn, store, wake_fd=wake_r) as connection,
    ):
        first = connection.get()
        first.execute("SET statement_timeout = '10ms'")
        writer = OutcomeWriter(store, connection, StatusWriter(status_w), SuccessBuffer(10))
        written = writer._until_written(write)
        assert connection.epoch == 2 and written == tries[-1] != tries[0]
        records = list(caplog.records)
    assert tries == [tries[0]] * (TRANSACTION_RETRIES + 1) + [written]
    canceled = [r for r in records if r.getMessage().startswith("statement canceled")]
    assert len(canceled) == TRANSACTION_RETRIES
    assert {r.pgworkerd_fields["sqlstate"] for r in canceled} == {"57014"}
    assert [r.getMessage() for r in records][-1] == "database connection lost"
