"""Soak: minutes of mixed jobs under periodic worker kills and database restarts, then
the invariant checker's verdict, the counts, RSS over time and dead tuples.

    python -m bench.soak [--minutes 10] [--rate 20] [--concurrency 4]

Runs `pgworkerd run` on a throwaway cluster (durable settings) with the test suite's
handlers: fast, slow, failing, flaky, hanging (blocked in C past max runtime) and
crashing jobs. Not part of `make test`.
"""

from __future__ import annotations

import argparse
import random
import signal
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import psutil
import psycopg

import pgworkerd
from pgworkerd.storage.embedded import EmbeddedCluster, free_port
from pgworkerd.storage.migrations import migrate
from tests import invariants
from tests.daemon import Daemon, write_config

# kind, payload, options, share of the mix
# (A hanging job holds a worker ~5 s per attempt: the mix keeps the load under capacity.)
MIX: list[tuple[str, dict[str, Any], dict[str, Any], float]] = [
    ("work", {"ms": 10}, {}, 0.80),
    ("sleep", {"seconds": 1}, {}, 0.04),
    ("fail", {}, {"max_attempts": 3}, 0.06),
    ("fail_then_succeed", {"succeed_at": 2}, {}, 0.06),
    ("block_in_c", {}, {"max_runtime": 2, "max_attempts": 2}, 0.01),
    ("crash", {}, {"max_attempts": 2}, 0.03),
]


def reconnect(dsn: str, stop: threading.Event) -> psycopg.Connection[Any]:
    """A new connection once the server takes one (it may still be shutting down or
    starting up): retried every 0.2 s, until `stop`."""
    while True:
        try:
            return psycopg.connect(dsn, autocommit=True)
        except psycopg.OperationalError:
            if stop.wait(0.2):
                raise


def produce(dsn: str, rate: float, stop: threading.Event, ids: list[int]) -> None:
    rng = random.Random(1)
    kinds = [m[0] for m in MIX]
    weights = [m[3] for m in MIX]
    spec = {m[0]: m for m in MIX}
    with psycopg.connect(dsn, autocommit=True) as conn:
        while not stop.is_set():
            tick = time.monotonic()
            batch = []
            for kind in rng.choices(kinds, weights, k=max(1, int(rate))):
                _, payload, options, _ = spec[kind]
                batch.append({"kind": kind, "payload": payload, **options})
            try:
                ids.extend(pgworkerd.enqueue_many(conn, batch))
            except psycopg.OperationalError:
                conn = reconnect(dsn, stop)  # a restart took it: back when it is up
                continue
            stop.wait(max(0.0, 1.0 - (time.monotonic() - tick)))


def rss_mb(daemon: Daemon) -> tuple[float, list[float]]:
    supervisor = psutil.Process(daemon.pid).memory_info().rss / 2**20
    children = []
    for child in daemon.workers():
        try:
            children.append(child.memory_info().rss / 2**20)
        except psutil.NoSuchProcess:
            continue
    return supervisor, children


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=10)
    parser.add_argument("--rate", type=float, default=20, help="jobs enqueued per second")
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--kill-every", type=float, default=10, help="seconds between kills")
    parser.add_argument(
        "--restart-every", type=float, default=120, help="seconds between database restarts"
    )
    args = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="pgworkerd-soak-"))
    cluster = EmbeddedCluster(base_dir=work / "pg", port=free_port()).ensure_running()
    dsn = cluster.dsn()
    with psycopg.connect(dsn, autocommit=True) as conn:
        migrate(conn, "pgworkerd")
        invariants.install(conn)
    config = write_config(
        work / "soak.yaml",
        workers=[{"queues": ["default"], "concurrency": args.concurrency}],
        defaults={
            "max_attempts": 5,
            "max_runtime": "30s",
            "batch_size": 10,
            "backoff_base": "1s",
            "backoff_max": "10s",
        },
    )
    daemon = Daemon(config, dsn, work / "soak.log")
    ids: list[int] = []
    stop = threading.Event()
    producer = threading.Thread(target=produce, args=(dsn, args.rate, stop, ids))
    producer.start()
    rng = random.Random(2)
    kills = restarts = 0
    rss_samples: list[tuple[float, float, float]] = []
    started = last_kill = last_restart = last_sample = time.monotonic()
    try:
        while (elapsed := time.monotonic() - started) < args.minutes * 60:
            now = time.monotonic()
            if now - last_kill >= args.kill_every:
                busy = [p for p in daemon.workers() if _running_a_job(p)]
                if busy:
                    rng.choice(busy).kill()
                    kills += 1
                last_kill = now
            if now - last_restart >= args.restart_every:
                cluster.stop("immediate" if restarts % 2 else "fast")
                cluster.start()
                restarts += 1
                last_restart = now
            if now - last_sample >= 10:
                supervisor, children = rss_mb(daemon)
                rss_samples.append((elapsed, supervisor, max(children, default=0.0)))
                last_sample = now
            time.sleep(0.2)
        stop.set()
        producer.join()
        # Quiet down: let every job that can still run reach a final state.
        deadline = time.monotonic() + 120
        with psycopg.connect(dsn, autocommit=True) as conn:
            while time.monotonic() < deadline:
                left = conn.execute(
                    "SELECT count(*) FROM pgworkerd.jobs WHERE state IN ('queued', 'running')"
                ).fetchone()[0]
                if left == 0:
                    break
                time.sleep(1)
        daemon.signal(signal.SIGTERM)
        exit_code = daemon.wait(timeout_s=60)
        with psycopg.connect(dsn, autocommit=True) as conn:
            verdict = invariants.check(
                conn,
                ids,
                max_runtime_s=30,
                lease_ttl_s=3,
                unrecorded_starts=kills + restarts * 3 * 10,
            )
            dead_tuples = conn.execute(
                "SELECT n_live_tup, n_dead_tup, autovacuum_count FROM pg_stat_user_tables"
                " WHERE schemaname = 'pgworkerd' AND relname = 'jobs'"
            ).fetchone()
            by_kind = conn.execute(
                "SELECT kind, state, count(*) FROM pgworkerd.jobs GROUP BY 1, 2 ORDER BY 1, 2"
            ).fetchall()
    finally:
        stop.set()
        daemon.kill_everything()
        cluster.destroy()

    print(
        f"soak: {args.minutes:g} min, {len(ids)} jobs, {kills} worker kills, "
        f"{restarts} database restarts, daemon exit {exit_code}"
    )
    print("verdict:", "I1-I5 hold" if not verdict.violations else verdict.report())
    print("counts:", verdict.counts)
    print("by kind and state:", ", ".join(f"{k}/{s}={n}" for k, s, n in by_kind))
    print(f"jobs table: live={dead_tuples[0]} dead={dead_tuples[1]} autovacuums={dead_tuples[2]}")
    print("RSS MB over time (s, supervisor, largest worker):")
    for elapsed, supervisor, child in rss_samples:
        print(f"  {elapsed:6.0f}  {supervisor:6.1f}  {child:6.1f}")


def _running_a_job(worker: psutil.Process) -> bool:
    """Whether the worker's title says it runs a job. A worker killed a moment ago may be a
    zombie its supervisor has not reaped yet: psutil raises for it (ZombieProcess, a
    NoSuchProcess), which ended a 30-minute soak after 12 minutes."""
    try:
        return " job " in " ".join(worker.cmdline())
    except psutil.NoSuchProcess:
        return False


if __name__ == "__main__":
    main()
