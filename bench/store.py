"""Job store benchmark: enqueue (on a Connection and on an AsyncConnection) and
claim+complete rates, beside a raw psycopg reference measured in the same run on the
same throwaway cluster (durable commits, as the peers).

    python -m bench.store [--single 2000] [--bulk 10000] [--claim-jobs 20000]

The reference is the smallest thing that could do the same work (the shape of the
peers' bench_rawpsycopg.py harness): INSERT one row, INSERT ... SELECT FROM
unnest, and claim with SKIP LOCKED then DELETE; the ratio says what our bookkeeping
(leases, attempts, validation, ordering) costs on top of it.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import psycopg

import pgworkerd
from pgworkerd.storage.embedded import EmbeddedCluster, free_port
from pgworkerd.storage.migrations import migrate
from pgworkerd.storage.store import JobStore

RAW_SCHEMA = """
CREATE TABLE raw_jobs (
    id bigserial PRIMARY KEY,
    queue text NOT NULL DEFAULT 'default',
    status smallint NOT NULL DEFAULT 0,
    payload jsonb NOT NULL
);
CREATE INDEX raw_jobs_queued ON raw_jobs (queue, id) WHERE status = 0;
"""
RAW_INSERT = "INSERT INTO raw_jobs (payload) VALUES (%s::jsonb)"
RAW_INSERT_MANY = "INSERT INTO raw_jobs (payload) SELECT unnest(%s::text[])::jsonb"
RAW_CLAIM = """
WITH c AS (SELECT id FROM raw_jobs WHERE queue = 'default' AND status = 0
           ORDER BY id LIMIT %s FOR UPDATE SKIP LOCKED)
