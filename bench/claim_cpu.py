"""The worker's store call alone: the client CPU per job of `JobStore.complete_and_claim`
at batch 100, in one process, this checkout against another, alternated.

    python -m bench.claim_cpu OTHER_CHECKOUT [--pairs 6] [--jobs 30000]

In the daemon (bench.worker_abab) two workers, their two backends and the supervisor
share two cores, and a worker's CPU per job moves by up to a tenth between runs of the
same code. Here one process claims and completes no-op jobs on a throwaway cluster (the
worker's connection settings: storage.connections.connect, its WORKER_OPTIONS), as a
worker's loop does with nothing else around it, and reports `time.process_time` per
job, each side in a fresh process that imports its own checkout (`--one` is that
process): the store call's share of a worker's CPU, without the per-job loop and the
status messages. It is not quieter than the daemon on a shared machine (25-29 µs a job
for the same code in one session); the raw psycopg loop's client (bench_rawpsycopg.py's
claim and DELETE) does the same work in ~19 µs a job
(bench/results/worker-round13-20261128.md).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def one(jobs: int) -> dict[str, float]:
    """One measurement in this process, from the checkout on its path."""
    from bench.cluster import PEER_SETTINGS, fresh_database, throwaway_cluster
    from bench.daemon import fill_noop_jobs
    from pgworkerd.storage import connections
    from pgworkerd.storage.migrations import migrate
    from pgworkerd.storage.store import JobStore

    try:
        from pgworkerd.worker import WORKER_OPTIONS as worker_options
    except ImportError:
        # This runs on the side under test, which may be a checkout from before
        # WORKER_OPTIONS (round 15): its workers set only plan_cache_mode, so stand
        # for them with that, as they were.
        from pgworkerd.worker import WORKER_PLAN_CACHE_MODE

        worker_options = f"-c plan_cache_mode={WORKER_PLAN_CACHE_MODE}"

    with throwaway_cluster(settings=PEER_SETTINGS) as cluster:
        dsn = fresh_database(cluster, "claim_cpu")
        with connections.connect(dsn, application_name="claim_cpu") as conn:
            migrate(conn, "pgworkerd")
        with connections.connect(
            dsn,
            application_name="claim_cpu",
            options=worker_options,
        ) as conn:
            fill_noop_jobs(conn, jobs)
            store = JobStore()
            scope = {"queues": ["bench"], "limit": 100, "lease_ttl_s": 60.0, "worker": "w"}
            batch = store.claim(conn, **scope)  # type: ignore[arg-type]
            for _ in range(10):  # past psycopg's prepare threshold
                done = [(job.lease, None) for job in batch]
                _, batch = store.complete_and_claim(conn, done, **scope)  # type: ignore[arg-type]
            cpu, wall, count = time.process_time(), time.monotonic(), 0
            while batch:
                done = [(job.lease, None) for job in batch]
                count += len(done)
                _, batch = store.complete_and_claim(conn, done, **scope)  # type: ignore[arg-type]
            return {
                "cpu_us_per_job": (time.process_time() - cpu) / count * 1e6,
                "wall_us_per_job": (time.monotonic() - wall) / count * 1e6,
            }


def _side(code: Path, jobs: int) -> dict[str, float]:
    """One measurement in a fresh process that imports `code`'s package."""
    # Imported here, not at the top: the `--one` process imports this file with the
    # other checkout's `bench` package first on its path, which may not have it.
    from bench.fresh_side import measure_in_checkout

    return measure_in_checkout(__file__, code, ["--jobs", str(jobs), str(code)])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.claim_cpu")
    parser.add_argument("other", type=Path, help="the other checkout (A)")
    parser.add_argument("--pairs", type=int, default=6)
    parser.add_argument("--jobs", type=int, default=30_000)
    parser.add_argument("--one", action="store_true", help="measure once, print JSON")
    args = parser.parse_args(argv)
    if args.one:
        print(json.dumps(one(args.jobs)))
        return 0
    sides: dict[str, list[float]] = {"A": [], "B": []}
    for pair in range(1, args.pairs + 1):
        for tag, code in (("A", args.other.resolve()), ("B", REPO)):
            r = _side(code, args.jobs)
            sides[tag].append(r["cpu_us_per_job"])
            print(
                f"{tag}{pair}: CPU {r['cpu_us_per_job']:.1f} µs/job, wall"
                f" {r['wall_us_per_job']:.1f} µs/job; load {os.getloadavg()[0]:.1f}",
                flush=True,
            )
    lower = sum(b < a for a, b in zip(sides["A"], sides["B"], strict=True))
    a, b = statistics.median(sides["A"]), statistics.median(sides["B"])
    print(f"median CPU µs/job: A {a:.1f}, B {b:.1f} (B/A {b / a:.3f})")
    print(f"B lower in {lower} of {args.pairs} pairs")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
