"""What releasing dependents costs (issue 22).

    python -m bench.workflows [--fanout 10000] [--pairs 10000] [--links 1000]

On a throwaway cluster, through the store's own claim and complete (as a worker runs
them, batch 100, one connection):
  * fan-out: one parent with `fanout` dependents; the parent's completion (the release
    of every dependent, in its statement) is timed, then the dependents are drained;
  * pairs: `pairs` parents each with one dependent (the dependents' enqueue, one
    `enqueue_many` naming a parent each, is timed); all drained, the dependents released
    one by one as their parents complete; beside the same number of plain jobs;
  * chain: a chain of `links` (its enqueue timed), drained one link at a time (each
    claimable only once the one before succeeded): links per second.
The release statement's plans (auto_explain of nested statements, ANALYZE and BUFFERS)
for the fan-out and for one pair are printed after the table.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

import psycopg

import pgworkerd
from bench.cluster import PEER_SETTINGS, fresh_database, throwaway_cluster
from pgworkerd.storage.migrations import migrate
from pgworkerd.storage.store import JobStore

BATCH = 100
PLAN_SETTINGS = {**PEER_SETTINGS, "shared_preload_libraries": "auto_explain"}
# auto_explain as a notice to this session only, for the statements the trigger runs.
EXPLAIN_ON = [
    "SET auto_explain.log_min_duration = 0",
    "SET auto_explain.log_analyze = on",
    "SET auto_explain.log_buffers = on",
    "SET auto_explain.log_nested_statements = on",
    "SET auto_explain.log_level = notice",
]
EXPLAIN_OFF = "SET auto_explain.log_min_duration = -1"

Conn = psycopg.Connection[Any]


def claim(store: JobStore, conn: Conn, limit: int) -> list[pgworkerd.Job]:
    return store.claim(
        conn, queues=["default"], limit=limit, lease_ttl_s=60, worker="bench-workflows:1"
    )


def drain(store: JobStore, conn: Conn, expected: int, limit: int = BATCH) -> float:
    """Claim and complete until `expected` jobs have succeeded; seconds taken."""
    started = time.perf_counter()
    done = 0
    idle_since = None
    while done < expected:
        jobs = claim(store, conn, limit)
        if not jobs:
            # A released job can sit behind the claim positions for up to a sweep.
            idle_since = idle_since or time.perf_counter()
            if time.perf_counter() - idle_since > 30:
                raise RuntimeError(f"stuck after {done} of {expected}")
            store.positions.sweep_soon()
            continue
        idle_since = None
        done += len(store.complete(conn, [(j.lease, None) for j in jobs]))
    return time.perf_counter() - started


def explained(conn: Conn, action: Any) -> tuple[float, list[str]]:
    """Run `action()` with auto_explain on; (seconds, the plans of the nested statements)."""
    plans: list[str] = []
    conn.add_notice_handler(lambda diag: plans.append(diag.message_primary or ""))
    for statement in EXPLAIN_ON:
        conn.execute(statement)
    started = time.perf_counter()
    action()
    seconds = time.perf_counter() - started
    conn.execute(EXPLAIN_OFF)
    return seconds, [p for p in plans if "job_dependencies" in p]


def fanout(dsn: str, store: JobStore, n: int) -> dict[str, Any]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        parent = pgworkerd.enqueue(conn, "parent", {})
        started = time.perf_counter()
        with conn.transaction():
            pgworkerd.enqueue_many(conn, [{"kind": "child", "payload": {}, "after": [parent]}] * n)
        enqueue_s = time.perf_counter() - started
        conn.execute("ANALYZE pgworkerd.jobs")
        (job,) = claim(store, conn, 1)
        release_s, plans = explained(conn, lambda: store.complete(conn, [(job.lease, None)]))
        drain_s = drain(store, conn, n)
    return {
        "enqueue_s": enqueue_s,
        "release_s": release_s,
        "drain_s": drain_s,
        "plans": plans,
    }


def pairs(dsn: str, store: JobStore, n: int) -> dict[str, Any]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        plain = pgworkerd.enqueue_many(conn, [{"kind": "plain", "payload": {}}] * (2 * n))
        conn.execute("ANALYZE pgworkerd.jobs")
        plain_s = drain(store, conn, len(plain))
        with conn.transaction():
            parents = pgworkerd.enqueue_many(conn, [{"kind": "parent", "payload": {}}] * n)
            started = time.perf_counter()
            pgworkerd.enqueue_many(
                conn, [{"kind": "child", "payload": {}, "after": [p]} for p in parents]
            )
            enqueue_s = time.perf_counter() - started
        conn.execute("ANALYZE pgworkerd.jobs")
        (job,) = claim(store, conn, 1)
        _, plans = explained(conn, lambda: store.complete(conn, [(job.lease, None)]))
        pairs_s = drain(store, conn, 2 * n - 1)
    return {"plain_s": plain_s, "enqueue_s": enqueue_s, "pairs_s": pairs_s, "plans": plans}


def chain(dsn: str, store: JobStore, n: int) -> dict[str, Any]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        started = time.perf_counter()
        with conn.transaction():
            pgworkerd.chain(conn, [{"kind": "link", "payload": {}}] * n)
        enqueue_s = time.perf_counter() - started
        conn.execute("ANALYZE pgworkerd.jobs")
        chain_s = drain(store, conn, n, limit=1)
    return {"enqueue_s": enqueue_s, "chain_s": chain_s}


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.workflows")
    parser.add_argument("--fanout", type=int, default=10_000)
    parser.add_argument("--pairs", type=int, default=10_000)
    parser.add_argument("--links", type=int, default=1_000)
    args = parser.parse_args()
    store = JobStore()
    with throwaway_cluster(settings=PLAN_SETTINGS) as cluster:
        results: dict[str, dict[str, Any]] = {}
        for name, run, n in (
            ("fanout", fanout, args.fanout),
            ("pairs", pairs, args.pairs),
            ("chain", chain, args.links),
        ):
            dsn = fresh_database(cluster, f"bench_workflows_{name}")
            with psycopg.connect(dsn, autocommit=True) as conn:
                migrate(conn, "pgworkerd")
            results[name] = run(dsn, JobStore(), n)
    f, p, c = results["fanout"], results["pairs"], results["chain"]
    print("| shape | jobs | seconds | per second |")
    print("|---|---:|---:|---:|")
    print(
        f"| fan-out: enqueue {args.fanout} dependents of one parent | {args.fanout} "
        f"| {f['enqueue_s']:.2f} | {args.fanout / f['enqueue_s']:,.0f} |"
    )
    print(
        f"| fan-out: the parent's completion (releases all) | {args.fanout} "
        f"| {f['release_s']:.3f} | {args.fanout / f['release_s']:,.0f} |"
    )
    print(
        f"| fan-out: drain the released dependents | {args.fanout} "
        f"| {f['drain_s']:.2f} | {args.fanout / f['drain_s']:,.0f} |"
    )
    print(
        f"| plain jobs, drained (batch {BATCH}) | {2 * args.pairs} "
        f"| {p['plain_s']:.2f} | {2 * args.pairs / p['plain_s']:,.0f} |"
    )
    print(
        f"| pairs: enqueue {args.pairs} dependents, one parent each | {args.pairs} "
        f"| {p['enqueue_s']:.2f} | {args.pairs / p['enqueue_s']:,.0f} |"
    )
    print(
        f"| pairs: parents and their one dependent each, drained | {2 * args.pairs - 1} "
        f"| {p['pairs_s']:.2f} | {(2 * args.pairs - 1) / p['pairs_s']:,.0f} |"
    )
    print(
        f"| chain: enqueue {args.links} links | {args.links} "
        f"| {c['enqueue_s']:.2f} | {args.links / c['enqueue_s']:,.0f} |"
    )
    print(
        f"| chain: links, one claimable at a time | {args.links} "
        f"| {c['chain_s']:.2f} | {args.links / c['chain_s']:,.0f} |"
    )
    for title, plans in (("fan-out release", f["plans"]), ("one pair's release", p["plans"])):
        print(f"\n### Plan: {title}\n\n```")
        print("\n\n".join(plans) or "(no plan captured)")
        print("```")
    del store


if __name__ == "__main__":
    main()
