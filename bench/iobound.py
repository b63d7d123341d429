"""I/O-bound jobs: N jobs whose handler waits WORK_MS (a network call, say), pgworkerd with
`threads: N` beside PgQueuer. `python -m bench` runs this section after the no-op rows,
on the same cluster (`--no-io` skips it; `--io-jobs`, `--io-work-ms`, `--io-async-threads`
change it).

pgworkerd (reimplemented here from the io harness's pgworkerd part, as users run it):
N jobs `wait` (time.sleep) or `wait_async` (asyncio.sleep) enqueued with enqueue_many,
then `pgworkerd run` with one pool of PROCS processes x THREADS, `defaults: {batch_size:
1}` and `log_level: warning` (the io harness's settings), timed until the database shows
every job finished. The table's figure counts from the daemon's READY=1 (imports, config
and forks done), as the no-op rows do; the figure from the spawn is kept beside it.

PgQueuer: the peers' io harness (`io_bound.py pgqueuer`, in the `--io-harness` file, not
part of this repository) in the peers' venv: one QueueManager, handler asyncio.sleep,
concurrency_limit PGQ_LIMIT (0 = none); its clock starts just before `pgq.run()`, after
its imports and connections. Its JSON line is the record.

Targets: plain handlers ≥ 1,000 jobs/s; coroutine handlers ≥ PgQueuer without a
concurrency limit, in the same run.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import psycopg

import pgworkerd
from bench import peers
from bench.cluster import in_fresh_database
from bench.daemon import QUEUE, Daemon, migrate, write_config
from bench.measure import UNFINISHED
from bench.peers import Peer
from pgworkerd.storage.embedded import EmbeddedCluster

POLL_S = 0.02
RUN_TIMEOUT_S = 180.0  # per row, as the peers' harness runs
PLAIN_TARGET_JPS = 1_000.0


@dataclass(frozen=True)
class Setup:
    jobs: int = 2_000
    work_ms: float = 50.0
    procs: int = 2
    plain_threads: int = 100
    # Slots x 1 / work time = the ceiling: 2 x 250 / 0.05 s = 10,000 jobs/s, well above
    # what PgQueuer does here (about 3,000), so the coroutine row is not slot-bound.
    async_threads: int = 250

    def ceiling_jps(self, threads: int) -> float:
        return self.procs * threads / (self.work_ms / 1000)


@dataclass(frozen=True)
class Row:
    key: str  # pgworkerd_plain, pgworkerd_async, pgqueuer_nolimit, pgqueuer_limit100
    label: str
    setting: str
    jps: float | None  # the table's figure (pgworkerd: from READY=1)
    jps_from_spawn: float | None  # pgworkerd only
    seconds: float | None
    done: int
    jobs: int
    ceiling_jps: float | None  # slots / work time; None: no limit

    @property
    def complete(self) -> bool:
        return self.done >= self.jobs


def pgworkerd_row(dsn: str, work: Path, setup: Setup, coroutines: bool) -> Row:
    threads = setup.async_threads if coroutines else setup.plain_threads
    kind = "wait_async" if coroutines else "wait"
    key = "pgworkerd_async" if coroutines else "pgworkerd_plain"
    config = write_config(
        work / f"io_{key}.yaml",
        dsn,
        extra={
            "workers": [{"queues": [QUEUE], "concurrency": setup.procs, "threads": threads}],
            "defaults": {"batch_size": 1},
            "log_level": "warning",
        },
    )
    log_path = work / f"io_{key}.log"
    migrate(config, log_path)
    with psycopg.connect(dsn, autocommit=True) as conn:
        pgworkerd.enqueue_many(
            conn, [{"kind": kind, "payload": {"ms": setup.work_ms}, "queue": QUEUE}] * setup.jobs
        )
        daemon = Daemon(config, log_path)
        try:
            deadline = time.perf_counter() + RUN_TIMEOUT_S
            while time.perf_counter() < deadline and daemon.proc.poll() is None:
                if not conn.execute(UNFINISHED).fetchone()[0]:
                    break
                time.sleep(POLL_S)
            elapsed = time.perf_counter() - daemon.started
        finally:
            daemon.stop()
        done = conn.execute(
            "SELECT count(*) FROM pgworkerd.jobs WHERE state = 'succeeded'"
        ).fetchone()[0]
    ready_s = None if daemon.ready is None else daemon.ready - daemon.started
    handler = "async def, asyncio.sleep" if coroutines else "def, time.sleep"
    return Row(
        key=key,
        label=f"pgworkerd, {'coroutine' if coroutines else 'plain'} handlers",
        setting=f"{setup.procs} processes x threads {threads} ({handler}), batch_size 1",
        jps=round(done / (elapsed - ready_s), 1) if ready_s is not None else None,
        jps_from_spawn=round(done / elapsed, 1),
        seconds=round(elapsed - (ready_s or 0.0), 2),
        done=done,
        jobs=setup.jobs,
        ceiling_jps=setup.ceiling_jps(threads),
    )


def pgqueuer_row(
    dsn: str, harness: Path, peer: Peer, setup: Setup, limit: int, log: Path
) -> Row | None:
    """One run of the io harness's PgQueuer part; None (with a note) if it gave no line."""
    env = {
        **os.environ,
        "DSN": dsn,
        "N": str(setup.jobs),
        "WORK_MS": f"{setup.work_ms:g}",
        "PGQ_LIMIT": str(limit),
    }
    env.pop("PYTHONPATH", None)  # the peer's venv only
    argv = [str(peer.venv.path / "bin" / "python"), str(harness), "pgqueuer"]
    returncode = peers.run_harness(argv, env, log, "PgQueuer io run")
    lines = [ln for ln in log.read_text(errors="replace").splitlines() if ln.startswith("{")]
    if not lines:
        print(f"  note: PgQueuer io run gave no result (exit {returncode}; see {log})")
        return None
    res = json.loads(lines[-1])
    return Row(
        key=f"pgqueuer_limit{limit}" if limit else "pgqueuer_nolimit",
        label="PgQueuer (asyncpg), " + (f"concurrency_limit {limit}" if limit else "no limit"),
        setting="one QueueManager, async def, asyncio.sleep"
        + (f", concurrency_limit {limit}" if limit else ""),
        jps=res.get("jps"),
        jps_from_spawn=None,
        seconds=res.get("s"),
        done=int(res.get("done", 0)),
        jobs=setup.jobs,
        ceiling_jps=limit / (setup.work_ms / 1000) if limit else None,
    )


