"""`python -m bench --held-snapshot`: work on time while a transaction holds back vacuum.

Each system in turn, on the same throwaway durable cluster, each in a fresh database:
a producer offers a fixed rate (`rate` jobs/s, enqueued every 20 ms in small batches,
each job carrying time.time() at its enqueue), the workers run them, and three phases
follow one another: `before` (nothing held), `held` (a separate connection has run
`BEGIN; SELECT txid_current()` and stays idle in transaction, as a forgotten psql
session does) and `after` (it rolled back). Per phase, by the wall clock of this host:
jobs/s done (handler starts in the phase), the queue depth (enqueued minus started;
its maximum, and at the end of the phase) and the latency from enqueue to handler
start of the jobs enqueued in the phase (p50, p99; a job never started counts as
started at the end of the run, so a backlog cannot hide in the percentiles).

pgworkerd runs as users run it (bench/daemon.py; `code` another checkout's, for a
before/after); PgQueuer through bench/held_pgqueuer.py in the peers' venv (one
QueueManager, batch 10, as the peers' harness runs it).
"""

from __future__ import annotations

import json
import os
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg

import pgworkerd
from bench import peers, report
from bench.daemon import QUEUE, Daemon, migrate, write_config
from bench.stats import percentile

TICK_S = 0.02
PHASES = ("before", "held", "after")
HOLDERS = ("xid", "readers")
READERS = 4
HELD_BY = {
    "xid": "a connection idle in transaction with an xid",
    "readers": "four REPEATABLE READ transactions scanning the jobs table, a pause of "
    "0.25 s between scans",
}
READER_PAUSE_S = 0.25  # between two scans of one reader: four readers, not four busy loops


@dataclass(frozen=True)
class Shape:
    rate: float = 800.0  # jobs/s offered
    before_s: float = 30.0
    held_s: float = 90.0
    after_s: float = 60.0
    concurrency: int = 4  # pgworkerd: processes
    threads: int = 8  # pgworkerd: jobs at once per process
    held_by: str = "xid"  # HOLDERS

    @property
    def total_s(self) -> float:
        return self.before_s + self.held_s + self.after_s


class Producer(threading.Thread):
    """Enqueues `rate` jobs/s for `duration_s`: every TICK_S, as many as are due."""

    def __init__(self, enqueue: Any, rate: float, duration_s: float) -> None:
        super().__init__(daemon=True)
        self.enqueue, self.rate, self.duration_s = enqueue, rate, duration_s
        self.sent = 0
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            t0 = time.monotonic()
            while (elapsed := time.monotonic() - t0) < self.duration_s:
                due = int(elapsed * self.rate) - self.sent
                if due > 0:
                    self.enqueue(due)
                    self.sent += due
                time.sleep(max(0.0, TICK_S - (time.monotonic() - t0 - elapsed)))
        except BaseException as exc:  # reported by the caller
            self.error = exc


def hold_phases(dsn: str, shape: Shape, started: float) -> dict[str, float]:
    """Sleep through `before`, hold the horizon through `held` (as `shape.held_by`
    says), release, sleep through `after`; the wall-clock boundaries of the phases."""
    bounds = {"start": started}
    time.sleep(max(0.0, started + shape.before_s - time.time()))
    if shape.held_by == "readers":
        bounds["held"] = time.time()
        scans = read_while_held(dsn, shape.held_s)
        print(f"    {READERS} readers made {scans} scans of the table while held", flush=True)
    else:
        with psycopg.connect(dsn, application_name="bench holder") as holder:
            holder.execute("SELECT txid_current()")  # an xid: the horizon stops here
            bounds["held"] = time.time()
            time.sleep(shape.held_s)
            holder.rollback()
    bounds["after"] = time.time()
    time.sleep(max(0.0, bounds["after"] + shape.after_s - time.time()))
    bounds["end"] = time.time()
    return bounds


