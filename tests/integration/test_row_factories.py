"""Every public function (and pgworkerd.testing's) that takes the caller's connection
works whatever that connection's row_factory (a web app's `psycopg.connect(dsn,
row_factory=dict_row)`): pgworkerd reads its own statements' rows positionally
(storage/rows.py), not with the connection's factory. Each case asserts the function's
real return value and its effect, read back on a plain connection."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Any, TypeVar

import psycopg
import pytest
from psycopg.rows import RowFactory, dict_row, kwargs_row, namedtuple_row

import pgworkerd
from pgworkerd import config
from pgworkerd.encoding import dump_result
from pgworkerd.storage.store import JobStore
from pgworkerd.testing import assert_enqueued, drain
from tests.integration.store_helpers import claim

Conn = psycopg.Connection[Any]
AConn = psycopg.AsyncConnection[Any]


def _kwargs(**columns: Any) -> dict[str, Any]:
    return columns


FACTORIES: dict[str, RowFactory[Any]] = {
    "dict_row": dict_row,
    "namedtuple_row": namedtuple_row,
    "kwargs_row": kwargs_row(_kwargs),
}


def job(plain: Conn, job_id: int) -> tuple[Any, ...]:
    row = plain.execute(
        "SELECT state, priority, unique_key, kind FROM pgworkerd.jobs WHERE id = %s", (job_id,)
    ).fetchone()
    assert row is not None, f"job {job_id} was not inserted"
    return tuple(row)


def finished(plain: Conn, value: Any) -> int:
    """A job that ran and returned `value`, made on the plain connection."""
    store = JobStore()
    job_id = pgworkerd.enqueue(plain, "k", {})
    (claimed,) = claim(store, plain)
    assert store.complete(plain, [(claimed.lease, dump_result(value))]) == {job_id}
    return job_id


# -- sync: each case gets (the connection with the factory, a plain connection) -----------


def enqueue_bare(c: Conn, plain: Conn) -> None:
    job_id = pgworkerd.enqueue(c, "k", {"n": 1})
    assert type(job_id) is int and job(plain, job_id)[0] == "queued"


def enqueue_with_priority(c: Conn, plain: Conn) -> None:
    job_id = pgworkerd.enqueue(c, "k", {"n": 1}, priority=3)
    assert type(job_id) is int and job(plain, job_id)[:2] == ("queued", 3)


def enqueue_unique(c: Conn, plain: Conn) -> None:
    job_id = pgworkerd.enqueue(c, "k", {"n": 1}, unique_key="u1")
    assert type(job_id) is int and job(plain, job_id)[2] == "u1"
    # The unique_key held: the live job's id, found by a second statement.
    assert pgworkerd.enqueue(c, "k", {"n": 2}, unique_key="u1") == job_id


def enqueue_throttled(c: Conn, plain: Conn) -> None:
    job_id = pgworkerd.enqueue(c, "k", {"n": 1}, unique_key="t1", throttle=60)
    assert type(job_id) is int and job(plain, job_id)[0] == "queued"
    # The key's window holds a job: that one.
    assert pgworkerd.enqueue(c, "k", {"n": 2}, unique_key="t1", throttle=60) == job_id


def enqueue_debounced(c: Conn, plain: Conn) -> None:
    job_id = pgworkerd.enqueue(c, "k", {"n": 1}, unique_key="d1", debounce=60)
    assert type(job_id) is int and job(plain, job_id)[0] == "queued"
    # Folded into the queued job: its payload replaced.
    assert pgworkerd.enqueue(c, "k", {"n": 2}, unique_key="d1", debounce=60) == job_id
    payload = "SELECT payload FROM pgworkerd.jobs WHERE id = %s"
    assert plain.execute(payload, (job_id,)).fetchone() == ({"n": 2},)


def enqueue_many(c: Conn, plain: Conn) -> None:
    ids = pgworkerd.enqueue_many(c, [{"kind": "k", "payload": {"n": n}} for n in range(3)])
    assert len(set(ids)) == 3 and all(type(i) is int for i in ids)
    assert [job(plain, i)[0] for i in ids] == ["queued"] * 3


def chain(c: Conn, plain: Conn) -> None:
    ids = pgworkerd.chain(c, [{"kind": "a", "payload": {}}, {"kind": "b", "payload": {}}])
    assert [job(plain, i)[::3] for i in ids] == [("queued", "a"), ("waiting", "b")]


def batch(c: Conn, plain: Conn) -> None:
    ids, then_id = pgworkerd.batch(
        c, [{"kind": "a", "payload": {}}] * 2, then={"kind": "t", "payload": {}}
    )
    assert [job(plain, i)[0] for i in ids] == ["queued"] * 2
    assert job(plain, then_id)[::3] == ("waiting", "t")


def cancel(c: Conn, plain: Conn) -> None:
    job_id = pgworkerd.enqueue(plain, "k", {})
    assert pgworkerd.cancel(c, job_id) is True
    assert job(plain, job_id)[0] == "cancelled"


def retry(c: Conn, plain: Conn) -> None:
    job_id = pgworkerd.enqueue(plain, "k", {})
    assert pgworkerd.cancel(plain, job_id)
    assert pgworkerd.retry(c, job_id) is True
    assert job(plain, job_id)[0] == "queued"


def result(c: Conn, plain: Conn) -> None:
    job_id = finished(plain, {"answer": 42})
    assert pgworkerd.result(c, job_id) == {"answer": 42}


def wait(c: Conn, plain: Conn) -> None:
    assert pgworkerd.wait(c, finished(plain, 1), timeout=5) == "succeeded"
    with pytest.raises(TimeoutError):
        pgworkerd.wait(c, pgworkerd.enqueue(plain, "k", {}), timeout=0.05)


def pause_and_resume_queue(c: Conn, plain: Conn) -> None:
    paused = "SELECT count(*) FROM pgworkerd.paused_queues WHERE queue = 'q1'"
    assert pgworkerd.pause_queue(c, "q1") is True
    assert plain.execute(paused).fetchone() == (1,)
    assert pgworkerd.pause_queue(c, "q1") is False
    assert pgworkerd.resume_queue(c, "q1") is True
    assert plain.execute(paused).fetchone() == (0,)


def pause_and_resume_key(c: Conn, plain: Conn) -> None:
    until = pgworkerd.pause_key(c, "kk", 60)
    assert isinstance(until, datetime)
    row = plain.execute("SELECT until FROM pgworkerd.paused_keys WHERE key = 'kk'").fetchone()
    assert row == (until,)
    assert pgworkerd.resume_key(c, "kk") is True
    assert pgworkerd.resume_key(c, "kk") is False


def succeed(job: pgworkerd.Job) -> Any:
    job.progress(50, "half")
    return {"got": job.payload}


def retry_now(job: pgworkerd.Job) -> None:
    raise pgworkerd.Retry(after=0)


DRAIN_CONFIG = config.parse(
    """