def targets(rows: list[Row]) -> list[tuple[str, str, bool | None]]:
    """(target, measured, passed or None when not measured)."""
    by_key = {r.key: r for r in rows if r.complete}
    out: list[tuple[str, str, bool | None]] = []
    plain = by_key.get("pgworkerd_plain")
    coro = by_key.get("pgworkerd_async")
    peer = by_key.get("pgqueuer_nolimit")
    if plain and plain.jps is not None:
        out.append(
            (
                f"I/O-bound, plain handlers ≥ {PLAIN_TARGET_JPS:,.0f} jobs/s",
                f"{plain.jps:,.0f} jobs/s",
                plain.jps >= PLAIN_TARGET_JPS,
            )
        )
    else:
        out.append((f"I/O-bound, plain handlers ≥ {PLAIN_TARGET_JPS:,.0f} jobs/s", "-", None))
    text = "I/O-bound, coroutine handlers ≥ PgQueuer without a limit (same run)"
    if coro and coro.jps is not None and peer and peer.jps:
        out.append(
            (
                text,
                f"{coro.jps:,.0f} vs {peer.jps:,.0f} jobs/s ({coro.jps / peer.jps:.2f}x)",
                coro.jps >= peer.jps,
            )
        )
    else:
        out.append((text, "not measured", None))
    return out


