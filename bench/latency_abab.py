"""Idle latency of this checkout against another, alternated, beside the raw loop.

    python -m bench.latency_abab OTHER_CHECKOUT [--pairs 5] [--config JSON | --defaults]
        [--no-raw] [--hops] [--statements]

The latency mode of `python -m bench` (bench/measure.py: the daemon idle 2 s, then a
separate process enqueues 200 jobs at 50/s; latency = handler start minus the time
before the enqueue call), run in one throwaway cluster, each run in a fresh database:
OTHER then this checkout in odd pairs, this then OTHER in even ones (ABBA...), and the
raw psycopg loop (raw_2x100, its worker LISTENs itself) after each pair. Both sides run
with the config the targets are judged on (bench.measure.TUNED_CONFIG) unless
`--config` or `--defaults`; the producer is this checkout's for both.

`--hops`: each daemon runs under bench/hoptrace.py, which marks the wall-clock time of
each hop of a wake-up (the supervisor's select returning with the listening socket
readable, its `wake` write, the worker's select returning, the claim sent, the claim
back; the handler's start is the job's result); per run, the median time of each hop.
The marks cost a system call each, so the --hops runs are for the breakdown, not for
the A/B. `--statements`: the cluster loads pg_stat_statements; after each run of
pgworkerd, the worker's claim statement's calls, mean plan and execution time.

Prints a markdown report (and writes it to --out, default
bench/results/<timestamp>-latency-abab/summary.md).
"""

from __future__ import annotations

import argparse
import bisect
import functools
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg

from bench import measure, peers, stats
from bench.cluster import PEER_SETTINGS, fdatasync_rate, in_fresh_database, throwaway_cluster
from bench.daemon import REPO

RAW = "raw_2x100"
HOPTRACE = Path(__file__).resolve().parent / "hoptrace.py"
# (label, event), in the order of a wake-up; every hop is matched as the first such
# event at or after the previous one (worker events: in the worker that woke first).
HOPS = (
    ("supervisor's select returned", "sup_select"),
    ("`wake` written", "sup_wake"),
    ("worker's select returned", "wk_select"),
    ("claim sent", "wk_claim_sent"),
    ("claim returned", "wk_claim_back"),
    ("handler called", "wk_handler"),
)
MATCH_WITHIN_S = 0.05  # a hop later than this after the enqueue is not this job's


