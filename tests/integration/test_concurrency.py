"""Concurrent claimers in separate processes each get every job exactly once."""

from __future__ import annotations

import multiprocessing
from collections import Counter

import pgworkerd
from pgworkerd.storage.store import JobStore

CLAIMERS = 8
JOBS = 5_000


def claim_until_empty(dsn: str, worker: str, start: multiprocessing.Event) -> list[int]:
    """Runs in a child process: claim batches and complete them until none is left."""
    import psycopg

    store = JobStore()
    seen: list[int] = []
    with psycopg.connect(dsn, autocommit=True) as conn:
        start.wait(30)
        while batch := store.claim(
            conn, queues=["default"], limit=10, lease_ttl_s=60, worker=worker
        ):
            seen.extend(job.id for job in batch)
            applied = store.complete(conn, [(job.lease, None) for job in batch])
            assert applied == {job.id for job in batch}
    return seen


def test_eight_processes_claim_five_thousand_jobs_each_exactly_once(conn, db_dsn):
    ids = pgworkerd.enqueue_many(conn, [{"kind": "k", "payload": {"n": n}} for n in range(JOBS)])
    context = multiprocessing.get_context("spawn")  # no connection or lock crosses a fork
    with context.Manager() as manager:
        start = manager.Event()
        with context.Pool(CLAIMERS) as pool:
            pending = [
                pool.apply_async(claim_until_empty, (db_dsn, f"claimer-{n}", start))
                for n in range(CLAIMERS)
            ]
            start.set()
            results = [p.get(timeout=110) for p in pending]

    claims = Counter(job_id for seen in results for job_id in seen)
    assert set(claims) == set(ids)
    assert max(claims.values()) == 1, [i for i, c in claims.items() if c > 1][:10]
    assert sum(1 for seen in results if seen) > 1, "the claimers should have shared the work"
    states = dict(conn.execute("SELECT state, count(*) FROM pgworkerd.jobs GROUP BY state"))
    assert states == {"succeeded": JOBS}
    assert conn.execute("SELECT max(attempt) FROM pgworkerd.jobs").fetchone()[0] == 1
