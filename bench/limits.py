"""`python -m bench --limits` (or `python -m bench.limits`): what the flow-control limits
cost the claim (issue 19), in one run on one throwaway durable cluster.

Rows, each in a fresh database, `jobs` no-op jobs enqueued first, then `workers`
threads, each on its own connection with its own JobStore (the limits as a worker's),
complete and claim batches of `batch` as a worker does (JobStore.complete_and_claim:
the successes of the last batch written with the next claim) until nothing is left:
  unlimited             no limits (the claim as before this issue)
  queue limits          concurrency 100,000 and rate 1,000,000/s: never binding, so
                        the cost is the lock, the counts and the ledger
  per_key, 1,000 keys   per_key {concurrency: 1}, jobs spread over 1,000 keys
  fair, 10,000 keys     fair: true, jobs spread over 10,000 keys
Each row: jobs/s (jobs / wall time from the first claim to the last) and the latency
of one complete-and-claim call (p50, p99, ms). Then the plans: 100,000 ready jobs over
10,000 keys, analysed, and EXPLAIN (ANALYZE, BUFFERS) of one claim of 10 of each kind
(in a transaction rolled back; the limited ones after their lock, as JobStore runs
them). Writes bench/results/<stamp>-limits/ (summary.md, plans.txt).
"""

from __future__ import annotations

import argparse
import threading
import time
from pathlib import Path

import psycopg

import pgworkerd
from bench.cluster import fresh_database, throwaway_cluster
from bench.daemon import REPO
from bench.stats import percentile
from pgworkerd.job import Lease
from pgworkerd.storage import migrations, queries
from pgworkerd.storage.limits import QueueLimits, claim_limit_params
from pgworkerd.storage.store import JobStore, _claim_params
from pgworkerd.worker import WORKER_OPTIONS

ROWS: list[tuple[str, QueueLimits | None, int]] = [
    ("unlimited", None, 0),
    ("queue limits (not binding)", QueueLimits(concurrency=100_000, rate=(1_000_000, 1.0)), 0),
    ("per_key, 1,000 keys", QueueLimits(key_concurrency=1), 1_000),
    ("fair, 10,000 keys", QueueLimits(fair=True), 10_000),
]
PLAN_JOBS, PLAN_KEYS = 100_000, 10_000


def migrate(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        migrations.migrate(conn, "pgworkerd")


def enqueue(dsn: str, jobs: int, keys: int) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        for start in range(0, jobs, 10_000):
            records = [
                {"kind": "noop", "payload": {}, **({"key": f"k{n % keys}"} if keys else {})}
                for n in range(start, min(jobs, start + 10_000))
            ]
            pgworkerd.enqueue_many(conn, records)
        conn.execute("ANALYZE pgworkerd.jobs")


def drain(dsn: str, limits: QueueLimits | None, workers: int, batch: int) -> dict[str, float]:
    calls: list[float] = []
    done = [0]
    lock = threading.Lock()

    def worker() -> None:
        store = JobStore(limits={"default": limits} if limits else None)
        own: list[float] = []
        finished = 0
        with psycopg.connect(dsn, autocommit=True, options=WORKER_OPTIONS) as conn:
            pending: list[tuple[Lease, str | None]] = []
            while True:
                began = time.perf_counter()
                kept, claimed = store.complete_and_claim(
                    conn, pending, queues=["default"], limit=batch, lease_ttl_s=60, worker="b"
                )
                own.append(time.perf_counter() - began)
                finished += len(kept)
                pending = [(job.lease, None) for job in claimed]
                if not claimed:
                    break
        with lock:
            calls.extend(own)
            done[0] += finished

    threads = [threading.Thread(target=worker) for _ in range(workers)]
    began = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - began
    return {
        "jobs": done[0],
        "jobs_per_s": done[0] / wall,
        "p50_ms": percentile(calls, 50) * 1000,
        "p99_ms": percentile(calls, 99) * 1000,
    }


def plans(dsn: str, running: int = 0) -> str:
    """EXPLAIN (ANALYZE, BUFFERS) of a claim of 10 of each kind, 100,000 ready jobs over
    10,000 keys, `running` of them claimed first (committed: they hold leases, as a busy
    fleet's running jobs do, which the limited claims count)."""
    enqueue(dsn, PLAN_JOBS, PLAN_KEYS)
    sql = queries.statements("pgworkerd")
    out = []
    with psycopg.connect(dsn) as conn:
        if running:
            JobStore().claim(conn, queues=["default"], limit=running, lease_ttl_s=3600, worker="r")
            conn.commit()
            conn.execute("ANALYZE pgworkerd.jobs")
            conn.commit()
        for name, limits, _ in ROWS:
            store = JobStore(limits={"default": limits} if limits else None)
            store.positions.learn(["default"], [])
            params = {
                **_claim_params(("default",), 10, 60.0, "plan", 5),
                **store.positions.params(["default"], sweep=True),
            }
            statement = "jobs_claim"
            if limits is not None:
                statement = "jobs_claim_limited"
                params.update(claim_limit_params(["default"], {"default": limits}))
                conn.execute(
                    sql["limits_lock"], {"schema_name": "pgworkerd", "queues": ["default"]}
                )
            rows = conn.execute(
                b"EXPLAIN (ANALYZE, BUFFERS, COSTS OFF) " + sql[statement], params
            ).fetchall()
            conn.rollback()
            out.append(f"## {name} ({statement})\n\n" + "\n".join(r[0] for r in rows) + "\n")
    return "\n".join(out)


def main(argv: list[str] | None = None, out: Path | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.limits")
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--batch", type=int, default=10)
    parser.add_argument(
        "--running", type=int, default=0, help="jobs running (leased) while the plans are taken"
    )
    parser.add_argument("--plans-only", action="store_true", help="the plans, not the rows")
    args = parser.parse_args(argv)
    out = out or REPO / "bench" / "results" / (time.strftime("%Y%m%dT%H%M%S") + "-limits")
    out.mkdir(parents=True, exist_ok=True)
    lines = [
        f"{args.jobs} no-op jobs, {args.workers} claimers (threads, own connections),"
        f" batch {args.batch}: complete_and_claim as a worker runs it",
        "",
        "| row | jobs/s | claim p50 ms | claim p99 ms |",
        "|---|---:|---:|---:|",
    ]
    with throwaway_cluster() as cluster:
        for index, (name, limits, keys) in enumerate([] if args.plans_only else ROWS):
            dsn = fresh_database(cluster, f"limits{index}")
            migrate(dsn)
            enqueue(dsn, args.jobs, keys)
            row = drain(dsn, limits, args.workers, args.batch)
            assert row["jobs"] == args.jobs, row
            line = (
                f"| {name} | {row['jobs_per_s']:,.0f} | {row['p50_ms']:.2f} | {row['p99_ms']:.2f} |"
            )
            print(line, flush=True)
            lines.append(line)
        dsn = fresh_database(cluster, "plans")
        migrate(dsn)
        explained = plans(dsn, args.running)
    (out / "summary.md").write_text("\n".join(lines) + "\n")
    (out / "plans.txt").write_text(explained)
    print("\n".join(lines))
    print(f"results in {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
