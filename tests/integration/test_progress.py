"""Progress writes on a real PostgreSQL: fenced by the lease, throttled by the writer
thread, the last value kept, and cleared by the next claim."""

from __future__ import annotations

import threading
import time
import uuid
from typing import Any

import psycopg
import pytest

import pgworkerd
from pgworkerd import progress
from pgworkerd.storage.progress import write_progress
from pgworkerd.storage.store import JobStore
from tests.daemon import wait_until
from tests.integration.store_helpers import claim, expire_leases

Conn = psycopg.Connection[Any]


def progress_of(conn: Conn, job_id: int) -> tuple[Any, ...]:
    row = conn.execute(
        "SELECT progress, progress_stage FROM pgworkerd.jobs WHERE id = %s", (job_id,)
    ).fetchone()
    assert row is not None
    return tuple(row)


def test_only_the_lease_that_runs_the_job_writes(conn: Conn, store: JobStore) -> None:
    job_id = pgworkerd.enqueue(conn, "k", {}, max_attempts=3)
    (job,) = claim(store, conn)
    token = job.lease_token
    assert token is not None
    assert write_progress(conn, "pgworkerd", {job_id: (token, 10.0, "one")}) == {job_id}
    assert write_progress(conn, "pgworkerd", {job_id: (uuid.uuid4(), 90.0, "x")}) == set()
    assert progress_of(conn, job_id) == (10.0, "one")
    # Rescued: the old holder's token no longer fences the row.
    expire_leases(conn)
    store.rescue(conn)
    assert write_progress(conn, "pgworkerd", {job_id: (token, 50.0, "stale")}) == set()
    # The next claim starts the attempt with no progress; the stale holder still cannot.
    conn.execute("UPDATE pgworkerd.jobs SET run_at = now() WHERE id = %s", (job_id,))
    (again,) = claim(store, conn)
    assert progress_of(conn, job_id) == (None, None)
    assert write_progress(conn, "pgworkerd", {job_id: (token, 50.0, "stale")}) == set()
    assert again.lease_token is not None
    assert write_progress(conn, "pgworkerd", {job_id: (again.lease_token, 5.0, None)}) == {job_id}


def test_a_value_reaching_the_row_after_its_success_is_kept_not_after_cancel(
    conn: Conn, store: JobStore
) -> None:
    done_id = pgworkerd.enqueue(conn, "k", {})
    cancelled_id = pgworkerd.enqueue(conn, "k", {})
    done, cancelled = sorted(claim(store, conn), key=lambda j: j.id)
    store.complete(conn, [(done.lease, None)])
    pgworkerd.cancel(conn, cancelled_id)
    values = {
        done_id: (done.lease.token, 100.0, "finished"),
        cancelled_id: (cancelled.lease.token, 100.0, "finished"),
    }
    assert write_progress(conn, "pgworkerd", values) == {done_id}
    assert progress_of(conn, done_id) == (100.0, "finished")
    assert progress_of(conn, cancelled_id) == (None, None)


class CountingConnection(psycopg.Connection[Any]):
    statements = 0

    def execute(self, *args: Any, **kwargs: Any) -> Any:
        type(self).statements += 1
        return super().execute(*args, **kwargs)


def test_a_tight_loop_of_reports_from_threads_is_throttled_and_the_last_value_kept(
    conn: Conn, store: JobStore, db_dsn: str
) -> None:
    ids = [pgworkerd.enqueue(conn, "k", {}) for _ in range(4)]
    jobs = claim(store, conn)
    writer = progress.ProgressWriter(
        lambda: CountingConnection.connect(db_dsn, autocommit=True), "pgworkerd", interval_s=0.2
    )
    previous = progress.install(writer)
    started = time.monotonic()
    try:

        def spin(job: pgworkerd.Job) -> None:
            for i in range(20_001):
                job.progress(i / 200, f"step {i}")

        threads = [threading.Thread(target=spin, args=(job,)) for job in jobs]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        elapsed = time.monotonic() - started
        # The last value of every job arrives, after at most an interval or two.
        wait_until(
            lambda: all(progress_of(conn, i) == (100.0, "step 20000") for i in ids),
            timeout_s=10,
            what="the last progress of each job",
        )
    finally:
        progress.install(previous)
    elapsed = max(elapsed, time.monotonic() - started)
    # 80,004 reports; one write per interval at most (plus the first), for all 4 jobs.
    assert CountingConnection.statements <= elapsed / 0.2 + 2, (CountingConnection.statements,)


def test_a_write_a_lock_timeout_rolled_back_keeps_the_connection(
    conn: Conn, store: JobStore, db_dsn: str, caplog: pytest.LogCaptureFixture
) -> None:
    # The progress connection waits 50 ms at most for a row lock; an application
    # transaction holds the job's row. The write fails (55P03) and is said; the
    # connection was fine and is kept: the next report is written on it.
    [job_id] = [pgworkerd.enqueue(conn, "k", {})]
    [job] = claim(store, conn)
    connects: list[psycopg.Connection[Any]] = []

    def connect() -> psycopg.Connection[Any]:
        connection = psycopg.connect(db_dsn, autocommit=True)
        connection.execute("SET lock_timeout = '50ms'")
        connects.append(connection)
        return connection

    writer = progress.ProgressWriter(connect, "pgworkerd", interval_s=0.05)
    try:
        with psycopg.connect(db_dsn) as application:
            application.execute("SELECT FROM pgworkerd.jobs WHERE id = %s FOR UPDATE", [job_id])
            assert job.lease_token is not None
            writer.report(job_id, job.lease_token, 10.0, "held")
            wait_until(
                lambda: [r for r in caplog.records if r.getMessage() == "progress not written"],
                what="the write to fail",
            )
            application.commit()
        assert "lock timeout" in caplog.records[-1].pgworkerd_fields["error"]
        assert progress_of(conn, job_id)[0] is None
        writer.report(job_id, job.lease_token, 20.0, "free")
        wait_until(lambda: progress_of(conn, job_id)[0] == 20.0, what="the next report")
        assert len(connects) == 1 and not connects[0].closed
    finally:
        for connection in connects:
            connection.close()
