"""The claim query stays on its partial index with millions of rows it must ignore."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import psycopg
from psycopg import sql

import pgworkerd
from pgworkerd import queries

CLAIM_PARAMS = {"queues": ["default", "other"], "queue_max_attempts": [5, 5], "limit": 10,
                "lease_ttl_s": 30.0, "worker": "explain"}


def plan_nodes(node: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield node
    for child in node.get("Plans", []):
        yield from plan_nodes(child)


def explain_claim(conn: psycopg.Connection[Any]) -> dict[str, Any]:
    """EXPLAIN ANALYZE of a real claim, rolled back so the data stays as it is."""
    statement = sql.SQL("EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) ") + \
        queries.statements("pgworkerd")["jobs_claim"]
    with conn.transaction(force_rollback=True):
        raw = conn.execute(statement, CLAIM_PARAMS).fetchone()[0]
    return (raw if isinstance(raw, list) else json.loads(raw))[0]["Plan"]


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
    touched = plan["Shared Hit Blocks"] + plan["Shared Read Blocks"]
    assert touched < 300, f"claim touched {touched} pages"