@dataclass
class Run:
    side: str  # "A" (other), "B" (this checkout) or "raw"
    pair: int
    record: dict[str, Any]
    hops: dict[str, float] = field(default_factory=dict)  # label -> median ms after t0
    hops_matched: int = 0
    statements: list[tuple[str, int, int, float, float]] = field(default_factory=list)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.latency_abab", description=__doc__)
    parser.add_argument("other", type=Path, help="the other checkout (side A)")
    parser.add_argument("--pairs", type=int, default=5)
    parser.add_argument("--config", type=json.loads, default=None, help="extra config, JSON")
    parser.add_argument(
        "--defaults", action="store_true", help="both sides at the defaults (no extra config)"
    )
    parser.add_argument("--no-raw", dest="raw", action="store_false")
    parser.add_argument("--hops", action="store_true", help="per-hop marks (bench/hoptrace.py)")
    parser.add_argument("--statements", action="store_true", help="pg_stat_statements per run")
    parser.add_argument("--peers-dir", type=Path, default=REPO.parent / "shared/bench/peers")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    args.extra = {} if args.defaults else (args.config or measure.TUNED_CONFIG)
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    out = args.out or REPO / "bench" / "results" / f"{time.strftime('%Y%m%dT%H%M%S')}-latency-abab"
    logs = out / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="pgworkerd-latency-abab-"))
    wrapper = _hoptrace_wrapper(work) if args.hops else None
    proto = measure.Protocol()
    settings = dict(PEER_SETTINGS)
    if args.statements:
        settings["shared_preload_libraries"] = "pg_stat_statements"
        settings["pg_stat_statements.track_planning"] = "on"
    raw_ok = args.raw and peers.ready(peers.PEERS[RAW], logs / "venv.log")
    runs: list[Run] = []
    load_before = os.getloadavg()
    try:
        with throwaway_cluster(keep_log=logs / "postgresql.log", settings=settings) as cluster:
            fsync = fdatasync_rate(cluster)
            for pair in range(1, args.pairs + 1):
                sides = ["A", "B"] if pair % 2 else ["B", "A"]
                for side in [*sides, *([RAW] if raw_ok else [])]:
                    tag = f"{side}_{pair}"
                    hops_dir = work / f"hops_{tag}"
                    hops_dir.mkdir()

                    one = functools.partial(
                        _one_run, side, pair, tag, hops_dir, args, logs, proto, wrapper
                    )
                    run = in_fresh_database(cluster, "bench_latency_abab", logs, tag, one)
                    if run is not None:
                        runs.append(run)
                        r = run.record
                        print(
                            f"  {tag:<14} p50 {r.get('lat_p50_ms')} ms  p99 {r.get('lat_p99_ms')}"
                            f" ms  enqueue p50 {r.get('enqueue_call_p50_ms')} ms",
                            flush=True,
                        )
    finally:
        shutil.rmtree(work, ignore_errors=True)
    report = markdown(runs, args, fsync, load_before, os.getloadavg())
    print()
    print(report)
    (out / "summary.md").write_text(report)
    (out / "runs.json").write_text(
        json.dumps([run.__dict__ for run in runs], indent=2, default=str)
    )
    return 0


def _one_run(
    side: str,
    pair: int,
    tag: str,
    hops_dir: Path,
    args: argparse.Namespace,
    logs: Path,
    proto: measure.Protocol,
    wrapper: Path | None,
    dsn: str,
) -> Run:
    if side == RAW:
        rec = peers.run(
            peers.PEERS[RAW], "latency", dsn, args.peers_dir, proto, logs / f"{tag}.log"
        )
        return Run(side, pair, rec or {})
    if args.statements:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
    samples: list[tuple[int, float, float, float]] = []
    os.environ["BENCH_HOPS_DIR"] = str(hops_dir)  # read by bench/hoptrace.py in the daemon
    rec = measure.latency(
        dsn,
        logs,
        tag,
        proto,
        args.extra,
        code=args.other if side == "A" else None,
        python=wrapper,
        samples=samples,
    )
    run = Run(side, pair, rec)
    if wrapper is not None:
        run.hops, run.hops_matched = hop_medians(hops_dir, samples)
    if args.statements:
        run.statements = _statements(dsn)
    return run


def _hoptrace_wrapper(work: Path) -> Path:
    """An 'interpreter' for Daemon(python=...): it is called as `X -m pgworkerd ARGS`
    and runs `python bench/hoptrace.py ARGS` instead."""
    path = work / "python-hoptrace"
    path.write_text(f'#!/bin/sh\nshift 2\nexec "{sys.executable}" "{HOPTRACE}" "$@"\n')
    path.chmod(0o755)
    return path


def hop_medians(
    hops_dir: Path, samples: list[tuple[int, float, float, float]]
) -> tuple[dict[str, float], int]:
    """Per hop, the median of its time after the job's enqueue call began (ms), and
    (`cpu <hop>`) of the CPU its process spent since the previous hop when both are
    in one process (ms), over the jobs whose every hop was matched; and how many were."""
    events: dict[int, dict[str, list[tuple[float, float]]]] = {}
    for path in hops_dir.glob("*.hops"):
        per: dict[str, list[tuple[float, float]]] = defaultdict(list)
        for line in path.read_text().splitlines():
            name, wall, cpu = line.split()
            per[name].append((float(wall), float(cpu)))
        for marks in per.values():
            marks.sort()
        events[int(path.stem)] = per
    offsets: dict[str, list[float]] = defaultdict(list)
    matched = 0
    for _i, t0, call_s, started in samples:
        chain = _match(events, t0)
        if chain is None or chain[-1][0] > started:
            continue
        matched += 1
        offsets["enqueue call returned"].append(call_s)
        previous: tuple[float, float, int] | None = None
        for (label, _), hop in zip(HOPS, chain, strict=True):
            offsets[label].append(hop[0] - t0)
            if previous is not None and previous[2] == hop[2]:
                offsets[f"cpu {label}"].append(hop[1] - previous[1])
            previous = hop
        offsets["handler started"].append(started - t0)
    return {k: round(statistics.median(v) * 1000, 3) for k, v in offsets.items()}, matched


