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

# `status` and /readyz warn when the horizon is held longer than this many lease_ttl:
# long enough that no claim, renewal or housekeeping transaction of ours is the holder.
HORIZON_WARN_LEASES = 10


@dataclass(frozen=True)
class Horizon:
    """The oldest holder of the xmin horizon (see `horizon_holder` in sql/queries.sql)."""

    kind: str  # transaction, prepared transaction, replication slot
    pid: int | None
    name: str | None  # application_name, prepared gid, or slot name
    state: str | None  # of a transaction: idle in transaction, active, ...
    age_s: float | None  # open this long (None: a slot, or not visible to our role)
    xid_age: int | None  # transactions begun since its snapshot

    def too_old(self, lease_ttl_s: float) -> bool:
        return self.age_s is not None and self.age_s > HORIZON_WARN_LEASES * lease_ttl_s

    def describe(self) -> str:
        """One line: which holder, and for how long."""
        who = self.kind if self.pid is None else f"{self.kind} pid {self.pid}"
        if self.name:
            who += f" ({self.name})"
        if self.state:
            who += f", {self.state}"
        how_long = f"open {self.age_s:.0f}s" if self.age_s is not None else "open"
        return f"{who}, {how_long}, {self.xid_age or 0} transactions behind"


@dataclass(frozen=True)
class StatusRows:
    """What `status` reads, in one round of statements on one connection."""

    queues: list[dict[str, Any]]
    daemons: list[dict[str, Any]]
    progress: list[dict[str, Any]]
    now: datetime  # the database clock
    periodic_last: list[dict[str, Any]]  # entry_key, last_slot_at, last_job_id
    horizon: Horizon | None  # see `Reads.horizon`
    jobs_table: dict[str, Any] | None  # see `Reads.jobs_table`


class Reads:
    """The operator's reads over one schema."""

    def __init__(self, schema: str) -> None:
        self.schema = schema
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
        return StatusRows(
            queue_rows,
            daemon_rows,
            progress_rows,
            now["now"],
            slots,
            self.horizon(conn),
            self.jobs_table(conn),
        )

    def horizon(self, conn: psycopg.Connection[Any]) -> Horizon | None:
        """The oldest holder of the xmin horizon; None: nothing holds it."""
        with conn.cursor(row_factory=dict_row) as cur:
            row = cur.execute(self._sql["horizon_holder"]).fetchone()
        return None if row is None else Horizon(**row)

    def jobs_table(self, conn: psycopg.Connection[Any]) -> dict[str, Any] | None:
        """live_tuples, dead_tuples, last_vacuum_at of the jobs table; None: no
        statistics yet."""
        with conn.cursor(row_factory=dict_row) as cur:
            return cur.execute(self._sql["jobs_table_health"], {"schema": self.schema}).fetchone()

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
