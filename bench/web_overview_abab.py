"""The overview's cost with and without the index of dead jobs (0009's, which 0014 merged
with the waiting jobs' into jobs_dead_or_waiting_idx), alternated
in one run (ABAB): the table of bench/web_cost.py (1,000,000 finished and 100,000 queued
jobs by default), one `pgworkerd web` process, the overview fetched over HTTP.

    python -m bench.web_overview_abab [--finished 1000000] [--queued 100000]
                                      [--rounds 4] [--requests 20]

A shared machine's load moves between minutes, so the arms take turns in the same run
rather than being compared with an older file: each round drops the index (A, as before
0009) and then builds it again from 0014's own CREATE INDEX (B), and times the page and
each of its statements in both. Then, each alternated the same way:
- the job path: a job made dead and retried again, one statement each, as a worker's
  failure and an operator's retry do (the only transitions the index costs);
- the paused keys' read (dashboard_keys_paused) with no key paused and with three keys
  paused, 10 % of the queued jobs carrying a key;
- two other ways to run the overview's slower statements: the last hour by minute with a
  float8 epoch (as now) against numeric (as before), and the queued count without
  parallel workers (as the overview's live part runs it now) against with them.
Prints markdown with EXPLAIN (ANALYZE, BUFFERS) of the dead count in both arms, and
writes it to bench/results/<timestamp>-web-overview-abab.md.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import psycopg

from bench.cluster import fresh_database, server_settings, throwaway_cluster
from bench.daemon import REPO
from bench.web_cost import _fill, _start_web, _time, parsed, web_arguments
from pgworkerd.storage import queries
from pgworkerd.storage.dashboard import CHART_MINUTES

MIGRATION = REPO / "pgworkerd" / "storage" / "sql" / "0014_dead_or_waiting_index.sql"
INDEX = "pgworkerd.jobs_dead_or_waiting_idx"

# dashboard_finished_by_minute's minute as it was before this bench chose float8, kept
# here to compare the two spellings.
NUMERIC_MINUTE = b"floor(extract(epoch FROM now() - finished_at) / 60)::int"
FLOAT_MINUTE = b"floor(date_part('epoch', now() - finished_at) / 60)::int"


def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    stamp = time.strftime("%Y%m%dT%H%M%S")
    work = args.out / f"{stamp}-web-overview-abab"
    work.mkdir(parents=True)
    sql = queries.statements("pgworkerd")
    lines: list[str] = []
    with throwaway_cluster(keep_log=work / "postgresql.log") as cluster:
        dsn = fresh_database(cluster, "bench_web")
        settings = server_settings(dsn)
        fill_s = _fill(dsn, args.finished, args.queued)
        print(f"filled in {fill_s:.0f} s", flush=True)
        with psycopg.connect(dsn, autocommit=True) as conn:
            arms = _Arms(conn)
            web = _start_web(dsn, work)
            load_before = os.getloadavg()
            try:
                overview = arms.alternate(
                    args.rounds, lambda: _time(web, "/", args.requests), index=True
                )
            finally:
                web.terminate()
                web.wait(timeout=10)
            statements = {
                name: arms.alternate(
                    args.rounds,
                    _statement(conn, sql[name], params, args.requests, setting),
                    index=True,
                )
                for name, params, setting in (
                    ("dashboard_dead_by_queue", {}, None),
                    ("dashboard_queues_live", {}, sql["dashboard_serial"]),
                    ("dashboard_finished_by_minute", {"minutes": CHART_MINUTES}, None),
                )
            }
            plans = {arm: arms.with_index(arm, lambda: _plan(conn, sql)) for arm in (False, True)}
            job_path = arms.alternate(args.rounds, _dead_and_retried(conn, 500), index=True)
            spelling = _spellings(conn, sql, args)
            keys = _paused_keys(conn, sql, args)
            builds = [arms.build_s() for _ in range(3)]
            size = conn.execute(f"SELECT pg_size_pretty(pg_relation_size('{INDEX}'))").fetchone()
        load_after = os.getloadavg()
    lines += _header(args, settings, fill_s, (load_before, load_after))
    lines += _table("The overview over HTTP, ms a request", {"/": overview})
    lines += _table("Its statements, ms each (psql-side, no HTTP)", statements)
    lines += _table(
        "The job path: one job made dead, then retried, ms a transition pair", {"": job_path}
    )
    lines += [
        f"Building the index (0014's CREATE INDEX, three times): "
        f"{', '.join(f'{s:.2f}' for s in builds)} s; its size: {size[0] if size else '?'}.",
        "",
    ]
    lines += _table("Other spellings, ms each (A: as before, B: the other)", spelling)
    lines += _table("Paused keys' read, ms each (A: none paused, B: three)", keys)
    lines += ["## Plans of the dead count (EXPLAIN ANALYZE, BUFFERS)", ""]
    for arm, plan in plans.items():
        lines += [f"### {'B: with' if arm else 'A: without'} the index", "", "```", plan, "```", ""]
    text = "\n".join(lines)
    path = work.with_suffix(".md")
    path.write_text(text)
    print(text)
    print(f"written to {path}")
    return 0


class _Arms:
    """Index present (B) or not (A), and the alternation of the two."""

    def __init__(self, conn: psycopg.Connection[Any]) -> None:
        self.conn = conn
        # The migration's CREATE INDEX alone: its DROPs are of the indexes it replaced.
        text = MIGRATION.read_text()
        start = text.index("CREATE INDEX")
        self.migration = text[start : text.index(";", start) + 1].encode()

    def set_index(self, present: bool) -> None:
        self.conn.execute(f"DROP INDEX IF EXISTS {INDEX}")
        if present:
            with self.conn.transaction():
                self.conn.execute("SET LOCAL search_path = pgworkerd")
                self.conn.execute(self.migration)

    def build_s(self) -> float:
        self.conn.execute(f"DROP INDEX IF EXISTS {INDEX}")
        started = time.perf_counter()
        self.set_index(True)
        return time.perf_counter() - started

    def with_index(self, present: bool, work: Callable[[], Any]) -> Any:
        self.set_index(present)
        return work()

    def alternate(
        self, rounds: int, work: Callable[[], list[float]], *, index: bool
    ) -> dict[str, list[list[float]]]:
        """`work` in A then B, `rounds` times: each arm's timings, a list a round."""
        out: dict[str, list[list[float]]] = {"A": [], "B": []}
        for _ in range(rounds):
            for arm in ("A", "B"):
                self.set_index(arm == "B")
                out[arm].append(work())
        self.set_index(True)
        return out