def _match(
    events: dict[int, dict[str, list[tuple[float, float]]]], t0: float
) -> list[tuple[float, float, int]] | None:
    """The wake-up's hops after `t0`: (wall, thread CPU, pid) each."""

    def first(pid: int, name: str, after: float) -> tuple[float, float] | None:
        marks = events[pid].get(name, [])
        k = bisect.bisect_left(marks, (after, -1.0))
        return marks[k] if k < len(marks) and marks[k][0] < t0 + MATCH_WITHIN_S else None

    chain: list[tuple[float, float, int]] = []
    at, worker = t0, -1
    for n, (_, name) in enumerate(HOPS):
        if name.startswith("sup_") or n == 2:  # any process: the supervisor, or which worker woke
            found = [(m, pid) for pid in events if (m := first(pid, name, at)) is not None]
            if not found:
                return None
            mark, pid = min(found)
            if n == 2:
                worker = pid
        else:
            found_one = first(worker, name, at)
            if found_one is None:
                return None
            mark, pid = found_one, worker
        at = mark[0]
        chain.append((mark[0], mark[1], pid))
    return chain


def _statements(dsn: str) -> list[tuple[str, int, int, float, float]]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT left(regexp_replace(query, '\\s+', ' ', 'g'), 60), calls, plans,"
            " mean_plan_time, mean_exec_time FROM pg_stat_statements"
            " WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())"
            " AND calls >= 100 ORDER BY calls DESC LIMIT 8"
        ).fetchall()
        conn.execute("SELECT pg_stat_statements_reset()")
    return [(q, c, n, round(p, 4), round(e, 4)) for q, c, n, p, e in rows]


