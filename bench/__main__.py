"""pgworkerd beside its peers, in one run on one throwaway durable PostgreSQL cluster.

    python -m bench [--peers pgqueuer_apg,raw_2x100 | all | none] [--reps 1] [-n 20000]
                    [--scale] [--peers-dir DIR] [--no-io] [--io-harness FILE]
                    [--modes throughput,latency]
    python -m bench --peak [--peak-layouts 1x2x8,2x1x8] [--peak-seconds 30] [--peak-raw]
                    [--peak-config JSON] [--peak-code DIR] [--peak-reps 1]
    python -m bench --held-snapshot [...]
    python -m bench --bytes [-n 20000] [--bytes-code DIR] [--bytes-reps 1] [--peers ...]

pgworkerd runs as users run it (YAML config, `pgworkerd migrate`, `pgworkerd run`);
each peer runs through its own harness from the peers' directory (`--peers-dir`; the
peers' harnesses are not part of this repository); both follow the protocol of the
peers' common.py (see bench/measure.py). Prints one markdown table and
the targets' verdicts (processing against raw 2x100 on pairs run back to back in each
repetition, both orders weighed alike: bench/paired.py), then an I/O-bound section
(bench/iobound.py: 2,000 jobs x 50 ms, pgworkerd with threads, plain and coroutine
handlers, beside PgQueuer through the peers' io harness `<peers-dir>/../io/io_bound.py`
when a PgQueuer peer is selected; about half a minute, `--no-io` skips it), and writes
bench/results/<timestamp>/ (summary.md, records.jsonl, run.json, chart.png, logs/) plus
bench/results/latest.png and latest.md.

`--peak` runs only the full-system peak (bench/peak.py: a producer and the daemon at
once, 1 ms jobs, depth held at 2,000; jobs/s and the CPU split), `--held-snapshot`
only the held-snapshot mode (bench/held.py), `--bytes` only the bytes each job leaves
behind (bench/bytes.py: WAL per job from enqueue to success by record type and relation,
and the bytes a retained finished job keeps, beside the selected peers).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import sys
import time
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

import psutil
import psycopg

from bench import bytes as bytes_mode
from bench import (
    chart,
    enqueue_cost,
    held,
    iobound,
    limits,
    measure,
    paired,
    peak,
    peers,
    report,
    scale,
)
from bench.cluster import (
    drop_database,
    fdatasync_rate,
    fresh_database,
    in_fresh_database,
    server_settings,
    throwaway_cluster,
)
from bench.daemon import REPO
from pgworkerd.storage.embedded import EmbeddedCluster

RESULTS = REPO / "bench" / "results"
MODES = ("throughput", "latency")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__.splitlines()[0])
    parser.add_argument(
        "--peers",
        default=",".join(peers.DEFAULT_PEERS),
        help=f"comma-separated, 'all' or 'none'; of {', '.join(peers.PEERS)}"
        " (default: %(default)s)",
    )
    parser.add_argument("--reps", type=int, default=1, help="runs of each; median when > 1")
    parser.add_argument(
        "--modes",
        default=",".join(MODES),
        help="comma-separated, of %(default)s: e.g. `latency` alone to iterate on the "
        "idle latency (bench.latency_abab alternates two checkouts)",
    )
    parser.add_argument("-n", type=int, default=20_000, help="jobs in throughput mode")
    parser.add_argument(
        "--n-single", type=int, default=2_000, help="of which enqueued one by one (at most n/10)"
    )
    parser.add_argument(
        "--enqueue-blocks",
        type=int,
        default=60,
        help="the enqueue-one target's figure: blocks of one-by-one enqueues alternated "
        "with blocks of the raw loop's insert-and-commit (bench/enqueue_cost.py), after "
        "the throughput rows; 0 skips it (default %(default)s)",
    )
    parser.add_argument(
        "--enqueue-block", type=int, default=100, help="calls per block (default %(default)s)"
    )
    parser.add_argument(
        "--scale",
        action="store_true",
        help="also claim latency with 1 M finished + 1 M scheduled rows, and "
        "worker RSS after 100k jobs (a few minutes more)",
    )
    parser.add_argument("--scale-rows", type=int, default=1_000_000, help=argparse.SUPPRESS)
    parser.add_argument("--scale-jobs", type=int, default=100_000, help=argparse.SUPPRESS)
    parser.add_argument(
        "--peers-dir",
        type=Path,
        default=REPO.parent / "shared/bench/peers",
        help="the peers' harnesses (default: %(default)s)",
    )
    parser.add_argument("--out", type=Path, default=RESULTS, help="results directory")
    parser.add_argument(
        "--no-io", dest="io", action="store_false", help="skip the I/O-bound section"
    )
    parser.add_argument(
        "--io-harness",
        type=Path,
        default=None,
        help="the peers' io harness for the PgQueuer I/O rows (default: "
        "<peers-dir>/../io/io_bound.py)",
    )
    parser.add_argument("--io-jobs", type=int, default=iobound.Setup.jobs, help=argparse.SUPPRESS)
    parser.add_argument(
        "--io-work-ms", type=float, default=iobound.Setup.work_ms, help=argparse.SUPPRESS
    )
    parser.add_argument(
        "--io-async-threads", type=int, default=iobound.Setup.async_threads, help=argparse.SUPPRESS
    )
    parser.add_argument(
        "--held-snapshot",
        action="store_true",
        help="only the held-snapshot mode (bench/held.py): a fixed rate offered, a "
        "transaction held idle with an xid in the middle phase; jobs/s, depth and "
        "latency per phase, beside PgQueuer unless --peers none",
    )
    parser.add_argument(
        "--limits",
        action="store_true",
        help="only the flow-control rows (bench/limits.py): no limits, queue limits, "
        "per_key over 1,000 keys, fair over 10,000 keys; jobs/s, claim p50/p99, plans",
    )
    parser.add_argument("--held-rate", type=float, default=800.0, help="jobs/s offered")
    parser.add_argument(
        "--held-phases", default="30,90,60", help="seconds before,held,after (default %(default)s)"
    )
    parser.add_argument(
        "--held-by",
        choices=held.HOLDERS,
        default="xid",
        help="what holds the horizon in the middle phase: 'xid', one connection idle in "
        "transaction with an xid; 'readers', four REPEATABLE READ transactions scanning "
        "the jobs table over and over (default %(default)s)",
    )
    parser.add_argument(
        "--held-code",
        type=Path,
        default=None,
        help="also run this other checkout's pgworkerd (a before/after in one run)",
    )
    parser.add_argument(
        "--peak",
        action="store_true",
        help="only the full-system peak mode (bench/peak.py): producer and daemon at "
        "once, 1 ms jobs, 256-byte payloads, depth held at 2,000; jobs/s and the CPU split",
    )
    parser.add_argument(
        "--peak-layouts",
        default="1x2x8,2x1x8",
        help="DAEMONSxPROCESSESxTHREADS, comma-separated (default %(default)s)",
    )
    parser.add_argument("--peak-seconds", type=float, default=30.0, help="measured window")
    parser.add_argument(
        "--peak-raw", action="store_true", help="also the raw psycopg loop in the same shape"
    )
    parser.add_argument(
        "--peak-config",
        type=json.loads,
        default=None,
        help='extra daemon config as JSON, e.g. \'{"log_level": "warning"}\' (default: none)',
    )
    parser.add_argument(
        "--peak-code",
        type=Path,
        default=None,
        help="also run this other checkout's pgworkerd, alternating with this one's",
    )
    parser.add_argument("--peak-reps", type=int, default=1, help="runs of each layout")
    parser.add_argument(
        "--bytes",
        action="store_true",
        help="only the bytes mode (bench/bytes.py): WAL per job from enqueue to success "
        "(by record type and relation, full-page images apart) and bytes per retained "
        "finished job (table and each index), beside the selected peers",
    )
    parser.add_argument(
        "--bytes-code",
        type=Path,
        default=None,
        help="also run this other checkout's pgworkerd, alternating with this one's",
    )
    parser.add_argument(
        "--bytes-sql",
        action="append",
        default=[],
        metavar="LABEL=SQL",
        help="also this checkout with SQL run after its migrations (a schema change tried "
        "before its migration is written); repeatable",
    )
    parser.add_argument("--bytes-reps", type=int, default=1, help="runs of each (A B A B)")
    parser.add_argument(
        "--bytes-rounds",
        type=int,
        default=1,
        help="2: a second round of N jobs in the same table, and its retained bytes",
    )
    args = parser.parse_args(argv)
    if args.io_harness is None:
        args.io_harness = args.peers_dir.parent / "io" / "io_bound.py"
    if args.peers in ("all", "none"):
        args.peer_names = list(peers.PEERS) if args.peers == "all" else []
    else:
        args.peer_names = [p for p in args.peers.split(",") if p]
        unknown = [p for p in args.peer_names if p not in peers.PEERS]
        if unknown:
            parser.error(f"unknown peer(s) {', '.join(unknown)}; known: {', '.join(peers.PEERS)}")
    if (
        args.peer_names
        and not args.held_snapshot
        and not args.peak
        and not (args.peers_dir / "common.py").exists()
    ):
        parser.error(
            f"{args.peers_dir} holds no peer harnesses (common.py); "
            "give --peers-dir or --peers none"
        )
    if args.peak:
        try:
            peak.parse_layouts(args.peak_layouts)
        except ValueError as exc:
            parser.error(str(exc))
    args.mode_names = [m for m in args.modes.split(",") if m]
    if not args.mode_names or any(m not in MODES for m in args.mode_names):
        parser.error(f"--modes takes {', '.join(MODES)}")
    if args.reps < 1 or args.n < 10:
        parser.error("--reps must be ≥ 1 and -n ≥ 10")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    started = time.monotonic()
    stamp = time.strftime("%Y%m%dT%H%M%S")
    out = args.out / stamp
    logs = out / "logs"
    logs.mkdir(parents=True)
    if args.held_snapshot:
        print(f"results in {out}")
        return held.main(args, out)
    if args.limits:
        return limits.main(["--jobs", str(args.n)], out)
    if args.peak:
        print(f"results in {out}")
        return _peak(args, out, logs)
    if args.bytes:
        print(f"results in {out}")
        return bytes_mode.main(
            out=out,
            logs=logs,
            proto=measure.Protocol(n=args.n, n_single=min(args.n_single, args.n // 10)),
            peer_names=[
                name
                for name in args.peer_names
                if peers.ready(peers.PEERS[name], logs / "venv.log")
            ],
            peers_dir=args.peers_dir,
            code=args.bytes_code,
            reps=args.bytes_reps,
            sql_variants=[(a, b) for a, _, b in (v.partition("=") for v in args.bytes_sql)],
            rounds=args.bytes_rounds,
        )
    proto = measure.Protocol(n=args.n, n_single=min(args.n_single, args.n // 10))
    print(f"results in {out}")

    available = [
        name for name in args.peer_names if peers.ready(peers.PEERS[name], logs / "venv.log")
    ]
    records: list[dict[str, Any]] = []
    scale_figures: dict[str, Any] | None = None
    enqueue_one: dict[str, Any] | None = None
    io_rows: list[iobound.Row] = []
    io_setup = iobound.Setup(
        jobs=args.io_jobs, work_ms=args.io_work_ms, async_threads=args.io_async_threads
    )
    with throwaway_cluster(keep_log=logs / "postgresql.log") as cluster:
        settings = server_settings(cluster.dsn())
        print(
            f"cluster up on 127.0.0.1:{cluster.port}: "
            + ", ".join(f"{k}={v}" for k, v in settings.items())
        )
        # The disk and the neighbours move commit-bound numbers: say what they were.
        environment = {
            "fdatasync_per_s_start": fdatasync_rate(cluster),
            "loadavg_start": os.getloadavg(),
        }
        print(
            f"fdatasync {environment['fdatasync_per_s_start'] or 0:,.0f}/s, "
            f"load average {environment['loadavg_start'][0]:.2f}"
        )
        for rep in range(1, args.reps + 1):
            # raw back to back with each judged row, which side first swapped every
            # repetition: the throughput targets are judged on these pairs (bench/paired.py)
            for mode, name in paired.schedule(args.mode_names, [*report.OUR_ROWS, *available], rep):
                record = _one_run(cluster, name, mode, rep, proto, args, logs)
                if record is not None:
                    records.append(record)
                    with (out / "records.jsonl").open("a") as fh:
                        fh.write(json.dumps(record, sort_keys=True) + "\n")
        if args.enqueue_blocks and "throughput" in args.mode_names:
            enqueue_one = _enqueue_one(cluster, args.enqueue_blocks, args.enqueue_block)
        if args.io:
            io_rows = iobound.run_section(cluster, logs, args, io_setup)
        if args.scale:
            scale_figures = _scale(cluster, logs, args)
        environment.update(fdatasync_per_s_end=fdatasync_rate(cluster), loadavg_end=os.getloadavg())
    elapsed = time.monotonic() - started

    table = report.rows(records, [*report.OUR_ROWS, *available])
    paired_figures = paired.figures(records)
    goals = report.targets(table, scale_figures, enqueue_one, paired_figures)
    title = (
        f"pgworkerd vs peers, {time.strftime('%Y-%m-%d')}: {_machine()}, PostgreSQL "
        f"{settings.get('server_version', '?').split()[0]} durable "
        f"(fsync, synchronous_commit on)"
    )
    header = [
        f"### {title}",
        "",
        "No-op jobs. "
        + _modes_described(proto, args.mode_names)
        + f"pgworkerd: `workers: [{{queues: [bench], concurrency: {proto.concurrency}}}]`, "
        "other settings at their defaults, and again with "
        f"`{json.dumps(measure.TUNED_CONFIG)}` (the targets are judged on that row), "
        f"and with `{json.dumps(measure.BATCH_INFO_CONFIG)}` (the same at info logs). "
        "Peers: their harnesses from "
        f"`{_shown(args.peers_dir)}`. "
        + (f"Median of {args.reps} runs." if args.reps > 1 else "One run each.")
        + " The processing targets against raw 2x100 are judged on pairs: raw runs back "
        "to back with the tuned and the info rows in each repetition, which first swapped "
        "every repetition, and the figure is the geometric mean of the median ratios of "
        "the two orders (listed under the table)."
        + f" Disk fdatasync (pg_test_fsync): {_rate(environment, 'start')} at the start, "
        f"{_rate(environment, 'end')} at the end; load average (1 min) "
        f"{environment['loadavg_start'][0]:.1f} before.",
    ]
    notes = [*paired.markdown(paired_figures, report.LABELS), *_notes(records, scale_figures)]
    summary = report.markdown(table, goals, header, notes)
    if io_rows:
        harness = (
            _shown(args.io_harness) if any(r.jps_from_spawn is None for r in io_rows) else None
        )
        summary += "\n" + "\n".join(iobound.markdown(io_rows, io_setup, harness)) + "\n"
    print()
    print(summary)
    report.write_run(
        out,
        summary,
        {
            "argv": sys.argv,
            "protocol": asdict(proto),
            "peers": available,
            "skipped_peers": [p for p in args.peer_names if p not in available],
            "settings": settings,
            "machine": _machine(),
            "environment": environment,
            "elapsed_s": round(elapsed, 1),
            "scale": scale_figures,
            "enqueue_one": enqueue_one,
            "paired": paired.as_json(paired_figures),
            "io": {
                "setup": asdict(io_setup),
                "rows": [asdict(r) for r in io_rows],
                "targets": iobound.targets(io_rows) if io_rows else [],
            },
            "rows": [asdict(r) for r in table],
            "targets": [asdict(g) for g in goals],
        },
    )
    if chart.draw(table, title, out / "chart.png", report.target_lines(table)):
        shutil.copyfile(out / "chart.png", args.out / "latest.png")
        print(f"chart: {out / 'chart.png'} (copied to {args.out / 'latest.png'})")
    shutil.copyfile(out / "summary.md", args.out / "latest.md")
    print(f"run took {elapsed / 60:.1f} min; results in {out}")
    return 0


def _one_run(
    cluster: EmbeddedCluster,
    name: str,
    mode: str,
    rep: int,
    proto: measure.Protocol,
    args: argparse.Namespace,
    logs: Path,
) -> dict[str, Any] | None:
    """One system, one mode, in a fresh database; its record, or None after a note."""
    tag = f"{name}_{mode}_{rep}"

    def measured(dsn: str) -> dict[str, Any] | None:
        if name in report.OUR_ROWS:
            measured: Callable[..., dict[str, Any]] = getattr(measure, mode)
            extra = {
                report.OURS_TUNED: measure.TUNED_CONFIG,
                report.OURS_INFO: measure.BATCH_INFO_CONFIG,
            }.get(name)  # the defaults' row: none
            return measured(dsn, logs, tag, proto, extra)
        return peers.run(peers.PEERS[name], mode, dsn, args.peers_dir, proto, logs / f"{tag}.log")

    def run(dsn: str) -> dict[str, Any] | None:
        # What moves a commit-bound run besides its code, recorded with it: the disk's
        # fdatasync rate and the load just before, and the checkpoints during the run.
        context = {
            "fdatasync_per_s_before": fdatasync_rate(cluster),
            "loadavg_before": round(os.getloadavg()[0], 2),
        }
        before = _checkpoints(cluster)
        record = measured(dsn)
        if record is not None:
            record.update(context, checkpoints_during=_checkpoints(cluster) - before)
            record.update(_autovacuums(dsn))
        return record

    t0 = time.monotonic()
    record = in_fresh_database(cluster, f"bench_{name}", logs, tag, run)
    if record is not None:
        record.update(name=name, rep=rep)
        print(f"  {tag:<28} {time.monotonic() - t0:5.1f}s  {_brief(record)}")
    return record


def _checkpoints(cluster: EmbeddedCluster) -> int:
    """Checkpoints the cluster has begun, timed and requested (a DROP DATABASE
    requests one)."""
    with psycopg.connect(cluster.dsn(), autocommit=True) as conn:
        row = conn.execute(
            "SELECT checkpoints_timed + checkpoints_req FROM pg_stat_bgwriter"
        ).fetchone()
    return int(row[0]) if row else 0


def _autovacuums(dsn: str) -> dict[str, int]:
    """Autovacuums and autoanalyzes the run's fresh database saw (its tables'
    counters, read before the database is dropped): one landing in a run's window
    costs that run, not its pair."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute(
            "SELECT coalesce(sum(autovacuum_count), 0), coalesce(sum(autoanalyze_count), 0)"
            " FROM pg_stat_user_tables"
        ).fetchone()
    vacuums, analyzes = row if row else (0, 0)
    return {"autovacuums_during": int(vacuums), "autoanalyzes_during": int(analyzes)}


