"""CPU per job of a daemon at the defaults, this checkout against another, alternated.

    python -m bench.worker_abab OTHER_CHECKOUT [--pairs 3] [--window 8] [--spy DIR]
        [--config JSON] [--jobs N] [--statements DIR]

Each run: a throwaway cluster, no-op jobs inserted (`--jobs`; by default enough for the
start-up pause and the window at RATE_CEILING_PER_S), `pgworkerd run` with two
processes and everything else at its defaults (batch_size 10, info logs); after a
start-up pause, the supervisor's and its workers' CPU (psutil) over a window, divided
by the jobs the database shows succeeded in it, and the supervisor's wake-ups (its
voluntary context switches: each a wait of its loop that slept) per 100 jobs, a
count the machine's load moves far less than CPU time. Runs alternate, the side that goes
first swapped every pair (OTHER, this, this, OTHER, ...): the second run of a pair was
~5 % slower than the first with the same code on both sides (round 14's A/A), so a fixed
order read as a loss for the checkout that always ran second. With `--spy DIR`, py-spy
(on the PATH or PY_SPY) samples one worker and the supervisor of each run for 6 s at
200 Hz into DIR (raw format). `--config JSON`: keys merged into both sides' config file,
e.g. the tuned row's
'{"defaults": {"batch_size": 100}, "log_level": "warning"}' (default: none, the
defaults). `--statements DIR`: the cluster loads pg_stat_statements, reset at the
window's start; at its end each statement's calls, mean execution and planning time,
and shared buffers hit and dirtied per call are written to DIR/<run>_statements.txt.
A run whose jobs all succeeded before its window ended measured idle workers: the
script says so on one line and exits 2 (`--jobs` must cover the start-up pause and the
window at the rate of the row: 29,000-38,000 jobs/s for the tuned one in round 16).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
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

STARTUP_S = 3.0  # after both workers are forked: their imports and first claims
# Above the fastest row measured (the tuned one: ~18,000 jobs/s in round 15, 29,000-38,000
# in round 16 on a faster machine, where a ceiling of 25,000 ran out inside the window):
# the default backlog lasts the start-up pause and the window at this rate, with room.
RATE_CEILING_PER_S = 50_000


def default_jobs(window_s: float) -> int:
    """Jobs enough to keep both workers busy through the start-up pause and the window."""
    return int(RATE_CEILING_PER_S * (STARTUP_S + window_s))


class RanOut(Exception):
    """The daemon ran out of jobs before the window ended: its rate is not measured."""


def check_supply(succeeded_at_end: int, inserted: int, window_s: float) -> None:
    """Raise RanOut when every inserted job had succeeded by the window's end: the
    workers idled for part of the window, so jobs per second (and CPU per job, which
    then counts idle loops) would be read off a run that was not kept busy."""
    if succeeded_at_end >= inserted:
        raise RanOut(
            f"all {inserted:,} jobs were done before the {window_s:g} s window ended:"
            " give --jobs more (at least the rate times the start-up pause plus the window)"
        )


def _py_spy(py_spy: str, pid: int, out: Path) -> list[str]:
    """6 s of samples at 200 Hz, raw format, without stopping the process."""
    return [
        py_spy,
        "record",
        "-p",
        str(pid),
        "-d",
        "6",
        "-f",
        "raw",
        "-o",
        str(out),
        "-r",
        "200",
        "--nonblocking",
    ]


def one_run(
    code: Path | None,
    tag: str,
    window_s: float,
    spy: Path | None,
    extra: dict[str, Any] | None = None,
    statements: Path | None = None,
    *,
    jobs: int,
) -> dict[str, float]:
    work = Path(tempfile.mkdtemp(prefix="pgworkerd-worker-abab-"))
    settings = dict(PEER_SETTINGS)
    if statements is not None:
        settings["shared_preload_libraries"] = "pg_stat_statements"
        settings["pg_stat_statements.track_planning"] = "on"  # plans are per call too
    try:
        with throwaway_cluster(settings=settings) as cluster:
            dsn = cluster.dsn()
            config = write_config(work / "config.yaml", dsn, extra=extra)
            migrate(config, work / "daemon.log", code=code)
            with psycopg.connect(dsn, autocommit=True) as conn:
                fill_noop_jobs(conn, jobs)
                with (work / "daemon.log").open("ab") as log:
                    daemon = subprocess.Popen(
                        [*command(code), "run", "-c", str(config)],
                        env=daemon_env(code),
                        cwd=code or REPO,
                        stdout=log,
                        stderr=subprocess.STDOUT,
                        start_new_session=True,
                    )
                try:
                    return _window(
                        conn,
                        psutil.Process(daemon.pid),
                        tag,
                        window_s,
                        spy,
                        statements,
                        cluster.data_dir,
                        inserted=jobs,
                    )
                finally:
                    daemon.terminate()
                    daemon.wait(60)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _window(
    conn: psycopg.Connection[tuple[int]],
    supervisor: psutil.Process,
    tag: str,
    window_s: float,
    spy: Path | None,
    statements: Path | None = None,
    data_dir: Path | None = None,
    *,
    inserted: int,
) -> dict[str, float]:
    deadline = time.monotonic() + 60
    while len(supervisor.children()) < 2:  # both workers forked
        if time.monotonic() > deadline:
            raise RuntimeError("the daemon's two workers did not start within 60 s")
        time.sleep(0.1)
    time.sleep(STARTUP_S)
    workers = supervisor.children()

    def cpu() -> tuple[float, float, int]:
        own = supervisor.cpu_times()
        kids = [w.cpu_times() for w in workers]
        woken = supervisor.num_ctx_switches().voluntary
        return own.user + own.system, sum(k.user + k.system for k in kids), woken

    def done() -> int:
        row = conn.execute(
            "SELECT count(*) FROM pgworkerd.jobs WHERE state = 'succeeded'"
        ).fetchone()
        return row[0] if row else 0

    samplers = []
    if spy is not None:
        py_spy = os.environ.get("PY_SPY", "py-spy")
        for pid, name in ((workers[0].pid, "worker"), (supervisor.pid, "supervisor")):
            out = spy / f"{tag}_{name}.raw"
            samplers.append(
                subprocess.Popen(
                    _py_spy(py_spy, pid, out),
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                )
            )
    if statements is not None:
        conn.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
        conn.execute("SELECT pg_stat_statements_reset()")

    # Each count (~70 ms on 200,000 rows) comes just before its CPU sample, at both
    # ends: the jobs' span and the CPU's are of one length.
    w0, d0 = wal_position(conn), done()
    server = ServerCpu(data_dir, exclude=(conn.info.backend_pid,)) if data_dir else None
    c0, t0 = cpu(), time.monotonic()
    time.sleep(window_s)
    d1 = done()
    c1, t1 = cpu(), time.monotonic()
    check_supply(d1, inserted, window_s)
    server_s = server.since_start() if server else {"total": 0.0}
    w1 = wal_position(conn)
    if statements is not None:
        _write_statements(conn, statements / f"{tag}_statements.txt")
    for sampler in samplers:
        sampler.wait()
    jobs = max(1, d1 - d0)
    return {
        "jobs_per_s": jobs / (t1 - t0),
        "supervisor_s_per_10k": (c1[0] - c0[0]) / jobs * 1e4,
        "workers_s_per_10k": (c1[1] - c0[1]) / jobs * 1e4,
        "tree_s_per_10k": (c1[0] - c0[0] + c1[1] - c0[1]) / jobs * 1e4,
        "supervisor_wakeups_per_100": (c1[2] - c0[2]) / jobs * 100,
        # PostgreSQL's processes (the measuring connection's backend left out), by kind
        **{f"server_{kind}_s_per_10k": s / jobs * 1e4 for kind, s in server_s.items()},
        "wal_bytes_per_job": (w1 - w0) / jobs,
        "load": os.getloadavg()[0],
    }


def _write_statements(conn: psycopg.Connection[Any], out: Path) -> None:
    """The window's statements by total time: calls, ms per call, buffers per call."""
    rows = conn.execute(
        "SELECT calls, total_exec_time, plans, total_plan_time, shared_blks_hit,"
        " shared_blks_read, shared_blks_dirtied, wal_bytes,"
        " left(regexp_replace(query, '\\s+', ' ', 'g'), 160)"
        " FROM pg_stat_statements WHERE calls > 0 ORDER BY total_exec_time DESC LIMIT 15"
    ).fetchall()
    lines = [
        "calls\ttotal_ms\tms/call\tplans\tplan_ms/call\thit/call\tread/call\tdirtied/call"
        "\twal_B/call\tquery"
    ]
    for calls, total, plans, plan_ms, hit, read, dirtied, wal, query in rows:
        lines.append(
            f"{calls}\t{total:.0f}\t{total / calls:.3f}\t{plans}\t{plan_ms / calls:.3f}\t"
            f"{hit / calls:.1f}\t"
            f"{read / calls:.1f}\t{dirtied / calls:.1f}\t{int(wal) / calls:.0f}\t{query}"
        )
    out.write_text("\n".join(lines) + "\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("other", type=Path, help="the other checkout (A)")
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--window", type=float, default=8.0, help="seconds measured")
    parser.add_argument("--spy", type=Path, default=None, help="py-spy output directory")
    parser.add_argument(
        "--config",
        type=json.loads,
        default=None,
        help="JSON object merged into both sides' config (default: the defaults)",
    )
    parser.add_argument(
        "--statements", type=Path, default=None, help="pg_stat_statements output directory"
    )
    parser.add_argument(
        "--jobs",
        type=int,
        default=None,
        help="jobs inserted (default: enough for the start-up pause and the window at"
        f" {RATE_CEILING_PER_S:,} jobs/s)",
    )
    args = parser.parse_args(argv)
    if args.jobs is None:
        args.jobs = default_jobs(args.window)
    for directory in (args.spy, args.statements):
        if directory is not None:
            directory.mkdir(parents=True, exist_ok=True)
    tree: dict[str, list[float]] = {"A": [], "B": []}
    server: dict[str, list[float]] = {"A": [], "B": []}
    rate: dict[str, list[float]] = {"A": [], "B": []}
    sides: list[tuple[str, Path | None]] = [("A", args.other.resolve()), ("B", None)]
    for pair in range(1, args.pairs + 1):
        for side, code in sides if pair % 2 else sides[::-1]:
            tag = f"{side}{pair}"
            try:
                r = one_run(
                    code, tag, args.window, args.spy, args.config, args.statements, jobs=args.jobs
                )
            except RanOut as error:
                print(f"{tag}: {error}", file=sys.stderr)
                return 2
            tree[side].append(r["tree_s_per_10k"])
            server[side].append(r["server_total_s_per_10k"])
            rate[side].append(r["jobs_per_s"])
            print(
                f"{tag}: {r['jobs_per_s']:,.0f} jobs/s; CPU s per 10k jobs: supervisor "
                f"{r['supervisor_s_per_10k']:.3f}, workers {r['workers_s_per_10k']:.3f}, "
                f"tree {r['tree_s_per_10k']:.3f}; supervisor wake-ups per 100 jobs "
                f"{r['supervisor_wakeups_per_100']:.2f}; server {r['server_total_s_per_10k']:.3f}"
                f" (backends {r['server_backends_s_per_10k']:.3f}, walwriter"
                f" {r['server_walwriter_s_per_10k']:.3f}, autovacuum"
                f" {r['server_autovacuum_s_per_10k']:.3f}, checkpointer"
                f" {r['server_checkpointer_s_per_10k']:.3f}); WAL B/job"
                f" {r['wal_bytes_per_job']:.0f}; load {r['load']:.1f}",
                flush=True,
            )
    for side in ("A", "B"):
        values = tree[side]
        print(
            f"{side}: tree CPU s per 10k jobs, median {statistics.median(values):.3f} "
            f"({min(values):.3f}-{max(values):.3f}); jobs/s, median "
            f"{statistics.median(rate[side]):,.0f}; server CPU s per 10k jobs, median"
            f" {statistics.median(server[side]):.3f}"
            f" ({min(server[side]):.3f}-{max(server[side]):.3f})"
        )
    ratios = [b / a for a, b in zip(rate["A"], rate["B"], strict=True)]
    ahead = sum(r > 1 for r in ratios)
    print(
        f"rate B/A per pair, median {statistics.median(ratios):.3f};"
        f" B ahead in {ahead} of {len(ratios)}"
    )
    server_lower = sum(b < a for a, b in zip(server["A"], server["B"], strict=True))
    print(f"server CPU per job: B lower in {server_lower} of {len(ratios)} pairs")
    return 0


if __name__ == "__main__":
    sys.exit(main())
