"""Settlements for the jobs of children that died: written when the database takes
them, retried from a queue until then. They are fenced by lease, so a late one changes
nothing if the job moved on."""

from __future__ import annotations

import functools
import logging
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


class PendingSettlements:
    """Settlements not written yet, oldest first."""

    def __init__(self) -> None:
        self._queue: deque[Settlement] = deque()

    def __len__(self) -> int:
        return len(self._queue)

    def add(self, settlements: Iterable[Settlement]) -> None:
        self._queue.extend(settlements)

    def flush(self, session: DatabaseSession, store: JobStore) -> None:
        """Write them in order until one fails (it stays first in the queue)."""
        while self._queue:
            work = functools.partial(_write, store=store, item=self._queue[0])
            if not session.attempt("settle job", work).ok:
                return
            self._queue.popleft()


def _write(conn: psycopg.Connection[Any], store: JobStore, item: Settlement) -> None:
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
