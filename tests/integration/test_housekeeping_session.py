"""The supervisor's DatabaseSession against a real server: a round trip answers with a
typed result, and one that outlives its client-side deadline fails at that deadline (not
at the server's statement_timeout), after which the session connects afresh."""

from __future__ import annotations

import time

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
