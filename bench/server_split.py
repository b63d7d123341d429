"""PostgreSQL's CPU per job: pgworkerd against the raw loop, on one cluster, in one run.

    python -m bench.server_split [--jobs 200000] [--window 8] [--config JSON]
        [--perf DIR] [--rounds 1] [--peers-dir /work/shared/bench/peers] [--sql SQL]

On a throwaway cluster with pg_stat_statements: `--jobs` no-op jobs, `pgworkerd run`
with two processes (plus `--config`, default the tuned row: batch_size 100, warning
logs), measured over a window after a start-up pause; then the raw loop of the peers'
bench_rawpsycopg.py (two processes, claims of 100, a DELETE per batch: raw_2x100) on
`--raw-jobs` rows of its own table, over the same window. For each: jobs/s; the server's CPU
by kind of process (backends, walwriter, autovacuum, checkpointer: bench/server_cpu.py)
and the client's; WAL bytes; and per statement, calls and µs of execution per job
(pg_stat_statements' total_exec_time, with planning). `--perf DIR`: perf records one
claiming backend for 5 s of each window (`perf record -F 1999 -g`) into DIR. `--sql`:
a statement run after pgworkerd's migrations (to price an index, a trigger, a check).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import psutil
import psycopg

from bench.cluster import PEER_SETTINGS, throwaway_cluster
from bench.daemon import REPO, command, daemon_env, fill_noop_jobs, migrate, write_config
from bench.server_cpu import ServerCpu, wal_position

TUNED = {"defaults": {"batch_size": 100}, "log_level": "warning"}
STARTUP_S = 3.0
SETTINGS = {
    **PEER_SETTINGS,
    "shared_preload_libraries": "pg_stat_statements",
    "pg_stat_statements.track_planning": "on",
}


def _statements(conn: psycopg.Connection[Any], jobs: int) -> list[dict[str, Any]]:
    rows = conn.execute(
        "SELECT calls, total_exec_time + total_plan_time, wal_bytes,"
        " left(regexp_replace(query, '\\s+', ' ', 'g'), 120)"
        " FROM pg_stat_statements WHERE calls > 0"
        " AND query NOT LIKE '%%pg_stat_statements%%'"
        " ORDER BY total_exec_time DESC LIMIT 12"
    ).fetchall()
    return [
        {
            "calls": calls,
            "us_per_job": ms * 1000 / jobs,
            "us_per_call": ms * 1000 / calls,
            "wal_bytes_per_job": int(wal) / jobs,
            "query": query,
        }
        for calls, ms, wal, query in rows
    ]


def _perf(pid: int, out: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        ["perf", "record", "-F", "1999", "-g", "-p", str(pid), "-o", str(out), "--", "sleep", "5"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def _no_other_clients(conn: psycopg.Connection[Any]) -> None:
    """Wait until the previous side's backends have exited: their CPU would be counted
    in the next window's "ended" (the postmaster's reaped children)."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        row = conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend'"
            " AND pid <> pg_backend_pid()"
        ).fetchone()
        if row and row[0] == 0:
            return
        time.sleep(0.1)
    raise RuntimeError("other clients still connected after 30 s")


def _window(
    conn: psycopg.Connection[Any],
    data_dir: Path,
    clients: list[psutil.Process],
    done_sql: str,
    window_s: float,
    perf_out: Path | None,
) -> dict[str, Any]:
    """Measure the window; `done_sql` counts the jobs finished so far."""
    own = conn.info.backend_pid
    perf = None
    if perf_out is not None:
        row = conn.execute(
            "SELECT pid FROM pg_stat_activity WHERE backend_type = 'client backend'"
            " AND pid <> pg_backend_pid() AND query ILIKE '%%UPDATE%%' ORDER BY pid LIMIT 1"
        ).fetchone()
        if row:
            perf = _perf(row[0], perf_out)
    conn.execute("SELECT pg_stat_statements_reset()")

    def client_cpu() -> float:
        total = 0.0
        for proc in clients:
            t = proc.cpu_times()
            total += t.user + t.system
        return total

    def done() -> int:
        row = conn.execute(done_sql).fetchone()
        return int(row[0]) if row else 0

    # Each count comes just before its CPU sample, at both ends: the jobs' span and the
    # CPU's are of one length.
    w0, d0 = wal_position(conn), done()
    server = ServerCpu(data_dir, exclude=(own,))
    c0, t0 = client_cpu(), time.monotonic()
    time.sleep(window_s)
    d1 = done()
    c1, t1 = client_cpu(), time.monotonic()
    server_s = server.since_start()
    w1 = wal_position(conn)
    jobs = max(1, d1 - d0)
    statements = _statements(conn, jobs)
    if perf is not None:
        perf.wait()
    return {
        "jobs_per_s": jobs / (t1 - t0),
        "server_us_per_job": {k: v / jobs * 1e6 for k, v in server_s.items()},
        "client_us_per_job": (c1 - c0) / jobs * 1e6,
        "wal_bytes_per_job": (w1 - w0) / jobs,
        "statements": statements,
    }


