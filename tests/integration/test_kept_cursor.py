"""The cursor enqueue's barest call keeps with the caller's connection
(pgworkerd/storage/kept_cursor.py): each id goes to its own caller, across threads on
one Connection and tasks on one AsyncConnection; a connection dropped unclosed is
freed by the cycle collector; a dumper registered later is not seen by the kept
cursor, a client_encoding set later is; a closed or failed connection behaves as with
`conn.execute`; in pipeline mode every enqueue path returns its own rows' ids."""

from __future__ import annotations

import asyncio
import gc
import sys
import threading
import time
import uuid
import warnings
from typing import Any
from unittest import mock

import psycopg
import pytest
from psycopg.types.string import StrDumper

import pgworkerd
from pgworkerd.contrib import otel
from pgworkerd.storage import inserts
from pgworkerd.storage.kept_cursor import CURSORS

THREADS, TASKS, CALLS = 2, 8, 300


@pytest.fixture(autouse=True)
def _untraced(monkeypatch: pytest.MonkeyPatch) -> None:
    """Enqueue takes the kept cursor only when it records no trace context. Another
    test file run earlier in this process (tests/process/test_otel.py) may have set a
    global TracerProvider, which OpenTelemetry never lets go: these tests then ran the
    traced path, found no kept cursor and failed, by the order of the files alone."""
    monkeypatch.setattr(otel, "tracing", lambda: False)


def _check_each_id(conn: psycopg.Connection[Any], calls: dict[int, tuple[str, int]]) -> None:
    """Each id is the row its caller enqueued: kind and payload as that caller gave."""
    rows = conn.execute(
        "SELECT id, kind, (payload->>'n')::int FROM pgworkerd.jobs WHERE id = ANY(%s)",
        (list(calls),),
    ).fetchall()
    assert len(calls) == len(rows)
    assert {job_id: (kind, n) for job_id, kind, n in rows} == calls


def _read_when_all_have_executed(read: Any, parties: int) -> Any:
    """`read` (inserts._returned_id), run when each of `parties` threads has executed its
    insert and come to its read: the window where a cursor shared between them would
    hold the last one's result, read by all."""
    executed = threading.Barrier(parties, timeout=30)

    def read_when_all_have_executed(cursor: Any) -> int:
        executed.wait()
        return int(read(cursor))

    return read_when_all_have_executed


def test_two_threads_on_one_connection_each_get_their_own_ids(db_dsn, conn):
    calls: dict[int, tuple[str, int]] = {}
    returned: list[int] = []
    with psycopg.connect(db_dsn, autocommit=True) as shared:
        start = threading.Barrier(THREADS)

        def enqueue(kind: str) -> None:
            start.wait()
            for n in range(CALLS):
                job_id = pgworkerd.enqueue(shared, kind, {"n": n})
                returned.append(job_id)
                calls[job_id] = (kind, n)

        threads = [threading.Thread(target=enqueue, args=(f"t{i}",)) for i in range(THREADS)]
        switch = sys.getswitchinterval()
        sys.setswitchinterval(1e-6)  # threads switch between any two steps of a call
        read = _read_when_all_have_executed(inserts._returned_id, THREADS)
        try:
            with mock.patch.object(inserts, "_returned_id", read):
                for thread in threads:
                    thread.start()
                for thread in threads:
                    thread.join()
        finally:
            sys.setswitchinterval(switch)
        kept = len(vars(shared)[CURSORS])
    assert len(returned) == len(calls) == THREADS * CALLS  # no id returned twice
    _check_each_id(conn, calls)
    assert kept == THREADS  # one cursor kept per thread


