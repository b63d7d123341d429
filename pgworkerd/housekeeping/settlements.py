"""Settlements for the jobs of children that died: written when the database takes
them, retried from a queue until then. They are fenced by lease, so a late one changes
nothing if the job moved on.

A settlement never waits on a row lock (SETTLE_LOCK_WAIT_MS): the supervisor's one
connection also renews every lease, and a job's row may stay locked for long by another
transaction (a producer's open `enqueue(after=[it])`, an uncommitted cancel, a user's
SELECT ... FOR UPDATE): its settlement waiting there ran into the round trip's deadline,
which drops the connection, and the renewals behind it failed until the lock went,
stopping the daemon's other jobs (review 25 F4). A settlement whose row is locked is
put back at the end of the queue and tried again LOCKED_RETRY_S later; the others go
on being written.
"""

from __future__ import annotations

import functools
import logging
import time
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import psycopg

from pgworkerd import logs
from pgworkerd.housekeeping.session import DatabaseSession
from pgworkerd.job import Lease
from pgworkerd.storage.store import JobStore

log = logging.getLogger("pgworkerd.supervisor")


@dataclass(frozen=True, slots=True)
class Settlement:
    """What to write for a job whose child is gone: charge it, or give it back."""

    lease: Lease
    charge_error: str | None  # None: release uncharged


SETTLE_LOCK_WAIT_MS = 20  # the longest a settlement waits on a row lock
LOCKED_RETRY_S = 0.25  # a settlement found locked is tried again no sooner


class PendingSettlements:
    """Settlements not written yet, oldest first."""

    def __init__(self) -> None:
        self._queue: deque[Settlement] = deque()
        self._retry_at = 0.0  # monotonic: flush() is not due before (a row was locked)

    def __len__(self) -> int:
        return len(self._queue)

    def add(self, settlements: Iterable[Settlement]) -> None:
        self._queue.extend(settlements)
        self._retry_at = 0.0

    def uncharged(self) -> list[Lease]:
        """The leases of the jobs to give back uncharged: our rescue spares them."""
        return [item.lease for item in self._queue if item.charge_error is None]

    def due(self, now: float) -> bool:
        """Whether there are settlements to try at `now` (monotonic)."""
        return bool(self._queue) and now >= self._retry_at

    def flush(self, session: DatabaseSession, store: JobStore) -> None:
        """Write them in order until one fails (it stays first in the queue); one
        whose row is locked goes to the end, tried again LOCKED_RETRY_S later."""
        locked: list[Settlement] = []
        while self._queue:
            work = functools.partial(_write, store=store, item=self._queue[0])
            result = session.attempt("settle job", work)
            if not result.ok:
                break
            item = self._queue.popleft()
            if not result.value:
                locked.append(item)
        if locked:
            self._queue.extend(locked)
            self._retry_at = time.monotonic() + LOCKED_RETRY_S


def _write(conn: psycopg.Connection[Any], store: JobStore, item: Settlement) -> bool:
    """Write the settlement; False when a row it needs was locked (nothing written)."""
    try:
        with conn.transaction():
            store.limit_lock_wait(conn, SETTLE_LOCK_WAIT_MS)
            _settle(conn, store, item)
    except psycopg.errors.LockNotAvailable:
        return False
    return True


def _settle(conn: psycopg.Connection[Any], store: JobStore, item: Settlement) -> None:
    if item.charge_error is None:
        store.release(conn, [item.lease])
        return
    outcome = store.fail(conn, item.lease, item.charge_error)
    if outcome is not None:
        logs.event(
            log,
            logging.WARNING,
            "charged job of a lost worker",
            job=item.lease.job_id,
            attempt=outcome.attempt,
            next_state=outcome.state,
            error=item.charge_error,
        )
