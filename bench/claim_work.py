"""What one claim reads while a transaction holds back vacuum (issue 18).

    python -m bench.claim_work [--jobs 100000] [--batch 100] [--no-holder]

On a throwaway cluster with pg_stat_statements: a separate connection opens a
transaction with an xid (`BEGIN; SELECT txid_current()`) and leaves it open; then jobs
are enqueued a chunk at a time and run through the store's own claim and complete
(JobStore.claim, JobStore.complete, as a worker runs them). For the first chunk and
every tenth of the run, the buffers (shared hit + read) and time of the claim
statements are read from pg_stat_statements and divided by the claims made: the work
of one claim as the jobs done since the snapshot grow. `--no-holder` is the same run
with nothing held, for comparison.

The claiming connection plans as a worker's does (generic plans, kept for the
connection's life), and the table is analysed once after the first chunk, as
autovacuum would have done by then on a live table: a plan cached while the table was
empty would scan the whole heap, and measure that instead.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

import psycopg

import pgworkerd
from bench.cluster import PEER_SETTINGS, fresh_database, throwaway_cluster
from pgworkerd.storage.migrations import migrate
from pgworkerd.storage.store import JobStore
from pgworkerd.worker import WORKER_OPTIONS

CHUNK = 1_000
STATS_SETTINGS = {**PEER_SETTINGS, "shared_preload_libraries": "pg_stat_statements"}

# Every statement that locks rows to claim them says FOR UPDATE SKIP LOCKED; of the
# others that do, none runs in this loop (rescue, pruning).
CLAIM_WORK = """
SELECT coalesce(sum(shared_blks_hit + shared_blks_read), 0)::bigint,
       coalesce(sum(total_exec_time), 0)::float8
FROM pg_stat_statements
WHERE query LIKE '%%FOR UPDATE SKIP LOCKED%%' AND dbid = (
    SELECT oid FROM pg_database WHERE datname = current_database())
"""


def drain_chunk(
    conn: psycopg.Connection[Any], store: JobStore, batch: int
) -> tuple[int, int, int, float]:
    """Enqueue a chunk, then claim and complete until nothing is ready: (jobs done,
    claims, buffers of the claims, ms of the claims)."""
    pgworkerd.enqueue_many(conn, [{"kind": "k", "payload": {}} for _ in range(CHUNK)])
    conn.execute("SELECT pg_stat_statements_reset()")
    done = claims = 0
    while True:
        claimed = store.claim(conn, queues=["default"], limit=batch, lease_ttl_s=60, worker="w")
        claims += 1
        if not claimed:
            break
        done += len(store.complete(conn, [(job.lease, None) for job in claimed]))
    buffers, ms = conn.execute(CLAIM_WORK).fetchone()
    return done, claims, buffers, ms


def run(dsn: str, jobs: int, batch: int, hold: bool) -> list[tuple[int, float, float]]:
    """(jobs done before, buffers per claim, ms per claim) at the sampled chunks."""
    figures = []
    store = JobStore()
    with (
        psycopg.connect(dsn, autocommit=True, options=WORKER_OPTIONS) as conn,
        psycopg.connect(dsn, autocommit=False) as holder,
    ):
        conn.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
        if hold:
            xid = holder.execute("SELECT txid_current()").fetchone()[0]
            print(f"holder: xid {xid} open, idle in transaction")
        done = 0
        started = time.monotonic()
        every = max(jobs // 10, CHUNK)
        while done < jobs:
            sampled = done % every == 0 or done + CHUNK >= jobs
            chunk_done, claims, buffers, ms = drain_chunk(conn, store, batch)
            if done == 0:
                conn.execute("ANALYZE pgworkerd.jobs")  # see the module's docstring
            if sampled:
                figures.append((done, buffers / claims, ms / claims))
                print(
                    f"  done {done:>7}: {buffers / claims:9.1f} buffers/claim"
                    f" {ms / claims:8.2f} ms/claim  (at {time.monotonic() - started:6.1f} s)",
                    flush=True,
                )
            done += chunk_done
        dead = conn.execute(
            "SELECT n_dead_tup FROM pg_stat_user_tables WHERE relname = 'jobs'"
        ).fetchone()
        print(f"jobs: n_dead_tup {dead[0] if dead else None}")
        holder.rollback()
    return figures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.claim_work")
    parser.add_argument("--jobs", type=int, default=100_000)
    parser.add_argument("--batch", type=int, default=100, help="jobs per claim")
    parser.add_argument("--no-holder", dest="hold", action="store_false")
    args = parser.parse_args(argv)
    with throwaway_cluster(settings=STATS_SETTINGS) as cluster:
        dsn = fresh_database(cluster, "claim_work")
        with psycopg.connect(dsn) as conn:
            migrate(conn, "pgworkerd")
        figures = run(dsn, args.jobs, args.batch, args.hold)
    first, last = figures[0][1], figures[-1][1]
    print(f"buffers per claim: start {first:.1f}, end {last:.1f} ({last / first:.1f}x)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