def _peak(args: argparse.Namespace, out: Path, logs: Path) -> int:
    """The full-system peak mode (bench/peak.py), each layout in a fresh database."""
    rows: list[peak.PeakRow] = []
    codes: list[Path | None] = [None] if args.peak_code is None else [args.peak_code, None]
    with throwaway_cluster(keep_log=logs / "postgresql.log") as cluster:
        settings = server_settings(cluster.dsn())
        loadavg = os.getloadavg()
        for rep in range(1, args.peak_reps + 1):
            for layout in peak.parse_layouts(args.peak_layouts):
                runs: list[tuple[str, Callable[[str], peak.PeakRow]]] = [
                    (
                        f"pgworkerd{'_other' if code else ''}_{layout.name}_{rep}",
                        lambda dsn, layout=layout, code=code: peak.run_pgworkerd(
                            dsn,
                            cluster.data_dir,
                            logs,
                            layout,
                            args.peak_seconds,
                            args.peak_config,
                            code,
                        ),
                    )
                    for code in codes
                ]
                if args.peak_raw:
                    runs.append(
                        (
                            f"raw_{layout.name}_{rep}",
                            lambda dsn, layout=layout: peak.run_raw(
                                dsn, cluster.data_dir, logs, layout, args.peak_seconds
                            ),
                        )
                    )
                for tag, run in runs:
                    row = in_fresh_database(cluster, "bench_peak", logs, tag, run)
                    if row is not None:
                        rows.append(row)
                        print(
                            f"  {tag:<28} {row.jobs_per_s:8,.0f} jobs/s  CPU s "
                            + ", ".join(f"{k} {v:.1f}" for k, v in row.cpu_s.items())
                        )
    header = (
        f"### Full-system peak, {time.strftime('%Y-%m-%d %H:%M')}: {_machine()}, PostgreSQL "
        f"{settings.get('server_version', '?').split()[0]} durable; load average "
        f"{loadavg[0]:.1f} before\n\n"
        f"Producer and daemon at once: 1 ms jobs (`wait`), {peak.PAYLOAD_BYTES}-byte "
        f"payloads, the producer topping the queue up to {peak.DEPTH:,} ready jobs; "
        f"{peak.WARMUP_S:g} s warm-up, then {args.peak_seconds:g} s measured. Daemon config: "
        + (f"`{json.dumps(args.peak_config)}`" if args.peak_config else "the defaults")
        + ". Layout DxPxT: D daemons of P processes of T threads. CPU over the window "
        "(psutil): PostgreSQL (postmaster and backends), workers, supervisor(s), producer."
    )
    summary = peak.markdown(rows, header)
    print()
    print(summary)
    report.write_run(
        out, summary, {"argv": sys.argv, "settings": settings, "rows": peak.as_json(rows)}
    )
    return 0


