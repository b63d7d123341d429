"""ABAB helper for issue 19: the unlimited no-op row of bench/limits.py (20,000 jobs, 4
claimers, batch 10, complete_and_claim as a worker runs it) for whichever checkout is on
PYTHONPATH; run it from each checkout in turn:

    PYTHONPATH=<checkout> python bench/abab_unlimited_claim.py NAME

It imports `WORKER_OPTIONS` and bench/server_cpu, so it runs on checkouts from round 16
on (an older checkout needs the script from its own time). Besides jobs/s
and the call's p50/p99, the CPU per job: this process's (the 4 claimers' Python and
psycopg) and the server's (every process of the cluster, reaped backends included,
from /proc), over the drain only.
"""

from __future__ import annotations

import sys
import threading
import time
from typing import Any

import psycopg

import pgworkerd
from bench.cluster import fresh_database, throwaway_cluster
from bench.server_cpu import ServerCpu
from bench.stats import percentile
from pgworkerd.storage import migrations
from pgworkerd.storage.store import JobStore
from pgworkerd.worker import WORKER_OPTIONS

JOBS, WORKERS, BATCH = 20_000, 4, 10


def drain(dsn: str, calls: list[float]) -> None:
    store = JobStore()
    options = WORKER_OPTIONS
    with psycopg.connect(dsn, autocommit=True, options=options) as conn:
        pending: list[Any] = []
        while True:
            began = time.perf_counter()
            _, claimed = store.complete_and_claim(
                conn, pending, queues=["default"], limit=BATCH, lease_ttl_s=60, worker="b"
            )
            calls.append(time.perf_counter() - began)
            pending = [(job.lease, None) for job in claimed]
            if not claimed:
                return


def main(name: str) -> None:
    with throwaway_cluster() as cluster:
        dsn = fresh_database(cluster, "abab")
        with psycopg.connect(dsn, autocommit=True) as conn:
            migrations.migrate(conn, "pgworkerd")
            for _ in range(JOBS // 10_000):
                pgworkerd.enqueue_many(conn, [{"kind": "noop", "payload": {}}] * 10_000)
            conn.execute("ANALYZE pgworkerd.jobs")
        calls: list[float] = []
        threads = [threading.Thread(target=drain, args=(dsn, calls)) for _ in range(WORKERS)]
        time.sleep(0.5)  # the setup's backend reaped
        # Every process of the cluster, reaped backends included (bench/server_cpu.py).
        server_cpu, client_before = ServerCpu(cluster.data_dir), time.process_time()
        began = time.perf_counter()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        wall = time.perf_counter() - began
        client = time.process_time() - client_before
        time.sleep(0.5)  # the claimers' backends reaped
        server = server_cpu.since_start()["total"]
    p50, p99 = percentile(calls, 50) * 1000, percentile(calls, 99) * 1000
    print(
        f"{name}: {JOBS / wall:,.0f} jobs/s, p50 {p50:.2f} ms, p99 {p99:.2f} ms,"
        f" CPU/job server {server / JOBS * 1e6:.0f} us client {client / JOBS * 1e6:.0f} us",
        flush=True,
    )


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "this checkout")
