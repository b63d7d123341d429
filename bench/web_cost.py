"""What the dashboard's pages cost over a large table: 1,000,000 finished and 100,000
queued jobs (by default), a real `pgworkerd web` process, each page fetched over HTTP.

    python -m bench.web_cost [--finished 1000000] [--queued 100000] [--requests 30]

The finished jobs are spread over the last 24 hours (97 % succeeded, 2 % dead, 1 %
cancelled: about 42,000 in the chart's last hour), over 5 queues and 10 kinds; the
queued ones half ready (run_at in the past hour), half scheduled within the next day.
Then VACUUM ANALYZE, as autovacuum would have done on a table that size.

Each page is fetched `--requests` times after one warm-up; the figures are wall-clock
times of whole responses (connect, queries, rendering) on this machine. Then EXPLAIN
(ANALYZE, BUFFERS) of every statement the pages run. Prints markdown and writes it to
bench/results/<timestamp>-web-cost.md.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import psycopg
import yaml

from bench.cluster import fresh_database, server_settings, throwaway_cluster
from bench.daemon import REPO
from pgworkerd.storage import queries
from pgworkerd.storage.dashboard import CHART_MINUTES, LAST_ERROR_TAIL, SCAN_WINDOW
from pgworkerd.storage.embedded import free_port
from pgworkerd.storage.migrations import migrate

RESULTS = REPO / "bench" / "results"

FILL_FINISHED = """
INSERT INTO pgworkerd.jobs (queue, kind, payload, state, attempt, max_attempts, run_at,
                            created_at, started_at, finished_at, last_error, errors)
SELECT 'q' || (i %% 5), 'kind' || (i %% 10), jsonb_build_object('n', i), s.state,
       1, 5, t - interval '2 seconds', t - interval '2 seconds', t - interval '1 second', t,
       CASE WHEN s.state = 'dead' THEN 'RuntimeError: failed' END,
       CASE WHEN s.state = 'dead'
            THEN jsonb_build_array(jsonb_build_object('attempt', 1, 'at', t, 'error', 'x'))
            ELSE '[]' END
FROM generate_series(1, %(n)s) AS i,
     LATERAL (SELECT now() - (i::float8 / %(n)s) * interval '24 hours' AS t) AS tt,
     LATERAL (SELECT CASE WHEN i %% 100 < 2 THEN 'dead' WHEN i %% 100 = 2 THEN 'cancelled'
                          ELSE 'succeeded' END AS state) AS s
"""

FILL_QUEUED = """
INSERT INTO pgworkerd.jobs (queue, kind, payload, state, run_at)
SELECT 'q' || (i %% 5), 'kind' || (i %% 10), jsonb_build_object('n', i), 'queued',
       CASE WHEN i %% 2 = 0 THEN now() - (i::float8 / %(n)s) * interval '1 hour'
            ELSE now() + (i::float8 / %(n)s) * interval '1 day' END