UPDATE raw_jobs j SET status = 1 FROM c WHERE j.id = c.id RETURNING j.id, j.payload
"""
RAW_ACK = "DELETE FROM raw_jobs WHERE id = ANY(%s)"

Conn = psycopg.Connection[Any]
Row = tuple[str, float, float]  # what, pgworkerd jobs/s, raw SQL jobs/s


def rate(count: int, work: Callable[[], None]) -> float:
    started = time.perf_counter()
    work()
    return count / (time.perf_counter() - started)


def reset(conn: Conn) -> None:
    conn.execute("TRUNCATE pgworkerd.jobs, raw_jobs")
    conn.execute("VACUUM ANALYZE pgworkerd.jobs")
    conn.execute("VACUUM ANALYZE raw_jobs")


def bench_enqueue_single(conn: Conn, n: int) -> tuple[float, float]:
    ours = rate(n, lambda: [pgworkerd.enqueue(conn, "noop", {"i": i}) for i in range(n)])
    raw = rate(n, lambda: [conn.execute(RAW_INSERT, (json.dumps({"i": i}),)) for i in range(n)])
    return ours, raw


def bench_enqueue_bulk(conn: Conn, n: int, rounds: int = 3) -> tuple[float, float]:
    jobs = [{"kind": "noop", "payload": {"i": i}} for i in range(n)]
    payloads = [json.dumps({"i": i}) for i in range(n)]
    ours = max(rate(n, lambda: pgworkerd.enqueue_many(conn, jobs)) for _ in range(rounds))
    raw = max(rate(n, lambda: conn.execute(RAW_INSERT_MANY, (payloads,))) for _ in range(rounds))
    return ours, raw


async def arate(count: int, work: Callable[[], Awaitable[object]]) -> float:
    started = time.perf_counter()
    await work()
    return count / (time.perf_counter() - started)


async def bench_enqueue_async(dsn: str, n_single: int, n_bulk: int, rounds: int = 3) -> list[Row]:
    """`bench_enqueue_single` and `bench_enqueue_bulk` on an AsyncConnection, the raw
    reference async too."""
    jobs = [{"kind": "noop", "payload": {"i": i}} for i in range(n_bulk)]
    payloads = [json.dumps({"i": i}) for i in range(n_bulk)]
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as aconn:

        async def ours_single() -> None:
            for i in range(n_single):
                await pgworkerd.enqueue_async(aconn, "noop", {"i": i})

        async def raw_single() -> None:
            for i in range(n_single):
                await aconn.execute(RAW_INSERT, (json.dumps({"i": i}),))

        single = (await arate(n_single, ours_single), await arate(n_single, raw_single))
        ours_bulk = raw_bulk = 0.0
        for _ in range(rounds):  # the best of `rounds`, as bench_enqueue_bulk
            ours = await arate(n_bulk, lambda: pgworkerd.enqueue_many_async(aconn, jobs))
            raw = await arate(n_bulk, lambda: aconn.execute(RAW_INSERT_MANY, (payloads,)))
            ours_bulk, raw_bulk = max(ours_bulk, ours), max(raw_bulk, raw)
    return [
        ("enqueue_async, one job per transaction", *single),
        (f"enqueue_many_async, {n_bulk:,} jobs per call", ours_bulk, raw_bulk),
    ]


def bench_claim_complete(conn: Conn, n: int, batch: int) -> tuple[float, float]:
    reset(conn)
    store = JobStore()
    pgworkerd.enqueue_many(conn, [{"kind": "noop", "payload": {"i": i}} for i in range(n)])
    conn.execute(RAW_INSERT_MANY, ([json.dumps({"i": i}) for i in range(n)],))
    conn.execute("ANALYZE pgworkerd.jobs")
    conn.execute("ANALYZE raw_jobs")

    def ours() -> None:
        while jobs := store.claim(
            conn, queues=["default"], limit=batch, lease_ttl_s=30, worker="bench"
        ):
            store.complete(conn, [(job.lease, None) for job in jobs])

    def raw() -> None:
        while rows := conn.execute(RAW_CLAIM, (batch,)).fetchall():
            conn.execute(RAW_ACK, ([row[0] for row in rows],))

    return rate(n, ours), rate(n, raw)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--single", type=int, default=2000, help="jobs enqueued one by one")
    parser.add_argument("--bulk", type=int, default=10_000, help="jobs per enqueue_many call")
    parser.add_argument(
        "--claim-jobs",
        type=int,
        default=20_000,
        help="jobs drained per claim batch size (batch 1 drains a quarter)",
    )
    args = parser.parse_args()

    cluster = EmbeddedCluster(
        base_dir=Path(tempfile.mkdtemp(prefix="pgworkerd-bench-")), port=free_port()
    )
    try:
        cluster.ensure_running()
        with psycopg.connect(cluster.dsn(), autocommit=True) as conn:
            migrate(conn, "pgworkerd")
            conn.execute(RAW_SCHEMA)
            rows = [
                ("enqueue, one job per transaction", *bench_enqueue_single(conn, args.single)),
                (
                    f"enqueue_many, {args.bulk:,} jobs per call",
                    *bench_enqueue_bulk(conn, args.bulk),
                ),
                *asyncio.run(bench_enqueue_async(cluster.dsn(), args.single, args.bulk)),
            ]
            for batch in (1, 10, 100):
                n = args.claim_jobs // 4 if batch == 1 else args.claim_jobs
                rows.append(
                    (
                        f"claim+complete, batch {batch}, 1 process",
                        *bench_claim_complete(conn, n, batch),
                    )
                )
            settings = dict(
                conn.execute(
                    "SELECT name, setting FROM pg_settings WHERE name IN "
                    "('fsync', 'synchronous_commit', 'server_version')"
                ).fetchall()
            )
    finally:
        cluster.destroy()

    print(
        f"PostgreSQL {settings['server_version']}, fsync={settings['fsync']}, "
        f"synchronous_commit={settings['synchronous_commit']}, psycopg {psycopg.__version__}"
    )
    print(f"| {'what':<42} | {'pgworkerd jobs/s':>16} | {'raw SQL jobs/s':>14} | {'ratio':>5} |")
    print(f"|{'-' * 44}|{'-' * 18}|{'-' * 16}|{'-' * 7}|")
    for what, ours, raw in rows:
        print(f"| {what:<42} | {ours:>16,.0f} | {raw:>14,.0f} | {ours / raw:>5.2f} |")


if __name__ == "__main__":
    main()