def markdown(rows: list[Row], setup: Setup, harness: Path | str | None) -> list[str]:
    peer = next((r for r in rows if r.key == "pgqueuer_nolimit"), None)
    lines = [
        f"I/O-bound: {setup.jobs:,} jobs whose handler waits {setup.work_ms:g} ms "
        "(a network call), same cluster, each row in a fresh database, one run each.",
        "",
        "| system | setting | jobs/s | s | jobs/s from spawn | slot ceiling jobs/s |",
        "|---|---|---:|---:|---:|---:|",
    ]
    for r in rows:
        label = f"**{r.label}**" if r.key.startswith("pgworkerd") else r.label
        if not r.complete:
            label += f" (only {r.done:,} of {r.jobs:,} finished)"
        lines.append(
            f"| {label} | {r.setting} | {_fmt(r.jps, '{:,.0f}')} | {_fmt(r.seconds, '{:.2f}')}"
            f" | {_fmt(r.jps_from_spawn, '{:,.0f}')}"
            f" | {_fmt(r.ceiling_jps, '{:,.0f}') if r.ceiling_jps else 'none'} |"
        )
    lines += ["", "I/O-bound targets:", ""]
    for text, measured, passed in targets(rows):
        verdict = {True: "PASS", False: "FAIL", None: "n/a "}[passed]
        lines.append(f"- **{verdict}** {text}: {measured}")
    lines += [
        "",
        "- I/O-bound jobs/s: pgworkerd from its READY=1 to the database showing every job "
        "finished (polled every 20 ms), as in the no-op rows; 'from spawn' adds the "
        "daemon's start-up (interpreter, imports, forks). PgQueuer from just before "
        "`pgq.run()` (after its imports and connections) to its handler's last "
        "completion, as its harness" + (f" (`{harness}`)" if harness else "") + " measures it.",
        f"- Slot ceiling = slots / {setup.work_ms:g} ms: threads "
        f"{setup.async_threads} for the coroutine row gives {setup.procs} x "
        f"{setup.async_threads} / {setup.work_ms / 1000:g} s = "
        f"{setup.ceiling_jps(setup.async_threads):,.0f} jobs/s"
        + (f" against PgQueuer's {peer.jps:,.0f}" if peer and peer.jps else "")
        + ": that row is not bounded by its slots. The plain row's "
        f"{setup.procs} x {setup.plain_threads} threads cap it at "
        f"{setup.ceiling_jps(setup.plain_threads):,.0f} jobs/s.",
    ]
    return lines


def _fmt(value: float | None, fmt: str) -> str:
    return "-" if value is None else fmt.format(value)


def run_section(
    cluster: EmbeddedCluster, logs: Path, args: argparse.Namespace, setup: Setup
) -> list[Row]:
    """The I/O-bound rows, each in a fresh database; a failed row is noted and left out."""
    print(f"  io: {setup.jobs:,} jobs x {setup.work_ms:g} ms ...")
    pgq = next((peers.PEERS[n] for n in args.peer_names if n.startswith("pgqueuer")), None)
    if pgq is not None and not args.io_harness.exists():
        print(f"  note: no PgQueuer I/O rows: {args.io_harness} does not exist")
        pgq = None
    if pgq is not None and not peers.ready(pgq, logs / "venv.log"):
        pgq = None
    runs: list[tuple[str, Callable[[str], Row | None]]] = [
        ("pgworkerd_plain", lambda dsn: pgworkerd_row(dsn, logs, setup, False)),
        ("pgworkerd_async", lambda dsn: pgworkerd_row(dsn, logs, setup, True)),
    ]
    if pgq is not None:
        peer = pgq
        for limit in (0, 100):
            runs.append(
                (
                    f"pgqueuer_limit{limit}",
                    lambda dsn, limit=limit: pgqueuer_row(
                        dsn, args.io_harness, peer, setup, limit, logs / f"io_pgq_{limit}.log"
                    ),
                )
            )
    rows = []
    for key, run in runs:
        t0 = time.monotonic()
        row = in_fresh_database(cluster, f"bench_io_{key}", logs, f"io_{key}", run)
        if row is not None:
            rows.append(row)
            print(
                f"  io {row.key:<26} {time.monotonic() - t0:5.1f}s  "
                f"{row.jps or 0:,.0f} jobs/s ({row.done:,}/{row.jobs:,} done)"
            )
    return rows
