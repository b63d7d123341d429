"""The paused queues of one schema (table `paused_queues`): no claim takes a job of a
queue named there. Resuming notifies the queue so idle workers claim at once."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

import psycopg
from psycopg.rows import dict_row

from pgworkerd.storage import queries
from pgworkerd.storage.channels import notify_channel
from pgworkerd.storage.rows import execute


class QueuePauseStore:
    def __init__(self, schema: str) -> None:
        self._sql = queries.statements(schema)
        self._channel = notify_channel(schema)

    def pause(self, conn: psycopg.Connection[Any], queues: Sequence[str]) -> list[str]:
        """Pauses `queues`; returns those that were not paused already, sorted."""
        rows = execute(conn, self._sql["queues_pause"], {"queues": list(queues)}).fetchall()
        return sorted(str(row[0]) for row in rows)

    def resume(self, conn: psycopg.Connection[Any], queues: Sequence[str]) -> list[str]:
        """Resumes `queues`; returns those that were paused, sorted."""
        params = {"queues": list(queues), "channel": self._channel}
        return [str(row[0]) for row in execute(conn, self._sql["queues_resume"], params)]

    def paused(self, conn: psycopg.Connection[Any]) -> dict[str, datetime]:
        """Each paused queue and when it was paused."""
        return {str(row[0]): row[1] for row in execute(conn, self._sql["queues_paused"])}

    def queues(
        self, conn: psycopg.Connection[Any], configured: Sequence[str]
    ) -> list[dict[str, Any]]:
        """Every queue that `configured` names, a job names, or that is paused, by name:
        paused_at, whether configured, and its jobs by state."""
        with conn.cursor(row_factory=dict_row) as cur:
            rows = cur.execute(self._sql["queues_list"], {"configured": list(configured)})
            return rows.fetchall()