def _statement(
    conn: psycopg.Connection[Any],
    statement: bytes,
    params: dict[str, Any],
    n: int,
    setting: bytes | None = None,
) -> Callable[[], list[float]]:
    """`statement` timed `n` times; under `setting` (a SET) if given, as the page runs it."""

    def run() -> list[float]:
        if setting is not None:
            conn.execute(setting)
        conn.execute(statement, params).fetchall()  # warm-up
        times = []
        for _ in range(n):
            started = time.perf_counter()
            conn.execute(statement, params, prepare=False).fetchall()
            times.append((time.perf_counter() - started) * 1000)
        if setting is not None:
            conn.execute("RESET ALL")
        return times

    return run


def _dead_and_retried(conn: psycopg.Connection[Any], n: int) -> Callable[[], list[float]]:
    """A queued job's row made dead and queued again, one autocommit statement each: the
    writes the index adds to (the worker's last failure) and its row's next version."""
    job_id = conn.execute(
        "SELECT id FROM pgworkerd.jobs WHERE state = 'queued' ORDER BY id LIMIT 1"
    ).fetchone()[0]  # type: ignore[index]

    def run() -> list[float]:
        times = []
        for _ in range(n):
            started = time.perf_counter()
            conn.execute(
                "UPDATE pgworkerd.jobs SET state = 'dead', finished_at = now() WHERE id = %s",
                [job_id],
            )
            conn.execute(
                "UPDATE pgworkerd.jobs SET state = 'queued', finished_at = NULL WHERE id = %s",
                [job_id],
            )
            times.append((time.perf_counter() - started) * 1000)
        return times

    return run


def _spellings(
    conn: psycopg.Connection[Any], sql: dict[str, bytes], args: argparse.Namespace
) -> dict[str, dict[str, list[list[float]]]]:
    finished = sql["dashboard_finished_by_minute"]
    numeric = finished.replace(FLOAT_MINUTE, NUMERIC_MINUTE)
    floated = finished.replace(NUMERIC_MINUTE, FLOAT_MINUTE)
    params = {"minutes": CHART_MINUTES}
    live = sql["dashboard_queues_live"]
    out: dict[str, dict[str, list[list[float]]]] = {
        "last hour by minute: numeric / float8 epoch": {"A": [], "B": []},
        "queued and running: parallel / not": {"A": [], "B": []},
    }
    for _ in range(args.rounds):
        by_minute = out["last hour by minute: numeric / float8 epoch"]
        by_minute["A"].append(_statement(conn, numeric, params, args.requests)())
        by_minute["B"].append(_statement(conn, floated, params, args.requests)())
        parallel = out["queued and running: parallel / not"]
        parallel["A"].append(_statement(conn, live, {}, args.requests)())
        serial = sql["dashboard_serial"]  # what the overview's live part sets
        parallel["B"].append(_statement(conn, live, {}, args.requests, serial)())
    return out


