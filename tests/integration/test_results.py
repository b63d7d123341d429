"""pgworkerd.result and pgworkerd.wait on a real PostgreSQL: results kept (NUL escaped,
oversized and unserialisable ones replaced by a marker), wait woken by the FINISHED
notification of each statement that makes a job final, with a constant number of
statements however long it waits."""

from __future__ import annotations

import asyncio
import re
import tempfile
import threading
import time
from collections.abc import Callable
from typing import Any

import psycopg
import pytest

import pgworkerd
from pgworkerd.encoding import RESULT_OMITTED, dump_result
from pgworkerd.job import Lease
from pgworkerd.storage.store import JobStore
from tests.integration.store_helpers import claim, expire_leases

Conn = psycopg.Connection[Any]


def finished(store: JobStore, conn: Conn, value: Any) -> int:
    """A job that ran and returned `value`."""
    job_id = pgworkerd.enqueue(conn, "k", {})
    (job,) = claim(store, conn)
    assert store.complete(conn, [(job.lease, dump_result(value))]) == {job_id}
    return job_id


def test_result_round_trips_with_nul_escaped(conn: Conn, store: JobStore) -> None:
    value = {"text": "a\x00b", "n": [1, 2.5, None, True], "\x00key": "x"}
    job_id = finished(store, conn, value)
    assert pgworkerd.result(conn, job_id) == {
        "text": "a\\u0000b",
        "n": [1, 2.5, None, True],
        "\\u0000key": "x",
    }
    assert pgworkerd.result(conn, finished(store, conn, None)) is None
    assert pgworkerd.result(conn, finished(store, conn, "plain")) == "plain"


