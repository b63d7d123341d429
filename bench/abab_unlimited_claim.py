"""ABAB helper for issue 19: the unlimited no-op row of bench/limits.py (20,000 jobs, 4 claimers, batch 10, complete_and_claim), for whichever checkout is on PYTHONPATH: run it from each checkout in turn, `python bench/abab_unlimited_claim.py NAME`."""

import sys
import threading
import time

import psycopg

import pgworkerd
from bench.cluster import fresh_database, throwaway_cluster
from bench.stats import percentile
from pgworkerd.storage import migrations
from pgworkerd.storage.store import JobStore
from pgworkerd.worker import WORKER_PLAN_CACHE_MODE

JOBS, WORKERS, BATCH = 20000, 4, 10
with throwaway_cluster() as cluster:
    dsn = fresh_database(cluster, "abab")
    with psycopg.connect(dsn, autocommit=True) as conn:
        migrations.migrate(conn, "pgworkerd")
        for start in range(0, JOBS, 10000):
            pgworkerd.enqueue_many(conn, [{"kind": "noop", "payload": {}}] * 10000)
        conn.execute("ANALYZE pgworkerd.jobs")
    calls = []

    def worker():
        store = JobStore()
        with psycopg.connect(
            dsn, autocommit=True, options=f"-c plan_cache_mode={WORKER_PLAN_CACHE_MODE}"
        ) as conn:
            pending = []
            while True:
                t = time.perf_counter()
                kept, claimed = store.complete_and_claim(
                    conn, pending, queues=["default"], limit=BATCH, lease_ttl_s=60, worker="b"
                )
                calls.append(time.perf_counter() - t)
                pending = [(j.lease, None) for j in claimed]
                if not claimed:
                    break

    threads = [threading.Thread(target=worker) for _ in range(WORKERS)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    print(
        f"{sys.argv[1]}: {JOBS / wall:,.0f} jobs/s, p50 {percentile(calls, 50) * 1000:.2f} ms, p99 {percentile(calls, 99) * 1000:.2f} ms",
        flush=True,
    )
