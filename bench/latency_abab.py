"""Idle latency of this checkout against another, alternated, beside the raw loop.

    python -m bench.latency_abab OTHER_CHECKOUT [--pairs 5] [--config JSON | --defaults]
        [--no-raw] [--hops] [--statements] [--tail N] [--server-log] [--jobs N]
        [--import-first] [--own-producer]

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

`--tail N` (implies --hops, with the tracer's extra marks): per daemon run, the N
slowest jobs, each with its hops (the step of each) and what else the processes did
from its enqueue to its handler's start (the supervisor's round trips, an idle
worker's look, Python's GC), and with `--server-log` the server's log lines of that
window (the cluster then logs checkpoints, autovacuum and statements over 2 ms).
`--jobs N`: N jobs per run instead of the table's 200 (at the same 50/s), for a p99
that rests on more than the 2nd-3rd slowest job; the table's measurement is 200.
`--import-first`: the producer looks up pgworkerd.enqueue before its clock starts
(bench/producer.py), not in job 0's timed call as the table's measurement does.
`--own-producer`: side A's producer runs A's bench.producer on A's pgworkerd (by
default both sides' is this checkout's): for a change of the client, as the table
(`python -m bench`, one checkout) would see it.
Every run's per-job latencies (ms, in enqueue order) are kept in runs.json.

Prints a markdown report (and writes it to --out, default
bench/results/<timestamp>-latency-abab/summary.md).
"""

from __future__ import annotations

import argparse
import bisect
import dataclasses
import datetime
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
# --server-log: what the cluster logs, for a slow job's window. Timestamps in UTC.
SERVER_LOG_SETTINGS = {
    "log_checkpoints": "on",
    "log_autovacuum_min_duration": "0",
    "log_min_duration_statement": "2",
    "log_timezone": "UTC",
}
TAIL_BEFORE_S = 0.002  # a slow job's window starts this long before its enqueue call


@dataclass
class Run:
    side: str  # "A" (other), "B" (this checkout) or "raw"
    pair: int
    record: dict[str, Any]
    hops: dict[str, float] = field(default_factory=dict)  # label -> median ms after t0
    hops_matched: int = 0
    statements: list[tuple[str, int, int, float, float]] = field(default_factory=list)
    latencies_ms: list[float] = field(default_factory=list)  # per job, in enqueue order
    tail: list[dict[str, Any]] = field(default_factory=list)  # --tail: the slowest jobs


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
    parser.add_argument("--tail", type=int, default=0, help="the N slowest jobs' anatomy")
    parser.add_argument("--server-log", action="store_true", help="log checkpoints etc.")
    parser.add_argument("--jobs", type=int, default=None, help="jobs per run (default 200)")
    parser.add_argument(
        "--import-first",
        action="store_true",
        help="the producer looks up pgworkerd.enqueue before its clock starts",
    )
    parser.add_argument(
        "--own-producer",
        action="store_true",
        help="each side's producer runs its own checkout's pgworkerd (default: this one's)",
    )
    parser.add_argument("--peers-dir", type=Path, default=REPO.parent / "shared/bench/peers")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    args.extra = {} if args.defaults else (args.config or measure.TUNED_CONFIG)
    args.hops = args.hops or args.tail > 0
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    out = args.out or REPO / "bench" / "results" / f"{time.strftime('%Y%m%dT%H%M%S')}-latency-abab"
    logs = out / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="pgworkerd-latency-abab-"))
    wrapper = _hoptrace_wrapper(work) if args.hops else None
    if args.tail:
        os.environ["BENCH_HOPS_EXTRA"] = "1"  # read by bench/hoptrace.py in the daemon
    proto = measure.Protocol()
    if args.jobs:
        proto = dataclasses.replace(proto, trickle_n=args.jobs)
    if args.import_first:
        proto = dataclasses.replace(proto, import_first=True)
    settings = dict(PEER_SETTINGS)
    if args.server_log:
        settings.update(SERVER_LOG_SETTINGS)
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
    server_log = _server_log(logs / "postgresql.log") if args.server_log else []
    report = markdown(runs, args, fsync, load_before, os.getloadavg(), server_log)
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
        producer_code=args.other if side == "A" and args.own_producer else None,
    )
    run = Run(side, pair, rec)
    run.latencies_ms = [round((started - t0) * 1000, 3) for _i, t0, _c, started in sorted(samples)]
    if wrapper is not None:
        run.hops, run.hops_matched = hop_medians(hops_dir, samples)
    if args.tail:
        run.tail = tail_anatomy(hops_dir, samples, args.tail)
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


def _hop_events(hops_dir: Path) -> dict[int, dict[str, list[tuple[float, float]]]]:
    """The tracer's marks: per pid, per event name, (wall, thread CPU) in time order."""
    events: dict[int, dict[str, list[tuple[float, float]]]] = {}
    for path in hops_dir.glob("*.hops"):
        per: dict[str, list[tuple[float, float]]] = defaultdict(list)
        for line in path.read_text().splitlines():
            name, wall, cpu = line.split()
            per[name].append((float(wall), float(cpu)))
        for marks in per.values():
            marks.sort()
        events[int(path.stem)] = per
    return events


def hop_medians(
    hops_dir: Path, samples: list[tuple[int, float, float, float]]
) -> tuple[dict[str, float], int]:
    """Per hop, the median of its time after the job's enqueue call began (ms), and
    (`cpu <hop>`) of the CPU its process spent since the previous hop when both are
    in one process (ms), over the jobs whose every hop was matched; and how many were."""
    events = _hop_events(hops_dir)
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
    events: dict[int, dict[str, list[tuple[float, float]]]], t0: float, *, partial: bool = False
) -> list[tuple[float, float, int]] | None:
    """The wake-up's hops after `t0`: (wall, thread CPU, pid) each; `partial`: the hops
    matched up to the first that was not (else None when one was not)."""

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
                return chain if partial else None
            mark, pid = min(found)
            if n == 2:
                worker = pid
        else:
            found_one = first(worker, name, at)
            if found_one is None:
                return chain if partial else None
            mark, pid = found_one, worker
        at = mark[0]
        chain.append((mark[0], mark[1], pid))
    return chain