def test_tasks_on_one_async_connection_each_get_their_own_ids(db_dsn, conn):
    # psycopg 3.3's AsyncCursor.execute returns with no await between the query's
    # result and the read of the id, so unaided the tasks of one thread never
    # interleave there and a cursor shared by them would go unseen. Its execute here
    # yields once after the real result (on the real database), as a psycopg that
    # awaited there would: another task's execute then runs in that window, and on a
    # shared cursor the first task would read the other's id.
    real_execute = psycopg.AsyncCursor.execute

    async def execute_then_yield(self: Any, *args: Any, **kwargs: Any) -> Any:
        result = await real_execute(self, *args, **kwargs)
        await asyncio.sleep(0)
        return result

    calls: dict[int, tuple[str, int]] = {}

    async def enqueue(aconn: psycopg.AsyncConnection[Any], kind: str) -> None:
        for n in range(CALLS // 4):
            calls[await pgworkerd.enqueue_async(aconn, kind, {"n": n})] = (kind, n)

    async def main() -> None:
        async with await psycopg.AsyncConnection.connect(db_dsn, autocommit=True) as aconn:
            await asyncio.gather(*(enqueue(aconn, f"task{i}") for i in range(TASKS)))

    with mock.patch.object(psycopg.AsyncCursor, "execute", execute_then_yield):
        asyncio.run(main())
    assert len(calls) == TASKS * (CALLS // 4)  # no id returned twice
    _check_each_id(conn, calls)


def test_a_call_between_another_calls_execute_and_its_read_gets_its_own_id(db_dsn, conn):
    # A second enqueue on the same thread and connection while the first has its
    # cursor (a signal handler, a finaliser): here, run from inside the first's read
    # of its id. The first call's cursor is out of the dict, so the second makes its own.
    calls: dict[int, tuple[str, int]] = {}
    with psycopg.connect(db_dsn, autocommit=True) as pconn:
        pgworkerd.enqueue(pconn, "warm", {"n": 0})  # this thread's cursor is kept
        read = inserts._returned_id
        inner: list[int] = []
        reads = iter([True])  # the first read (the outer call's) runs the inner call

        def read_after_another_enqueue(cursor: Any) -> int:
            if next(reads, False):
                inner.append(pgworkerd.enqueue(pconn, "inner", {"n": 2}))
            return read(cursor)

        with mock.patch.object(inserts, "_returned_id", read_after_another_enqueue):
            outer = pgworkerd.enqueue(pconn, "outer", {"n": 1})
    assert outer != inner[0]
    calls[outer] = ("outer", 1)
    calls[inner[0]] = ("inner", 2)
    _check_each_id(conn, calls)


def _sessions(conn: psycopg.Connection[Any], application_name: str) -> int:
    count: int = conn.execute(
        "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s",
        (application_name,),
    ).fetchone()[0]
    return count


def _wait_for_sessions(conn: psycopg.Connection[Any], name: str, count: int) -> int:
    deadline = time.monotonic() + 10
    while (seen := _sessions(conn, name)) != count and time.monotonic() < deadline:
        time.sleep(0.05)
    return seen


def test_a_connection_dropped_unclosed_is_freed_by_the_cycle_collector(db_dsn, conn):
    # connection -> its dict of cursors -> cursor -> connection is a cycle: dropped
    # without close(), the connection (and its server session) goes at the next cycle
    # collection, not at once. A thread-local cache would keep it open for the thread's
    # life, gc.collect() or not.
    name = f"pgw-dropped-{uuid.uuid4().hex[:8]}"
    dropped = psycopg.connect(db_dsn, autocommit=True, application_name=name)
    pgworkerd.enqueue(dropped, "k", {"n": 1})
    assert _sessions(conn, name) == 1
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ResourceWarning)  # psycopg's "deleted while open"
        gc.disable()
        try:
            del dropped
            assert _wait_for_sessions(conn, name, 0) == 1, "kept until a collection"
            gc.collect()
        finally:
            gc.enable()
    assert _wait_for_sessions(conn, name, 0) == 0


def test_a_dumper_registered_after_the_first_enqueue_is_not_seen_by_the_kept_cursor(db_dsn, conn):
    # The kept cursor copied the connection's adapters when it was made: enqueue's
    # three str parameters (queue, kind, payload JSON) are dumped as then, on the
    # thread whose cursor it is. Another thread's new cursor, and the other statements
    # (by conn.execute), use the connection's adapters of the moment.
    class Shouting(StrDumper):
        def dump(self, obj: str) -> bytes:
            return super().dump(obj.upper())

    with psycopg.connect(db_dsn, autocommit=True) as pconn:
        pgworkerd.enqueue(pconn, "first", {"n": 0}, queue="mail")
        pconn.adapters.register_dumper(str, Shouting)
        kept = pgworkerd.enqueue(pconn, "kept", {"n": 1}, queue="mail")
        other_thread: list[int] = []
        thread = threading.Thread(
            target=lambda: other_thread.append(
                pgworkerd.enqueue(pconn, "new", {"n": 2}, queue="mail")
            )
        )
        thread.start()
        thread.join()
        other_statement = pgworkerd.enqueue(pconn, "one", {"n": 3}, queue="mail", priority=1)
    rows = dict(
        conn.execute("SELECT id, (queue, kind, payload::text)::text FROM pgworkerd.jobs").fetchall()
    )
    assert rows[kept] == '(mail,kept,"{""n"": 1}")'
    assert rows[other_thread[0]] == '(MAIL,NEW,"{""N"": 2}")'
    assert rows[other_statement] == '(MAIL,ONE,"{""N"": 3}")'


def test_a_closed_connection_raises_as_before(db_dsn):
    with psycopg.connect(db_dsn, autocommit=True) as pconn:
        pgworkerd.enqueue(pconn, "k", {"n": 1})  # a cursor is kept
        pconn.close()
        with pytest.raises(psycopg.OperationalError, match=r"^the connection is closed$"):
            pgworkerd.enqueue(pconn, "k", {"n": 2})


def test_a_broken_connection_raises_as_before(db_dsn, conn):
    with psycopg.connect(db_dsn, autocommit=True) as pconn:
        pgworkerd.enqueue(pconn, "k", {"n": 1})
        conn.execute("SELECT pg_terminate_backend(%s)", (pconn.info.backend_pid,))
        with pytest.raises(psycopg.OperationalError):
            pgworkerd.enqueue(pconn, "k", {"n": 2})  # the server's goodbye
        assert pconn.broken
        with pytest.raises(psycopg.OperationalError, match=r"^the connection is closed$"):
            pgworkerd.enqueue(pconn, "k", {"n": 3})


def test_a_failed_transaction_raises_as_before_and_the_next_one_gets_its_id(db_dsn, conn):
    with psycopg.connect(db_dsn) as pconn:
        pgworkerd.enqueue(pconn, "k", {"n": 1})
        with pytest.raises(psycopg.errors.DivisionByZero):
            pconn.execute("SELECT 1 / 0")
        with pytest.raises(psycopg.errors.InFailedSqlTransaction):
            pgworkerd.enqueue(pconn, "k", {"n": 2})
        pconn.rollback()
        job_id = pgworkerd.enqueue(pconn, "after", {"n": 3})
        pconn.commit()
    _check_each_id(conn, {job_id: ("after", 3)})


def test_a_client_encoding_set_after_the_first_enqueue_is_used(db_dsn, conn):
    # psycopg keeps a cursor's str dumpers, each with the encoding of its making, while
    # the same query object runs again: the kept cursor is replaced when the
    # connection's client_encoding is no longer the one it was made under.
    with psycopg.connect(db_dsn, autocommit=True) as pconn:
        pgworkerd.enqueue(pconn, "k", {"s": "a"})  # a cursor is kept, made under UTF8
        pconn.execute("SET client_encoding TO 'LATIN1'")
        latin1 = pgworkerd.enqueue(pconn, "k\u00e9", {"s": "\u00e9"})
        pconn.execute("SET client_encoding TO 'UTF8'")
        utf8 = pgworkerd.enqueue(pconn, "k\u00e8", {"s": "\u00e8"})
    rows = conn.execute(
        "SELECT id, kind, payload->>'s' FROM pgworkerd.jobs WHERE id = ANY(%s)",
        ([latin1, utf8],),
    ).fetchall()
    assert {job_id: (kind, s) for job_id, kind, s in rows} == {
        latin1: ("k\u00e9", "\u00e9"),
        utf8: ("k\u00e8", "\u00e8"),
    }


def test_in_pipeline_mode_each_enqueue_returns_its_own_rows_ids(db_dsn, conn):
    # In pipeline mode a statement's result comes when the pipeline is synced or a
    # fetch asks for it: the barest call (AssertionError before), a one-job statement
    # (IndexError) and enqueue_many ([]) each wait for theirs.
    calls: dict[int, tuple[str, int]] = {}
    with psycopg.connect(db_dsn, autocommit=True) as pconn:
        pgworkerd.enqueue(pconn, "k", {"n": 0})  # a cursor is kept
        with pconn.pipeline():
            calls[pgworkerd.enqueue(pconn, "bare", {"n": 1})] = ("bare", 1)
            calls[pgworkerd.enqueue(pconn, "one", {"n": 2}, priority=3)] = ("one", 2)
            many = pgworkerd.enqueue_many(
                pconn, [{"kind": "many", "payload": {"n": n}} for n in (3, 4)]
            )
            calls.update(zip(many, [("many", 3), ("many", 4)], strict=True))
            calls[pgworkerd.enqueue(pconn, "bare", {"n": 5})] = ("bare", 5)
    assert len(calls) == 5
    _check_each_id(conn, calls)


def test_in_async_pipeline_mode_each_enqueue_returns_its_own_rows_ids(db_dsn, conn):
    calls: dict[int, tuple[str, int]] = {}

    async def main() -> None:
        async with await psycopg.AsyncConnection.connect(db_dsn, autocommit=True) as aconn:
            await pgworkerd.enqueue_async(aconn, "k", {"n": 0})
            async with aconn.pipeline():
                calls[await pgworkerd.enqueue_async(aconn, "bare", {"n": 1})] = ("bare", 1)
                one = await pgworkerd.enqueue_async(aconn, "one", {"n": 2}, priority=3)
                calls[one] = ("one", 2)
                many = await pgworkerd.enqueue_many_async(
                    aconn, [{"kind": "many", "payload": {"n": n}} for n in (3, 4)]
                )
                calls.update(zip(many, [("many", 3), ("many", 4)], strict=True))
                calls[await pgworkerd.enqueue_async(aconn, "bare", {"n": 5})] = ("bare", 5)

    asyncio.run(main())
    assert len(calls) == 5
    _check_each_id(conn, calls)


def test_in_pipeline_mode_wait_returns_the_jobs_state(db_dsn, conn):
    # wait's LISTEN returns no rows: fetched in pipeline mode, where fetchall raised
    # ProgrammingError for it, it counts as none.
    conn.autocommit = True
    job_id = pgworkerd.enqueue(conn, "k", {"n": 1})
    assert pgworkerd.cancel(conn, job_id)
    with psycopg.connect(db_dsn, autocommit=True) as pconn, pconn.pipeline():
        assert pgworkerd.wait(pconn, job_id, timeout=5) == "cancelled"
