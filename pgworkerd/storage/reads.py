"""The reads behind `pgworkerd status`, `jobs list`, `jobs show`, `queues` and
`pgworkerd.testing.assert_enqueued`: rows as the database returns them (the client
shapes them into JSON values, see client/operations.py)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import psycopg
from psycopg.rows import dict_row

from pgworkerd.storage import queries


@dataclass(frozen=True)
class StatusRows:
    """What `status` reads, in one round of statements on one connection."""

    queues: list[dict[str, Any]]
    daemons: list[dict[str, Any]]
    progress: list[dict[str, Any]]
    now: datetime  # the database clock
    periodic_last: list[dict[str, Any]]  # entry_key, last_slot_at, last_job_id


class Reads:
    """The operator's reads over one schema."""

    def __init__(self, schema: str) -> None:
        self._sql = queries.statements(schema)

    def status(
        self, conn: psycopg.Connection[Any], *, progress_limit: int, periodic_keys: Sequence[str]
    ) -> StatusRows:
        with conn.cursor(row_factory=dict_row) as cur:
            queue_rows = cur.execute(self._sql["jobs_status_by_queue"]).fetchall()
            daemon_rows = cur.execute(self._sql["daemons_list"]).fetchall()
            progress_rows = cur.execute(
                self._sql["jobs_running_progress"], {"limit": progress_limit}
            ).fetchall()
            now = cur.execute(self._sql["clock_read"]).fetchone()
            slots = cur.execute(
                self._sql["periodic_entries_last"], {"keys": list(periodic_keys)}
            ).fetchall()
        assert now is not None
        return StatusRows(queue_rows, daemon_rows, progress_rows, now["now"], slots)

    def clock(self, conn: psycopg.Connection[Any]) -> datetime:
        """The database clock's now()."""
        row = conn.execute(self._sql["clock_read"]).fetchone()
        assert row is not None
        return row[0]  # type: ignore[no-any-return]

    def jobs(
        self,
        conn: psycopg.Connection[Any],
        *,
        state: str | None,
        queue: str | None,
        kind: str | None,
        limit: int,
    ) -> list[dict[str, Any]]:
        """Jobs matching the filters (None: any), newest first."""
        params = {"state": state, "queue": queue, "kind": kind, "limit": limit}
        with conn.cursor(row_factory=dict_row) as cur:
            return cur.execute(self._sql["jobs_list"], params).fetchall()

    def states(self, conn: psycopg.Connection[Any], ids: Sequence[int]) -> dict[int, str]:
        """The state of each of `ids` that exists."""
        rows = conn.execute(self._sql["jobs_states"], {"ids": list(ids)}).fetchall()
        return {int(row[0]): str(row[1]) for row in rows}

    def enqueued_matching(
        self,
        conn: psycopg.Connection[Any],
        *,
        kind: str,
        states: Sequence[str],
        payload_subset_json: str | None,
        limit: int,
    ) -> list[dict[str, Any]]:
        """Jobs of `kind` in `states` whose payload contains the given JSON (None: any
        payload), newest first."""
        params = {
            "kind": kind,
            "states": list(states),
            "subset": payload_subset_json,
            "limit": limit,
        }
        with conn.cursor(row_factory=dict_row) as cur:
            return cur.execute(self._sql["jobs_enqueued_matching"], params).fetchall()
