"""What the /metrics feed costs per job, or what one checkout costs beside another: the
same no-op workload run ABAB (A, B, A, B, ...) in one throwaway cluster, so the machine's
drift falls on both alike.

    python -m bench.metrics_cost [-n 30000] [--rounds 4] [--batch-size 10]
    python -m bench.metrics_cost --against DIR [...]
    python -m bench.metrics_cost --python-b PYTHON [...]

Default: A = this checkout without a listener, B = the same with `http: {listen:
127.0.0.1:<free port>}` (the supervisor then feeds its per-job counters and histograms;
nothing scrapes it during the run). `--against DIR`: A = the pgworkerd in DIR (another
checkout, e.g. `git archive <commit> | tar -x -C DIR`), B = this one, neither listening.
`--python-b PYTHON`: A = this checkout under this interpreter, B = this checkout under
PYTHON (another venv: e.g. with the `otel` extra installed, where this one has none).

Each run: a fresh database migrated by the run's own code, N no-op jobs enqueued
(enqueue_many, 1,000 a call), then `pgworkerd run` started and timed until the database
shows every job finished. Figures per run:
  steady jobs/s      jobs / (last finish - first start), from the database's clock
  supervisor us/job  the supervisor's CPU (user + system) from its READY=1 to the end,
                     per job: start-up (imports, forks) left out, as both pay it alike
  tree us/job        the same for the whole tree (supervisor + workers)
Prints a markdown table (every run, then the medians and B/A) and writes it to
bench/results/<timestamp>-metrics-cost.md (or -against.md).
"""

from __future__ import annotations

import argparse
import os
import platform
import socket
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg

import pgworkerd
from bench.cluster import in_fresh_database, server_settings, throwaway_cluster
from bench.daemon import QUEUE, REPO, Daemon, migrate, write_config
from bench.measure import UNFINISHED

RESULTS = REPO / "bench" / "results"


@dataclass(frozen=True)
class Variant:
    label: str
    code: Path | None  # None: this checkout
    http: bool
    python: Path | None = None  # None: this interpreter


@dataclass(frozen=True)
class Run:
    variant: str
    round: int
    steady_jps: float
    supervisor_us_per_job: float
    tree_us_per_job: float


def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    if args.against is not None:
        variants = (
            Variant(f"A: {args.against.name}", args.against.resolve(), http=False),
            Variant("B: this checkout", None, http=False),
        )
    elif args.python_b is not None:
        variants = (
            Variant(f"A: {sys.executable}", None, http=False),
            Variant(f"B: {args.python_b}", None, http=False, python=args.python_b),
        )
    else:
        variants = (
            Variant("A: no listener", None, http=False),
            Variant("B: http.listen", None, http=True),
        )
    stamp = time.strftime("%Y%m%dT%H%M%S")
    kind = "against" if args.against else "python-b" if args.python_b else "metrics-cost"
    work = args.out / f"{stamp}-{kind}"
    logs = work / "logs"
    logs.mkdir(parents=True)
    runs: list[Run] = []
    with throwaway_cluster(keep_log=logs / "postgresql.log") as cluster:
        settings = server_settings(cluster.dsn())
        for round_no in range(1, args.rounds + 1):
            for index, variant in enumerate(variants):
                tag = f"r{round_no}-{'ab'[index]}"
                run = in_fresh_database(
                    cluster,
                    "bench_ab",
                    logs,
                    tag,
                    lambda dsn, v=variant, t=tag, r=round_no: _measure(dsn, v, r, logs, t, args),
                )
                if run is not None:
                    runs.append(run)
                    print(
                        f"  {tag} {variant.label}: {run.steady_jps:,.0f} jobs/s, supervisor "
                        f"{run.supervisor_us_per_job:.1f} us/job, tree {run.tree_us_per_job:.1f}"
                    )
    text = _report(variants, runs, args, settings)
    path = work.with_suffix(".md")
    path.write_text(text)
    print(text)
    print(f"written to {path}")
    return 0


