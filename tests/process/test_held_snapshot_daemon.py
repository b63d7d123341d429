"""The work of a claim does not grow while a transaction holds back vacuum, measured on
a real daemon (issue 18; tests/integration/test_claim_held_snapshot.py measures the
store's claim alone).

A connection opens a transaction with an xid and leaves it idle, as a forgotten `psql`
session does; then 100,000 no-op jobs run through `pgworkerd run` (two worker
processes, batch 10, the defaults), enqueued 2,000 at a time as a producer would keep a
queue fed. pg_stat_statements counts the buffers of the daemon's claim statements (the
claim alone, and the complete-and-claim of each batch) over windows of 10,000 jobs:
every window after the first must stay within 2x of the first. Without claim positions
each claim walks past the queued versions of every job done since the snapshot began,
and the windows grow with them (the store-level test fails at 20,000 jobs).
"""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

import pgworkerd
from tests.daemon import wait_until

JOBS = 100_000
CHUNK = 2_000  # enqueued at once, then worked off
WINDOW = 10_000  # jobs per sample of the claims' buffers
BASELINE_JOBS = 4_000  # first chunks, before the first window: see the integration test

# The statements that claim: jobs_claim (WITH RECURSIVE queues ...) and
# jobs_complete_and_claim (WITH RECURSIVE completed ...); both lock their picks.
CLAIM_WORK = """
SELECT coalesce(sum(shared_blks_hit + shared_blks_read), 0)::float8
       / greatest(sum(calls), 1)
FROM pg_stat_statements
WHERE query LIKE 'WITH RECURSIVE%%' AND query LIKE '%%FOR UPDATE SKIP LOCKED%%'
"""


@pytest.mark.slow  # 100,000 jobs through a daemon: a minute or two
@pytest.mark.timeout(900)
def test_a_daemons_claims_stay_flat_while_a_snapshot_is_held(stats_dsn, daemons):
    daemons(stats_dsn, handlers={"noop": "tests.handlers:noop"})
    with psycopg.connect(stats_dsn, autocommit=True) as conn:
        windows = claim_work_while_held(conn, stats_dsn, JOBS)
    print(f"buffers per claim statement (jobs done, buffers): {windows}")
    assert len(windows) == JOBS // WINDOW  # the first from BASELINE_JOBS to WINDOW


FIRST_JOBS = 12  # run one at a time on a new table, before anything holds a snapshot
FRESH_JOBS = 40_000


@pytest.mark.slow  # 40,000 jobs through a daemon: about a minute
@pytest.mark.timeout(900)
def test_claims_stay_flat_under_a_held_snapshot_after_a_start_on_a_new_table(stats_dsn, daemons):
    """A new install: the daemon starts on an empty jobs table that has never been
    analyzed, and its first jobs come one at a time. Its worker's connection plans
    generically (plan_cache_mode) and psycopg prepares each statement at its sixth run,
    so the claims' plans are made while the table holds a few rows, and kept until its
    statistics change. Autoanalyze is kept off the table here: the time before the
    first one (up to autovacuum_naptime after 50 changes), held for the test. Then a
    transaction holds a snapshot and 40,000 jobs run: the claims' buffers must stay
    flat, as in the test above, whatever the table's size was when they were planned."""
    with psycopg.connect(stats_dsn, autocommit=True) as conn:
        conn.execute("ALTER TABLE pgworkerd.jobs SET (autovacuum_analyze_threshold = 2147483647)")
    daemons(
        stats_dsn,
        handlers={"noop": "tests.handlers:noop"},
        workers=[{"queues": ["default"], "concurrency": 1}],  # its runs are all one's
    )
    with psycopg.connect(stats_dsn, autocommit=True) as conn:
        for _ in range(FIRST_JOBS):  # each its own claim and completion
            run_chunk(conn, size=1)
        assert jobs_statistics(conn) == (0, -1.0), "jobs was analyzed: not a new table"
        windows = claim_work_while_held(conn, stats_dsn, FRESH_JOBS)
    print(f"buffers per claim statement (jobs done, buffers): {windows}")
    assert len(windows) == FRESH_JOBS // WINDOW


def claim_work_while_held(
    conn: psycopg.Connection[Any], dsn: str, jobs: int
) -> list[tuple[int, float]]:
    """Hold an xid on another connection while `jobs` no-op jobs run, CHUNK at a time;
    return the claims' buffers per statement, by WINDOW of jobs after the first
    BASELINE_JOBS. Each window must stay within 2x of the first (checked as it ends: a
    claim that grows fails in seconds)."""
    with psycopg.connect(dsn) as holder:
        holder.execute("SELECT txid_current()")  # an xid: the horizon stops here
        done = 0
        while done < BASELINE_JOBS:
            done += run_chunk(conn)
        conn.execute("SELECT pg_stat_statements_reset()")
        windows: list[tuple[int, float]] = []
        while done < jobs:
            done += run_chunk(conn)
            if done % WINDOW == 0:
                windows.append((done, claim_work(conn)))
                conn.execute("SELECT pg_stat_statements_reset()")
                first = windows[0][1]
                assert first > 0, "no claim was counted"
                assert windows[-1][1] <= 2 * first, f"buffers per claim grew: {windows}"
        still_held = conn.execute(
            "SELECT backend_xid IS NOT NULL FROM pg_stat_activity WHERE pid = %s",
            (holder.info.backend_pid,),
        ).fetchone()
        holder.rollback()
    assert still_held == (True,), "the xid was held to the end"
    return windows


def run_chunk(conn: psycopg.Connection[Any], size: int = CHUNK) -> int:
    """Enqueue `size` no-op jobs and wait until the daemon has worked them all off."""
    pgworkerd.enqueue_many(conn, [{"kind": "noop", "payload": {}}] * size)
    wait_until(
        lambda: (
            not conn.execute(
                "SELECT EXISTS (SELECT FROM pgworkerd.jobs WHERE state IN ('queued', 'running'))"
            ).fetchone()[0]
        ),
        timeout_s=120,
        what="the chunk worked off",
    )
    return size


def claim_work(conn: psycopg.Connection[Any]) -> float:
    return conn.execute(CLAIM_WORK).fetchone()[0]


def jobs_statistics(conn: psycopg.Connection[Any]) -> tuple[int, float]:
    """jobs's (relpages, reltuples): (0, -1) until its first VACUUM or ANALYZE."""
    return conn.execute(
        "SELECT relpages, reltuples FROM pg_class WHERE oid = 'pgworkerd.jobs'::regclass"
    ).fetchone()
