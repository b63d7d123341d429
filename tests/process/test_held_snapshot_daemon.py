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
and the windows grow with them (the store-level test fails at 20,000 jobs). The
daemon first works a few hundred jobs on a small table, where its workers' statements
are planned: a plan that updates the rows by a seq scan of jobs grows the same way
(docs/design.md, "The idle wake-up path", round 15).
"""

from __future__ import annotations

import time
from typing import Any

import psycopg
import pytest

import pgworkerd
from tests.daemon import wait_until

JOBS = 100_000
CHUNK = 2_000  # enqueued at once, then worked off
WINDOW = 10_000  # jobs per sample of the claims' buffers
BASELINE_JOBS = 4_000  # first chunks, before the first window: see the integration test
SMALL_TABLE_BATCHES = 10  # of 30 jobs, before the snapshot is held

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
    with (
        psycopg.connect(stats_dsn, autocommit=True) as conn,
        psycopg.connect(stats_dsn) as holder,
    ):
        # First a few hundred jobs, 30 at a time, on a table of a few pages: the
        # workers' statements get their plans there (prepared at connect, or at their
        # sixth run), as on a fresh install, and keep them until jobs is next analyzed
        # (autovacuum: a minute or more; the test takes seconds). A plan that reads
        # jobs by a seq scan then reads every dead version below.
        for _ in range(SMALL_TABLE_BATCHES):
            pgworkerd.enqueue_many(conn, [{"kind": "noop", "payload": {}}] * 30)
            time.sleep(0.5)
        holder.execute("SELECT txid_current()")  # an xid: the horizon stops here
        done = 0
        while done < BASELINE_JOBS:
            done += run_chunk(conn)
        conn.execute("SELECT pg_stat_statements_reset()")
        windows: list[tuple[int, float]] = []
        while done < JOBS:
            done += run_chunk(conn)
            if done % WINDOW == 0:
                windows.append((done, claim_work(conn)))
                conn.execute("SELECT pg_stat_statements_reset()")
                first = windows[0][1]
                assert first > 0, "no claim was counted"
                # Each window checked as it ends: a claim that grows fails in seconds.
                assert windows[-1][1] <= 2 * first, f"buffers per claim grew: {windows}"
        still_held = conn.execute(
            "SELECT backend_xid IS NOT NULL FROM pg_stat_activity WHERE pid = %s",
            (holder.info.backend_pid,),
        ).fetchone()
        holder.rollback()
    print(f"buffers per claim statement (jobs done, buffers): {windows}")
    assert still_held == (True,), "the xid was held to the end"
    assert len(windows) == JOBS // WINDOW  # the first from BASELINE_JOBS to WINDOW


def run_chunk(conn: psycopg.Connection[Any]) -> int:
    """Enqueue CHUNK no-op jobs and wait until the daemon has worked them all off."""
    pgworkerd.enqueue_many(conn, [{"kind": "noop", "payload": {}}] * CHUNK)
    wait_until(
        lambda: (
            not conn.execute(
                "SELECT EXISTS (SELECT FROM pgworkerd.jobs WHERE state IN ('queued', 'running'))"
            ).fetchone()[0]
        ),
        timeout_s=120,
        what="the chunk worked off",
    )
    return CHUNK


def claim_work(conn: psycopg.Connection[Any]) -> float:
    return conn.execute(CLAIM_WORK).fetchone()[0]
