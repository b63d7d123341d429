"""The dashboard's own reads (pgworkerd/web): the overview's counts and chart, the jobs
page by keyset, and whether the schema has a `key` column to filter by.

Every statement here answers from an index range, never from a pass over the whole
table: the overview is polled every few seconds while a browser is open, and the table
holds every finished job until retention prunes it. What each statement walks is said
beside it; bench/web_cost.py times them over a million finished rows and prints their
plans. The status queries the CLI runs (jobs_status_by_queue) count the whole table, so
the overview does not reuse them; it reuses daemons_list, periodic_entries_last,
queues_paused and jobs_get from sql/queries.sql as they are.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg import sql
from psycopg.rows import dict_row

from pgworkerd.storage import queries

CHART_MINUTES = 60  # the overview's throughput chart: one bar a minute over the last hour
# Ids a jobs page walks at most (see _PAGE): about 100 ms of heap where nothing matches.
SCAN_WINDOW = 300_000

# Queued and running jobs per queue, each from its partial index: jobs_claim_idx holds
# only queued rows (queue and run_at are in it: an index-only scan once vacuumed), and
# jobs_lease_expiry_idx only leased (= running, by jobs_running_is_leased) rows. Finished
# rows, however many, are in neither.
_LIVE = """
SELECT queue, 'queued' AS state, count(*) AS n,
       extract(epoch FROM now() - min(run_at) FILTER (WHERE run_at <= now()))::float8
           AS oldest_ready_age_s
FROM {jobs} WHERE state = 'queued'
GROUP BY queue
UNION ALL
SELECT queue, 'running', count(*), NULL
FROM {jobs} WHERE lease_expires_at IS NOT NULL
GROUP BY queue
"""

# Dead jobs per queue: the 'dead' range of jobs_finished_idx (state, finished_at), then
# the heap for the queue. Dead jobs are few next to succeeded ones and wait for an
# operator; succeeded and cancelled totals are not counted at all (see _FINISHED_1H).
_DEAD = """
SELECT queue, count(*) AS n
FROM {jobs} WHERE state = 'dead'
GROUP BY queue
"""

# Jobs finished in the last hour by queue, state and minute (0: the current minute):
# the chart and the "last hour" counts. One range of jobs_finished_idx (state,
# finished_at) per final state, then the heap for the queue. Spelled as three equalities,
# not `state IN (...)`: with the list, PostgreSQL 15 misjudges the range and reads the
# whole table (300 ms over a million rows instead of 60: bench/web_cost.py).
_FINISHED_1H = """
SELECT queue, state,
       floor(extract(epoch FROM now() - finished_at) / 60)::int AS minutes_ago,
       count(*) AS n
FROM (
    SELECT queue, state, finished_at FROM {jobs}
    WHERE state = 'succeeded' AND finished_at > now() - make_interval(mins => %(minutes)s)
    UNION ALL
    SELECT queue, state, finished_at FROM {jobs}
    WHERE state = 'dead' AND finished_at > now() - make_interval(mins => %(minutes)s)
    UNION ALL
    SELECT queue, state, finished_at FROM {jobs}
    WHERE state = 'cancelled' AND finished_at > now() - make_interval(mins => %(minutes)s)
) AS finished
GROUP BY 1, 2, 3
"""

# The planner's estimate of the table's rows (as of the last ANALYZE): what the overview
# shows as "about N jobs", instead of counting them. NULL before the first ANALYZE
# (reltuples is -1 then).
_ESTIMATE = """
SELECT (SELECT CASE WHEN reltuples >= 0 THEN reltuples::bigint END FROM pg_class
        WHERE oid = to_regclass(%(table)s)) AS estimate
"""

# Newest first, one page at a time: `before` is the smallest id of the previous page
# (keyset pagination: no OFFSET, each page is a backward range of the primary key), and
# `floor` bounds the range: a filter that few or no rows match walks at most
# SCAN_WINDOW ids of the key, not the whole table, and the page offers the next window.
_PAGE = """
SELECT id, queue, kind, state, priority, attempt, max_attempts, run_at, created_at,
       started_at, finished_at, worker, last_error
FROM {jobs}
WHERE (%(state)s::text IS NULL OR state = %(state)s::text)
  AND (%(queue)s::text IS NULL OR queue = %(queue)s::text)
  AND (%(kind)s::text IS NULL OR kind = %(kind)s::text)
  AND id < %(before)s::bigint AND id >= %(floor)s::bigint
  {key_filter}
