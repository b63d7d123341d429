"""The indexes of the jobs table after migration 0014: dead and waiting jobs share one
partial index (PostgreSQL opens every index of the table, and plans every partial
index's predicate, at each insert and update of a job), and the readers of the two it
replaced read it: the dashboard's dead count alone from it, the waiting gauge from it."""

from __future__ import annotations

import time
from typing import Any

import psycopg

from pgworkerd.storage import queries

# Every index of jobs, and what it is for (docs/design.md, "Which indexes jobs has").
INDEXES = {
    "jobs_pkey",
    "jobs_claim_idx",
    "jobs_unique_key_idx",
    "jobs_lease_expiry_idx",
    "jobs_finished_idx",
    "jobs_key_claim_idx",
    "jobs_key_queued_idx",
    "jobs_dead_or_waiting_idx",
    "jobs_after_idx",
}


def _scans(node: dict[str, Any]) -> Any:
    """(node type, index or relation) of every scan in a JSON plan."""
    if "Scan" in node["Node Type"]:
        yield node["Node Type"], node.get("Index Name") or node.get("Relation Name")
    for child in node.get("Plans", []):
        yield from _scans(child)


def _plan_scans(conn: psycopg.Connection[Any], name: str, params: Any) -> list[Any]:
    query = queries.statements("pgworkerd")[name]
    plan = conn.execute(b"EXPLAIN (FORMAT JSON) " + query, params).fetchone()[0]
    return list(_scans(plan[0]["Plan"]))


def _vacuum_until_all_visible(conn: psycopg.Connection[Any], seconds: float = 60.0) -> None:
    """VACUUM ANALYZE jobs until every page of it is marked all-visible: the premise of
    an index-only scan. A transaction holding an xid anywhere in the cluster (this
    suite's thread creating the next test's database, for one) keeps VACUUM from
    marking the pages of rows inserted after it; with none marked, the planner costs an
    index-only scan as a plain index scan and a bitmap over jobs_finished_idx can come
    out cheaper (the plan a CI run once saw)."""
    deadline = time.monotonic() + seconds
    while True:
        conn.execute("VACUUM ANALYZE pgworkerd.jobs")
        pages, visible = conn.execute(
            "SELECT relpages, relallvisible FROM pg_class WHERE oid = 'pgworkerd.jobs'::regclass"
        ).fetchone()
        if visible == pages:
            return
        assert time.monotonic() < deadline, f"{visible} of {pages} pages all-visible"
        time.sleep(0.2)


def test_jobs_has_one_index_of_dead_and_waiting_jobs(conn):
    names = {
        r[0]
        for r in conn.execute(
            "SELECT indexrelid::regclass::text FROM pg_index"
            " WHERE indrelid = 'pgworkerd.jobs'::regclass"
        ).fetchall()
    }
    assert {n.removeprefix("pgworkerd.") for n in names} == INDEXES
    (definition,) = conn.execute(
        "SELECT pg_get_indexdef('pgworkerd.jobs_dead_or_waiting_idx'::regclass)"
    ).fetchone()
    assert definition.endswith("(state, queue) WHERE (state = ANY ('{dead,waiting}'::text[]))"), (
        definition
    )


def test_the_dead_count_and_the_waiting_gauge_read_that_index(conn):
    """50,000 succeeded, 500 dead and 500 waiting jobs: each reader takes its state's
    range of jobs_dead_or_waiting_idx (the dead count from the index alone), never a
    pass over the table, and counts what it did."""
    conn.execute(
        "INSERT INTO pgworkerd.jobs (queue, kind, payload, state, finished_at)"
        " SELECT 'q' || (n % 3), 'k', '{}', 'succeeded', now()"
        " FROM generate_series(1, 50000) n"
    )
    conn.execute(
        "INSERT INTO pgworkerd.jobs (queue, kind, payload, state, finished_at)"
        " SELECT 'q' || (n % 3), 'k', '{}', 'dead', now() FROM generate_series(1, 500) n"
    )
    conn.execute(
        "INSERT INTO pgworkerd.jobs (queue, kind, payload, state)"
        " SELECT 'q' || (n % 2), 'k', '{}', 'waiting' FROM generate_series(1, 500) n"
    )
    _vacuum_until_all_visible(conn)
    queues = {"queues": ["q0", "q1", "q2"]}
    dead = _plan_scans(conn, "dashboard_dead_by_queue", {})
    assert dead == [("Index Only Scan", "jobs_dead_or_waiting_idx")], dead
    for name, params in [("queues_waiting", queues), ("dashboard_queues_live", {})]:
        scans = _plan_scans(conn, name, params)
        assert any(rel == "jobs_dead_or_waiting_idx" for _, rel in scans), (name, scans)
        assert not any(node == "Seq Scan" and rel == "jobs" for node, rel in scans), scans
    statements = queries.statements("pgworkerd")
    counted = dict(conn.execute(statements["dashboard_dead_by_queue"]).fetchall())
    assert counted == {"q0": 166, "q1": 167, "q2": 167}
    waiting = dict(conn.execute(statements["queues_waiting"], queues).fetchall())
    assert waiting == {"q0": 250, "q1": 250, "q2": 0}