handlers:
  succeed: tests.integration.test_row_factories:succeed
  retry_now: tests.integration.test_row_factories:retry_now
queues: {default: {}}
"""
)


def drain_and_assert_enqueued(c: Conn, plain: Conn) -> None:
    """pgworkerd.testing runs the daemon's statements (claim, complete, progress, retry,
    fail) on the caller's connection."""
    ok = pgworkerd.enqueue(c, "succeed", {"n": 1})
    again = pgworkerd.enqueue(c, "retry_now", {})
    unknown = pgworkerd.enqueue(c, "nobody_handles_this", {})
    assert assert_enqueued(c, "succeed", {"n": 1})["id"] == ok
    outcomes = drain(c, DRAIN_CONFIG)
    assert [(o.job_id, o.outcome, o.state) for o in outcomes] == [
        (ok, "succeeded", "succeeded"),
        (again, "retry", "queued"),
        (unknown, "discarded", "dead"),
    ]
    progress = "SELECT progress FROM pgworkerd.jobs WHERE id = %s"
    assert plain.execute(progress, (ok,)).fetchone() == (50.0,)
    assert pgworkerd.result(c, ok) == {"got": {"n": 1}}


F = TypeVar("F", bound=Callable[..., Any])


def by_name(*cases: F) -> dict[str, F]:
    """Each case under its function's name (the test's parameter ids)."""
    return {case.__name__: case for case in cases}


