"""A million finished rows past retention, pruned as the daemon prunes them (rounds of
1000-row batches under a time budget) while a worker enqueues, claims and completes
jobs beside it: every expired row goes, nothing else does, and the worker never waits
on the pruner's locks. Times and lock waits are measured and printed (`-s`), not
asserted: the machine's speed is not the subject."""

from __future__ import annotations

import itertools
import statistics
import threading
import time

import psycopg
import pytest

import pgworkerd
from pgworkerd.housekeeping.retention import Policy, prune_round
from pgworkerd.storage.store import JobStore
from tests.integration.test_retention import DAY, HOUR, add

SCHEMA = "pgworkerd"
POLICY = Policy({"succeeded": DAY, "dead": 30 * DAY, "cancelled": 7 * DAY})
EXPIRED = 1_000_000


def fill(conn) -> None:
    """EXPIRED rows past retention (80 % succeeded, 10 % dead, 10 % cancelled, finished
    over the past weeks), and rows that stay."""
    conn.execute(
        """
        INSERT INTO pgworkerd.jobs
            (queue, kind, payload, state, attempt, created_at, finished_at, result)
        SELECT 'default', 'k', '{}', s.state, 1, f.at, f.at, NULL
        FROM generate_series(1, %(n)s) AS i,
             LATERAL (SELECT CASE WHEN i %% 10 = 0 THEN 'dead'
                                  WHEN i %% 10 = 1 THEN 'cancelled'
                                  ELSE 'succeeded' END AS state) AS s,
             LATERAL (SELECT now() - make_interval(days => CASE s.state
                                                     WHEN 'dead' THEN 31
                                                     WHEN 'cancelled' THEN 8
                                                     ELSE 2 END)
                             - make_interval(secs => i %% 86400) AS at) AS f
        """,
        {"n": EXPIRED},
    )
    add(conn, "succeeded", HOUR, 5000)
    add(conn, "dead", 10 * DAY, 1000)
    add(conn, "queued", 100 * DAY, 1000)
    add(conn, "running", 100 * DAY, 100)
    conn.execute("ANALYZE pgworkerd.jobs")


class Worker(threading.Thread):
    """enqueue → claim → complete in a loop beside the pruner, timing each cycle."""

    def __init__(self, dsn: str) -> None:
        super().__init__(daemon=True)
        self.dsn = dsn
        self.stop = threading.Event()
        self.cycles_ms: list[float] = []
        self.error: BaseException | None = None

    def run(self) -> None:
        store = JobStore(SCHEMA)
        try:
            with psycopg.connect(self.dsn, autocommit=True) as conn:
                conn.execute("SET lock_timeout = '5s'")  # a wait fails loudly, not forever
                while not self.stop.is_set():
                    started = time.perf_counter()
                    pgworkerd.enqueue(conn, "k", {}, queue="beside")
                    jobs = store.claim(
                        conn, queues=["beside"], limit=1, lease_ttl_s=30, worker="w:1"
                    )
                    store.complete(conn, [(job.lease, None) for job in jobs])
                    self.cycles_ms.append((time.perf_counter() - started) * 1000)
        except BaseException as exc:
            self.error = exc


class LockWatch(threading.Thread):
    """Samples the server's lock waits on the jobs table every 20 ms."""

    def __init__(self, dsn: str) -> None:
        super().__init__(daemon=True)
        self.dsn = dsn
        self.stop = threading.Event()
        self.samples = 0
        self.waits = 0  # samples in which some backend waited for a lock

    def run(self) -> None:
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            while not self.stop.wait(0.02):
                waiting = conn.execute(
                    "SELECT count(*) FROM pg_stat_activity"
                    " WHERE datname = current_database() AND wait_event_type = 'Lock'"
                ).fetchone()[0]
                self.samples += 1
                self.waits += bool(waiting)


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_a_million_expired_rows_are_pruned_in_batches_beside_a_busy_worker(conn, db_dsn):
    filled_at = time.perf_counter()
    fill(conn)
    fill_s = time.perf_counter() - filled_at
    kept = {"succeeded": 5000, "dead": 1000, "queued": 1000, "running": 100}

    worker, watch = Worker(db_dsn), LockWatch(db_dsn)
    worker.start()
    watch.start()
    batch_ms: list[float] = []
    rounds = 0
    removed = 0
    started = time.perf_counter()
    try:
        while True:
            ticks: list[float] = []

            def clock(ticks: list[float] = ticks) -> float:
                ticks.append(time.perf_counter())
                return ticks[-1]

            pruned = prune_round(conn, SCHEMA, POLICY, clock=clock)
            rounds += 1
            removed += pruned.total
            # The clock is read once before the round and once before each batch.
            batch_ms += [(b - a) * 1000 for a, b in itertools.pairwise(ticks[1:])]
            if not pruned.backlog:
                break
    finally:
        prune_s = time.perf_counter() - started
        worker.stop.set()
        watch.stop.set()
        worker.join(timeout=30)
        watch.join(timeout=30)

    assert worker.error is None, f"the worker beside the pruner failed: {worker.error!r}"
    assert removed == EXPIRED
    kept_after = conn.execute(
        "SELECT state, count(*) FROM pgworkerd.jobs WHERE queue <> 'beside' GROUP BY state"
    ).fetchall()
    assert dict(kept_after) == kept, "only what was past retention went"
    cycles = sorted(worker.cycles_ms)
    print(
        f"\nfill {fill_s:.1f}s; pruned {removed} rows in {prune_s:.1f}s, {rounds} rounds, "
        f"{len(batch_ms)} batches: median {statistics.median(batch_ms):.1f} ms, "
        f"max {max(batch_ms):.1f} ms; worker beside it: {len(cycles)} cycles, median "
        f"{statistics.median(cycles):.1f} ms, p99 {cycles[int(len(cycles) * 0.99)]:.1f} ms, "
        f"max {cycles[-1]:.1f} ms; lock waits seen in {watch.waits} of {watch.samples} "
        "samples"
    )