def _enqueue_one(cluster: EmbeddedCluster, blocks: int, block: int) -> dict[str, Any]:
    """pgworkerd.enqueue, one job per transaction, beside the raw loop's insert-and-commit,
    in blocks alternated within one run (bench/enqueue_cost.py): the "enqueue 1-by-1"
    column compares 2,000 enqueues with a raw run minutes apart, and a slow moment of the
    shared disk moves one and not the other (its three pgworkerd rows, the same code,
    spread by ±10 %)."""
    t0 = time.monotonic()
    print(f"  enqueue one: {blocks} blocks of {block} calls, alternated with the raw loop ...")
    dsns = {
        "raw": fresh_database(cluster, "bench_enqueue_raw"),
        "pgworkerd": fresh_database(cluster, "bench_enqueue_pgworkerd"),
    }
    try:
        with psycopg.connect(dsns["raw"], autocommit=True) as conn:
            conn.execute(enqueue_cost.RAW_SCHEMA)
        enqueue_cost.migrate_with(REPO, dsns["pgworkerd"])
        times = enqueue_cost.interleaved_times(
            {"pgworkerd": REPO}, ["raw", "pgworkerd"], dsns, blocks, block
        )
    finally:
        for name in dsns:
            drop_database(cluster, f"bench_enqueue_{name}")
    median, overall = enqueue_cost.ratio_to_raw(times["pgworkerd"], times["raw"])
    jps = {name: blocks * block / sum(w for w, _ in got) for name, got in times.items()}
    print(
        f"  enqueue one: {median:.3f}x raw (median of blocks), {overall:.3f}x over all; "
        f"{jps['pgworkerd']:,.0f} vs {jps['raw']:,.0f} jobs/s ({time.monotonic() - t0:.0f}s)"
    )
    return {
        "blocks": blocks,
        "block": block,
        "median": round(median, 3),
        "all": round(overall, 3),
        "jps": round(jps["pgworkerd"], 1),
        "raw_jps": round(jps["raw"], 1),
    }