def test_oversized_or_unserialisable_result_is_a_marker_and_the_job_succeeds(
    conn: Conn, store: JobStore
) -> None:
    big = finished(store, conn, "x" * (1024 * 1024 + 1))
    assert conn.execute("SELECT state FROM pgworkerd.jobs WHERE id = %s", (big,)).fetchone() == (
        "succeeded",
    )
    marker = pgworkerd.result(conn, big)
    assert re.fullmatch(
        r"1048579 bytes of JSON, over the limit of 1048576 bytes", marker[RESULT_OMITTED]
    )
    odd = pgworkerd.result(conn, finished(store, conn, {"when": object()}))
    assert odd[RESULT_OMITTED].startswith("not JSON-serialisable: Object of type object")
    nan = pgworkerd.result(conn, finished(store, conn, float("nan")))
    assert nan[RESULT_OMITTED].startswith("not JSON-serialisable")
    # Just within the limit in bytes, with multi-byte characters: kept as it is.
    fits = "é" * ((1024 * 1024 - 2) // 2)
    assert pgworkerd.result(conn, finished(store, conn, fits)) == fits


def test_result_of_an_unknown_or_unfinished_job_raises(conn: Conn, store: JobStore) -> None:
    with pytest.raises(pgworkerd.JobNotFound, match="job 999 does not exist"):
        pgworkerd.result(conn, 999)
    queued = pgworkerd.enqueue(conn, "k", {})
    with pytest.raises(pgworkerd.NoResult, match="is queued") as raised:
        pgworkerd.result(conn, queued)
    assert raised.value.state == "queued"


class Trace:
    """Every statement a connection sends, read from libpq's own protocol trace: what
    reaches the server, whatever the code above it does."""

    def __init__(self, conn: Conn) -> None:
        self.conn = conn
        self.file = tempfile.NamedTemporaryFile("w+", suffix=".trace")  # noqa: SIM115

    def __enter__(self) -> Trace:
        self.conn.pgconn.trace(self.file.fileno())
        self.conn.pgconn.set_trace_flags(psycopg.pq.Trace.SUPPRESS_TIMESTAMPS)
        return self

    def __exit__(self, *exc: object) -> None:
        self.conn.pgconn.untrace()

    def statements(self) -> list[str]:
        """The text of each statement parsed or queried by the client."""
        self.file.seek(0)
        found = []
        for line in self.file:
            # "F	<len>	Parse	 "" "SELECT ..." ..." / "F	<len>	Query	 "..."
            match = re.match(r'F\t\d+\t(?:Parse\t "[^"]*"|Query\t) "(.*)', line)
            if match:
                found.append(match[1].split()[0].upper())
        return found

    def executions(self) -> int:
        self.file.seek(0)
        return sum(1 for line in self.file if re.match(r"F\t\d+\t(Execute|Query)\b", line))

    def close(self) -> None:
        self.file.close()


def finish_later(db_dsn: str, delay_s: float, action: Callable[[Conn, JobStore], Any]) -> None:
    def run() -> None:
        time.sleep(delay_s)
        with psycopg.connect(db_dsn, autocommit=True) as other:
            action(other, JobStore())

    threading.Thread(target=run, daemon=True).start()


def complete_all(conn: Conn, store: JobStore) -> None:
    running = conn.execute(
        "SELECT id, lease_token FROM pgworkerd.jobs WHERE state = 'running'"
    ).fetchall()
    store.complete(conn, [(Lease(i, t), '"done"') for i, t in running])


def test_wait_is_woken_by_the_completion_and_runs_a_constant_few_statements(
    conn: Conn, store: JobStore, db_dsn: str
) -> None:
    job_id = pgworkerd.enqueue(conn, "k", {})
    claim(store, conn)
    finish_later(db_dsn, 1.5, complete_all)
    trace = Trace(conn)
    started = time.monotonic()
    with trace:
        state = pgworkerd.wait(conn, job_id, timeout=30)
    waited = time.monotonic() - started
    assert state == "succeeded" and waited >= 1.4
    # LISTEN, the mark, the read of the final state, UNLISTEN: no loop over the table
    # during the 1.5 s it waited.
    assert trace.statements() == ["LISTEN", "UPDATE", "SELECT", "UNLISTEN"]
    assert trace.executions() == 4
    trace.close()
    assert pgworkerd.result(conn, job_id) == "done"


def test_wait_times_out_and_leaves_the_connection_usable(conn: Conn, store: JobStore) -> None:
    job_id = pgworkerd.enqueue(conn, "k", {})
    started = time.monotonic()
    with pytest.raises(TimeoutError, match=f"job {job_id} is not final after 0.5s"):
        pgworkerd.wait(conn, job_id, timeout=0.5)
    assert 0.5 <= time.monotonic() - started < 5
    assert conn.execute("SELECT 1").fetchone() == (1,)
    # Not listening any more: a later completion leaves nothing behind.
    assert conn.execute("SELECT count(*) FROM pg_listening_channels()").fetchone() == (0,)


def test_wait_on_a_final_job_returns_at_once(conn: Conn, store: JobStore) -> None:
    done = finished(store, conn, 1)
    cancelled = pgworkerd.enqueue(conn, "k", {})
    pgworkerd.cancel(conn, cancelled)
    assert pgworkerd.wait(conn, done, timeout=0) == "succeeded"
    assert pgworkerd.wait(conn, cancelled) == "cancelled"
    with pytest.raises(pgworkerd.JobNotFound):
        pgworkerd.wait(conn, 12345, timeout=1)


def fail_all(conn: Conn, store: JobStore) -> None:
    for job_id, token in conn.execute(
        "SELECT id, lease_token FROM pgworkerd.jobs WHERE state = 'running'"
    ).fetchall():
        store.fail(conn, Lease(job_id, token), "boom")


def rescue_all(conn: Conn, store: JobStore) -> None:
    expire_leases(conn)
    store.rescue(conn)


def cancel_all(conn: Conn, store: JobStore) -> None:
    ids = [row[0] for row in conn.execute("SELECT id FROM pgworkerd.jobs WHERE state = 'running'")]
    store.cancel(conn, ids)


def complete_with_claim(conn: Conn, store: JobStore) -> None:
    running = conn.execute(
        "SELECT id, lease_token FROM pgworkerd.jobs WHERE state = 'running'"
    ).fetchall()
    store.complete_and_claim(
        conn,
        [(Lease(i, t), None) for i, t in running],
        queues=["default"],
        limit=5,
        lease_ttl_s=30,
        worker="w",
    )


@pytest.mark.parametrize(
    ("action", "final"),
    [
        (fail_all, "dead"),
        (rescue_all, "dead"),
        (cancel_all, "cancelled"),
        (complete_with_claim, "succeeded"),
    ],
    ids=["fail", "rescue", "cancel", "complete_and_claim"],
)
def test_each_statement_that_makes_a_job_final_wakes_wait(
    conn: Conn, store: JobStore, db_dsn: str, action: Any, final: str
) -> None:
    job_id = pgworkerd.enqueue(conn, "k", {}, max_attempts=1)
    claim(store, conn)
    finish_later(db_dsn, 0.5, action)
    assert pgworkerd.wait(conn, job_id, timeout=20) == final


def test_a_retried_failure_is_not_final_and_wait_goes_on(
    conn: Conn, store: JobStore, db_dsn: str
) -> None:
    job_id = pgworkerd.enqueue(conn, "k", {}, max_attempts=2)
    claim(store, conn)
    store.fail(conn, claim_lease(conn, job_id), "first")  # back to queued, not final

    def second_attempt(other: Conn, other_store: JobStore) -> None:
        other.execute("UPDATE pgworkerd.jobs SET run_at = now() WHERE id = %s", (job_id,))
        claim(other_store, other)
        fail_all(other, other_store)

    finish_later(db_dsn, 0.5, second_attempt)
    assert pgworkerd.wait(conn, job_id, timeout=20) == "dead"


def claim_lease(conn: Conn, job_id: int) -> Any:
    row = conn.execute("SELECT lease_token FROM pgworkerd.jobs WHERE id = %s", (job_id,)).fetchone()
    return Lease(job_id, row[0])


def test_wait_needs_a_connection_outside_a_transaction(db_dsn: str, conn: Conn) -> None:
    job_id = finished(JobStore(), conn, 1)
    with psycopg.connect(db_dsn) as plain:  # not autocommit
        # Idle: switched to autocommit for the wait, and back.
        assert pgworkerd.wait(plain, job_id) == "succeeded"
        assert plain.autocommit is False
        plain.execute("SELECT 1")  # a transaction is open now
        with pytest.raises(pgworkerd.WaitError, match="outside a transaction"):
            pgworkerd.wait(plain, job_id)


def test_wait_async(db_dsn: str, conn: Conn, store: JobStore) -> None:
    job_id = pgworkerd.enqueue(conn, "k", {})
    claim(store, conn)

    async def scenario() -> tuple[str, int]:
        ticks = 0

        async def ticker() -> None:
            nonlocal ticks
            while True:
                await asyncio.sleep(0.05)
                ticks += 1

        async with await psycopg.AsyncConnection.connect(db_dsn, autocommit=True) as aconn:
            task = asyncio.create_task(ticker())
            finish_later(db_dsn, 1.0, complete_all)
            state = await pgworkerd.wait_async(aconn, job_id, timeout=20)
            with pytest.raises(TimeoutError):
                await pgworkerd.wait_async(aconn, pgworkerd.enqueue(conn, "k", {}), timeout=0.3)
            task.cancel()
        return state, ticks

    state, ticks = asyncio.run(scenario())
    assert state == "succeeded"
    assert ticks >= 5  # the event loop ran on while it waited


def test_no_notification_for_a_job_nobody_waits_for(conn: Conn, store: JobStore) -> None:
    conn.execute('LISTEN "pgworkerd.finished"')
    finished(store, conn, 1)
    assert list(conn.notifies(timeout=0.3)) == []


def test_wait_on_a_waiting_job_waits_for_its_end_and_times_out(
    conn: Conn, store: JobStore, db_dsn: str
) -> None:
    # Its mark matched only queued and running jobs: wait() marked and read a waiting job
    # in a loop (40,150 transactions in 5 s), its timeout never checked.
    parent = pgworkerd.enqueue(conn, "parent", {})
    child = pgworkerd.enqueue(conn, "child", {}, after=[parent])
    trace = Trace(conn)
    try:
        with trace, pytest.raises(TimeoutError, match=f"job {child} is not final after 0.5s"):
            pgworkerd.wait(conn, child, timeout=0.5)
        assert trace.executions() <= 4, "no loop while it waited"
    finally:
        trace.close()
    finish_later(db_dsn, 1.0, lambda other, s: s.cancel(other, [parent]))
    assert pgworkerd.wait(conn, child, timeout=30) == "cancelled", "its cascade announces it"


@pytest.mark.parametrize(
    ("job_id", "error", "message"),
    [
        ("1", TypeError, "job_id must be an int, got str"),
        (1.0, TypeError, "job_id must be an int, got float"),
        (True, TypeError, "job_id must be an int, got bool"),
        ([1], TypeError, "job_id must be an int, got list"),
        (2**63, ValueError, "job_id must fit in 64 bits"),
    ],
)
def test_a_bad_job_id_is_refused_before_any_sql(
    db_dsn: str, conn: Conn, job_id: Any, error: type[Exception], message: str
) -> None:
    # cancel(conn, "1") cancelled job 1 and said False; the others raised database
    # errors that aborted the caller's transaction.
    first = pgworkerd.enqueue(conn, "k", {})
    assert first == 1
    with psycopg.connect(db_dsn) as tx:
        tx.execute("SELECT 1")
        for call in (pgworkerd.cancel, pgworkerd.retry, pgworkerd.result):
            with pytest.raises(error, match=re.escape(message)):
                call(tx, job_id)
        with pytest.raises(error, match=re.escape(message)):
            asyncio.run(_wait_async_on(db_dsn, job_id))
        assert tx.info.transaction_status == psycopg.pq.TransactionStatus.INTRANS
    with pytest.raises(error, match=re.escape(message)):
        pgworkerd.wait(conn, job_id)
    assert conn.execute("SELECT state FROM pgworkerd.jobs").fetchall() == [("queued",)]


async def _wait_async_on(db_dsn: str, job_id: Any) -> str:
    async with await psycopg.AsyncConnection.connect(db_dsn, autocommit=True) as aconn:
        return await pgworkerd.wait_async(aconn, job_id, timeout=1)


@pytest.mark.parametrize(
    ("timeout", "error", "message"),
    [
        (float("nan"), ValueError, "timeout must be a number of seconds, got nan"),
        ("1", TypeError, "timeout must be seconds or None, got str"),
    ],
)
def test_a_bad_timeout_is_refused(
    conn: Conn, timeout: Any, error: type[Exception], message: str
) -> None:
    job_id = pgworkerd.enqueue(conn, "k", {})  # a nan deadline never passed: no return
    with pytest.raises(error, match=re.escape(message)):
        pgworkerd.wait(conn, job_id, timeout=timeout)


def test_a_result_with_a_lone_surrogate_is_a_marker_and_the_job_succeeds(
    conn: Conn, store: JobStore
) -> None:
    # It made psycopg raise while writing the success: the worker exited, and a job
    # that had succeeded ran again until it ended dead.
    job_id = finished(store, conn, {"text": "bad \ud800"})
    assert conn.execute("SELECT state FROM pgworkerd.jobs WHERE id = %s", (job_id,)).fetchone() == (
        "succeeded",
    )
    assert "surrogates not allowed" in pgworkerd.result(conn, job_id)[RESULT_OMITTED]
