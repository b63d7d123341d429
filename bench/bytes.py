"""The bytes each job leaves behind (issue 23): WAL per job from enqueue to success, and
the bytes a finished job keeps while it is retained, beside the raw loop and PgQueuer,
in one run on one throwaway durable cluster.

    python -m bench --bytes [-n 20000] [--bytes-code DIR] [--bytes-sql LABEL=SQL ...]
                    [--bytes-reps 1] [--peers ...]

For pgworkerd (this checkout; with `--bytes-code DIR` another checkout's code too; with
`--bytes-sql LABEL=SQL` this checkout again with SQL run after its migrations, e.g.
`ff100=ALTER TABLE pgworkerd.jobs SET (fillfactor = 100)`, to try a schema change
before writing its migration; all alternated A B A B over `--bytes-reps`), in a fresh
database (`--bytes-rounds 2`: then N more jobs in the same table, bulk enqueued and
worked, and the retained bytes again: the room the first round's versions and its
20,000-deep queue left is reused, or the table grows): `pgworkerd migrate`, a
CHECKPOINT (so full-page images count from a known point), then four phases, the WAL
position read between them: N_SINGLE no-op jobs enqueued one per transaction, the rest
with `enqueue_many` in calls of 1,000 (both in a subprocess running that checkout's
code), `pgworkerd run` at its defaults until every job is finished (start-up, the
autovacuum that runs meanwhile and the graceful stop included), then a VACUUM of the
jobs table; then, with those finished jobs still in the table, 1,000 more jobs enqueued,
claimed and completed through JobStore, 10 a statement, one step after the other (the
daemon completes and claims in one statement: this says what each step writes). Each
phase's WAL is read back with pg_walinspect (pg_get_wal_records_info,
from the `postgres` database): bytes by resource manager and record type, full-page
images apart, and by the relation of the record's first block (the table, each index),
mapped through the bench database's pg_class. The LSN difference (what the server
really wrote: records plus their alignment and the pages' headers) is the headline
figure; the breakdown sums the records' own lengths.

Retained: after the VACUUM, pg_relation_size of the table, its toast, its FSM and VM
forks and each index, divided by the finished jobs; pgstattuple's live tuple bytes and
free space say how much of the heap is rows and how much is room left by the versions
each job went through.

The peers (the raw loop, PgQueuer: `--peers`) run their own harness's throughput mode
(the same N and N_SINGLE), after the same CHECKPOINT; their WAL is the whole harness run
(schema install included, a few kB), with the same breakdown; what they keep is what
their tables hold after a VACUUM (the raw loop deletes each job at its ack).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections import defaultdict
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import psycopg

from bench import peers, report
from bench.cluster import in_fresh_database, server_settings, throwaway_cluster
from bench.daemon import QUEUE, REPO, Daemon, daemon_env, migrate, write_config
from bench.measure import Protocol
from pgworkerd.storage.embedded import EmbeddedCluster

BULK_BATCH = 1_000
PHASES = ("enqueue_single", "enqueue_bulk", "process", "vacuum")
TO_SUCCESS = ("enqueue_single", "enqueue_bulk", "process")

# Run by the variant's own code (PYTHONPATH): the enqueue calls a user makes; `steps`:
# enqueue n, claim them all, complete them all, through JobStore (10 a statement, as
# the daemon at its defaults), printing the WAL position between the steps.
CHILD = """
import json
import os
import socket
import sys
import psycopg
import pgworkerd
from pgworkerd.storage.store import JobStore
dsn, how, n, batch, queue = sys.argv[1:6]
n, batch = int(n), int(batch)
payload = {"i": 0}
jobs = [{"kind": "noop", "payload": payload, "queue": queue}]
def lsn(conn):
    return str(conn.execute("SELECT pg_current_wal_flush_lsn()").fetchone()[0])