def _scale(cluster: EmbeddedCluster, logs: Path, args: argparse.Namespace) -> dict[str, Any]:
    t0 = time.monotonic()
    print(
        f"  scale: claim latency, empty vs +{args.scale_rows:,} finished "
        f"+{args.scale_rows:,} scheduled rows ..."
    )
    empty, loaded = scale.claim_empty_vs_loaded(
        fresh_database(cluster, "bench_scale_empty"),
        fresh_database(cluster, "bench_scale_loaded"),
        finished=args.scale_rows,
        scheduled=args.scale_rows,
        samples=2000,
    )
    drop_database(cluster, "bench_scale_empty")
    drop_database(cluster, "bench_scale_loaded")
    print(
        f"  scale: claim p50/p99 {empty.p50_ms:.2f}/{empty.p99_ms:.2f} ms empty, "
        f"{loaded.p50_ms:.2f}/{loaded.p99_ms:.2f} ms loaded ({time.monotonic() - t0:.0f}s)"
    )
    t0 = time.monotonic()
    print(f"  scale: worker RSS over {args.scale_jobs:,} jobs through the daemon ...")
    memory = scale.daemon_memory(
        fresh_database(cluster, "bench_scale_memory"), logs, args.scale_jobs
    )
    drop_database(cluster, "bench_scale_memory")
    last = memory[-1]
    print(
        f"  scale: after {last.jobs_done:,} jobs: largest worker {last.largest_worker_mb:.1f} "
        f"MB, supervisor {last.supervisor_mb:.1f} MB ({time.monotonic() - t0:.0f}s)"
    )
    return {
        "rows": args.scale_rows,
        "claim_empty": asdict(empty),
        "claim_loaded": asdict(loaded),
        "daemon_jobs": args.scale_jobs,
        "worker_rss_mb": round(last.largest_worker_mb, 1),
        "supervisor_rss_mb": round(last.supervisor_mb, 1),
        "memory_samples": [asdict(s) for s in memory],
    }


