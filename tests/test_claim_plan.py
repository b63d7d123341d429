"""The claim query stays on its partial index with millions of rows it must ignore."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import psycopg

import pgworkerd
from pgworkerd import queries
from pgworkerd.store import JobStore

CLAIM_PARAMS = {"queues": ["default", "other"], "queue_max_attempts": [5, 5], "limit": 10,
                "lease_ttl_s": 30.0, "worker": "explain"}


def plan_nodes(node: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield node
    for child in node.get("Plans", []):
        yield from plan_nodes(child)


def explain(conn: psycopg.Connection[Any], name: str, params: dict[str, Any]) -> dict[str, Any]:
    """EXPLAIN ANALYZE of a real run of statement `name`, rolled back so the data stays
    as it is."""
    statement = b"EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + queries.statements("pgworkerd")[name]
    with conn.transaction(force_rollback=True):
        raw = conn.execute(statement, params).fetchone()[0]
    return (raw if isinstance(raw, list) else json.loads(raw))[0]["Plan"]


def explain_claim(conn: psycopg.Connection[Any]) -> dict[str, Any]:
    return explain(conn, "jobs_claim", CLAIM_PARAMS)


def pages_touched(plan: dict[str, Any]) -> int:
    return plan["Shared Hit Blocks"] + plan["Shared Read Blocks"]


def test_claim_uses_the_partial_index_with_a_million_finished_and_future_rows(conn):
    conn.execute("""
        INSERT INTO pgworkerd.jobs (queue, kind, payload, state, attempt, max_attempts,
                                    finished_at)
        SELECT 'default', 'k', '{}', 'succeeded', 1, 5, now()
        FROM generate_series(1, 1000000)""")
    conn.execute("""
        INSERT INTO pgworkerd.jobs (queue, kind, payload, run_at)
        SELECT 'default', 'k', '{}', now() + interval '1 day'
        FROM generate_series(1, 1000000)""")
    pgworkerd.enqueue_many(conn, [{"kind": "k", "payload": {}} for _ in range(20)])
    conn.execute("VACUUM ANALYZE pgworkerd.jobs")

    plan = explain_claim(conn)
    nodes = list(plan_nodes(plan))
    scans = [(n["Node Type"], n.get("Index Name")) for n in nodes
             if n.get("Relation Name") == "jobs"]
    assert ("Seq Scan", None) not in scans, scans
    assert any(index == "jobs_claim_idx" for _, index in scans), scans
    assert plan["Actual Rows"] == 10
    # Buffers, not time: the claim touches a few pages, not the millions of rows.
    touched = pages_touched(plan)
    assert touched < 300, f"claim touched {touched} pages"


def test_completing_a_batch_does_not_read_the_finished_rows(conn):
    """A batch's completion, and the look-up of completions a lost reply hid (§6), go
    by primary key: a million finished rows cost them nothing. (Both once walked the
    finished rows: 97 ms per batch of 100 at 50,000 of them.)"""
    conn.execute("""
        INSERT INTO pgworkerd.jobs (queue, kind, payload, state, attempt, max_attempts,
                                    finished_at, lease_token)
        SELECT 'default', 'k', '{}', 'succeeded', 1, 5, now(), gen_random_uuid()
        FROM generate_series(1, 1000000)""")
    pgworkerd.enqueue_many(conn, [{"kind": "k", "payload": {}} for _ in range(100)])
    conn.execute("VACUUM ANALYZE pgworkerd.jobs")
    jobs = JobStore().claim(conn, queues=["default"], limit=100, lease_ttl_s=30, worker="w")
    params = {"ids": [job.id for job in jobs], "tokens": [job.lease_token for job in jobs],
              "results": [None] * len(jobs)}
    for name in ("jobs_complete", "jobs_completed_by_leases"):
        plan = explain(conn, name, params)
        scans = {n.get("Index Name") or n["Node Type"] for n in plan_nodes(plan)
                 if n.get("Relation Name") == "jobs" and n["Node Type"] != "ModifyTable"}
        assert scans == {"jobs_pkey"}, (name, scans)
        assert pages_touched(plan) < 2000, (name, pages_touched(plan))
