"""The paused keys of one schema (table `paused_keys`): no claim takes a job whose key
has a pause that has not ended yet (database clock). Resuming notifies the queues that
hold the key's jobs, so idle workers claim them at once; a pause that ends by itself is
found by the idle workers' next-due query (jobs_next_run_at)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

import psycopg
from psycopg.rows import dict_row

from pgworkerd.storage import queries
from pgworkerd.storage.channels import cancel_channel, notify_channel
from pgworkerd.storage.rows import execute


class KeyPauseStore:
    def __init__(self, schema: str) -> None:
        self._sql = queries.statements(schema)
        self._channel = notify_channel(schema)
        self._pause_channel = cancel_channel(schema)  # KEY PAUSE NOTICE in queries.sql

    def pause_until(
        self, conn: psycopg.Connection[Any], key: str, until: datetime, *, extend: bool
    ) -> datetime:
        """Pauses `key` until `until`; `extend` keeps a pause that runs longer. Returns
        the pause's end."""
        return self._pause(conn, key, until, None, extend)

    def pause_for(
        self, conn: psycopg.Connection[Any], key: str, seconds: float, *, extend: bool
    ) -> datetime:
        """Pauses `key` for `seconds` from now (database clock); as `pause_until`."""
        return self._pause(conn, key, None, float(seconds), extend)

    def _pause(
        self,
        conn: psycopg.Connection[Any],
        key: str,
        until: datetime | None,
        seconds: float | None,
        extend: bool,
    ) -> datetime:
        """keys_pause: until `until`, or for `seconds` from now when `until` is None."""
        params = {
            "key": key,
            "until": until,
            "seconds": seconds,
            "extend": extend,
            "channel": self._pause_channel,
        }
        return _end(execute(conn, self._sql["keys_pause"], params).fetchone())

    def resume(self, conn: psycopg.Connection[Any], key: str) -> bool:
        """Ends `key`'s pause; whether one was running."""
        params = {"key": key, "channel": self._channel}
        row = execute(conn, self._sql["keys_resume"], params).fetchone()
        return bool(row and row[0])

    def keys(self, conn: psycopg.Connection[Any], *, limit: int) -> list[dict[str, Any]]:
        """Keys of live jobs or paused now, by name, at most `limit`: running, ready,
        queued, paused_until, paused_at, paused_for_s."""
        with conn.cursor(row_factory=dict_row) as cur:
            return cur.execute(self._sql["keys_list"], {"limit": limit}).fetchall()

    def holding(self, conn: psycopg.Connection[Any], *, limit: int) -> list[dict[str, Any]]:
        """Keys paused now, by name, at most `limit`: key, until, paused_at,
        paused_for_s, held_back (their ready jobs)."""
        with conn.cursor(row_factory=dict_row) as cur:
            return cur.execute(self._sql["keys_paused_holding"], {"limit": limit}).fetchall()

    def holding_by_queue(
        self, conn: psycopg.Connection[Any], queues: Sequence[str]
    ) -> dict[str, int]:
        """Ready jobs of `queues` held back by a key pause, by queue (none: left out)."""
        query = self._sql["keys_paused_holding_by_queue"]
        rows = execute(conn, query, {"queues": list(queues)}).fetchall()
        return {str(queue): int(count) for queue, count in rows}


def _end(row: Any) -> datetime:
    assert row is not None  # an upsert returns its row
    until: datetime = row[0]
    return until