def markdown(
    runs: list[Run],
    args: argparse.Namespace,
    fsync: float | None,
    load_before: tuple[float, float, float],
    load_after: tuple[float, float, float],
) -> str:
    by: dict[str, dict[int, Run]] = defaultdict(dict)
    for run in runs:
        by[run.side][run.pair] = run
    lines = [
        f"### Idle latency, A = {args.other}, B = this checkout "
        f"({time.strftime('%Y-%m-%d %H:%M')})",
        "",
        f"Config both sides: `{json.dumps(args.extra)}`; {args.pairs} pairs (A B in odd "
        "pairs, B A in even), the raw loop after each pair; each run in a fresh database "
        f"of one cluster. fdatasync {fsync or 0:,.0f}/s; load average (1 min) "
        f"{load_before[0]:.2f} before, {load_after[0]:.2f} after."
        + (" Runs under the hop tracer (bench/hoptrace.py)." if args.hops else ""),
        "",
        "| pair | A p50 | B p50 | B/A p50 | raw p50 | B/raw p50 | A p99 | B p99 | raw p99 |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]

    def get(side: str, pair: int, key: str) -> float | None:
        run = by[side].get(pair)
        return None if run is None else run.record.get(key)

    def rounded(x: float | None) -> float | None:
        return None if x is None else round(x, 2)

    def ratio(x: float | None, y: float | None) -> float | None:
        return None if x is None or not y else round(x / y, 2)

    pairs = range(1, args.pairs + 1)
    ba, braw, araw = [], [], []
    for pair in range(1, args.pairs + 1):
        a, b, raw = (get(s, pair, "lat_p50_ms") for s in ("A", "B", RAW))
        ba.append(ratio(b, a))
        braw.append(ratio(b, raw))
        araw.append(ratio(a, raw))
        cells = [
            a,
            b,
            ba[-1],
            raw,
            braw[-1],
            *(get(s, pair, "lat_p99_ms") for s in ("A", "B", RAW)),
        ]
        lines.append(
            f"| {pair} | " + " | ".join("-" if c is None else f"{c}" for c in cells) + " |"
        )
    med = {
        s: rounded(stats.median(get(s, p, "lat_p50_ms") for p in range(1, args.pairs + 1)))
        for s in ("A", "B", RAW)
    }
    med99 = {
        s: rounded(stats.median(get(s, p, "lat_p99_ms") for p in range(1, args.pairs + 1)))
        for s in ("A", "B", RAW)
    }
    lines += [
        f"| median | {med['A']} | {med['B']} | {rounded(stats.median(ba))} | {med[RAW]} | "
        f"{rounded(stats.median(braw))} | {med99['A']} | {med99['B']} | {med99[RAW]} |",
        "",
        f"A/raw p50 per pair, median: {rounded(stats.median(araw))}; B/raw: "
        f"{rounded(stats.median(braw))}; B/A: {rounded(stats.median(ba))} ({len(runs)} runs). "
        "Enqueue call p50 (ms), median: "
        + ", ".join(
            f"{s} {rounded(stats.median(get(s, p, 'enqueue_call_p50_ms') for p in pairs))}"
            for s in ("A", "B", RAW)
        )
        + ".",
    ]
    if args.hops:
        labels = ["enqueue call returned", *(label for label, _ in HOPS), "handler started"]

        def hop_cells(run: Run) -> list[str]:
            cells, prev = [str(run.hops_matched)], 0.0
            for n, label in enumerate(labels):
                v = run.hops.get(label)
                if v is None:
                    cells.append("-")
                    continue
                step = "" if n == 0 else f" (+{v - prev:.3f})"
                cells.append(f"{v:.3f}{step}")
                if n > 0:
                    prev = v
            return cells

        lines += _daemon_runs_table(
            runs,
            "Per hop: median time after the enqueue call began (ms), over the jobs whose "
            "every hop was matched; the step from the previous hop in brackets.",
            ["matched", *labels],
            hop_cells,
        )
        cpu_labels = [label for label, _ in HOPS[1:] if label != "worker's select returned"]
        lines += _daemon_runs_table(
            runs,
            "CPU (thread time, ms, median) each process spent on a step, from the previous "
            "hop in the same process: the work itself, apart from waiting for a CPU.",
            cpu_labels,
            lambda run: [str(run.hops.get(f"cpu {label}", "-")) for label in cpu_labels],
        )
    if args.statements:
        lines += [
            "",
            "pg_stat_statements (calls ≥ 100): calls, plans, mean plan ms, mean exec ms",
            "",
        ]
        for run in runs:
            for q, c, n, p, e in run.statements:
                lines.append(
                    f"- {run.side}_{run.pair}: `{q}` {c} calls, {n} plans of {p} ms, exec {e} ms"
                )
    return "\n".join(lines) + "\n"


def _daemon_runs_table(
    runs: list[Run], intro: str, columns: list[str], cells: Callable[[Run], list[str]]
) -> list[str]:
    """A markdown table of the hop tracer's figures, a row per daemon run that has them
    (the raw loop's runs have none), after a blank line and `intro`."""
    lines = [
        "",
        intro,
        "",
        "| run | " + " | ".join(columns) + " |",
        "|---|" + "---:|" * len(columns),
    ]
    for run in runs:
        if run.side != RAW and run.hops:
            lines.append(f"| {run.side}_{run.pair} | " + " | ".join(cells(run)) + " |")
    return lines


if __name__ == "__main__":
    sys.exit(main())