def _notes(records: list[dict[str, Any]], scale_figures: dict[str, Any] | None) -> list[str]:
    ours = [r for r in records if r["name"] in report.OUR_ROWS and r["mode"] == "throughput"]
    notes = []
    for r in ours:
        imports_s = r.get("imports_s")
        if imports_s is None:
            imports = "(it never said READY=1)"
        else:
            imports = (
                f"of which {imports_s:.2f} s before its READY=1 (interpreter, imports, "
                "config, forks: the peers' harnesses import before their clock "
                f"starts); {r['n'] / r['all_acked_s']:,.0f} jobs/s counted from the "
                "spawn, "
                f"{r.get('process_after_imports_jps') or 0:,.0f} jobs/s from READY=1 "
                "(the table's figure)"
            )
        notes.append(
            f"- {report.LABELS[r['name']]} run {r['rep']}: {r['all_acked_s']:.2f} s for "
            f"{r['n']:,} jobs from spawning `pgworkerd run`, {imports}; first claim "
            f"{r.get('startup_s') or float('nan'):.2f} s after the spawn; steady (first "
            f"claim to last finish) {r.get('steady_jps') or 0:,.0f} jobs/s. CPU "
            f"{r.get('worker_cpu_s')} s, of which the supervisor {r.get('supervisor_cpu_s')} s. "
            f"{r.get('log_lines', 0) / r['n']:.1f} daemon log lines per job; worker RSS "
            f"{r.get('worker_rss_mb')} MB at the end."
        )
    notes.append(
        "- CPU: pgworkerd = supervisor + workers (psutil, reaped children included, "
        "start-up included); peers = their worker process as their harness reports "
        "it (the raw loop reports none)."
    )
    if scale_figures:
        e, lo = scale_figures["claim_empty"], scale_figures["claim_loaded"]
        notes.append(
            f"- Claim+complete of one job through JobStore, p50/p99: "
            f"{e['p50_ms']:.2f}/{e['p99_ms']:.2f} ms empty table, "
            f"{lo['p50_ms']:.2f}/{lo['p99_ms']:.2f} ms with the rows added."
        )
    return notes


