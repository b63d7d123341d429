"""Paused queues: what `pgworkerd queues [pause | resume]` reads and writes, and the
Python `pause_queue` and `resume_queue`.

A pause is a row in the schema's `paused_queues` table, so it outlives any daemon and
holds for every host. The claim statements leave a paused queue out of their list of
queues (storage/sql/queries.sql, `claim_picks`): each daemon honours a pause from its next claim
on, and the jobs it is already running finish. A resume deletes the row and announces
the queue on the enqueue channel, so idle workers claim its jobs at once.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import psycopg

from pgworkerd.client.connections import checked
from pgworkerd.client.producer import check_name, schema_of
from pgworkerd.storage.queue_pauses import QueuePauseStore
from pgworkerd.storage.states import STATES
from pgworkerd.storage.store import DEFAULT_SCHEMA


def pause_queue(conn: psycopg.Connection[Any], queue: str, *, schema: str | None = None) -> bool:
    """Pause `queue`: no daemon claims its jobs from its next claim on; jobs running
    finish. True if it was not paused already. Runs in the caller's transaction, like
    `enqueue`; `schema` defaults as `enqueue`'s does. Any name may be paused, one no job
    has yet included."""
    conn = checked(conn, "pause_queue")
    return QueuePauses(schema_of(schema)).pause(conn, [queue]) == [queue]


def resume_queue(conn: psycopg.Connection[Any], queue: str, *, schema: str | None = None) -> bool:
    """Resume a paused `queue`; idle workers are told at commit and claim its jobs at
    once. True if it was paused."""
    conn = checked(conn, "resume_queue")
    return QueuePauses(schema_of(schema)).resume(conn, [queue]) == [queue]


class QueuePauses:
    """The paused queues of one schema."""

    def __init__(self, schema: str = DEFAULT_SCHEMA) -> None:
        self._store = QueuePauseStore(schema)

    def pause(self, conn: psycopg.Connection[Any], queues: Sequence[str]) -> list[str]:
        """Pauses `queues` (names checked as enqueue checks them: InvalidJob); returns
        those that were not paused already, sorted."""
        for queue in queues:
            check_name("queue", queue)
        return self._store.pause(conn, queues)

    def resume(self, conn: psycopg.Connection[Any], queues: Sequence[str]) -> list[str]:
        """Resumes `queues`; returns those that were paused, sorted."""
        for queue in queues:  # as pause checks them: InvalidJob, not a database error
            check_name("queue", queue)
        return self._store.resume(conn, queues)

    def paused(self, conn: psycopg.Connection[Any]) -> dict[str, Any]:
        """Each paused queue and when it was paused (a datetime)."""
        return self._store.paused(conn)

    def queues(
        self, conn: psycopg.Connection[Any], configured: Sequence[str]
    ) -> list[dict[str, Any]]:
        """Every queue the config names (`configured`), jobs name, or that is paused, by
        name: whether it is paused and since when, and its jobs by state. JSON values:
        the `queues --json` output."""
        return [_queue(row) for row in self._store.queues(conn, configured)]


def _queue(row: dict[str, Any]) -> dict[str, Any]:
    paused_at = row["paused_at"]
    return {
        "queue": row["queue"],
        "paused": paused_at is not None,
        "paused_at": None if paused_at is None else paused_at.isoformat(),
        "configured": bool(row["configured"]),
        "counts": {state: int(row[state]) for state in STATES},
    }
