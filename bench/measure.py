"""pgworkerd measured with the peers' protocol (their common.py, in `--peers-dir`):

throughput  enqueue N no-op jobs, the first N_SINGLE one at a time (one transaction
            each) and the rest with `enqueue_many` in calls of ENQ_BATCH; then start
            `pgworkerd run` and time until the database shows every job finished.
            The clock starts just before the daemon is spawned, so start-up (interpreter,
            imports, forks, connections) is included as it is for the peers, whose
            worker start-up is included too (theirs is cheaper: already imported).
            The steady rate (first claim to last finish, from the database) is
            recorded beside it.
latency     start the daemon, wait until its workers are connected, let it idle 2 s,
            then a separate process (bench.producer) enqueues TRICKLE_N jobs at
            TRICKLE_RATE/s; latency = handler start minus the producer's time.time()
            just before each enqueue call.

Each returns one record with the keys of a peer's RESULT line.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from dataclasses import dataclass
from importlib.metadata import version
from pathlib import Path
from typing import Any

import psycopg

import pgworkerd
from bench import stats
from bench.daemon import QUEUE, REPO, Daemon, daemon_env, migrate, write_config

POLL_S = 0.02  # common.poll_until's interval

# Both partial indexes answer this at once, whatever the number of finished rows:
# jobs_claim_idx holds the queued rows, jobs_lease_expiry_idx the running ones.
UNFINISHED = """
SELECT EXISTS (SELECT 1 FROM pgworkerd.jobs WHERE state = 'queued')
    OR EXISTS (SELECT 1 FROM pgworkerd.jobs WHERE lease_expires_at IS NOT NULL)
"""


@dataclass(frozen=True)
class Protocol:
    n: int = 20_000
    n_single: int = 2_000
    enq_batch: int = 1_000
    trickle_n: int = 200
    trickle_rate: float = 50.0
    concurrency: int = 2
    phase_timeout_s: float = 160.0
    # The latency mode's producer looks up pgworkerd.enqueue before its clock starts
    # (bench/producer.py --import-first); the table's measurement does not.
    import_first: bool = False


# pgworkerd at its best setting for no-op jobs (bench.report.OURS_TUNED).
TUNED_CONFIG: dict[str, Any] = {"defaults": {"batch_size": 100}, "log_level": "warning"}
# The same batches at the default log level (two lines a job): the row issue 23 measured
# "at the default log level" (bench.report.OURS_INFO).
BATCH_INFO_CONFIG: dict[str, Any] = {"defaults": {"batch_size": 100}}


def _record(mode: str, proto: Protocol, config_extra: dict[str, Any]) -> dict[str, Any]:
    return {
        "system": "pgworkerd",
        "version": version("pgworkerd"),
        "driver": f"psycopg {psycopg.__version__} sync",
        "mode": mode,
        "concurrency": f"{proto.concurrency} procs, config "
        + (json.dumps(config_extra) if config_extra else "defaults"),
    }


def _prepare(
    mode: str,
    dsn: str,
    work: Path,
    tag: str,
    proto: Protocol,
    config_extra: dict[str, Any] | None,
    code: Path | None = None,
) -> tuple[Path, Path, dict[str, Any]]:
    """The run's config file (migrated), its log path and its record so far."""
    config_extra = config_extra or {}
    config = write_config(
        work / f"{tag}.yaml", dsn, concurrency=proto.concurrency, extra=config_extra
    )
    log_path = work / f"{tag}.log"
    migrate(config, log_path, code=code)
    return config, log_path, _record(mode, proto, config_extra)


def throughput(
    dsn: str, work: Path, tag: str, proto: Protocol, config_extra: dict[str, Any] | None = None
) -> dict[str, Any]:
    config, log_path, res = _prepare("throughput", dsn, work, tag, proto, config_extra)
    with psycopg.connect(dsn, autocommit=True) as conn:
        payload = {"i": 0}
        t0 = time.perf_counter()
        for _ in range(proto.n_single):
            pgworkerd.enqueue(conn, "noop", payload, queue=QUEUE)
        res["enqueue_single_jps"] = round(proto.n_single / (time.perf_counter() - t0), 1)
        rest = proto.n - proto.n_single
        t0 = time.perf_counter()
        while rest > 0:
            b = min(proto.enq_batch, rest)
            pgworkerd.enqueue_many(conn, [{"kind": "noop", "payload": payload, "queue": QUEUE}] * b)
            rest -= b
        res["enqueue_batch_jps"] = round((proto.n - proto.n_single) / (time.perf_counter() - t0), 1)

        daemon = Daemon(config, log_path)
        try:
            # A daemon that exited (bad config, crash) ends the wait: nothing will finish.
            _poll(
                lambda: (
                    daemon.proc.poll() is not None or not conn.execute(UNFINISHED).fetchone()[0]
                ),
                proto.phase_timeout_s,
            )
            done = not conn.execute(UNFINISHED).fetchone()[0]
            elapsed = time.perf_counter() - daemon.started
            usage = daemon.usage()
        finally:
            exit_status = daemon.stop()
        succeeded, span_s, first_start_s = conn.execute(
            "SELECT count(*), extract(epoch FROM max(finished_at) - min(started_at)),"
            " extract(epoch FROM min(started_at)) FROM pgworkerd.jobs"
            " WHERE state = 'succeeded'"
        ).fetchone()
    res.update(
        n=proto.n,
        all_acked_s=round(elapsed, 3),
        acked_ok=bool(done and succeeded == proto.n),
        process_jps=round(proto.n / elapsed, 1),
        steady_jps=round(succeeded / float(span_s), 1) if span_s else None,
        # spawn to the first claim: the daemon's start-up inside all_acked_s
        startup_s=(
            round(float(first_start_s) - daemon.started_wall, 3)
            if first_start_s is not None
            else None
        ),
        **_after_ready(daemon, elapsed, proto.n),
        worker_cpu_s=round(usage.cpu_s, 2),
        supervisor_cpu_s=round(usage.supervisor_cpu_s, 2),
        worker_rss_mb=[round(x, 1) for x in usage.worker_rss_mb],
        daemon_exit=exit_status,
        log_lines=_count_lines(log_path),
    )
    return res