def _paused_keys(
    conn: psycopg.Connection[Any], sql: dict[str, bytes], args: argparse.Namespace
) -> dict[str, dict[str, list[list[float]]]]:
    # 10 % of the queued jobs, over ten keys.
    conn.execute(
        "UPDATE pgworkerd.jobs SET key = 'tenant:' || (id / 10 % 10) "
        "WHERE state = 'queued' AND id % 10 = 0"
    )
    conn.execute("VACUUM ANALYZE pgworkerd.jobs")
    read = _statement(conn, sql["dashboard_keys_paused"], {"limit": 100}, args.requests)
    out: dict[str, list[list[float]]] = {"A": [], "B": []}
    for _ in range(args.rounds):
        conn.execute("DELETE FROM pgworkerd.paused_keys")
        out["A"].append(read())
        conn.execute(
            "INSERT INTO pgworkerd.paused_keys (key, until)"
            " SELECT 'tenant:' || i, now() + interval '1 hour' FROM generate_series(1, 3) AS i"
        )
        out["B"].append(read())
    held = conn.execute(sql["dashboard_keys_paused"], {"limit": 100}).fetchall()
    return {f"dashboard_keys_paused (held back: {[int(r[4]) for r in held]})": out}


def _plan(conn: psycopg.Connection[Any], sql: dict[str, bytes]) -> str:
    explain = b"EXPLAIN (ANALYZE, BUFFERS, COSTS OFF) " + sql["dashboard_dead_by_queue"]
    return "\n".join(row[0] for row in conn.execute(explain, prepare=False).fetchall())


def _header(
    args: argparse.Namespace,
    settings: dict[str, Any],
    fill_s: float,
    load: tuple[tuple[float, float, float], ...],
) -> list[str]:
    return [
        "# The overview's cost, ABAB: with and without the index of dead jobs"
        " (jobs_dead_or_waiting_idx, 0014)",
        "",
        f"`python -m bench.web_overview_abab {' '.join(args.argv)}`".replace("  ", " "),
        "",
        f"on {platform.node()} ({platform.machine()}), {time.strftime('%Y-%m-%d %H:%M %Z')}; "
        f"{args.finished:,} finished jobs (last 24 h, 2 % dead) and {args.queued:,} queued, "
        f"filled and VACUUM ANALYZEd in {fill_s:.0f} s; {args.rounds} rounds of A then B, "
        f"{args.requests} timings an arm a round after a warm-up; server: "
        + ", ".join(f"{k}={v}" for k, v in settings.items()),
        "",
        f"Load average (1 min) at the start and the end: {load[0][0]:.1f}, {load[1][0]:.1f} "
        f"on {os.cpu_count()} CPUs (a shared machine: other work ran too).",
        "",
        "A: without the index (as before 0009); B: with it. Medians of each round, then of "
        "all the arm's timings, and their p95.",
        "",
    ]


def _table(title: str, rows: dict[str, dict[str, list[list[float]]]]) -> list[str]:
    lines = [
        f"## {title}",
        "",
        "| | arm | round medians | median | p95 | max |",
        "|---|---|---|---:|---:|---:|",
    ]
    for name, arms in rows.items():
        for arm, rounds in arms.items():
            every = sorted(t for r in rounds for t in r)
            p95 = every[min(len(every) - 1, round(0.95 * (len(every) - 1)))]
            medians = ", ".join(f"{statistics.median(r):.1f}" for r in rounds)
            lines.append(
                f"| {f'`{name}`' if name else ''} | {arm} | {medians} "
                f"| {statistics.median(every):.1f} | {p95:.1f} | {every[-1]:.1f} |"
            )
    return [*lines, ""]


def _parse(argv: list[str] | None) -> argparse.Namespace:
    parser = web_arguments("bench.web_overview_abab", __doc__, requests=20)
    parser.add_argument("--rounds", type=int, default=4)
    return parsed(parser, argv)


if __name__ == "__main__":
    sys.exit(main())
