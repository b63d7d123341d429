"""Scale: claim latency with a big table (a million jobs waiting; a million finished and
a million scheduled for later) against an empty one, and daemon memory over a long run
of no-op jobs. `python -m bench --scale` reports the two targets from here.

    python -m bench.scale [--jobs 1000000] [--samples 2000] [--daemon-jobs 100000]
    python -m bench.scale --threads-memory [--threads 64] [--daemon-jobs 100000]

`--threads-memory` runs only the worker-memory measurement with `threads: N`: one worker
process (`workers: [{queues: [bench], concurrency: 1, threads: 64}]`, other settings at
their defaults) on a throwaway cluster; its RSS idle, after the first 1,000 no-op jobs and
then every few seconds until all 100,000 are finished (target: ≤ 60 MB at the end; the
1,000-job figure shows growth or its absence).

The daemon's memory is measured with pgworkerd's modules compiled first (`compileall`, as
pip does on install): from source, with PYTHONDONTWRITEBYTECODE set (as on the
development machines), the supervisor compiles every module before its fork, and the
compiler's leftovers in its heap added ~0.8 MB to each worker's RSS
(bench/results/issue23-round19-20261129.md).

Timings are printed, never asserted: tests/integration/test_claim_plan.py asserts the plan.
"""

from __future__ import annotations

import argparse
import compileall
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil
import psycopg

import pgworkerd
from bench import stats
from bench.cluster import fresh_database, throwaway_cluster
from bench.daemon import QUEUE, REPO, Daemon, migrate, write_config
from pgworkerd.storage.migrations import migrate as migrate_schema
from pgworkerd.storage.store import JobStore
from pgworkerd.worker import WORKER_OPTIONS

Conn = psycopg.Connection[Any]
CLAIM_QUEUE = "default"


@dataclass(frozen=True)
class Latency:
    what: str
    p50_ms: float
    p99_ms: float


@dataclass(frozen=True)
class MemorySample:
    elapsed_s: float
    supervisor_mb: float
    largest_worker_mb: float
    jobs_done: int
    worker_threads: int | None = None  # the largest worker's OS threads (threads_memory)


def enqueue_bulk(conn: Conn, count: int, chunk: int = 10_000, **options: Any) -> float:
    """`count` no-op jobs through enqueue_many, `chunk` a call; jobs/s."""
    started = time.perf_counter()
    for offset in range(0, count, chunk):
        pgworkerd.enqueue_many(
            conn,
            [
                {"kind": "noop", "payload": {"n": offset + n}, **options}
                for n in range(min(chunk, count - offset))
            ],
        )
    return count / (time.perf_counter() - started)


def claim_times_ms(conn: Conn, samples: int) -> list[float]:
    """Claim one job and complete it, `samples` times, through JobStore as a worker
    does (autocommit: two commits each; `conn` should have the worker's session
    settings, `worker_connection`); `samples` ready jobs are enqueued first so every
    claim finds one. Each time is the claim plus the complete."""
    enqueue_bulk(conn, samples)
    conn.execute("ANALYZE pgworkerd.jobs")
    store = JobStore()
    latencies = []
    for _ in range(samples):
        started = time.perf_counter()
        jobs = store.claim(conn, queues=[CLAIM_QUEUE], limit=1, lease_ttl_s=30, worker="scale")
        store.complete(conn, [(job.lease, None) for job in jobs])
        latencies.append((time.perf_counter() - started) * 1000)
        assert len(jobs) == 1, "a ready job was not claimed"
    return latencies


def worker_connection(dsn: str) -> Conn:
    """An autocommit connection with a worker's session settings (WORKER_OPTIONS:
    generic plans, no seq scans, no JIT), as the daemon's workers claim. Without them
    PostgreSQL plans the claim afresh at every run, and that planning grows with the
    table's statistics: measured so, the loaded table read 1.9-2.1x the empty one where
    a worker's claims read 0.9x (bench/results/issue23-round19-20261129.md)."""
    return psycopg.connect(dsn, autocommit=True, options=WORKER_OPTIONS)


def claim_latency(conn: Conn, what: str, samples: int) -> Latency:
    return _latency(what, claim_times_ms(conn, samples))


def _latency(what: str, times_ms: list[float]) -> Latency:
    return Latency(what, stats.percentile(times_ms, 50), stats.percentile(times_ms, 99))


def add_finished(conn: Conn, count: int) -> None:
    """`count` finished jobs of the claimed queue, made as in production: enqueued, then
    ended `succeeded` (by one UPDATE rather than a daemon run: the rows are what matters).
    Call with no other job queued."""
    enqueue_bulk(conn, count)
    conn.execute(
        "UPDATE pgworkerd.jobs SET state = 'succeeded', finished_at = now(),"
        " attempt = 1 WHERE state = 'queued'"
    )