def pgworkerd_side(
    cluster: Any,
    work: Path,
    jobs: int,
    window_s: float,
    extra: dict[str, Any],
    perf: Path | None,
    schema_sql: str | None = None,
) -> dict[str, Any]:
    dsn = cluster.dsn()
    config = write_config(work / "config.yaml", dsn, extra=extra)
    migrate(config, work / "daemon.log")
    with psycopg.connect(dsn, autocommit=True) as conn:
        if schema_sql:
            conn.execute(schema_sql)  # type: ignore[arg-type]  # a trial, from the command line
        conn.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
        fill_noop_jobs(conn, jobs)
        with (work / "daemon.log").open("ab") as log:
            daemon = subprocess.Popen(
                [*command(), "run", "-c", str(config)],
                env=daemon_env(),
                cwd=REPO,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        try:
            supervisor = psutil.Process(daemon.pid)
            deadline = time.monotonic() + 60
            while len(supervisor.children()) < 2:
                if time.monotonic() > deadline:
                    raise RuntimeError("the daemon's workers did not start within 60 s")
                time.sleep(0.1)
            time.sleep(STARTUP_S)
            return _window(
                conn,
                cluster.data_dir,
                [supervisor, *supervisor.children()],
                "SELECT count(*) FROM pgworkerd.jobs WHERE state = 'succeeded'",
                window_s,
                perf,
            )
        finally:
            daemon.terminate()
            daemon.wait(60)
            _no_other_clients(conn)


def _raw_worker(dsn: str, claim: str, ack: str, batch: int) -> None:
    """bench_rawpsycopg.py's throughput loop: claim a batch, ack it, until none is left."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        while True:
            rows = conn.execute(claim, (batch,)).fetchall()
            if not rows:
                return
            conn.execute(ack, ([r[0] for r in rows],))


def raw_side(
    cluster: Any, peers: Path, jobs: int, window_s: float, perf: Path | None
) -> dict[str, Any]:
    sys.path.insert(0, str(peers))
    import bench_rawpsycopg as raw  # type: ignore[import-not-found]

    dsn = cluster.dsn()
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(raw.SCHEMA)
        conn.execute(
            "INSERT INTO raw_jobs (payload) SELECT '{\"i\": 0}'::jsonb FROM generate_series(1, %s)",
            (jobs,),
        )
        conn.execute("VACUUM ANALYZE raw_jobs")
        ctx = mp.get_context("fork")
        procs = [
            ctx.Process(target=_raw_worker, args=(dsn, raw.CLAIM, raw.ACK, 100)) for _ in range(2)
        ]
        for p in procs:
            p.start()
        try:
            time.sleep(STARTUP_S)
            return _window(
                conn,
                cluster.data_dir,
                [psutil.Process(p.pid) for p in procs if p.pid is not None],
                f"SELECT {jobs} - count(*) FROM raw_jobs",
                window_s,
                perf,
            )
        finally:
            for p in procs:
                p.terminate()
                p.join(10)
            _no_other_clients(conn)


def report(name: str, r: dict[str, Any]) -> str:
    s = r["server_us_per_job"]
    lines = [
        f"## {name}: {r['jobs_per_s']:,.0f} jobs/s",
        f"server µs/job: total {s['total']:.1f}, backends {s['backends']:.1f}, walwriter"
        f" {s['walwriter']:.1f}, autovacuum {s['autovacuum']:.1f}, checkpointer"
        f" {s['checkpointer']:.1f}, other {s['other']:.1f}, ended {s['ended']:.1f};"
        f" client µs/job"
        f" {r['client_us_per_job']:.1f}; WAL B/job {r['wal_bytes_per_job']:.0f}",
        "calls\tµs/job\tµs/call\tWAL B/job\tquery",
    ]
    for st in r["statements"]:
        lines.append(
            f"{st['calls']}\t{st['us_per_job']:.2f}\t{st['us_per_call']:.0f}\t"
            f"{st['wal_bytes_per_job']:.0f}\t{st['query']}"
        )
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=200_000)
    parser.add_argument(
        "--raw-jobs",
        type=int,
        default=600_000,
        help="the raw loop's rows: it runs ~25,000 a second, and must not run out in the window",
    )
    parser.add_argument("--window", type=float, default=8.0)
    parser.add_argument("--config", type=json.loads, default=TUNED)
    parser.add_argument("--perf", type=Path, default=None)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--peers-dir", type=Path, default=REPO.parent / "shared/bench/peers")
    parser.add_argument(
        "--sql",
        default=None,
        help="run on pgworkerd's database after its migrations (a trial of a schema change"
        " before its migration is written, or of what an index or trigger costs)",
    )
    parser.add_argument("--json", type=Path, default=None, help="write the results here")
    args = parser.parse_args()
    if args.perf is not None:
        args.perf.mkdir(parents=True, exist_ok=True)
    results: list[dict[str, Any]] = []
    for n in range(1, args.rounds + 1):
        work = Path(tempfile.mkdtemp(prefix="pgworkerd-server-split-"))
        try:
            with throwaway_cluster(settings=SETTINGS) as cluster:
                perf = args.perf / f"pgworkerd{n}.data" if args.perf else None
                ours = pgworkerd_side(
                    cluster, work, args.jobs, args.window, args.config, perf, args.sql
                )
                print(report(f"pgworkerd, round {n}", ours), flush=True)
                perf = args.perf / f"raw{n}.data" if args.perf else None
                raw = raw_side(cluster, args.peers_dir, args.raw_jobs, args.window, perf)
                print(report(f"raw_2x100, round {n}", raw), flush=True)
                print(
                    f"pgworkerd/raw rate {ours['jobs_per_s'] / raw['jobs_per_s']:.2f}; server"
                    f" CPU per job {ours['server_us_per_job']['total']:.1f} /"
                    f" {raw['server_us_per_job']['total']:.1f} µs",
                    flush=True,
                )
                results.append({"pgworkerd": ours, "raw": raw})
        finally:
            shutil.rmtree(work, ignore_errors=True)
    if args.json is not None:
        args.json.write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
