"""The dashboard's reads (pgworkerd/web): the overview's counts and chart, the jobs page
by keyset, and whether the schema has a `key` column to filter by.

The statements are in sql/queries.sql (`dashboard_*`, `jobs_estimate`, `jobs_max_id`,
`jobs_has_key_column`), each answering from an index range, never from a pass over the
whole table: the overview is polled every few seconds while a browser is open, and the
table holds every finished job until retention prunes it. What each one walks is said
beside it; bench/web_cost.py times them over a million finished rows and prints their
plans. The status query the CLI runs (jobs_status_by_queue) counts the whole table, so
the overview does not reuse it; it reuses daemons_list, periodic_entries_last,
queues_paused and jobs_get as they are.
"""

from __future__ import annotations

from typing import Any

import psycopg
from psycopg import sql
from psycopg.rows import dict_row

from pgworkerd.storage import queries

CHART_MINUTES = 60  # the overview's throughput chart: one bar a minute over the last hour
# Ids a jobs page walks at most (see dashboard_jobs_page): about 100 ms of heap where
# nothing matches.
SCAN_WINDOW = 300_000
# Characters of a job's last error a jobs page reads, from its end: its last line, which
# the page shows, and not the megabytes a row written by SQL may hold.
LAST_ERROR_TAIL = 4096
# Paused keys the overview lists at most (by name); `pgworkerd keys` lists them all.
PAUSED_KEYS_SHOWN = 100


class DashboardReads:
    """The dashboard's reads over one schema."""

    def __init__(self, schema: str) -> None:
        self.schema = schema
        self._sql = queries.statements(schema)

    def has_key_column(self, conn: psycopg.Connection[Any]) -> bool:
        row = conn.execute(self._sql["jobs_has_key_column"], {"schema": self.schema}).fetchone()
        return bool(row and row[0])

    # The overview's rows come in three parts that the web app reads at once on three
    # connections: the dead count and the last hour each walk tens of thousands of heap
    # rows on a large table, and in parallel the page costs the slowest part, not the
    # sum. The parts may be a few milliseconds apart: a dashboard's glance, not a ledger.

    def overview_live(self, conn: psycopg.Connection[Any]) -> dict[str, Any]:
        """The clock, queued and running counts, the estimate, pauses and daemons."""
        statements = self._sql
        estimate = statements["jobs_estimate"]
        table = sql.Identifier(self.schema, "jobs").as_string(conn)
        with conn.cursor(row_factory=dict_row) as cur:
            cur.execute(statements["dashboard_serial"])
            return {
                "now": _one(cur.execute(statements["clock_read"]))["now"],
                "live": cur.execute(statements["dashboard_queues_live"]).fetchall(),
                "estimate": _one(cur.execute(estimate, {"table": table}))["estimate"],
                "paused": cur.execute(statements["queues_paused"]).fetchall(),
                "daemons": cur.execute(statements["daemons_list"]).fetchall(),
            }

    def overview_dead(self, conn: psycopg.Connection[Any]) -> dict[str, Any]:
        with conn.cursor(row_factory=dict_row) as cur:
            return {"dead": cur.execute(self._sql["dashboard_dead_by_queue"]).fetchall()}

    def overview_paused_keys(self, conn: psycopg.Connection[Any]) -> dict[str, Any]:
        """The keys paused now (at most PAUSED_KEYS_SHOWN) with the ready jobs each holds
        back; on a schema with the `key` column only (the caller asks has_key_column)."""
        with conn.cursor(row_factory=dict_row) as cur:
            statement = self._sql["dashboard_keys_paused"]
            rows = cur.execute(statement, {"limit": PAUSED_KEYS_SHOWN}).fetchall()
            return {"paused_keys": rows}

    def overview_finished(self, conn: psycopg.Connection[Any]) -> dict[str, Any]:
        with conn.cursor(row_factory=dict_row) as cur:
            statement = self._sql["dashboard_finished_by_minute"]
            return {"finished": cur.execute(statement, {"minutes": CHART_MINUTES}).fetchall()}

    def max_id(self, conn: psycopg.Connection[Any]) -> int:
        row = conn.execute(self._sql["jobs_max_id"]).fetchone()
        return int(row[0]) if row else 0

    def periodic_last(
        self, conn: psycopg.Connection[Any], keys: list[str]
    ) -> dict[str, dict[str, Any]]:
        with conn.cursor(row_factory=dict_row) as cur:
            rows = cur.execute(self._sql["periodic_entries_last"], {"keys": keys})
            return {row["entry_key"]: row for row in rows.fetchall()}

    def jobs_page(
        self,
        conn: psycopg.Connection[Any],
        *,
        state: str | None,
        queue: str | None,
        kind: str | None,
        key: str | None,
        keyed: bool,
        before: int,
        floor: int,
        limit: int,
    ) -> list[dict[str, Any]]:
        """Up to `limit` jobs newest first with `floor` <= id < `before`, each with the
        last LAST_ERROR_TAIL characters of its last error (`last_error_tail`). `keyed`: the
        schema has the `key` column (the caller asks has_key_column once): each row has
        its key, and `key` filters; without it, `key` must be None."""
        params = {
            "floor": floor,
            "state": state,
            "queue": queue,
            "kind": kind,
            "key": key,
            "before": before,
            "limit": limit,
            "tail": LAST_ERROR_TAIL,
        }
        assert keyed or key is None
        name = "dashboard_jobs_page_by_key" if keyed else "dashboard_jobs_page"
        statement = self._sql[name]
        with conn.cursor(row_factory=dict_row) as cur:
            return cur.execute(statement, params).fetchall()


def _one(cur: psycopg.Cursor[dict[str, Any]]) -> dict[str, Any]:
    row = cur.fetchone()
    assert row is not None  # an aggregate-free SELECT of one row
    return row