with psycopg.connect(dsn, autocommit=True) as conn:
    if how == "single":
        for _ in range(n):
            pgworkerd.enqueue(conn, "noop", payload, queue=queue)
    elif how == "bulk":
        while n > 0:
            b = min(batch, n)
            pgworkerd.enqueue_many(conn, jobs * b)
            n -= b
    else:
        store = JobStore()
        worker = f"{socket.gethostname()}:{os.getpid()}/default#0"
        marks = [lsn(conn)]
        pgworkerd.enqueue_many(conn, jobs * n)
        marks.append(lsn(conn))
        leases = []
        while len(leases) < n:
            got = store.claim(conn, queues=[queue], limit=10, lease_ttl_s=30, worker=worker)
            if not got:
                raise SystemExit("nothing left to claim")
            leases += [job.lease for job in got]
        marks.append(lsn(conn))
        for i in range(0, n, 10):
            store.complete(conn, [(lease, None) for lease in leases[i : i + 10]])
        marks.append(lsn(conn))
        print(json.dumps(marks))
"""
STEPS = ("step_insert", "step_claim", "step_complete")
STEP_JOBS = 1_000

UNFINISHED = """
SELECT EXISTS (SELECT 1 FROM pgworkerd.jobs WHERE state = 'queued')
    OR EXISTS (SELECT 1 FROM pgworkerd.jobs WHERE lease_expires_at IS NOT NULL)
"""

# Records between two positions, grouped by what they are and the relation (database,
# file node) of their first block; run in the `postgres` database, where the extension
# is. record_length counts the whole record, its full-page images included.
WAL_RECORDS = r"""
SELECT w.resource_manager, w.record_type,
       (m)[1]::oid AS db, (m)[2]::oid AS filenode,
       count(*) AS records,
       -- a heap update whose new version went to another page logs two blocks (and
       -- the whole new tuple); on the same page, only what changed (prefix and suffix
       -- compression)
       count(*) FILTER (WHERE w.block_ref LIKE '%%blkref #1%%') AS two_blocks,
       sum(w.record_length - w.fpi_length)::bigint AS record_bytes,
       sum(w.fpi_length)::bigint AS fpi_bytes
FROM pg_get_wal_records_info(%(start)s::pg_lsn, %(end)s::pg_lsn) AS w
LEFT JOIN LATERAL regexp_match(w.block_ref, 'rel \d+/(\d+)/(\d+)') AS m ON true
GROUP BY 1, 2, 3, 4
"""

RELATIONS = """
SELECT pg_relation_filenode(c.oid) AS filenode, c.relname AS name,
       c.oid < 16384 AS catalog  -- FirstNormalObjectId: the system's own
FROM pg_class AS c
WHERE pg_relation_filenode(c.oid) IS NOT NULL
"""

# Every relation of the tables a system keeps its jobs in: the table, its indexes, its
# toast table and toast index, and the free space and visibility map forks.
SIZES = """
SELECT c.relname AS name, c.relkind AS kind, c.oid::regclass::text AS qualified,
       coalesce(a.amname, '') AS am,
       pg_relation_size(c.oid, 'main') AS main,
       pg_relation_size(c.oid, 'fsm') + pg_relation_size(c.oid, 'vm') AS maps
FROM pg_class AS c
LEFT JOIN pg_am AS a ON a.oid = c.relam
WHERE c.oid = %(table)s::regclass
   OR c.oid IN (SELECT indexrelid FROM pg_index WHERE indrelid = %(table)s::regclass)
   OR c.oid = (SELECT reltoastrelid FROM pg_class WHERE oid = %(table)s::regclass)
   OR c.oid IN (SELECT indexrelid FROM pg_index WHERE indrelid =
                (SELECT reltoastrelid FROM pg_class WHERE oid = %(table)s::regclass))