def _measure(
    dsn: str, variant: Variant, round_no: int, logs: Path, tag: str, args: argparse.Namespace
) -> Run:
    extra: dict[str, Any] = {"defaults": {"batch_size": args.batch_size}, "log_level": "warning"}
    if variant.http:
        extra["http"] = {"listen": f"127.0.0.1:{_free_port()}"}
    config = write_config(logs / f"{tag}.yaml", dsn, concurrency=2, extra=extra)
    log_path = logs / f"{tag}.log"
    migrate(config, log_path, code=variant.code, python=variant.python)
    with psycopg.connect(dsn, autocommit=True) as conn:
        for start in range(0, args.n, 1000):
            count = min(1000, args.n - start)
            pgworkerd.enqueue_many(conn, [{"kind": "noop", "payload": {}, "queue": QUEUE}] * count)
        daemon = Daemon(config, log_path, code=variant.code, python=variant.python)
        try:
            _wait(lambda: daemon.ready is not None or daemon.proc.poll() is not None, 60)
            at_ready = daemon.usage()
            _wait(lambda: daemon.proc.poll() is not None or not _unfinished(conn), 300)
            at_end = daemon.usage()
        finally:
            daemon.stop()
        done, span_s = conn.execute(
            "SELECT count(*), extract(epoch FROM max(finished_at) - min(started_at))"
            " FROM pgworkerd.jobs WHERE state = 'succeeded'"
        ).fetchone()
    if done != args.n or not span_s:
        raise RuntimeError(f"{done} of {args.n} jobs succeeded; see {log_path}")
    return Run(
        variant.label,
        round_no,
        steady_jps=done / float(span_s),
        supervisor_us_per_job=(at_end.supervisor_cpu_s - at_ready.supervisor_cpu_s) / done * 1e6,
        tree_us_per_job=(at_end.cpu_s - at_ready.cpu_s) / done * 1e6,
    )


def _report(
    variants: tuple[Variant, ...],
    runs: list[Run],
    args: argparse.Namespace,
    settings: dict[str, Any],
) -> str:
    if args.against:
        title = f"{variants[0].label[3:]} vs this checkout"
    elif args.python_b:
        title = f"this checkout under two interpreters: {variants[0].label[3:]} vs {args.python_b}"
    else:
        title = "the /metrics feed: no listener vs http.listen"
    lines = [
        f"# No-op throughput, ABAB: {title}",
        "",
        f"`python -m bench.metrics_cost {' '.join(args.argv)}`".replace("  ", " "),
        f"on {platform.node()} ({platform.machine()}, {_cpus()} CPUs), "
        f"{time.strftime('%Y-%m-%d %H:%M %Z')}; {args.n:,} no-op jobs a run, 2 processes, "
        f"batch_size {args.batch_size}, log_level warning; server: "
        + ", ".join(f"{k}={v}" for k, v in settings.items()),
        "",
        "| run | variant | steady jobs/s | supervisor CPU us/job | tree CPU us/job |",
        "|---|---|---:|---:|---:|",
    ]
    for run in runs:
        lines.append(
            f"| {run.round} | {run.variant} | {run.steady_jps:,.0f} | "
            f"{run.supervisor_us_per_job:.1f} | {run.tree_us_per_job:.1f} |"
        )
    lines += [
        "",
        "| variant | runs | median jobs/s | median supervisor us/job | median tree us/job |",
    ]
    lines.append("|---|---:|---:|---:|---:|")
    medians = {}
    for variant in variants:
        mine = [r for r in runs if r.variant == variant.label]
        if not mine:
            continue
        med = tuple(
            statistics.median(getattr(r, key) for r in mine)
            for key in ("steady_jps", "supervisor_us_per_job", "tree_us_per_job")
        )
        medians[variant.label] = med
        lines.append(
            f"| {variant.label} | {len(mine)} | {med[0]:,.0f} | {med[1]:.1f} | {med[2]:.1f} |"
        )
    if len(medians) == 2:
        a, b = (medians[v.label] for v in variants)
        lines += [
            "",
            f"B/A: jobs/s {b[0] / a[0]:.3f}, supervisor CPU per job {b[1] / a[1]:.3f} "
            f"({b[1] - a[1]:+.1f} us), tree CPU per job {b[2] / a[2]:.3f} ({b[2] - a[2]:+.1f} us)",
        ]
    return "\n".join(lines) + "\n"


def _parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench.metrics_cost", description=__doc__.splitlines()[0]
    )
    parser.add_argument("-n", type=int, default=30_000, help="jobs a run (default %(default)s)")
    parser.add_argument("--rounds", type=int, default=4, help="ABAB rounds (default %(default)s)")
    parser.add_argument("--batch-size", type=int, default=10, help="defaults.batch_size")
    parser.add_argument("--against", type=Path, help="another checkout's directory, as A")
    parser.add_argument(
        "--python-b", type=Path, help="another venv's interpreter, as B (this checkout's code)"
    )
    parser.add_argument("--out", type=Path, default=RESULTS, help="results directory")
    args = parser.parse_args(argv)
    if args.n < 1000 or args.rounds < 1:
        parser.error("-n must be ≥ 1000 and --rounds ≥ 1")
    if args.against is not None and not (args.against / "pgworkerd" / "__init__.py").exists():
        parser.error(f"--against {args.against}: no pgworkerd package there")
    args.argv = list(argv) if argv is not None else sys.argv[1:]
    return args


def _unfinished(conn: psycopg.Connection[Any]) -> bool:
    return bool(conn.execute(UNFINISHED).fetchone()[0])


def _wait(check: Any, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            raise RuntimeError(f"not done after {timeout_s}s")
        time.sleep(0.02)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _cpus() -> int:
    return os.cpu_count() or 1


if __name__ == "__main__":
    raise SystemExit(main())
