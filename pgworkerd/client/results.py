"""`pgworkerd.result`, and `pgworkerd.wait` (with its async twin `wait_async`).

`wait` costs a constant handful of statements however long it waits, and nothing on the
hot path of jobs nobody waits for (storage/sql/queries.sql, FINISHED; the statements:
storage/waiting.py):

1. `LISTEN <schema>.finished`, first, so no announcement is missed;
2. mark the job `waited_on`, in one UPDATE of a job that is not final yet; no row means
   it is final already (or does not exist), and step 3 is skipped;
3. sleep on the connection's socket until the job's id is announced: the statement that
   makes a marked job final (success, dead-lettering, cancel) sends it at commit;
4. read its state (and UNLISTEN). A job put back in its queue between the announcement
   and the read (an operator's retry) is waited for again.

LISTEN needs a connection outside a transaction: an autocommit connection is used as
it is; an idle one that is not autocommit is switched to autocommit for the wait and
back after; one inside a transaction raises WaitError (the LISTEN would hear nothing
until it committed).
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import psycopg
from psycopg.pq import TransactionStatus

from pgworkerd.client.connections import checked, checked_async
from pgworkerd.client.producer import check_job_id, schema_of
from pgworkerd.errors import JobNotFound, NoResult, WaitError
from pgworkerd.storage.states import FINAL_STATES
from pgworkerd.storage.waiting import FinishedJobs, Outcome


def result(conn: psycopg.Connection[Any], job_id: int, *, schema: str | None = None) -> Any:
    """The stored result of a succeeded job: its handler's return value as decoded JSON
    (None when it returned None; a `{"pgworkerd_result_omitted": why}` marker when the
    value could not be kept). JobNotFound for an unknown (or pruned) id, NoResult for a
    job in any other state (its `state` says which)."""
    conn, job_id = checked(conn, "result"), check_job_id(job_id)
    return _result_of(job_id, FinishedJobs(schema_of(schema)).outcome(job_id).run(conn))


def wait(
    conn: psycopg.Connection[Any],
    job_id: int,
    timeout: float | None = None,
    *,
    schema: str | None = None,
) -> str:
    """Block until the job is final and return its state: "succeeded", "dead" or
    "cancelled". TimeoutError after `timeout` seconds (None: no limit); JobNotFound for
    an unknown id. See the module's text for the connection it needs."""
    conn, finished = checked(conn, "wait"), FinishedJobs(schema_of(schema))
    job_id, timeout = check_job_id(job_id), _timeout(timeout)
    deadline = _deadline(timeout)
    with _outside_transaction(conn):
        finished.listen().run(conn)
        try:
            while True:
                if finished.mark_waited(job_id).run(conn):
                    _hear(conn, job_id, deadline, timeout)
                state = _final_state(job_id, finished.outcome(job_id).run(conn))
                if state is not None:
                    return state
        finally:
            finished.unlisten().run(conn)


async def wait_async(
    aconn: psycopg.AsyncConnection[Any],
    job_id: int,
    timeout: float | None = None,
    *,
    schema: str | None = None,
) -> str:
    """`wait` on an AsyncConnection: the event loop runs on while it waits."""
    aconn, finished = checked_async(aconn, "wait_async"), FinishedJobs(schema_of(schema))
    job_id, timeout = check_job_id(job_id), _timeout(timeout)
    deadline = _deadline(timeout)
    async with _outside_transaction_async(aconn):
        await finished.listen().run_async(aconn)
        try:
            while True:
                if await finished.mark_waited(job_id).run_async(aconn):
                    await _hear_async(aconn, job_id, deadline, timeout)
                state = _final_state(job_id, await finished.outcome(job_id).run_async(aconn))
                if state is not None:
                    return state
        finally:
            await finished.unlisten().run_async(aconn)


def _timeout(timeout: Any) -> float | None:
    """`timeout` checked, as a float (None: no limit)."""
    if timeout is None:
        return None
    if isinstance(timeout, bool) or not isinstance(timeout, int | float):
        raise TypeError(f"timeout must be seconds or None, got {type(timeout).__name__}")
    if isinstance(timeout, int) and not -(2**53) <= timeout <= 2**53:
        # Past what a float holds exactly (past ~1.8e308, at all: the deadline's sum
        # raised OverflowError), 285 million years and more: the infinite float it
        # stands for, whose wait has no limit (or, negative, is over at once).
        return math.inf if timeout > 0 else -math.inf
    if math.isnan(timeout):  # it compares false with everything: the wait never ended
        raise ValueError("timeout must be a number of seconds, got nan")
    return float(timeout)


def _deadline(timeout: float | None) -> float | None:
    """When a wait of `timeout` seconds (None: no limit) ends, on the monotonic clock."""
    return None if timeout is None else time.monotonic() + timeout


def _hear(
    conn: psycopg.Connection[Any], job_id: int, deadline: float | None, timeout: float | None
) -> None:
    """Until the job's id is announced; TimeoutError at the deadline."""
    wanted = str(job_id)
    while True:
        for notify in conn.notifies(timeout=_remaining(deadline, job_id, timeout)):
            if notify.payload == wanted:
                return


async def _hear_async(
    aconn: psycopg.AsyncConnection[Any],
    job_id: int,
    deadline: float | None,
    timeout: float | None,
) -> None:
    wanted = str(job_id)
    while True:
        async for notify in aconn.notifies(timeout=_remaining(deadline, job_id, timeout)):
            if notify.payload == wanted:
                return


def _remaining(deadline: float | None, job_id: int, timeout: float | None) -> float | None:
    if deadline is None:
        return None
    left = deadline - time.monotonic()
    if left <= 0:
        raise TimeoutError(f"job {job_id} is not final after {timeout:g}s")
    return left


def _final_state(job_id: int, outcome: Outcome) -> str | None:
    if outcome is None:
        raise JobNotFound(f"job {job_id} does not exist")
    state = outcome[0]
    return state if state in FINAL_STATES else None


def _result_of(job_id: int, outcome: Outcome) -> Any:
    if outcome is None:
        raise JobNotFound(f"job {job_id} does not exist")
    state, value = outcome
    if state != "succeeded":
        raise NoResult(job_id, state)
    return value


_IN_TRANSACTION = "wait() needs a connection outside a transaction: commit or roll back first"


@contextlib.contextmanager
def _outside_transaction(conn: psycopg.Connection[Any]) -> Iterator[None]:
    if conn.autocommit:
        yield
        return
    if conn.info.transaction_status != TransactionStatus.IDLE:
        raise WaitError(_IN_TRANSACTION)
    conn.autocommit = True
    try:
        yield
    finally:
        conn.autocommit = False


@contextlib.asynccontextmanager
async def _outside_transaction_async(aconn: psycopg.AsyncConnection[Any]) -> AsyncIterator[None]:
    if aconn.autocommit:
        yield
        return
    if aconn.info.transaction_status != TransactionStatus.IDLE:
        raise WaitError(_IN_TRANSACTION)
    await aconn.set_autocommit(True)
    try:
        yield
    finally:
        await aconn.set_autocommit(False)
