"""Paused queues: what `pgworkerd queues [pause | resume]` reads and writes, and the
Python `pause_queue` and `resume_queue`.

A pause is a row in the schema's `paused_queues` table, so it outlives any daemon and
holds for every host. The claim statements leave a paused queue out of their list of
queues (sql/queries.sql, `claim_picks`): each daemon honours a pause from its next claim
on, and the jobs it is already running finish. A resume deletes the row and announces
the queue on the enqueue channel, so idle workers claim its jobs at once.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import psycopg
from psycopg.rows import dict_row

from pgworkerd.client.producer import check_name, default_producer
from pgworkerd.storage import queries
from pgworkerd.storage.channels import notify_channel
from pgworkerd.storage.store import DEFAULT_SCHEMA

# The states `queues` counts, in the order its table shows them.
STATES = ("queued", "running", "succeeded", "dead", "cancelled")


def pause_queue(conn: psycopg.Connection[Any], queue: str, *, schema: str | None = None) -> bool:
    """Pause `queue`: no daemon claims its jobs from its next claim on; jobs running
    finish. True if it was not paused already. Runs in the caller's transaction, like
    `enqueue`; `schema` defaults as `enqueue`'s does. Any name may be paused, one no job
    has yet included."""
    return QueuePauses(_schema(schema)).pause(conn, [queue]) == [queue]


def resume_queue(conn: psycopg.Connection[Any], queue: str, *, schema: str | None = None) -> bool:
    """Resume a paused `queue`; idle workers are told at commit and claim its jobs at
    once. True if it was paused."""
    return QueuePauses(_schema(schema)).resume(conn, [queue]) == [queue]


def _schema(schema: str | None) -> str:
    return schema if schema is not None else default_producer().store.schema


class QueuePauses:
    """The paused queues of one schema."""

    def __init__(self, schema: str = DEFAULT_SCHEMA) -> None:
        self._sql = queries.statements(schema)
        self._channel = notify_channel(schema)

    def pause(self, conn: psycopg.Connection[Any], queues: Sequence[str]) -> list[str]:
        """Pauses `queues` (names checked as enqueue checks them: InvalidJob); returns
        those that were not paused already, sorted."""
        for queue in queues:
            check_name("queue", queue)
        rows = conn.execute(self._sql["queues_pause"], {"queues": list(queues)}).fetchall()
        return sorted(str(row[0]) for row in rows)

    def resume(self, conn: psycopg.Connection[Any], queues: Sequence[str]) -> list[str]:
        """Resumes `queues`; returns those that were paused, sorted."""
        params = {"queues": list(queues), "channel": self._channel}
        return [str(row[0]) for row in conn.execute(self._sql["queues_resume"], params)]

    def paused(self, conn: psycopg.Connection[Any]) -> dict[str, Any]:
        """Each paused queue and when it was paused (a datetime)."""
        return {str(row[0]): row[1] for row in conn.execute(self._sql["queues_paused"])}

    def queues(
        self, conn: psycopg.Connection[Any], configured: Sequence[str]
    ) -> list[dict[str, Any]]:
        """Every queue the config names (`configured`), jobs name, or that is paused, by
        name: whether it is paused and since when, and its jobs by state. JSON values:
        the `queues --json` output."""
        with conn.cursor(row_factory=dict_row) as cur:
            rows = cur.execute(self._sql["queues_list"], {"configured": list(configured)})
            return [_queue(row) for row in rows.fetchall()]


def _queue(row: dict[str, Any]) -> dict[str, Any]:
    paused_at = row["paused_at"]
    return {
        "queue": row["queue"],
        "paused": paused_at is not None,
        "paused_at": None if paused_at is None else paused_at.isoformat(),
        "configured": bool(row["configured"]),
        "counts": {state: int(row[state]) for state in STATES},
    }