FROM generate_series(1, %(n)s) AS i
"""


def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    stamp = time.strftime("%Y%m%dT%H%M%S")
    work = args.out / f"{stamp}-web-cost"
    work.mkdir(parents=True)
    with throwaway_cluster(keep_log=work / "postgresql.log") as cluster:
        dsn = fresh_database(cluster, "bench_web")
        settings = server_settings(dsn)
        fill_s = _fill(dsn, args.finished, args.queued)
        print(f"filled in {fill_s:.0f} s")
        pages = _pages(dsn)
        web = _start_web(dsn, work)
        try:
            load_before = os.getloadavg()
            timings = {path: _time(web, path, args.requests) for path in pages}
            load = (load_before, os.getloadavg())
        finally:
            web.terminate()
            web.wait(timeout=10)
        plans = _plans(dsn)
    text = _report(args, settings, fill_s, timings, plans, load)
    path = work.with_suffix(".md")
    path.write_text(text)
    print(text)
    print(f"written to {path}")
    return 0


def _fill(dsn: str, finished: int, queued: int) -> float:
    started = time.monotonic()
    with psycopg.connect(dsn, autocommit=True) as conn:
        migrate(conn, "pgworkerd")
        conn.execute(FILL_FINISHED, {"n": finished})
        conn.execute(FILL_QUEUED, {"n": queued})
        conn.execute("VACUUM ANALYZE pgworkerd.jobs")
    return time.monotonic() - started


def _pages(dsn: str) -> list[str]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        dead, middle = conn.execute(
            "SELECT (SELECT max(id) FROM pgworkerd.jobs WHERE state = 'dead'),"
            " (SELECT max(id) / 2 FROM pgworkerd.jobs)"
        ).fetchone()
    return [
        "/",
        "/jobs",
        "/jobs?state=queued",
        "/jobs?state=dead",
        "/jobs?queue=q3",
        "/jobs?state=dead&queue=q3",
        "/jobs?kind=kind7",
        f"/jobs?before={middle}",
        "/jobs?kind=no-such-kind",  # the worst case: no row matches, the whole key range
        f"/jobs/{dead}",
    ]


def _start_web(dsn: str, work: Path) -> subprocess.Popen[bytes]:
    port = free_port()
    config = work / "web.yaml"
    config.write_text(yaml.safe_dump({"web": {"listen": f"127.0.0.1:{port}"}}))
    log = (work / "web.log").open("wb")
    proc = subprocess.Popen(
        [sys.executable, "-m", "pgworkerd", "web", "-c", str(config)],
        env={"PGWORKERD_DATABASE_URL": dsn, "PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO)},
        stdout=log,
        stderr=subprocess.STDOUT,
        cwd=REPO,
    )
    proc.url = f"http://127.0.0.1:{port}"  # type: ignore[attr-defined]
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            urllib.request.urlopen(proc.url + "/static/dashboard.css", timeout=2).close()  # type: ignore[attr-defined]
            return proc
        except OSError:
            time.sleep(0.2)
    proc.kill()
    raise RuntimeError(f"pgworkerd web did not answer; see {work / 'web.log'}")


def _time(web: Any, path: str, requests: int) -> list[float]:
    def fetch() -> float:
        started = time.perf_counter()
        with urllib.request.urlopen(web.url + path, timeout=60) as response:
            response.read()
            assert response.status == 200, path
        return (time.perf_counter() - started) * 1000

    fetch()  # warm-up: the first request imports and compiles templates
    return [fetch() for _ in range(requests)]


def _plans(dsn: str) -> dict[str, str]:
    sql = queries.statements("pgworkerd")
    page_sql = sql["dashboard_jobs_page_by_key"]  # what a migrated schema's pages run
    with psycopg.connect(dsn, autocommit=True) as conn:
        top = int(conn.execute(sql["jobs_max_id"]).fetchone()[0]) + 1  # type: ignore[index]
    page: dict[str, Any] = {
        "state": None,
        "queue": None,
        "kind": None,
        "key": None,
        "before": top,
        "floor": max(1, top - SCAN_WINDOW),
        "tail": LAST_ERROR_TAIL,
    }
    cases: list[tuple[str, bytes, dict[str, Any]]] = [
        ("dashboard live (queued, running per queue)", sql["dashboard_queues_live"], {}),
        ("dashboard dead per queue", sql["dashboard_dead_by_queue"], {}),
        (
            "dashboard finished in the last hour",
            sql["dashboard_finished_by_minute"],
            {"minutes": CHART_MINUTES},
        ),
        ("dashboard row estimate", sql["jobs_estimate"], {"table": '"pgworkerd"."jobs"'}),
        ("shared queues_paused", sql["queues_paused"], {}),
        ("dashboard paused keys (none paused)", sql["dashboard_keys_paused"], {"limit": 100}),
        ("shared daemons_list", sql["daemons_list"], {}),
        ("jobs page, no filter", page_sql, {**page, "limit": 51}),
        ("jobs page, state=dead", page_sql, {**page, "state": "dead", "limit": 51}),
        ("jobs page, state=queued", page_sql, {**page, "state": "queued", "limit": 51}),
        ("jobs page, queue=q3", page_sql, {**page, "queue": "q3", "limit": 51}),
        ("jobs page, kind=no-such-kind", page_sql, {**page, "kind": "no-such-kind", "limit": 51}),
        (
            "jobs page, state=dead, queue=q3 (none)",
            page_sql,
            {**page, "state": "dead", "queue": "q3", "limit": 51},
        ),
        ("dashboard max id", sql["jobs_max_id"], {}),
        ("shared jobs_get (the job page)", sql["jobs_get"], {"id": 1}),
    ]
    plans = {}
    with psycopg.connect(dsn, autocommit=True) as conn:
        for name, statement, params in cases:
            if statement == sql["dashboard_queues_live"]:
                conn.execute(sql["dashboard_serial"])  # as the overview's live part runs it
            explain = b"EXPLAIN (ANALYZE, BUFFERS, COSTS OFF) " + statement
            rows = conn.execute(explain, params, prepare=False).fetchall()
            plans[name] = "\n".join(row[0] for row in rows)
            conn.execute("RESET ALL")
    return plans


def _report(
    args: argparse.Namespace,
    settings: dict[str, Any],
    fill_s: float,
    timings: dict[str, list[float]],
    plans: dict[str, str],
    load: tuple[tuple[float, float, float], ...],
) -> str:
    lines = [
        "# The dashboard's cost over a large table",
        "",
        f"`python -m bench.web_cost {' '.join(args.argv)}`".replace("  ", " "),
        "",
        f"on {platform.node()} ({platform.machine()}), {time.strftime('%Y-%m-%d %H:%M %Z')}; "
        f"{args.finished:,} finished jobs (last 24 h) and {args.queued:,} queued, filled and "
        f"VACUUM ANALYZEd in {fill_s:.0f} s; a `pgworkerd web` process, one connection a "
        f"request; {args.requests} requests a page after one warm-up; server: "
        + ", ".join(f"{k}={v}" for k, v in settings.items()),
        "",
        f"Load average (1 min) before and after the timings: {load[0][0]:.1f}, "
        f"{load[1][0]:.1f} on {os.cpu_count()} CPUs (a shared machine: other work ran too).",
        "",
        "| page | median ms | p95 ms | max ms |",
        "|---|---:|---:|---:|",
    ]
    for path, times in timings.items():
        ordered = sorted(times)
        p95 = ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]
        lines.append(
            f"| `{path}` | {statistics.median(times):.1f} | {p95:.1f} | {ordered[-1]:.1f} |"
        )
    lines += ["", "## Plans (EXPLAIN ANALYZE, BUFFERS)", ""]
    for name, plan in plans.items():
        lines += [f"### {name}", "", "```", plan, "```", ""]
    return "\n".join(lines)


def web_arguments(module: str, doc: str | None, requests: int) -> argparse.ArgumentParser:
    """The options of both web benches (this one and web_overview_abab): the table's
    size, the requests per page, where the results go."""
    parser = argparse.ArgumentParser(
        prog=f"python -m {module}", description=(doc or "").splitlines()[0]
    )
    parser.add_argument("--finished", type=int, default=1_000_000)
    parser.add_argument("--queued", type=int, default=100_000)
    parser.add_argument("--requests", type=int, default=requests)
    parser.add_argument("--out", type=Path, default=RESULTS)
    return parser


def parsed(parser: argparse.ArgumentParser, argv: list[str] | None) -> argparse.Namespace:
    """`argv` parsed, with the command line kept as `argv` for the run's record."""
    args = parser.parse_args(argv)
    args.argv = sys.argv[1:] if argv is None else argv
    return args


def _parse(argv: list[str] | None) -> argparse.Namespace:
    return parsed(web_arguments("bench.web_cost", __doc__, requests=30), argv)


if __name__ == "__main__":
    sys.exit(main())
