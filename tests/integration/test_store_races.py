"""Two faults at the store (docs/faults.md, "Rescuer racing completions" and "Many jobs
failing at once"): the rescuer racing completions, and failures that happen together
spread out."""

from __future__ import annotations

import random
import threading
from collections import Counter
from typing import Any

import psycopg

import pgworkerd
from pgworkerd.storage.store import JobStore


def test_s9_rescuer_racing_completions_never_overrides_an_accepted_outcome(conn, db_dsn):
    store = JobStore()
    count = 3000
    ids = pgworkerd.enqueue_many(conn, [{"kind": "k", "payload": {}} for _ in range(count)])
    jobs = store.claim(conn, queues=["default"], limit=count, lease_ttl_s=0.5, worker="racer")
    assert len(jobs) == count
    random.Random(9).shuffle(jobs)
    accepted: set[int] = set()
    rescued: list[int] = []
    reclaimed: list[Any] = []
    completing = threading.Event()

    def complete_one_by_one() -> None:
        with psycopg.connect(db_dsn, autocommit=True) as own:
            completing.set()
            for job in jobs:  # ~ the lease's expiry falls in the middle of this
                accepted.update(store.complete(own, [(job.lease, None)]))
        completing.clear()

    def rescue_and_reclaim() -> None:
        with psycopg.connect(db_dsn, autocommit=True) as own:
            completing.wait(10)
            while completing.is_set():
                rescued.extend(o.job_id for o in store.rescue(own, limit=50))
                # A fresh claim of a rescued job, with a long lease: must never be rescued.
                reclaimed.extend(
                    store.claim(own, queues=["default"], limit=50, lease_ttl_s=60, worker="second")
                )

    threads = [
        threading.Thread(target=complete_one_by_one),
        threading.Thread(target=rescue_and_reclaim),
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=100)

    assert not accepted & set(rescued), "a completed job was rescued, or a rescued completed"
    assert len(rescued) == len(set(rescued)), "a job was rescued twice"
    assert len(accepted) + len(rescued) == count
    assert rescued, "the race never happened: no lease expired during the completions"
    assert accepted, "the race never happened: every lease expired first"
    states = dict(conn.execute("SELECT state, count(*) FROM pgworkerd.jobs GROUP BY state"))
    assert states.get("succeeded", 0) == len(accepted)
    for job in reclaimed:  # held by the second worker, untouched by any rescue
        assert job.attempt == 2
        assert store.complete(conn, [(job.lease, None)]) == {job.id}
    assert set(ids) == accepted | set(rescued)


def test_s27_ten_thousand_failures_at_once_come_back_spread_out(conn):
    store = JobStore()  # the default backoff: full jitter over the first 30 s
    pgworkerd.enqueue_many(conn, [{"kind": "k", "payload": {}} for _ in range(10_000)])
    store.claim(conn, queues=["default"], limit=10_000, lease_ttl_s=30, worker="w")
    conn.execute("UPDATE pgworkerd.jobs SET lease_expires_at = now() - interval '1 s'")
    now = conn.execute("SELECT now()").fetchone()[0]
    outcomes = store.rescue(conn, limit=10_000)  # all fail in one instant
    assert len(outcomes) == 10_000
    per_second = Counter(int((o.run_at - now).total_seconds()) for o in outcomes)
    busiest_share = max(per_second.values()) / 10_000
    assert busiest_share <= 0.05, f"{busiest_share:.1%} of the retries fall in one second"
    assert len(per_second) >= 25, sorted(per_second)