ORDER BY c.relkind DESC, c.relname
"""


@dataclass
class Wal:
    """WAL of one phase: the LSN difference, and the records by (resource manager,
    record type, relation)."""

    lsn_bytes: int
    jobs: int
    records: list[dict[str, Any]] = field(default_factory=list)

    def per_job(self) -> float:
        return self.lsn_bytes / self.jobs

    def sums(self, key: str) -> dict[str, dict[str, float]]:
        """Per job, grouped by `key` ('rmgr', 'relation', or 'type'): records, those
        with two blocks, record bytes, fpi bytes."""
        out: dict[str, dict[str, float]] = defaultdict(
            lambda: {"records": 0.0, "two_blocks": 0.0, "record_bytes": 0.0, "fpi_bytes": 0.0}
        )
        for r in self.records:
            name = r["rmgr"] if key == "rmgr" else r[key]
            if key == "type":
                name = f"{r['rmgr']} {r['type']}"
            for k in ("records", "two_blocks", "record_bytes", "fpi_bytes"):
                out[name][k] += r[k] / self.jobs
        return dict(out)

    def record_bytes(self) -> float:
        return sum(int(r["record_bytes"]) for r in self.records) / self.jobs

    def fpi_bytes(self) -> float:
        return sum(int(r["fpi_bytes"]) for r in self.records) / self.jobs


@dataclass
class Retained:
    rows: int
    relations: list[dict[str, Any]]  # name, kind, main, maps
    live_tuple_bytes: float | None = None  # pgstattuple: tuple_len / tuple_count
    free_bytes: float | None = None  # pgstattuple: free_space / tuple_count

    def total(self) -> int:
        return sum(r["main"] + r["maps"] for r in self.relations)


@dataclass
class Run:
    label: str
    rep: int
    n: int
    phases: dict[str, Wal]
    retained: Retained | None
    note: str = ""
    # After a second round in the same table (`--bytes-rounds 2`): N more jobs, bulk
    # enqueued and worked by the daemon, then a VACUUM: does the table grow by what a
    # job keeps, or reuse the room the first round's versions and queue left?
    second: Retained | None = None

    def to_success(self) -> Wal:
        """The phases from the first enqueue to the last success, summed (for a peer:
        its whole harness run)."""
        names = [p for p in TO_SUCCESS if p in self.phases] or list(self.phases)
        merged = Wal(sum(self.phases[p].lsn_bytes for p in names), self.n)
        for p in names:
            merged.records.extend(self.phases[p].records)
        return merged


def one(conn: psycopg.Connection[Any], query: str, params: Any = None) -> Any:
    """The first row of a query that returns one."""
    row = conn.execute(query, params).fetchone()
    assert row is not None
    return row


def lsn(conn: psycopg.Connection[Any]) -> str:
    """The flushed WAL position: every record before it can be read back."""
    return str(one(conn, "SELECT pg_current_wal_flush_lsn()")[0])


def lsn_diff(conn: psycopg.Connection[Any], end: str, start: str) -> int:
    return int(one(conn, "SELECT pg_wal_lsn_diff(%s, %s)", (end, start))[0])


class WalReader:
    """Reads phases of WAL back, from the cluster's `postgres` database."""

    def __init__(self, cluster: EmbeddedCluster) -> None:
        self.admin = psycopg.connect(cluster.dsn(), autocommit=True)
        self.admin.execute("CREATE EXTENSION IF NOT EXISTS pg_walinspect")

    def mark(self) -> str:
        return lsn(self.admin)

    def checkpoint(self) -> str:
        self.admin.execute("CHECKPOINT")
        return self.mark()

    def phase(self, dsn: str, start: str, end: str, jobs: int) -> Wal:
        with psycopg.connect(dsn, autocommit=True) as conn:
            dboid = one(conn, "SELECT oid FROM pg_database WHERE datname = current_database()")[0]
            names = {int(fn): (name, catalog) for fn, name, catalog in conn.execute(RELATIONS)}
        wal = Wal(lsn_diff(self.admin, end, start), jobs)
        for rmgr, rtype, db, filenode, count, two, rec, fpi in self.admin.execute(
            WAL_RECORDS, {"start": start, "end": end}
        ):
            if filenode is None:
                relation = "-"  # no block: commits, running-xacts snapshots...
            elif int(db) != int(dboid):
                relation = "(shared catalogs)" if int(db) == 0 else "(another database)"
            else:
                name, catalog = names.get(int(filenode), ("(dropped or rewritten)", False))
                relation = "(catalogs)" if catalog else name
            wal.records.append(
                {
                    "rmgr": rmgr,
                    "type": rtype,
                    "relation": relation,
                    "records": int(count),
                    "two_blocks": int(two),
                    "record_bytes": int(rec),
                    "fpi_bytes": int(fpi),
                }
            )
        return wal

    def close(self) -> None:
        self.admin.close()