def latency(
    dsn: str,
    work: Path,
    tag: str,
    proto: Protocol,
    config_extra: dict[str, Any] | None = None,
    *,
    code: Path | None = None,
    python: Path | None = None,
    samples: list[tuple[int, float, float, float]] | None = None,
    producer_code: Path | None = None,
) -> dict[str, Any]:
    """`code`: another checkout's pgworkerd to run (the producer stays this one's, or
    `producer_code`'s: its bench.producer on its pgworkerd);
    `python`: the daemon's interpreter (bench.latency_abab's hop tracer); `samples`:
    filled with each job's (i, time before its enqueue call, the call's duration,
    handler start), for a per-hop breakdown."""
    config, log_path, res = _prepare("latency", dsn, work, tag, proto, config_extra, code)
    daemon = Daemon(config, log_path, code=code, python=python)
    try:
        res["workers_connected_s"] = round(daemon.workers_connected(dsn, proto.concurrency), 3)
        time.sleep(2.0)  # idle, as the peers' workers are before the trickle
        out = subprocess.run(
            [
                sys.executable,
                "-m",
                "bench.producer",
                dsn,
                "--n",
                str(proto.trickle_n),
                "--rate",
                str(proto.trickle_rate),
                "--queue",
                QUEUE,
                *(["--import-first"] if proto.import_first else []),
            ],
            stdout=subprocess.PIPE,
            check=True,
            env=daemon_env(producer_code),
            cwd=producer_code or REPO,
            timeout=proto.phase_timeout_s,
        ).stdout
        with psycopg.connect(dsn, autocommit=True) as conn:
            _poll(
                lambda: (
                    conn.execute(
                        "SELECT count(*) FROM pgworkerd.jobs WHERE state = 'succeeded'"
                    ).fetchone()[0]
                    >= proto.trickle_n
                ),
                30.0,
            )
            rows = conn.execute(
                "SELECT payload, result FROM pgworkerd.jobs WHERE state = 'succeeded'"
            ).fetchall()
    finally:
        res["daemon_exit"] = daemon.stop()
    lats = [result["started"] - payload["t"] for payload, result in rows]
    durations = json.loads(out.decode().strip().splitlines()[-1])["enqueue_call_s"]
    if samples is not None:
        samples.extend(
            (payload["i"], payload["t"], durations[payload["i"]], result["started"])
            for payload, result in rows
        )
    res.update(stats.latency_summary(lats))
    res.update(
        stats.slowest_jobs(
            (payload["i"], result["started"] - payload["t"]) for payload, result in rows
        )
    )
    res["enqueue_call_p50_ms"] = round(stats.percentile([d * 1000 for d in durations], 50), 2)
    res["log_lines"] = _count_lines(log_path)
    return res


def _after_ready(daemon: Daemon, elapsed: float, n: int) -> dict[str, float]:
    """The part of the run after the daemon's start-up: from its READY=1 (imports, config,
    handlers, schema check and forks done) to the database showing all done. The peers'
    harnesses import before their clocks start; this is the comparable figure."""
    if daemon.ready is None:
        return {}
    imports_s = daemon.ready - daemon.started
    return {
        "imports_s": round(imports_s, 3),
        "process_after_imports_jps": round(n / (elapsed - imports_s), 1),
    }


def _poll(check: Any, timeout_s: float) -> bool:
    deadline = time.perf_counter() + timeout_s
    while time.perf_counter() < deadline:
        if check():
            return True
        time.sleep(POLL_S)
    return False


def _count_lines(path: Path) -> int:
    with path.open("rb") as fh:
        return sum(1 for _ in fh)
