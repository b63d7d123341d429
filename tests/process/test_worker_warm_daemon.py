"""A real daemon's worker runs its first woken claims and completions on statements
prepared before them (JobStore.warm, on every new connection), so none of them is
planned. tests/integration/test_worker_warm.py checks the store's calls with arguments
made by hand; this checks the arguments a worker really passes. Without the warm-up each
is planned at its first five runs (psycopg prepares at the sixth): `plans` 6 here."""

from __future__ import annotations

import time

import psycopg
from psycopg import sql

import pgworkerd
from tests.daemon import wait_until

# The worker's claim and idle-look statements, by how their text begins; `plans` counts
# plannings (pg_stat_statements.track_planning), summed over the statement's rows.
PLANS = """
SELECT CASE WHEN query LIKE 'WITH picked AS MATERIALIZED%%' THEN 'claim_one'
            WHEN query LIKE 'WITH RECURSIVE completed AS%%' THEN 'complete_and_claim'
            WHEN query LIKE 'WITH queues AS%%' THEN 'next_run_at' END AS name,
       sum(calls)::int, sum(plans)::int
FROM pg_stat_statements
WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
GROUP BY 1 HAVING bool_or(query LIKE 'WITH picked AS MATERIALIZED%%'
                          OR query LIKE 'WITH RECURSIVE completed AS%%'
                          OR query LIKE 'WITH queues AS%%')
"""


def test_a_workers_first_woken_claims_are_not_planned(stats_dsn, daemons):
    with psycopg.connect(stats_dsn, autocommit=True) as conn:
        conn.execute(
            sql.SQL("ALTER DATABASE {} SET pg_stat_statements.track_planning = on").format(
                sql.Identifier(conn.info.dbname)
            )
        )
    daemon = daemons(stats_dsn, workers=[{"queues": ["default"], "concurrency": 1}])
    daemon.wait_for_workers(1)
    with psycopg.connect(stats_dsn, autocommit=True) as conn:

        def looked() -> bool:
            return any(name == "next_run_at" for name, _, _ in conn.execute(PLANS).fetchall())

        wait_until(looked, what="the worker's first idle look")  # started, idle
        conn.execute("SELECT pg_stat_statements_reset()")
        for _ in range(8):  # one at a time: each a woken claim, then a completion
            pgworkerd.enqueue(conn, "noop", {})
            time.sleep(0.15)
        wait_until(
            lambda: conn.execute(
                "SELECT count(*) = 8 FROM pgworkerd.jobs WHERE state = 'succeeded'"
            ).fetchone()[0],
            what="the 8 jobs",
        )
        time.sleep(0.5)  # the last completion, written with the next claim
        counted = {name: (calls, plans) for name, calls, plans in conn.execute(PLANS)}
    assert counted.get("claim_one", (0, 0))[0] >= 5, counted
    # At most one planning each: an automatic ANALYZE of jobs may replan once.
    assert all(plans <= 1 for _, plans in counted.values()), counted
