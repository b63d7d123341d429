"""The full-system peak: a producer and the daemon at once, on one machine.

    python -m bench --peak [--peak-layouts 1x2,2x1] [--peak-seconds 30] [--peak-raw]

The shape of the third-party harness the issue quotes: 1 ms jobs (the `wait` handler,
payload {"ms": 1, "pad": ...} of PAYLOAD_BYTES bytes of JSON), a producer process that
keeps the queue topped up to DEPTH ready jobs (it counts the queued jobs, enqueues the
difference with one `enqueue_many`, and loops; it sleeps 2 ms only when nothing was
missing), and the daemon(s) consuming at the same time. After a warm-up, jobs/s is the
growth of the succeeded count over the window, and the CPU each part spent over that
window comes from psutil: the PostgreSQL server (the postmaster and every backend,
reaped ones included), the workers, the supervisor(s), the producer.

A layout is DAEMONSxPROCESSESxTHREADS: `1x2x8` is one daemon with a pool of two
processes of 8 threads each, `2x1x8` two daemons of one such process each (on the same
queue and database). A 1 ms job leaves one thread of one process at ~1,000 jobs/s: the
peak needs threads (the issue's third-party figure used 4 processes x 8 threads).

`--peak-raw` adds the same shape through a raw psycopg loop (this module's
raw_worker/raw_producer, not the peers' harness, which has no such mode): one table
with one partial index, the same claim-with-SKIP-LOCKED, a 1 ms sleep per job and a
DELETE per batch (BATCH jobs a claim, pgworkerd's default batch size), one connection
per thread, the same producer loop on that table. It keeps no finished rows, writes
no lease, attempt or log line: the floor under any job system on this machine, not a peer.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import psutil
import psycopg

from bench.daemon import QUEUE, REPO, Daemon, daemon_env, migrate, write_config
from bench.server_cpu import postmaster

DEPTH = 2_000
PAYLOAD_BYTES = 256
BATCH = 10  # pgworkerd's default batch_size; the raw loop claims as many
WARMUP_S = 8.0
PAD = "x" * (PAYLOAD_BYTES - len(json.dumps({"ms": 1, "pad": ""})))
PAYLOAD = {"ms": 1, "pad": PAD}

PGWORKERD_QUEUED = "SELECT count(*) FROM pgworkerd.jobs WHERE state = 'queued'"
PGWORKERD_DONE = "SELECT count(*) FROM pgworkerd.jobs WHERE state = 'succeeded'"

RAW_SCHEMA = """
CREATE TABLE IF NOT EXISTS raw_jobs (
    id bigserial PRIMARY KEY,
    status smallint NOT NULL DEFAULT 0,
    payload jsonb NOT NULL,
    picked_at timestamptz
);
CREATE INDEX IF NOT EXISTS raw_jobs_queued ON raw_jobs (id) WHERE status = 0;
CREATE TABLE IF NOT EXISTS raw_done (n bigint NOT NULL);
INSERT INTO raw_done SELECT 0 WHERE NOT EXISTS (SELECT 1 FROM raw_done);
"""
RAW_QUEUED = "SELECT count(*) FROM raw_jobs WHERE status = 0"
RAW_DONE = "SELECT n FROM raw_done"
RAW_CLAIM = """
WITH c AS (
    SELECT id FROM raw_jobs WHERE status = 0 ORDER BY id LIMIT %s FOR UPDATE SKIP LOCKED
)
UPDATE raw_jobs j SET status = 1, picked_at = now() FROM c WHERE j.id = c.id
RETURNING j.id, j.payload
"""
# The ack counts what it deleted, so the bench can read the rate as it reads
# pgworkerd's succeeded count (one more row update per batch: the raw loop pays it).
RAW_ACK = """
WITH d AS (DELETE FROM raw_jobs WHERE id = ANY(%s) RETURNING 1)
UPDATE raw_done SET n = n + (SELECT count(*) FROM d)
"""


@dataclass
class Layout:
    daemons: int
    processes: int
    threads: int = 1  # jobs each process runs at once (the pool's `threads`)

    @property
    def name(self) -> str:
        return f"{self.daemons}x{self.processes}x{self.threads}"


@dataclass
class PeakRow:
    system: str
    layout: str
    jobs_per_s: float
    window_s: float
    depth_min: int
    depth_max: int
    cpu_s: dict[str, float] = field(default_factory=dict)  # part -> CPU s in the window
    notes: str = ""

    def cpu_ms_per_job(self, part: str) -> float:
        jobs = self.jobs_per_s * self.window_s
        return 1000 * self.cpu_s.get(part, 0.0) / jobs if jobs else float("nan")


def parse_layouts(text: str) -> list[Layout]:
    layouts = []
    for item in text.split(","):
        parts = item.strip().split("x")
        numbers = [int(n) for n in parts if n.isdigit()]
        if len(numbers) != len(parts) or not 2 <= len(numbers) <= 3 or min(numbers) < 1:
            raise ValueError(f"a layout is DxP or DxPxT, each at least 1: {item!r}")
        layouts.append(Layout(*numbers))
    return layouts


# -- the measured side ----------------------------------------------------------------


def tree_cpu(proc: psutil.Process) -> float:
    """User + system CPU seconds of `proc` and every descendant, reaped ones included
    (their times are in the parent's children_* once it has waited for them)."""
    times = proc.cpu_times()
    total = times.user + times.system + times.children_user + times.children_system
    for child in proc.children(recursive=True):
        with contextlib.suppress(psutil.Error):
            t = child.cpu_times()
            total += t.user + t.system
    return total


def own_cpu(proc: psutil.Process) -> float:
    times = proc.cpu_times()
    return times.user + times.system


class Parts:
    """The processes whose CPU the row splits."""

    def __init__(self, server: psutil.Process, producer: psutil.Process) -> None:
        self.server = server
        self.producer = producer
        self.supervisors: list[psutil.Process] = []  # a daemon's root: its own CPU
        self.worker_trees: list[psutil.Process] = []  # whose descendants are workers

    def sample(self) -> dict[str, float]:
        supervisors = sum(own_cpu(p) for p in self.supervisors)
        trees = sum(tree_cpu(p) for p in self.worker_trees)
        return {
            "postgres": tree_cpu(self.server),
            "workers": trees - supervisors,
            "supervisor": supervisors,
            "producer": tree_cpu(self.producer),
        }


def measure_window(
    dsn: str, parts: Parts, done_sql: str, queued_sql: str, seconds: float
) -> tuple[float, dict[str, float], int, int]:
    """(jobs/s, CPU s per part, min and max depth seen) over `seconds`."""
    depths = []
    with psycopg.connect(dsn, autocommit=True) as conn:
        done0 = conn.execute(done_sql).fetchone()[0]  # type: ignore[index]
        cpu0 = parts.sample()
        t0 = time.perf_counter()
        deadline = t0 + seconds
        while time.perf_counter() < deadline:
            time.sleep(min(1.0, max(0.0, deadline - time.perf_counter())))
            depths.append(conn.execute(queued_sql).fetchone()[0])  # type: ignore[index]
        done1 = conn.execute(done_sql).fetchone()[0]  # type: ignore[index]
        cpu1 = parts.sample()
        elapsed = time.perf_counter() - t0
    cpu = {k: round(cpu1[k] - cpu0[k], 2) for k in cpu0}
    return (done1 - done0) / elapsed, cpu, min(depths), max(depths)


def run_pgworkerd(
    dsn: str,
    data_dir: Path,
    work: Path,
    layout: Layout,
    seconds: float,
    extra: dict[str, Any] | None = None,
    code: Path | None = None,
) -> PeakRow:
    tag = f"peak_{layout.name}" + ("_other" if code else "")
    pool = {"queues": [QUEUE], "concurrency": layout.processes, "threads": layout.threads}
    configs = [
        write_config(work / f"{tag}_{d}.yaml", dsn, extra={"workers": [pool], **(extra or {})})
        for d in range(layout.daemons)
    ]
    migrate(configs[0], work / f"{tag}_0.log", code=code)
    # The producer is this checkout's whatever `code` runs: its cost is not compared.
    producer = _start_producer(dsn, "pgworkerd", work / f"{tag}_producer.log")
    daemons = [Daemon(c, work / f"{tag}_{d}.log", code=code) for d, c in enumerate(configs)]
    try:
        parts = Parts(postmaster(data_dir), psutil.Process(producer.pid))
        parts.supervisors = [d.ps for d in daemons]
        parts.worker_trees = [d.ps for d in daemons]
        time.sleep(WARMUP_S)
        jps, cpu, dmin, dmax = measure_window(dsn, parts, PGWORKERD_DONE, PGWORKERD_QUEUED, seconds)
    finally:
        for d in daemons:
            d.stop()
        _stop(producer)
    label = "pgworkerd" + (f" ({code})" if code else "")
    return PeakRow(label, layout.name, round(jps, 1), seconds, dmin, dmax, cpu)


def run_raw(dsn: str, data_dir: Path, work: Path, layout: Layout, seconds: float) -> PeakRow:
    """The raw loop: `layout.daemons` x `layout.processes` worker processes, no supervisor."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(RAW_SCHEMA)
    log = (work / f"peak_raw_{layout.name}.log").open("ab")
    producer = _start_producer(dsn, "raw", work / f"peak_raw_{layout.name}_producer.log")
    workers = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "bench.peak",
                "raw-worker",
                dsn,
                "--threads",
                str(layout.threads),
            ],
            env=daemon_env(),
            cwd=REPO,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        for _ in range(layout.daemons * layout.processes)
    ]
    try:
        parts = Parts(postmaster(data_dir), psutil.Process(producer.pid))
        procs = [psutil.Process(w.pid) for w in workers]
        parts.worker_trees = procs
        time.sleep(WARMUP_S)
        jps, cpu, dmin, dmax = measure_window(dsn, parts, RAW_DONE, RAW_QUEUED, seconds)
    finally:
        for w in workers:
            _stop(w)
        _stop(producer)
        log.close()
    return PeakRow("raw psycopg loop", layout.name, round(jps, 1), seconds, dmin, dmax, cpu)


def _start_producer(dsn: str, target: str, log_path: Path) -> subprocess.Popen[bytes]:
    with log_path.open("ab") as log:
        return subprocess.Popen(
            [sys.executable, "-m", "bench.peak", "producer", dsn, "--target", target],
            env=daemon_env(),
            cwd=REPO,
            stdout=log,
            stderr=subprocess.STDOUT,
        )


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def markdown(rows: list[PeakRow], header: str) -> str:
    parts = ("postgres", "workers", "supervisor", "producer")
    lines = [
        header,
        "",
        "| system | layout DxPxT | jobs/s | depth min-max | CPU ms/job: "
        + " / ".join(parts)
        + " | CPU % of 2 cores: "
        + " / ".join(parts)
        + " |",
        "|---|---|---:|---:|---:|---:|",
    ]
    for r in rows:
        per_job = " / ".join(f"{r.cpu_ms_per_job(p):.3f}" for p in parts)
        share = " / ".join(f"{100 * r.cpu_s.get(p, 0.0) / r.window_s / 2:.0f}" for p in parts)
        lines.append(
            f"| {r.system} | {r.layout} | {r.jobs_per_s:,.0f} | {r.depth_min:,}-{r.depth_max:,}"
            f" | {per_job} | {share} |"
        )
    return "\n".join(lines) + "\n"


def as_json(rows: list[PeakRow]) -> list[dict[str, Any]]:
    return [asdict(r) for r in rows]


# -- the producer and the raw worker (separate processes) -----------------------------


def producer(dsn: str, target: str, depth: int) -> None:
    """Top the queue up to `depth` ready jobs until SIGTERM."""
    stopping = False

    def stop(signum: int, frame: object) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, stop)
    with psycopg.connect(dsn, autocommit=True) as conn:
        if target == "raw":
            payload = json.dumps(PAYLOAD)
        else:
            import pgworkerd

            job = {"kind": "wait", "payload": PAYLOAD, "queue": QUEUE}
        queued_sql = RAW_QUEUED if target == "raw" else PGWORKERD_QUEUED
        while not stopping:
            missing = depth - conn.execute(queued_sql).fetchone()[0]  # type: ignore[index]
            if missing <= 0:
                time.sleep(0.002)
            elif target == "raw":
                conn.execute(
                    "INSERT INTO raw_jobs (payload) SELECT unnest(%s::jsonb[])",
                    ([payload] * missing,),
                )
            else:
                pgworkerd.enqueue_many(conn, [job] * missing)


def raw_worker(dsn: str, batch: int, threads: int) -> None:
    """`threads` loops, each on its own connection: claim, run, delete."""
    stopping = threading.Event()
    signal.signal(signal.SIGTERM, lambda signum, frame: stopping.set())

    def loop() -> None:
        with psycopg.connect(dsn, autocommit=True) as conn:
            while not stopping.is_set():
                rows = conn.execute(RAW_CLAIM, (batch,)).fetchall()
                if not rows:
                    time.sleep(0.01)
                    continue
                for _id, payload in rows:
                    time.sleep(payload["ms"] / 1000)  # the 1 ms job
                conn.execute(RAW_ACK, ([r[0] for r in rows],))

    running = [threading.Thread(target=loop) for _ in range(threads)]
    for t in running:
        t.start()
    while any(t.is_alive() for t in running):
        stopping.wait(0.2)  # the main thread takes the signal
    for t in running:
        t.join()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("role", choices=["producer", "raw-worker"])
    parser.add_argument("dsn")
    parser.add_argument("--target", choices=["pgworkerd", "raw"], default="pgworkerd")
    parser.add_argument("--depth", type=int, default=DEPTH)
    parser.add_argument("--batch", type=int, default=BATCH)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    if args.role == "producer":
        producer(args.dsn, args.target, args.depth)
    else:
        raw_worker(args.dsn, args.batch, args.threads)


if __name__ == "__main__":
    main()