SYNC: dict[str, Callable[[Conn, Conn], None]] = by_name(
    enqueue_bare,
    enqueue_with_priority,
    enqueue_unique,
    enqueue_throttled,
    enqueue_debounced,
    enqueue_many,
    chain,
    batch,
    cancel,
    retry,
    result,
    wait,
    pause_and_resume_queue,
    pause_and_resume_key,
    drain_and_assert_enqueued,
)


@pytest.mark.parametrize("factory", list(FACTORIES))
@pytest.mark.parametrize("case", list(SYNC))
def test_sync_function_on_a_connection_with_another_row_factory(
    db_dsn: str, conn: Conn, case: str, factory: str
) -> None:
    conn.autocommit = True
    with psycopg.connect(db_dsn, autocommit=True, row_factory=FACTORIES[factory]) as c:
        SYNC[case](c, conn)
        # Left as the caller made it.
        assert c.row_factory is FACTORIES[factory]


# -- async --------------------------------------------------------------------------------


async def enqueue_async_bare(a: AConn, plain: Conn) -> None:
    job_id = await pgworkerd.enqueue_async(a, "k", {"n": 1})
    assert type(job_id) is int and job(plain, job_id)[0] == "queued"


async def enqueue_async_with_priority(a: AConn, plain: Conn) -> None:
    job_id = await pgworkerd.enqueue_async(a, "k", {"n": 1}, priority=3)
    assert type(job_id) is int and job(plain, job_id)[:2] == ("queued", 3)


async def enqueue_many_async(a: AConn, plain: Conn) -> None:
    ids = await pgworkerd.enqueue_many_async(a, [{"kind": "k", "payload": {}}] * 3)
    assert len(set(ids)) == 3 and [job(plain, i)[0] for i in ids] == ["queued"] * 3


async def chain_async(a: AConn, plain: Conn) -> None:
    ids = await pgworkerd.chain_async(
        a, [{"kind": "a", "payload": {}}, {"kind": "b", "payload": {}}]
    )
    assert [job(plain, i)[::3] for i in ids] == [("queued", "a"), ("waiting", "b")]


async def batch_async(a: AConn, plain: Conn) -> None:
    ids, then_id = await pgworkerd.batch_async(
        a, [{"kind": "a", "payload": {}}] * 2, then={"kind": "t", "payload": {}}
    )
    assert [job(plain, i)[0] for i in ids] == ["queued"] * 2
    assert job(plain, then_id)[::3] == ("waiting", "t")


async def wait_async(a: AConn, plain: Conn) -> None:
    assert await pgworkerd.wait_async(a, finished(plain, 1), timeout=5) == "succeeded"


ASYNC: dict[str, Callable[[AConn, Conn], Awaitable[None]]] = by_name(
    enqueue_async_bare,
    enqueue_async_with_priority,
    enqueue_many_async,
    chain_async,
    batch_async,
    wait_async,
)


@pytest.mark.parametrize("factory", list(FACTORIES))
@pytest.mark.parametrize("case", list(ASYNC))
def test_async_function_on_a_connection_with_another_row_factory(
    db_dsn: str, conn: Conn, case: str, factory: str
) -> None:
    conn.autocommit = True

    async def scenario() -> None:
        a = await psycopg.AsyncConnection.connect(
            db_dsn, autocommit=True, row_factory=FACTORIES[factory]
        )
        async with a:
            await ASYNC[case](a, conn)
            assert a.row_factory is FACTORIES[factory]

    asyncio.run(scenario())