def read_while_held(dsn: str, held_s: float) -> int:
    """READERS connections, each in one REPEATABLE READ transaction for `held_s`,
    scanning the whole jobs table (count and payload sizes: a sequential scan), pausing
    READER_PAUSE_S between scans: a reporting job's readers. Their snapshots, taken at
    the first scan, hold the horizon until they end. How many scans they made."""
    stop_at = time.monotonic() + held_s
    scans = [0] * READERS
    errors: list[BaseException] = []

    def reader(n: int) -> None:
        try:
            # autocommit, so that the BEGIN below is the transaction's (psycopg would
            # otherwise open a READ COMMITTED one before it, and this BEGIN be ignored).
            with psycopg.connect(
                dsn, autocommit=True, application_name=f"bench reader {n}"
            ) as conn:
                conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
                while time.monotonic() < stop_at:
                    conn.execute(
                        "SELECT count(*), sum(octet_length(payload::text)) FROM jobs"
                        if _is_pgworkerd(conn)
                        else "SELECT count(*) FROM pgqueuer"
                    ).fetchone()
                    scans[n] += 1
                    time.sleep(min(READER_PAUSE_S, max(0.0, stop_at - time.monotonic())))
                conn.execute("ROLLBACK")
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=reader, args=(n,), daemon=True) for n in range(READERS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return sum(scans)


def _is_pgworkerd(conn: psycopg.Connection[Any]) -> bool:
    """Whether this database holds pgworkerd's jobs table (else PgQueuer's)."""
    row = conn.execute("SELECT to_regclass('pgworkerd.jobs') IS NOT NULL").fetchone()
    if row and row[0]:
        conn.execute("SET LOCAL search_path = pgworkerd")  # within the reader's transaction
        return True
    return False


def summarise(
    pairs: list[tuple[float, float | None]], bounds: dict[str, float]
) -> dict[str, dict[str, float]]:
    """Per phase figures from (enqueued, started or None) wall-clock pairs."""
    end = bounds["end"]
    edges = [bounds["start"], bounds["held"], bounds["after"], end]
    enq = sorted(t for t, _ in pairs)
    starts = sorted(s for _, s in pairs if s is not None)
    figures = {}
    for name, lo, hi in zip(PHASES, edges, edges[1:], strict=False):
        done = sum(1 for s in starts if lo <= s < hi)
        lat = [((s if s is not None else end) - t) * 1000 for t, s in pairs if lo <= t < hi]
        depths = [_depth(enq, starts, lo + k) for k in range(int(hi - lo) + 1)]
        figures[name] = {
            "seconds": round(hi - lo, 1),
            "jobs_per_s": round(done / (hi - lo), 1),
            "depth_max": max(depths),
            "depth_end": _depth(enq, starts, hi),
            "latency_p50_ms": round(percentile(lat, 50), 1) if lat else float("nan"),
            "latency_p99_ms": round(percentile(lat, 99), 1) if lat else float("nan"),
        }
    figures["slowest_seconds"] = slowest_seconds(pairs, bounds)
    figures["total"] = {
        "enqueued": len(pairs),
        "started": len(starts),
        "never_started": len(pairs) - len(starts),
    }
    return figures


def slowest_seconds(
    pairs: list[tuple[float, float | None]], bounds: dict[str, float], top: int = 3
) -> list[str]:
    """The `top` seconds of the run whose enqueued jobs waited longest, as "phase +N s:
    max latency": where a stall sits (the start, a sweep, the hold, the release)."""
    end = bounds["end"]
    worst: dict[int, float] = {}
    for t, s in pairs:
        second = int(t - bounds["start"])
        worst[second] = max(worst.get(second, 0.0), (s if s is not None else end) - t)
    edges = [("before", bounds["start"]), ("held", bounds["held"]), ("after", bounds["after"])]
    found = []
    for second, latency in sorted(worst.items(), key=lambda kv: -kv[1])[:top]:
        at = bounds["start"] + second
        phase, since = next((n, e) for n, e in reversed(edges) if at >= e)
        found.append(f"{phase} +{at - since:.0f} s: {latency * 1000:,.0f} ms")
    return found


def _depth(enq: list[float], starts: list[float], at: float) -> int:
    import bisect

    return bisect.bisect_right(enq, at) - bisect.bisect_right(starts, at)


def run_pgworkerd(dsn: str, shape: Shape, logs: Path, code: Path | None, tag: str) -> dict:
    config = write_config(
        logs / f"{tag}.yaml",
        dsn,
        concurrency=shape.concurrency,
        extra={
            "workers": [
                {"queues": [QUEUE], "concurrency": shape.concurrency, "threads": shape.threads}
            ]
        },
    )
    migrate(config, logs / f"{tag}.log", code=code)
    daemon = Daemon(config, logs / f"{tag}.log", code=code)
    try:
        daemon.workers_connected(dsn, shape.concurrency)
        with psycopg.connect(dsn, autocommit=True) as conn:

            def enqueue(n: int) -> None:
                t = time.time()
                pgworkerd.enqueue_many(
                    conn, [{"kind": "stamp", "payload": {"t": t}, "queue": QUEUE}] * n
                )

            started = time.time()
            producer = Producer(enqueue, shape.rate, shape.total_s)
            producer.start()
            bounds = hold_phases(dsn, shape, started)
            producer.join()
            if producer.error:
                raise producer.error
    finally:
        daemon.stop()
    with psycopg.connect(dsn, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT (payload->>'t')::float8, (result->>'started')::float8 FROM pgworkerd.jobs"
        ).fetchall()
    # As PgQueuer's side writes them: one [enqueued, started] pair a line, for a look at
    # a stall afterwards (which second, how long).
    (logs / f"{tag}.pairs").write_text("".join(json.dumps([t, s]) + "\n" for t, s in rows))
    return summarise([(t, s) for t, s in rows], bounds)


def run_pgqueuer(dsn: str, shape: Shape, logs: Path, tag: str) -> dict | None:
    peer = peers.PEERS["pgqueuer_apg"]
    if not peers.ready(peer, logs / "venv.log"):
        return None
    python = str(peer.venv.path / "bin" / "python")
    script = str(Path(__file__).with_name("held_pgqueuer.py"))
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    out = logs / f"{tag}.pairs"
    subprocess.run([python, script, "install", dsn], env=env, check=True)
    with (logs / f"{tag}.log").open("ab") as log:
        worker = subprocess.Popen(
            [python, script, "worker", dsn, str(out)],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        time.sleep(2.0)  # its listener up
        started = time.time()
        producer = subprocess.Popen(
            [python, script, "producer", dsn, str(shape.rate), str(shape.total_s)],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        bounds = hold_phases(dsn, shape, started)
        producer.wait(timeout=60)
        worker.terminate()
        worker.wait(timeout=60)
    pairs = [tuple(json.loads(line)) for line in out.read_text().splitlines()]
    return summarise([(t, s) for t, s in pairs], bounds)


def table(results: dict[str, dict | None]) -> list[str]:
    lines = [
        "| system | phase | jobs/s done | depth max | depth at end | latency p50 ms |"
        " latency p99 ms |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    for system, figures in results.items():
        if figures is None:
            lines.append(f"| {system} | (did not run) | | | | | |")
            continue
        for phase in PHASES:
            f = figures[phase]
            lines.append(
                f"| {system} | {phase} ({f['seconds']:.0f} s) | {f['jobs_per_s']:,.0f} |"
                f" {f['depth_max']:,} | {f['depth_end']:,} | {f['latency_p50_ms']:,.0f} |"
                f" {f['latency_p99_ms']:,.0f} |"
            )
    lines.append("")
    for system, figures in results.items():
        if figures is not None:
            slowest = "; ".join(figures["slowest_seconds"])
            lines.append(f"- {system}, the seconds whose jobs waited longest: {slowest}")
    return lines


def main(args: Any, out: Path) -> int:
    """The --held-snapshot mode of `python -m bench`: pgworkerd (this checkout, and
    `--held-code` too when given) and PgQueuer (unless `--peers none`) in one run on
    one cluster; prints and writes out/summary.md and out/run.json."""
    from bench.cluster import fresh_database, server_settings, throwaway_cluster

    before_s, held_s, after_s = (float(x) for x in args.held_phases.split(","))
    shape = Shape(
        rate=args.held_rate,
        before_s=before_s,
        held_s=held_s,
        after_s=after_s,
        held_by=args.held_by,
    )
    logs = out / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    results: dict[str, dict | None] = {}
    with throwaway_cluster(keep_log=logs / "postgresql.log") as cluster:
        settings = server_settings(cluster.dsn())
        runs: list[tuple[str, Any]] = [
            ("pgworkerd", lambda dsn: run_pgworkerd(dsn, shape, logs, None, "pgworkerd"))
        ]
        if args.held_code is not None:
            code = args.held_code.resolve()
            runs.append(
                (
                    f"pgworkerd at {code.name}",
                    lambda dsn: run_pgworkerd(dsn, shape, logs, code, "pgworkerd-code"),
                )
            )
        if "pgqueuer_apg" in args.peer_names:
            runs.append(("PgQueuer (apg)", lambda dsn: run_pgqueuer(dsn, shape, logs, "pgq")))
        for name, run in runs:
            print(f"  {name}: {shape.rate:g} jobs/s, phases {args.held_phases} s ...", flush=True)
            results[name] = run(fresh_database(cluster, "bench_held"))
    header = [
        f"### Held snapshot, {time.strftime('%Y-%m-%d %H:%M')}: {shape.rate:g} jobs/s offered",
        "",
        f"Phases: before {before_s:g} s, held {held_s:g} s ({HELD_BY[shape.held_by]}), "
        f"after {after_s:g} s. pgworkerd: {shape.concurrency} processes x "
        f"{shape.threads} threads, handler `stamp`; PgQueuer: one QueueManager, batch 10. "
        f"PostgreSQL {settings.get('server_version', '?').split()[0]}, "
        f"fsync {settings.get('fsync')}, synchronous_commit {settings.get('synchronous_commit')}."
        " Latency: enqueue to handler start, by the jobs enqueued in the phase (never "
        "started: counted to the end of the run). Depth: enqueued minus started.",
        "",
    ]
    summary = "\n".join([*header, *table(results)]) + "\n"
    print(summary)
    report.write_run(out, summary, results)
    return 0