def add_scheduled(conn: Conn, count: int) -> None:
    """`count` jobs on the claimed queue, due in a day: the claim must not walk them."""
    enqueue_bulk(conn, count, delay=86_400)


def settle(conn: Conn) -> None:
    # What autovacuum would have done by then, so the plan sees real statistics.
    conn.execute("VACUUM ANALYZE pgworkerd.jobs")


def claim_empty_vs_loaded(
    empty_dsn: str,
    loaded_dsn: str,
    *,
    finished: int,
    scheduled: int,
    samples: int,
    rounds: int = 10,
) -> tuple[Latency, Latency]:
    """Single-job claim+complete latency on an empty table against one holding
    `finished` finished rows and `scheduled` future rows (the target: within 1.2x).

    Two databases of one cluster, measured in alternating rounds: this VM's fdatasync
    rate drifts within minutes, and one after the other would charge the drift to
    whichever came second."""
    with (
        psycopg.connect(empty_dsn, autocommit=True) as empty,
        psycopg.connect(loaded_dsn, autocommit=True) as loaded,
    ):
        migrate_schema(empty, "pgworkerd")
        migrate_schema(loaded, "pgworkerd")
        add_finished(loaded, finished)
        add_scheduled(loaded, scheduled)
        settle(loaded)
    times: dict[str, list[float]] = {"empty": [], "loaded": []}
    with worker_connection(empty_dsn) as empty, worker_connection(loaded_dsn) as loaded:
        for _ in range(rounds):
            times["empty"] += claim_times_ms(empty, max(1, samples // rounds))
            times["loaded"] += claim_times_ms(loaded, max(1, samples // rounds))
    return (
        _latency("claim+complete, empty table", times["empty"]),
        _latency(
            f"claim+complete, +{finished:,} finished +{scheduled:,} scheduled", times["loaded"]
        ),
    )


def memory_sample(daemon: Daemon, done: int, *, threads: bool = False) -> MemorySample:
    """The daemon's RSS now (supervisor, largest worker) with `done` jobs finished; with
    `threads`, also the largest worker's OS thread count."""
    usage = daemon.usage()
    return MemorySample(
        time.perf_counter() - daemon.started,
        usage.supervisor_rss_mb,
        max(usage.worker_rss_mb, default=0.0),
        done,
        max((_threads(p) for p in daemon.ps.children(recursive=True)), default=0)
        if threads
        else None,
    )


def daemon_memory(
    dsn: str, work: Path, jobs: int, concurrency: int = 2, every_s: float = 2.0
) -> list[MemorySample]:
    """Run `jobs` no-op jobs through `pgworkerd run` (the bench's config) and sample the
    supervisor's and the largest worker's RSS until all are finished; the last sample
    is taken with every job done, before SIGTERM."""
    config = write_config(work / "memory.yaml", dsn, concurrency=concurrency)
    log_path = work / "memory.log"
    compileall.compile_dir(REPO / "pgworkerd", quiet=1)  # an installed package's state
    migrate(config, log_path)
    with psycopg.connect(dsn, autocommit=True) as conn:
        enqueue_bulk(conn, jobs, queue=QUEUE)
        daemon = Daemon(config, log_path)
        samples = []
        try:
            while True:
                left = conn.execute(
                    "SELECT count(*) FROM pgworkerd.jobs WHERE state IN ('queued', 'running')"
                ).fetchone()[0]
                samples.append(memory_sample(daemon, jobs - left))
                if left == 0:
                    break
                time.sleep(every_s)
        finally:
            daemon.stop()
    return samples


THREADS_RSS_TARGET_MB = 60.0


def threads_memory(
    dsn: str, work: Path, jobs: int, threads: int = 64, first: int = 1_000, every_s: float = 2.0
) -> list[MemorySample]:
    """One worker process with `threads: threads` over `jobs` no-op jobs: an RSS sample
    with its workers connected and idle (0 jobs), one once the first `first` jobs are
    finished, then one every `every_s` while the rest run, the last with all finished
    (before SIGTERM). The jobs are enqueued in two steps, so the `first` sample is taken
    exactly after that many, with the worker idle again."""
    config = write_config(
        work / "threads_memory.yaml",
        dsn,
        extra={"workers": [{"queues": [QUEUE], "concurrency": 1, "threads": threads}]},
    )
    log_path = work / "threads_memory.log"
    compileall.compile_dir(REPO / "pgworkerd", quiet=1)  # as daemon_memory
    migrate(config, log_path)
    with psycopg.connect(dsn, autocommit=True) as conn:
        daemon = Daemon(config, log_path)
        samples: list[MemorySample] = []

        def sample(done: int) -> int:
            samples.append(memory_sample(daemon, done, threads=True))
            return done

        def finished() -> int:
            return int(
                conn.execute(
                    "SELECT count(*) FROM pgworkerd.jobs WHERE state = 'succeeded'"
                ).fetchone()[0]
            )

        try:
            daemon.workers_connected(dsn, 1)
            time.sleep(1.0)
            sample(0)
            enqueue_bulk(conn, first, queue=QUEUE)
            while finished() < first:
                time.sleep(0.05)
            time.sleep(0.5)  # its outcomes written, the worker idle again
            sample(finished())
            enqueue_bulk(conn, jobs - first, queue=QUEUE)
            while sample(finished()) < jobs:
                if daemon.proc.poll() is not None:
                    raise RuntimeError(f"pgworkerd run exited; see {log_path}")
                time.sleep(every_s)
        finally:
            daemon.stop()
    return samples


def _threads(process: psutil.Process) -> int:
    try:
        return int(process.num_threads())
    except psutil.Error:
        return 0


def _print_memory(samples: list[MemorySample]) -> None:
    threads = any(s.worker_threads is not None for s in samples)
    print("  seconds  supervisor_MB  largest_worker_MB  jobs_done" + ("  OS_threads" * threads))
    for s in samples:
        print(
            f"  {s.elapsed_s:7.0f}  {s.supervisor_mb:13.1f}  {s.largest_worker_mb:17.1f}"
            f"  {s.jobs_done:9d}" + (f"  {s.worker_threads:10d}" if threads else "")
        )


def _threads_memory_main(args: argparse.Namespace) -> None:
    work = Path(tempfile.mkdtemp(prefix="pgworkerd-scale-"))
    with throwaway_cluster(work / "postgresql.log") as cluster:
        samples = threads_memory(
            fresh_database(cluster, "scale_threads_memory"), work, args.daemon_jobs, args.threads
        )
    print(
        f"one worker process, threads: {args.threads}, over {args.daemon_jobs:,} no-op jobs "
        f"(config defaults otherwise; logs in {work}):"
    )
    _print_memory(samples)
    after_first = next(s for s in samples if s.jobs_done > 0)
    last = samples[-1]
    verdict = "PASS" if last.largest_worker_mb <= THREADS_RSS_TARGET_MB else "FAIL"
    print(
        f"worker RSS: {samples[0].largest_worker_mb:.1f} MB idle, "
        f"{after_first.largest_worker_mb:.1f} MB after {after_first.jobs_done:,} jobs, "
        f"{last.largest_worker_mb:.1f} MB after {last.jobs_done:,} "
        f"({last.largest_worker_mb - after_first.largest_worker_mb:+.1f} MB)"
    )
    print(
        f"**{verdict}** worker RSS with threads: {args.threads} ≤ "
        f"{THREADS_RSS_TARGET_MB:.0f} MB after {last.jobs_done:,} jobs: "
        f"{last.largest_worker_mb:.1f} MB"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=1_000_000)
    parser.add_argument("--samples", type=int, default=2000)
    parser.add_argument("--daemon-jobs", type=int, default=100_000)
    parser.add_argument(
        "--threads-memory",
        action="store_true",
        help="only the worker RSS of one process with --threads over --daemon-jobs jobs",
    )
    parser.add_argument("--threads", type=int, default=64)
    args = parser.parse_args()
    if args.threads_memory:
        _threads_memory_main(args)
        return
    work = Path(tempfile.mkdtemp(prefix="pgworkerd-scale-"))
    rows = []
    with throwaway_cluster(work / "postgresql.log") as cluster:
        dsn = fresh_database(cluster, "scale_queued")
        with psycopg.connect(dsn, autocommit=True) as conn:
            migrate_schema(conn, "pgworkerd")
            rate = enqueue_bulk(conn, args.jobs)
            print(f"enqueue_many of {args.jobs:,} jobs (10,000 a call): {rate:,.0f} jobs/s")
            settle(conn)
        with worker_connection(dsn) as conn:
            rows.append(claim_latency(conn, f"claim+complete, {args.jobs:,} queued", args.samples))
        rows.extend(
            claim_empty_vs_loaded(
                fresh_database(cluster, "scale_empty"),
                fresh_database(cluster, "scale_loaded"),
                finished=args.jobs,
                scheduled=args.jobs,
                samples=args.samples,
            )
        )
        memory = daemon_memory(fresh_database(cluster, "scale_memory"), work, args.daemon_jobs)
    print(f"| {'claim of 1 job':<58} | p50 ms | p99 ms |")
    print(f"|{'-' * 60}|-------:|-------:|")
    for row in rows:
        print(f"| {row.what:<58} | {row.p50_ms:6.2f} | {row.p99_ms:6.2f} |")
    print(f"daemon over {args.daemon_jobs:,} no-op jobs (2 workers, config defaults):")
    _print_memory(memory)


if __name__ == "__main__":
    main()