ORDER BY id DESC
LIMIT %(limit)s
"""

# The newest id: the top of the first page's window (one descent of the primary key).
_MAX_ID = """
SELECT coalesce(max(id), 0) AS max_id FROM {jobs}
"""

_HAS_KEY = """
SELECT EXISTS (
    SELECT FROM information_schema.columns
    WHERE table_schema = %(schema)s AND table_name = 'jobs' AND column_name = 'key')
"""


@dataclass(frozen=True)
class Statements:
    live: bytes
    dead: bytes
    finished_1h: bytes
    estimate: bytes
    max_id: bytes
    page: bytes
    page_with_key: bytes


@functools.cache
def statements(schema: str) -> Statements:
    """Rendered once per schema; the schema enters only as an Identifier."""
    jobs = sql.Identifier(schema, "jobs")

    def render(text: str, **extra: sql.Composable) -> bytes:
        return sql.SQL(text).format(jobs=jobs, **extra).as_bytes(None)

    key = sql.SQL("AND (%(key)s::text IS NULL OR key = %(key)s::text)")
    return Statements(
        live=render(_LIVE),
        dead=render(_DEAD),
        finished_1h=render(_FINISHED_1H),
        estimate=render(_ESTIMATE),
        max_id=render(_MAX_ID),
        page=render(_PAGE, key_filter=sql.SQL("")),
        page_with_key=render(_PAGE, key_filter=key),
    )


class DashboardReads:
    """The dashboard's reads over one schema."""

    def __init__(self, schema: str) -> None:
        self.schema = schema
        self._own = statements(schema)
        self._shared = queries.statements(schema)

    def has_key_column(self, conn: psycopg.Connection[Any]) -> bool:
        row = conn.execute(_HAS_KEY, {"schema": self.schema}).fetchone()
        return bool(row and row[0])

    # The overview's rows come in three parts that the web app reads at once on three
    # connections: the dead count and the last hour each walk tens of thousands of heap
    # rows on a large table, and in parallel the page costs the slowest part, not the
    # sum. The parts may be a few milliseconds apart: a dashboard's glance, not a ledger.

    def overview_live(self, conn: psycopg.Connection[Any]) -> dict[str, Any]:
        """The clock, queued and running counts, the estimate, pauses and daemons."""
        own, shared = self._own, self._shared
        table = sql.Identifier(self.schema, "jobs").as_string(conn)
        with conn.cursor(row_factory=dict_row) as cur:
            return {
                "now": _one(cur.execute(shared["clock_read"]))["now"],
                "live": cur.execute(own.live).fetchall(),
                "estimate": _one(cur.execute(own.estimate, {"table": table}))["estimate"],
                "paused": cur.execute(shared["queues_paused"]).fetchall(),
                "daemons": cur.execute(shared["daemons_list"]).fetchall(),
            }

    def overview_dead(self, conn: psycopg.Connection[Any]) -> dict[str, Any]:
        with conn.cursor(row_factory=dict_row) as cur:
            return {"dead": cur.execute(self._own.dead).fetchall()}

    def overview_finished(self, conn: psycopg.Connection[Any]) -> dict[str, Any]:
        with conn.cursor(row_factory=dict_row) as cur:
            params = {"minutes": CHART_MINUTES}
            return {"finished": cur.execute(self._own.finished_1h, params).fetchall()}

    def max_id(self, conn: psycopg.Connection[Any]) -> int:
        row = conn.execute(self._own.max_id).fetchone()
        return int(row[0]) if row else 0

    def periodic_last(
        self, conn: psycopg.Connection[Any], keys: list[str]
    ) -> dict[str, dict[str, Any]]:
        with conn.cursor(row_factory=dict_row) as cur:
            rows = cur.execute(self._shared["periodic_entries_last"], {"keys": keys})
            return {row["entry_key"]: row for row in rows.fetchall()}

    def jobs_page(
        self,
        conn: psycopg.Connection[Any],
        *,
        state: str | None,
        queue: str | None,
        kind: str | None,
        key: str | None,
        before: int,
        floor: int,
        limit: int,
    ) -> list[dict[str, Any]]:
        """Up to `limit` jobs newest first with `floor` <= id < `before`. `key` only on a
        schema with the column (the caller asks has_key_column once)."""
        params = {
            "floor": floor,
            "state": state,
            "queue": queue,
            "kind": kind,
            "key": key,
            "before": before,
            "limit": limit,
        }
        statement = self._own.page if key is None else self._own.page_with_key
        with conn.cursor(row_factory=dict_row) as cur:
            return cur.execute(statement, params).fetchall()


def _one(cur: psycopg.Cursor[dict[str, Any]]) -> dict[str, Any]:
    row = cur.fetchone()
    assert row is not None  # an aggregate-free SELECT of one row
    return row