def tail_anatomy(
    hops_dir: Path, samples: list[tuple[int, float, float, float]], n: int
) -> list[dict[str, Any]]:
    """The `n` slowest jobs: each one's latency, its hops' steps (ms from the previous
    hop; None where a hop was not matched) and every other mark of any process from
    TAIL_BEFORE_S before its enqueue call to its handler's start, as (ms after the
    enqueue call began, process, event); a GC's start and stop as one event with its
    duration."""
    events = _hop_events(hops_dir)
    supervisor = next((pid for pid, per in events.items() if "sup_select" in per), -1)
    names = {supervisor: "sup"}
    for pid in sorted(events):
        names.setdefault(pid, f"w{len(names)}")
    slowest = sorted(samples, key=lambda s: s[3] - s[1])[-n:]
    out = []
    for i, t0, call_s, started in reversed(slowest):
        chain: list[tuple[float, float, int] | None] = list(_match(events, t0, partial=True) or [])
        chain += [None] * (len(HOPS) - len(chain))
        steps: dict[str, float | None] = {"enqueue call returned": round(call_s * 1000, 2)}
        own: set[tuple[int, str, float]] = set()
        previous = t0
        for (label, name), hop in zip(HOPS, chain, strict=True):
            if hop is None or hop[0] > started:
                steps[label] = None
                continue
            steps[label] = round((hop[0] - previous) * 1000, 2)
            own.add((hop[2], name, hop[0]))
            previous = hop[0]
        steps["handler started"] = round((started - previous) * 1000, 2)
        woke = [(pid, name, wall) for pid, name, wall in own if name == "wk_select"]
        others = []
        for pid, per in events.items():
            for name, marks in per.items():
                for wall, _cpu in marks:
                    if not t0 - TAIL_BEFORE_S <= wall <= started or (pid, name, wall) in own:
                        continue
                    if name.startswith("gc_stop"):
                        continue
                    label = name
                    if name.startswith("gc_start"):
                        stops = per.get(name.replace("start", "stop"), [])
                        k = bisect.bisect_left(stops, (wall, -1.0))
                        took = (stops[k][0] - wall) * 1000 if k < len(stops) else float("nan")
                        label = f"gc gen {name.split(':')[1]} {took:.2f} ms"
                    others.append((round((wall - t0) * 1000, 2), names[pid], label))
        out.append(
            {
                "i": i,
                "t0": t0,
                "latency_ms": round((started - t0) * 1000, 2),
                "woken": names[woke[0][0]] if woke else None,
                "steps": steps,
                "others": sorted(others),
            }
        )
    return out


def _server_log(path: Path) -> list[tuple[float, str]]:
    """The server log's lines as (time.time(), line): lines that start with a
    `%m` timestamp (log_line_prefix's default) in UTC; continuation lines kept with
    the line before."""
    lines: list[tuple[float, str]] = []
    if not path.exists():
        return lines
    for line in path.read_text(errors="replace").splitlines():
        try:
            stamp = datetime.datetime.strptime(line[:23], "%Y-%m-%d %H:%M:%S.%f").replace(
                tzinfo=datetime.UTC
            )
        except ValueError:
            if lines:
                lines[-1] = (lines[-1][0], lines[-1][1] + " " + line.strip())
            continue
        lines.append((stamp.timestamp(), line[24:].strip()))
    return lines


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
    server_log: list[tuple[float, str]] | None = None,
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
    if args.tail:
        lines += _tail_lines(runs, server_log or [])
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


def _tail_lines(runs: list[Run], server_log: list[tuple[float, str]]) -> list[str]:
    """The --tail section: per daemon run its slowest jobs, their hops' steps and what
    coincided (the server's log lines of the window too, when it was kept)."""
    labels = ["enqueue call returned", *(label for label, _ in HOPS), "handler started"]
    lines = [
        "",
        "The slowest jobs of each run: latency (ms), each hop's step from the previous "
        "one (ms; - not matched), the worker woken, and what else happened from "
        f"{TAIL_BEFORE_S * 1000:.0f} ms before the enqueue call to the handler's start "
        "(ms after the call began; sup = supervisor, wN = a worker).",
        "",
        "| run | job | latency | " + " | ".join(labels) + " | woken | coincided |",
        "|---|---:|---:|" + "---:|" * len(labels) + "---|---|",
    ]
    stamps = [t for t, _ in server_log]
    for run in runs:
        for job in run.tail:
            t0 = job["t0"]
            end = t0 + job["latency_ms"] / 1000
            cells = ["-" if job["steps"].get(k) is None else str(job["steps"][k]) for k in labels]
            seen = [f"{at} {who} {what}" for at, who, what in job["others"]]
            # The server logs a statement at its end, with its duration: a window's
            # line may be of a statement that began before it.
            lo = bisect.bisect_left(stamps, t0 - TAIL_BEFORE_S)
            hi = bisect.bisect_right(stamps, end + 0.001)
            seen += [f"pg {(t - t0) * 1000:.0f}: {text[:120]}" for t, text in server_log[lo:hi]]
            lines.append(
                f"| {run.side}_{run.pair} | {job['i']} | {job['latency_ms']} | "
                + " | ".join(cells)
                + f" | {job['woken'] or '-'} | "
                + ("; ".join(seen) or "-").replace("|", "/")
                + " |"
            )
    return lines


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