def retained(dsn: str, table: str, rows_sql: str) -> Retained:
    """Sizes of `table` and everything that belongs to it after a VACUUM, and
    pgstattuple's view of its heap."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"VACUUM {table}")
        rows = int(one(conn, rows_sql)[0])
        conn.execute("CREATE EXTENSION IF NOT EXISTS pgstattuple")
        relations = []
        for name, kind, qualified, am, main, maps in conn.execute(
            SIZES, {"table": table}
        ).fetchall():
            relation = {"name": name, "kind": kind, "main": int(main), "maps": int(maps)}
            if am == "btree":
                # The leaf bytes in use (entries and their line pointers): what is left
                # of the index once its empty and deleted pages are reused.
                leaf, empty, deleted, density = one(
                    conn,
                    "SELECT leaf_pages, empty_pages, deleted_pages, avg_leaf_density"
                    " FROM pgstatindex(%s)",
                    (qualified,),
                )
                relation.update(
                    leaf_pages=int(leaf),
                    empty_pages=int(empty),
                    deleted_pages=int(deleted),
                    leaf_density=float(density),
                    leaf_used=int(leaf * 8192 * float(density) / 100)
                    if density == density
                    else 0,  # NaN: no leaf in use
                )
            relations.append(relation)
        count, tuple_len, free = one(
            conn,
            "SELECT tuple_count, tuple_len, free_space FROM pgstattuple(%s::regclass)",
            (table,),
        )
        conn.execute("DROP EXTENSION pgstattuple")
    per = max(int(count), 1)
    return Retained(rows, relations, tuple_len / per, free / per)


def run_pgworkerd(
    reader: WalReader,
    dsn: str,
    logs: Path,
    tag: str,
    proto: Protocol,
    code: Path | None,
    after_migrate: str | None = None,
    rounds: int = 1,
) -> dict[str, Wal | Retained]:
    """The four phases of one pgworkerd checkout (`code`: another checkout's), in `dsn`;
    `after_migrate`: SQL run once the schema is in place."""
    config = write_config(logs / f"{tag}.yaml", dsn, concurrency=proto.concurrency)
    log_path = logs / f"{tag}.log"
    migrate(config, log_path, code=code)
    if after_migrate:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(after_migrate)
    env = daemon_env(code)
    out: dict[str, Wal | Retained] = {}

    def enqueue(how: str, n: int) -> str:
        with log_path.open("ab") as log:
            return subprocess.run(
                [sys.executable, "-c", CHILD, dsn, how, str(n), str(BULK_BATCH), QUEUE],
                env=env,
                cwd=code or REPO,
                stdout=subprocess.PIPE,
                stderr=log,
                check=True,
                text=True,
            ).stdout

    start = reader.checkpoint()
    enqueue("single", proto.n_single)
    mark = reader.mark()
    out["enqueue_single"] = reader.phase(dsn, start, mark, proto.n_single)
    start = mark
    enqueue("bulk", proto.n - proto.n_single)
    mark = reader.mark()
    out["enqueue_bulk"] = reader.phase(dsn, start, mark, proto.n - proto.n_single)
    start = mark

    def work() -> None:
        daemon = Daemon(config, log_path, code=code)
        try:
            with psycopg.connect(dsn, autocommit=True) as conn:
                deadline = time.monotonic() + proto.phase_timeout_s
                while one(conn, UNFINISHED)[0]:
                    if daemon.proc.poll() is not None or time.monotonic() > deadline:
                        raise RuntimeError(f"jobs left unfinished; see {log_path}")
                    time.sleep(0.05)
        finally:
            daemon.stop()

    work()
    mark = reader.mark()
    out["process"] = reader.phase(dsn, start, mark, proto.n)
    start = mark
    kept = retained(dsn, "pgworkerd.jobs", "SELECT count(*) FROM pgworkerd.jobs")
    mark = reader.mark()
    out["vacuum"] = reader.phase(dsn, start, mark, proto.n)
    out["retained"] = kept
    # Each step on its own, with the finished jobs of the run still in the table.
    marks = json.loads(enqueue("steps", STEP_JOBS).strip().splitlines()[-1])
    for step, begin, end in zip(STEPS, marks, marks[1:], strict=False):
        out[step] = reader.phase(dsn, begin, end, STEP_JOBS)
    for _ in range(1, rounds):
        start = reader.mark()
        enqueue("bulk", proto.n)
        work()
        out["second_round"] = reader.phase(dsn, start, reader.mark(), proto.n)
        out["second"] = retained(dsn, "pgworkerd.jobs", "SELECT count(*) FROM pgworkerd.jobs")
    return out


# What each peer keeps its jobs in, and how its finished jobs are counted.
PEER_TABLES = {
    "raw_2x100": [("raw_jobs", "SELECT count(*) FROM raw_jobs")],
    "raw_8x1": [("raw_jobs", "SELECT count(*) FROM raw_jobs")],
    "pgqueuer_apg": [
        ("pgqueuer", "SELECT count(*) FROM pgqueuer"),
        ("pgqueuer_log", "SELECT count(*) FROM pgqueuer_log"),
        ("pgqueuer_statistics", "SELECT count(*) FROM pgqueuer_statistics"),
    ],
}
PEER_TABLES["pgqueuer_psy"] = PEER_TABLES["pgqueuer_apg"]


def run_peer(
    reader: WalReader, dsn: str, name: str, peers_dir: Path, proto: Protocol, logs: Path, tag: str
) -> tuple[Wal, list[tuple[str, Retained]]]:
    start = reader.checkpoint()
    record = peers.run(peers.PEERS[name], "throughput", dsn, peers_dir, proto, logs / f"{tag}.log")
    if record is None or not record.get("acked_ok"):
        raise RuntimeError(f"{name}'s harness did not finish every job: {record}")
    mark = reader.mark()
    wal = reader.phase(dsn, start, mark, proto.n)
    kept = []
    for table, rows_sql in PEER_TABLES.get(name, []):
        with psycopg.connect(dsn, autocommit=True) as conn:
            exists = one(conn, "SELECT to_regclass(%s) IS NOT NULL", (table,))[0]
        if exists:
            kept.append((table, retained(dsn, table, rows_sql)))
    return wal, kept


# -- the report --------------------------------------------------------------------------

RMGRS = ("Heap", "Heap2", "Btree", "Transaction", "Sequence")


def _f(x: float) -> str:
    return f"{x:,.0f}"


def markdown(runs: list[Run], header: list[str]) -> str:
    lines = [*header, ""]
    lines += [
        "#### WAL per job, first enqueue to last success",
        "",
        "LSN difference / jobs; then the records' own bytes (no alignment, no page "
        "headers), full-page images apart, and by resource manager (record bytes + FPI). "
        "pgworkerd: both enqueue phases and the daemon's run; peers: their whole harness run.",
        "",
        "| system | rep | WAL B/job | records B/job | FPI B/job | "
        + " | ".join(RMGRS)
        + " | other |",
        "|---|---|---|---|---|" + "---|" * (len(RMGRS) + 1),
    ]
    for run in runs:
        w = run.to_success()
        by = w.sums("rmgr")
        cells = [
            _f(by.get(m, {}).get("record_bytes", 0) + by.get(m, {}).get("fpi_bytes", 0))
            for m in RMGRS
        ]
        other = sum(v["record_bytes"] + v["fpi_bytes"] for k, v in by.items() if k not in RMGRS)
        lines.append(
            f"| {run.label} | {run.rep} | **{_f(w.per_job())}** | {_f(w.record_bytes())} | "
            f"{_f(w.fpi_bytes())} | " + " | ".join(cells) + f" | {_f(other)} |"
        )
    lines += [
        "",
        "#### Retained bytes per finished job (after a VACUUM)",
        "",
        "Total: every fork of the table, its toast and its indexes, / rows kept. In use: "
        "the live tuples with their line pointers (pgstattuple) and the btree leaf bytes "
        "in use (pgstatindex: leaf pages x density), / rows: what is left once the free "
        "space the run's versions left behind is reused. Indexes: size (in use).",
        "",
        "| system | rep | rows | total B/job | in use B/job | heap B/job | live tuple / free "
        "| indexes B/job | toast+maps B/job |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for run, kept, label in [
        *((r, r.retained, r.label) for r in runs),
        *((r, r.second, f"{r.label}, after round 2") for r in runs if r.second is not None),
    ]:
        if kept is None:
            lines.append(f"| {label} | {run.rep} | | {run.note} | | | | | |")
            continue
        rows = max(kept.rows, 1)
        heap = sum(r["main"] for r in kept.relations if r["kind"] == "r")
        idx = [r for r in kept.relations if r["kind"] == "i" and "toast" not in r["name"]]
        rest = kept.total() - heap - sum(r["main"] for r in idx)
        live, in_use = "", ""
        if kept.live_tuple_bytes is not None:
            live = f"{_f(kept.live_tuple_bytes)} / {_f(kept.free_bytes or 0)}"
            # pgstattuple's tuple_len has the tuple headers, not the line pointers
            in_use = _f(kept.live_tuple_bytes + 4 + sum(r.get("leaf_used", 0) for r in idx) / rows)
        lines.append(
            f"| {label} | {run.rep} | {kept.rows:,} | **{_f(kept.total() / rows)}** | "
            f"{in_use} | {_f(heap / rows)} | {live} | "
            + ", ".join(
                f"{r['name']} {_f(r['main'] / rows)}"
                + (f" ({_f(r['leaf_used'] / rows)})" if "leaf_used" in r else "")
                for r in idx
            )
            + f" | {_f(rest / rows)} |"
        )
    ours = [r for r in runs if "enqueue_single" in r.phases]
    if ours:
        lines += [
            "",
            "#### pgworkerd by phase (B/job: LSN difference, and records by relation)",
            "",
        ]
        for run in ours:
            lines.append(f"{run.label}, rep {run.rep}:")
            lines.append("")
            lines.append(
                "| phase | WAL B/job | FPI B/job | by relation: record bytes (records) per job |"
            )
            lines.append("|---|---|---|---|")
            for name in [p for p in (*PHASES, *STEPS, "second_round") if p in run.phases]:
                w = run.phases[name]
                rel = sorted(w.sums("relation").items(), key=lambda kv: -kv[1]["record_bytes"])
                detail = ", ".join(
                    f"{k} {v['record_bytes']:,.0f} ({v['records']:.2f})"
                    for k, v in rel
                    if v["record_bytes"] >= 0.5
                )
                lines.append(f"| {name} | {_f(w.per_job())} | {_f(w.fpi_bytes())} | {detail} |")
            lines.append("")
            lines.append(
                "| record type, enqueue to success | records/job | record B/job | FPI B/job "
                "| B/record | two blocks |"
            )
            lines.append("|---|---|---|---|---|---|")
            for k, v in sorted(
                run.to_success().sums("type").items(), key=lambda kv: -kv[1]["record_bytes"]
            ):
                if v["record_bytes"] + v["fpi_bytes"] >= 0.5:
                    lines.append(
                        f"| {k} | {v['records']:.2f} | {v['record_bytes']:,.1f} | "
                        f"{v['fpi_bytes']:,.1f} | {v['record_bytes'] / v['records']:,.0f} | "
                        f"{v['two_blocks'] / v['records']:.0%} |"
                    )
            lines.append("")
    peers_runs = [r for r in runs if "enqueue_single" not in r.phases]
    for run in peers_runs:
        lines += [
            f"{run.label}, rep {run.rep}, by relation (record bytes (records) per job): "
            + ", ".join(
                f"{k} {v['record_bytes']:,.0f} ({v['records']:.2f})"
                for k, v in sorted(
                    run.to_success().sums("relation").items(),
                    key=lambda kv: -kv[1]["record_bytes"],
                )
                if v["record_bytes"] >= 0.5
            ),
            "",
        ]
    return "\n".join(lines) + "\n"


def main(
    *,
    out: Path,
    logs: Path,
    proto: Protocol,
    peer_names: list[str],
    peers_dir: Path,
    code: Path | None,
    reps: int,
    sql_variants: list[tuple[str, str]] = [],  # noqa: B006 (never mutated)
    rounds: int = 1,
) -> int:
    runs: list[Run] = []
    variants: list[tuple[str, Path | None, str | None]] = [("pgworkerd", None, None)]
    if code is not None:
        variants.insert(0, (f"pgworkerd {code.name}", code, None))
    variants += [(f"pgworkerd +{label}", None, sql) for label, sql in sql_variants]
    with throwaway_cluster(keep_log=logs / "postgresql.log") as cluster:
        settings = server_settings(cluster.dsn())
        reader = WalReader(cluster)
        try:
            for rep in range(1, reps + 1):
                for number, (label, variant_code, sql) in enumerate(variants):
                    tag = f"bytes_{number}_{rep}"
                    t0 = time.monotonic()

                    def ours(
                        dsn: str, tag: str = tag, c: Path | None = variant_code, q: Any = sql
                    ) -> Any:
                        return run_pgworkerd(reader, dsn, logs, tag, proto, c, q, rounds)

                    got = in_fresh_database(cluster, "bench_bytes", logs, tag, ours)
                    if got is None:
                        continue
                    kept = got.pop("retained")
                    second = got.pop("second", None)
                    assert isinstance(kept, Retained)
                    run = Run(
                        label,
                        rep,
                        proto.n,
                        {k: v for k, v in got.items() if isinstance(v, Wal)},
                        kept,
                        second=second if isinstance(second, Retained) else None,
                    )
                    runs.append(run)
                    print(
                        f"  {tag:<14} {label:<24} {time.monotonic() - t0:5.1f}s  WAL "
                        f"{run.to_success().per_job():,.0f} B/job to success, "
                        f"retained {kept.total() / max(kept.rows, 1):,.0f} B/job"
                    )
                for name in peer_names:
                    tag = f"bytes_{name}_{rep}"
                    t0 = time.monotonic()

                    def theirs(dsn: str, name: str = name, tag: str = tag) -> Any:
                        return run_peer(reader, dsn, name, peers_dir, proto, logs, tag)

                    got_peer = in_fresh_database(cluster, f"bench_{name}", logs, tag, theirs)
                    if got_peer is None:
                        continue
                    wal, kept_peer = got_peer
                    kept_one = _merge_kept(kept_peer, proto.n)
                    runs.append(
                        Run(
                            peers.PEERS[name].name,
                            rep,
                            proto.n,
                            {"harness": wal},
                            kept_one,
                        )
                    )
                    print(
                        f"  {tag:<24} {time.monotonic() - t0:5.1f}s  WAL "
                        f"{wal.per_job():,.0f} B/job (whole harness run)"
                    )
        finally:
            reader.close()
    header = [
        f"### Bytes per job, {time.strftime('%Y-%m-%d %H:%M')}: PostgreSQL "
        f"{settings.get('server_version', '?').split()[0]} durable "
        f"(full_page_writes {settings.get('full_page_writes')}), one throwaway cluster",
        "",
        f'{proto.n:,} no-op jobs (payload {{"i": 0}}), {proto.n_single:,} enqueued one '
        f"per transaction, the rest {BULK_BATCH:,} per call; pgworkerd's daemon at its "
        f"defaults ({proto.concurrency} processes on one queue); a CHECKPOINT before each "
        "system's first enqueue. Peers: their harnesses' throughput mode.",
    ]
    summary = markdown(runs, header)
    print()
    print(summary)
    report.write_run(
        out,
        summary,
        {
            "argv": sys.argv,
            "protocol": asdict(proto),
            "settings": settings,
            "runs": [_as_json(r) for r in runs],
        },
    )
    return 0


def _merge_kept(kept: list[tuple[str, Retained]], n: int) -> Retained | None:
    """A peer's tables as one Retained, per job enqueued (what they keep of n jobs)."""
    if not kept:
        return None
    relations = [r for _, k in kept for r in k.relations]
    return Retained(n, relations)


def _as_json(run: Run) -> dict[str, Any]:
    return {
        "label": run.label,
        "rep": run.rep,
        "n": run.n,
        "phases": {k: asdict(v) for k, v in run.phases.items()},
        "retained": asdict(run.retained) if run.retained else None,
        "second": asdict(run.second) if run.second else None,
    }