def _brief(record: dict[str, Any]) -> str:
    if record["mode"] == "throughput":
        return (
            f"enqueue {record.get('enqueue_single_jps', 0):,.0f} / "
            f"{record.get('enqueue_batch_jps', 0):,.0f} jobs/s, process "
            f"{record.get('process_jps', 0):,.0f} jobs/s"
            + ("" if record.get("acked_ok") else " (NOT all finished)")
        )
    brief = f"latency p50 {record.get('lat_p50_ms')} ms, p99 {record.get('lat_p99_ms')} ms"
    if record.get("lat_slowest"):  # pgworkerd's runs: [job index, ms] of the tail's jobs
        brief += f"; slowest {record['lat_slowest'][:3]}, p99 of jobs 10+ "
        brief += f"{record.get('lat_p99_from_10_ms')} ms"
    return brief


def _modes_described(proto: measure.Protocol, mode_names: list[str]) -> str:
    """The summary's account of how each mode that ran measured: a latency-only run
    measured no throughput, so it says nothing of the throughput mode's job counts."""
    text = ""
    if "throughput" in mode_names:
        text += (
            f"Throughput: {proto.n:,} jobs ({proto.n_single:,} enqueued one per "
            f"transaction, the rest {proto.enq_batch:,} per bulk call), processed until the "
            "database shows all finished, worker start-up included (pgworkerd's from its "
            "READY=1, after its imports, as the peers' harnesses import before their "
            "clocks start). "
        )
    if "latency" in mode_names:
        text += (
            f"Latency: worker idle 2 s, a separate process enqueues {proto.trickle_n} jobs "
            f"at {proto.trickle_rate:g}/s; handler start minus time before the enqueue call. "
        )
    return text


def _rate(environment: dict[str, Any], when: str) -> str:
    rate = environment.get(f"fdatasync_per_s_{when}")
    return "?" if rate is None else f"{rate:,.0f}/s"


def _machine() -> str:
    memory = psutil.virtual_memory().total / 2**30
    return f"{os.cpu_count()} CPUs, {memory:.0f} GiB, {platform.system()} {platform.release()}"


def _shown(path: Path) -> str:
    try:
        return os.path.relpath(path.resolve(), REPO)
    except ValueError:
        return str(path)


if __name__ == "__main__":
    sys.exit(main())
