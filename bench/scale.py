"""Scale: a million jobs enqueued in bulk; claim latency with them waiting, with a
million finished rows and with a million scheduled for later; daemon RSS over a long
run of no-op jobs.

    python -m bench.scale [--jobs 1000000] [--samples 2000] [--daemon-jobs 100000]

Timings are printed, never asserted: tests/test_claim_plan.py asserts the plan.
"""

from __future__ import annotations

import argparse
import signal
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import psutil
import psycopg

import pgworkerd
from pgworkerd.embedded import EmbeddedCluster, free_port
from pgworkerd.migrations import migrate
from pgworkerd.store import JobStore
from tests.daemon import Daemon, write_config

Conn = psycopg.Connection[Any]


def enqueue_bulk(conn: Conn, count: int, chunk: int = 10_000, **options: Any) -> float:
    started = time.perf_counter()
    for offset in range(0, count, chunk):
        pgworkerd.enqueue_many(conn, [{"kind": "noop", "payload": {"n": offset + n}, **options}
                                      for n in range(min(chunk, count - offset))])
    return count / (time.perf_counter() - started)


def claim_latency_ms(conn: Conn, samples: int) -> tuple[float, float]:
    store = JobStore()
    latencies = []
    for _ in range(samples):
        started = time.perf_counter()
        jobs = store.claim(conn, queues=["default"], limit=1, lease_ttl_s=30, worker="scale")
        latencies.append((time.perf_counter() - started) * 1000)
        store.complete(conn, [(job.lease, None) for job in jobs])
    latencies.sort()
    return statistics.median(latencies), latencies[int(len(latencies) * 0.99) - 1]


def daemon_rss(dsn: str, work: Path, jobs: int) -> list[tuple[float, float, float, int]]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        enqueue_bulk(conn, jobs)
    config = write_config(work / "scale.yaml", workers=[{"queues": ["default"],
                                                         "concurrency": 2}],
                          defaults={"batch_size": 100})
    daemon = Daemon(config, dsn, work / "scale.log")
    samples = []
    started = time.monotonic()
    try:
        with psycopg.connect(dsn, autocommit=True) as conn:
            while True:
                left = conn.execute("SELECT count(*) FROM pgworkerd.jobs"
                                    " WHERE state = 'queued'").fetchone()[0]
                supervisor = psutil.Process(daemon.pid).memory_info().rss / 2**20
                children = [p.memory_info().rss / 2**20 for p in daemon.workers()]
                samples.append((time.monotonic() - started, supervisor,
                                max(children, default=0.0), jobs - left))
                if left == 0:
                    break
                time.sleep(2)
        daemon.signal(signal.SIGTERM)
        daemon.wait(timeout_s=60)
    finally:
        daemon.kill_everything()
    return samples


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=1_000_000)
    parser.add_argument("--samples", type=int, default=2000)
    parser.add_argument("--daemon-jobs", type=int, default=100_000)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="pgworkerd-scale-"))
    cluster = EmbeddedCluster(base_dir=work / "pg", port=free_port()).ensure_running()
    dsn = cluster.dsn()
    rows = []
    try:
        with psycopg.connect(dsn, autocommit=True) as conn:
            migrate(conn, "pgworkerd")
            rows.append(("claim, empty table", *claim_latency_ms(conn, 200)))
            rate = enqueue_bulk(conn, args.jobs)
            print(f"enqueue_many of {args.jobs:,} jobs (10,000 a call): {rate:,.0f} jobs/s")
            conn.execute("VACUUM ANALYZE pgworkerd.jobs")
            rows.append((f"claim, {args.jobs:,} queued", *claim_latency_ms(conn, args.samples)))
            conn.execute("UPDATE pgworkerd.jobs SET state = 'succeeded', finished_at = now(),"
                         " attempt = 1 WHERE state = 'queued'")
            enqueue_bulk(conn, args.samples * 2)
            conn.execute("VACUUM ANALYZE pgworkerd.jobs")
            rows.append((f"claim, {args.jobs:,} finished", *claim_latency_ms(conn, args.samples)))
            enqueue_bulk(conn, args.jobs, delay=86_400)
            conn.execute("VACUUM ANALYZE pgworkerd.jobs")
            rows.append((f"claim, + {args.jobs:,} scheduled later",
                         *claim_latency_ms(conn, args.samples)))
            conn.execute("DELETE FROM pgworkerd.jobs")
            conn.execute("VACUUM ANALYZE pgworkerd.jobs")
        rss = daemon_rss(dsn, work, args.daemon_jobs)
    finally:
        cluster.destroy()
    print("| claim of 1 job                               | p50 ms | p99 ms |")
    print("|----------------------------------------------|-------:|-------:|")
    for what, p50, p99 in rows:
        print(f"| {what:<44} | {p50:6.2f} | {p99:6.2f} |")
    print(f"daemon over {args.daemon_jobs:,} no-op jobs (2 workers, batch 100):")
    print("  seconds  supervisor_MB  largest_worker_MB  jobs_done")
    for elapsed, supervisor, child, done in rss:
        print(f"  {elapsed:7.0f}  {supervisor:13.1f}  {child:17.1f}  {done:9d}")


if __name__ == "__main__":
    main()
