"""The supervisor's DatabaseSession against a real server: a round trip answers with a
typed result, and one that outlives its client-side deadline fails at that deadline (not
at the server's statement_timeout), after which the session connects afresh."""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

import psycopg
import pytest

import pgworkerd
from pgworkerd.housekeeping import Answer, DatabaseSession, Failure

LEASE_TTL_S = 6.0  # round trips capped at 2 s (statement_timeout too), never under 0.3 s


def test_a_round_trip_answers_with_its_value(db_dsn):
    session = DatabaseSession(database_url=db_dsn, lease_ttl_s=LEASE_TTL_S)
    try:
        result = session.attempt("add", lambda conn: conn.execute("SELECT 1 + 1").fetchone())
        assert result == Answer((2,))
        assert result.ok and result.value == (2,)
        assert session.queried_since_drain

        # Work that returns None answered all the same: not to be taken for a failure.
        nothing = session.attempt("nothing", lambda conn: None)
        assert nothing.ok and isinstance(nothing, Answer) and nothing.value is None
    finally:
        session.close()


def test_a_round_trip_past_its_deadline_fails_then_the_session_reconnects(db_dsn, conn):
    disconnects = []
    session = DatabaseSession(
        database_url=db_dsn,
        lease_ttl_s=LEASE_TTL_S,
        on_disconnect=lambda: disconnects.append(True),
        # The next lease to act on is due now: the budget falls to its floor, 0.3 s.
        answer_by=time.monotonic,
    )
    try:
        first = session.attempt("backend", lambda c: c.info.backend_pid)
        assert first.ok

        started = time.monotonic()
        result = session.attempt("sleep", lambda c: c.execute("SELECT pg_sleep(5)").fetchone())
        elapsed = time.monotonic() - started
        assert isinstance(result, Failure) and not result.ok
        assert result.what == "sleep"
        assert "no answer from the database within 0.30s" in (result.error or "")
        assert elapsed < 1.5, f"ended by the client-side deadline, took {elapsed:.2f}s"
        assert session.conn is None and disconnects == [True], "the connection was dropped"

        # Backing off from reconnecting for a moment: not tried, and said so.
        backing_off = session.attempt("backend", lambda c: c.info.backend_pid)
        assert backing_off == Failure("backend", None)

        time.sleep(0.3)
        again = session.attempt("backend", lambda c: c.info.backend_pid)
        assert again.ok and again.value != first.value, "a new connection, a new backend"
        assert conn.execute("SELECT 1").fetchone() == (1,), "the server itself is fine"
    finally:
        session.close()
        session.close()  # safe twice


def _blocked(conn: psycopg.Connection[Any], pid: int) -> bool:
    row = conn.execute("SELECT cardinality(pg_blocking_pids(%s)) > 0", [pid]).fetchone()
    return bool(row and row[0])


def test_a_round_trip_a_deadlock_rolled_back_runs_again_on_the_same_connection(
    db_dsn: str, conn: psycopg.Connection[Any], caplog: pytest.LogCaptureFixture
) -> None:
    # The supervisor's work locks a, then b; an application transaction holds b, then
    # waits for a. The supervisor's backend finds the deadlock (the application's would
    # only after a minute), so its transaction is the one rolled back.
    a, b = pgworkerd.enqueue_many(conn, [{"kind": "k", "payload": i} for i in range(2)])
    session = DatabaseSession(database_url=db_dsn, lease_ttl_s=LEASE_TTL_S)
    runs: list[int] = []

    def work(c: psycopg.Connection[Any]) -> int:
        runs.append(c.info.backend_pid)
        with c.transaction():
            for job in (a, b):
                c.execute("SELECT FROM pgworkerd.jobs WHERE id = %s FOR UPDATE", [job])
        return c.info.backend_pid

    with psycopg.connect(db_dsn) as application:
        application.execute("SET deadlock_timeout = '1min'")
        application.execute("SELECT FROM pgworkerd.jobs WHERE id = %s FOR UPDATE", [b])
        try:
            first = session.attempt("set", lambda c: c.execute("SET deadlock_timeout = '300ms'"))
            assert first.ok and session.conn is not None
            pid = session.conn.info.backend_pid

            def close_the_cycle() -> None:
                deadline = time.monotonic() + 10
                while not _blocked(conn, pid) and time.monotonic() < deadline:
                    time.sleep(0.01)
                # Waits until the supervisor's transaction is rolled back; its second
                # run then waits for this one's commit.
                application.execute("SELECT FROM pgworkerd.jobs WHERE id = %s FOR UPDATE", [a])
                time.sleep(0.1)
                application.commit()

            closing = threading.Thread(target=close_the_cycle)
            closing.start()
            with caplog.at_level(logging.WARNING, logger="pgworkerd.supervisor"):
                # In this thread: the round trip's deadline is a SIGALRM.
                result = session.attempt("lock two jobs", work)
            closing.join(10)
            assert result == Answer(pid), "answered, on the same backend"
            assert runs == [pid, pid]
            assert session.conn is not None and not session.conn.closed
        finally:
            session.close()
    # One line that says what happened, not "database error in supervisor".
    lines = [(r.levelno, r.getMessage()) for r in caplog.records]
    assert lines == [
        (logging.WARNING, "deadlock detected in supervisor; retrying on the same connection")
    ]
    fields = caplog.records[0].pgworkerd_fields
    assert fields["sqlstate"] == "40P01" and fields["during"] == "lock two jobs"
