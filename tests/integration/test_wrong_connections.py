"""A client call given what it cannot run on (a sync Connection to an `_async` function,
an AsyncConnection to a sync one, a DSN, None) is refused with one line, before any
statement: a sync Connection given to `enqueue_async` ran the INSERT and only then
failed, so that a caller who committed and retried with `enqueue` had the job twice."""

from __future__ import annotations

import asyncio
import gc
import warnings
from collections.abc import Callable
from typing import Any

import psycopg
import pytest
from psycopg.pq import TransactionStatus

import pgworkerd
from pgworkerd.errors import WrongConnection

JOB = {"kind": "k", "payload": {}}

ASYNC_CALLS: dict[str, Callable[[Any], Any]] = {
    "enqueue_async": lambda c: pgworkerd.enqueue_async(c, "k", {}),
    "enqueue_async (options)": lambda c: pgworkerd.enqueue_async(c, "k", {}, priority=3),
    "enqueue_many_async": lambda c: pgworkerd.enqueue_many_async(c, [JOB]),
    "chain_async": lambda c: pgworkerd.chain_async(c, [JOB, JOB]),
    "batch_async": lambda c: pgworkerd.batch_async(c, [JOB], then=JOB),
    "wait_async": lambda c: pgworkerd.wait_async(c, 1, timeout=1),
    "task.enqueue_async": lambda c: pgworkerd.task(kind="k")(lambda job: None).enqueue_async(c, {}),
}

SYNC_CALLS: dict[str, Callable[[Any], Any]] = {
    "enqueue": lambda c: pgworkerd.enqueue(c, "k", {}),
    "enqueue (options)": lambda c: pgworkerd.enqueue(c, "k", {}, priority=3),
    "enqueue_many": lambda c: pgworkerd.enqueue_many(c, [JOB]),
    "chain": lambda c: pgworkerd.chain(c, [JOB, JOB]),
    "batch": lambda c: pgworkerd.batch(c, [JOB], then=JOB),
    "cancel": lambda c: pgworkerd.cancel(c, 1),
    "retry": lambda c: pgworkerd.retry(c, 1),
    "result": lambda c: pgworkerd.result(c, 1),
    "wait": lambda c: pgworkerd.wait(c, 1, timeout=1),
    "pause_queue": lambda c: pgworkerd.pause_queue(c, "q"),
    "resume_queue": lambda c: pgworkerd.resume_queue(c, "q"),
    "pause_key": lambda c: pgworkerd.pause_key(c, "key", 60),
    "resume_key": lambda c: pgworkerd.resume_key(c, "key"),
    "task.enqueue": lambda c: pgworkerd.task(kind="k")(lambda job: None).enqueue(c, {}),
}


def count_jobs(dsn: str) -> int:
    with psycopg.connect(dsn) as check:
        return check.execute("SELECT count(*) FROM pgworkerd.jobs").fetchone()[0]


@pytest.mark.parametrize("call", ASYNC_CALLS, ids=str)
def test_a_sync_connection_given_to_an_async_function_runs_nothing(call, db_dsn):
    with psycopg.connect(db_dsn) as conn:
        with pytest.raises(WrongConnection) as caught:
            asyncio.run(ASYNC_CALLS[call](conn))
        # No statement ran: no transaction was begun, and none was left in autocommit.
        assert conn.info.transaction_status == TransactionStatus.IDLE
        assert conn.autocommit is False
        conn.commit()  # what a caller would do before retrying the right way
    assert count_jobs(db_dsn) == 0
    message = str(caught.value)
    assert "\n" not in message
    assert "cannot run on a psycopg.Connection: give a psycopg AsyncConnection" in message
    assert "without _async" in message
    # one error a caller may catch as either
    assert isinstance(caught.value, TypeError) and isinstance(caught.value, pgworkerd.InvalidJob)


@pytest.mark.parametrize("call", SYNC_CALLS, ids=str)
def test_an_async_connection_given_to_a_sync_function_runs_nothing(call, db_dsn):
    async def attempt() -> tuple[BaseException, TransactionStatus]:
        async with await psycopg.AsyncConnection.connect(db_dsn) as aconn:
            with pytest.raises(WrongConnection) as caught:
                SYNC_CALLS[call](aconn)
            return caught.value, aconn.info.transaction_status

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a coroutine never awaited would warn
        error, status = asyncio.run(attempt())
        gc.collect()
    assert status == TransactionStatus.IDLE
    assert "cannot run on a psycopg.AsyncConnection: give a psycopg Connection" in str(error)
    assert count_jobs(db_dsn) == 0


@pytest.mark.parametrize("call", ["enqueue", "enqueue_many", "result", "cancel"])
def test_a_dsn_or_none_is_refused_in_one_line_without_the_password(call, db_dsn):
    dsn = "postgresql://user:s3cret@127.0.0.1:1/db"
    with pytest.raises(WrongConnection) as caught:
        SYNC_CALLS[call](dsn)
    assert "s3cret" not in str(caught.value)
    assert "cannot run on a builtins.str" in str(caught.value)
    assert "connection string: connect with psycopg first" in str(caught.value)
    with pytest.raises(WrongConnection, match="cannot run on None: give a psycopg Connection"):
        SYNC_CALLS[call](None)
    with pytest.raises(WrongConnection, match="cannot run on None: give a psycopg AsyncConnection"):
        asyncio.run(ASYNC_CALLS["enqueue_async"](None))


def test_the_hint_names_the_twin_only_where_there_is_one(db_dsn):
    async def attempt(call: str) -> str:
        async with await psycopg.AsyncConnection.connect(db_dsn) as aconn:
            with pytest.raises(WrongConnection) as caught:
                SYNC_CALLS[call](aconn)
            return str(caught.value)

    assert asyncio.run(attempt("enqueue")).endswith("(an AsyncConnection goes to enqueue_async)")
    assert asyncio.run(attempt("cancel")).endswith("give a psycopg Connection")
