"""The claim query stays on its partial index with millions of rows it must ignore."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from psycopg import sql

import pgworkerd
from pgworkerd.storage import queries
from pgworkerd.storage.store import JobStore
from pgworkerd.worker import WORKER_OPTIONS, WORKER_PLAN_CACHE_MODE

# The levels and positions as JobStore's ClaimPositions passes them: here as a sweep
# does, every level from its start (the most a claim may walk).
LEVELS = {
    "level_queues": ["default", "other"],
    "level_priorities": [0, 0],
    "level_after_run_at": [None, None],
    "level_after_id": [None, None],
}
CLAIM_PARAMS = {
    **LEVELS,
    "queues": ["default", "other"],
    "queue_max_attempts": [5, 5],
    "limit": 10,
    "lease_ttl_s": 30.0,
    "worker": "explain",
}


def plan_nodes(node: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield node
    for child in node.get("Plans", []):
        yield from plan_nodes(child)


def jobs_scans(plan: dict[str, Any]) -> list[tuple[str, str | None]]:
    """(node type, index name) of each node of `plan` that reads or writes the jobs table."""
    return [
        (n["Node Type"], n.get("Index Name"))
        for n in plan_nodes(plan)
        if n.get("Relation Name") == "jobs"
    ]


def unbounded_jobs_reads(plan: dict[str, Any]) -> list[tuple[str, str | None]]:
    """(node type, index name) of each node of `plan` that reads the jobs table with no
    condition on an index: a seq scan, or an index scan without an Index Cond (a walk
    of the whole index, as slow as a seq scan on a big table). A bitmap heap scan's
    condition is its Recheck Cond."""
    return [
        (n["Node Type"], n.get("Index Name"))
        for n in plan_nodes(plan)
        if n.get("Relation Name") == "jobs"
        and n["Node Type"] != "ModifyTable"
        and "Index Cond" not in n
        and "Recheck Cond" not in n
    ]


# Workers run their statements with generic plans (worker.WORKER_PLAN_CACHE_MODE): each
# plan is checked both ways, planned for the parameters' values and planned blind.
PLAN_MODES = ("auto", WORKER_PLAN_CACHE_MODE)


def explain(
    conn: psycopg.Connection[Any],
    name: str,
    params: dict[str, Any],
    *,
    plan_cache_mode: str = "auto",
) -> dict[str, Any]:
    """EXPLAIN ANALYZE of a real run of statement `name`, rolled back so the data stays
    as it is. Run as a named prepared statement, as psycopg runs the workers' hot
    statements, so plan_cache_mode decides between a plan for these values and the
    generic one."""
    names: list[str] = []

    def placeholder(match: re.Match[str]) -> str:
        if match[1] not in names:
            names.append(match[1])
        return f"${names.index(match[1]) + 1}"

    text = queries.statements("pgworkerd")[name].decode()
    body = re.sub(r"%\((\w+)\)s", placeholder, text).replace("%%", "%")
    conn.execute(f"PREPARE explained AS {body}".encode())
    try:
        with conn.transaction(force_rollback=True):
            conn.execute("SELECT set_config('plan_cache_mode', %s, true)", (plan_cache_mode,))
            types = conn.execute(
                "SELECT parameter_types::text[] FROM pg_prepared_statements"
                " WHERE name = 'explained'"
            ).fetchone()[0]
            # Values inlined: a utility statement's own parameters would have no types.
            arguments = sql.SQL(", ").join(
                sql.SQL("{}::{}").format(sql.Literal(params[n]), sql.SQL(type_name))
                for n, type_name in zip(names, types, strict=True)
            )
            raw = conn.execute(
                sql.SQL(
                    "EXPLAIN (ANALYZE, VERBOSE, BUFFERS, FORMAT JSON) EXECUTE explained ({})"
                ).format(arguments)
            ).fetchone()[0]
    finally:
        conn.execute("DEALLOCATE explained")
    return (raw if isinstance(raw, list) else json.loads(raw))[0]["Plan"]


def pages_touched(plan: dict[str, Any]) -> int:
    return plan["Shared Hit Blocks"] + plan["Shared Read Blocks"]


@pytest.mark.slow  # a million rows: filled once a session (tests/integration/conftest.py)
def test_claim_uses_the_partial_index_with_a_million_finished_and_future_rows(
    finished_and_future_conn,
):
    conn = finished_and_future_conn

    for mode in PLAN_MODES:
        plan = explain(conn, "jobs_claim", CLAIM_PARAMS, plan_cache_mode=mode)
        scans = jobs_scans(plan)
        assert ("Seq Scan", None) not in scans, (mode, scans)
        assert not unbounded_jobs_reads(plan), (mode, unbounded_jobs_reads(plan))
        assert any(index == "jobs_claim_idx" for _, index in scans), (mode, scans)
        assert plan["Actual Rows"] == 11  # and claim_meta's row
        # Buffers, not time: the claim touches a few pages, not the millions of rows.
        touched = pages_touched(plan)
        assert touched < 300, f"claim touched {touched} pages ({mode})"

    # The worker's other statements on its hot path, on the same table.
    statements = {
        "jobs_next_run_at": {**LEVELS, "queues": ["default", "other"]},
        "jobs_levels": {"queues": ["default", "other"]},
        "jobs_complete_and_claim": {**CLAIM_PARAMS, "ids": [], "tokens": [], "results": []},
    }
    for (name, params), mode in [
        (item, mode) for item in statements.items() for mode in PLAN_MODES
    ]:
        plan = explain(conn, name, params, plan_cache_mode=mode)
        scans = jobs_scans(plan)
        assert ("Seq Scan", None) not in scans, (name, mode, scans)
        assert not unbounded_jobs_reads(plan), (name, mode, unbounded_jobs_reads(plan))
        assert pages_touched(plan) < 300, (name, mode, pages_touched(plan))


def test_completing_a_batch_does_not_read_the_finished_rows(conn):
    """A batch's completion, and the look-up of completions a lost reply hid (docs/faults.md,
    "Outcome committed, reply lost"), go
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
    params = {
        "ids": [job.id for job in jobs],
        "tokens": [job.lease_token for job in jobs],
        "results": [None] * len(jobs),
    }
    for name, mode in [
        (name, mode)
        for name in ("jobs_complete", "jobs_completed_by_leases")
        for mode in PLAN_MODES
    ]:
        plan = explain(conn, name, params, plan_cache_mode=mode)
        scans = {
            n.get("Index Name") or n["Node Type"]
            for n in plan_nodes(plan)
            if n.get("Relation Name") == "jobs" and n["Node Type"] != "ModifyTable"
        }
        assert scans == {"jobs_pkey"}, (name, mode, scans)
        assert not unbounded_jobs_reads(plan), (name, mode, unbounded_jobs_reads(plan))
        assert pages_touched(plan) < 2000, (name, mode, pages_touched(plan))


def test_a_paused_queue_costs_the_claim_nothing_however_many_jobs_wait_in_it(conn):
    """The pause is an anti-join on the small paused_queues table inside the claim's list
    of queues: the paused queue's jobs, ready or not, are never read, and the claim
    stays on its index."""
    conn.execute("""
        INSERT INTO pgworkerd.jobs (queue, kind, payload)
        SELECT 'other', 'k', '{}' FROM generate_series(1, 200000)""")
    pgworkerd.enqueue_many(conn, [{"kind": "k", "payload": {}} for _ in range(20)])
    pgworkerd.pause_queue(conn, "other")
    conn.execute("VACUUM ANALYZE pgworkerd.jobs")
    # Paused queue first in claim order: unpaused, it would be the one claimed.
    params = {**CLAIM_PARAMS, "queues": ["other", "default"]}
    statements = {
        "jobs_claim": params,
        "jobs_complete_and_claim": {**params, "ids": [], "tokens": [], "results": []},
        "jobs_next_run_at": {**LEVELS, "queues": ["other", "default"]},
    }
    for (name, statement_params), mode in [
        (item, mode) for item in statements.items() for mode in PLAN_MODES
    ]:
        plan = explain(conn, name, statement_params, plan_cache_mode=mode)
        scans = jobs_scans(plan)
        assert ("Seq Scan", None) not in scans, (name, mode, scans)
        assert not unbounded_jobs_reads(plan), (name, mode, unbounded_jobs_reads(plan))
        assert any(index == "jobs_claim_idx" for _, index in scans), (name, mode, scans)
        assert pages_touched(plan) < 300, (name, mode, pages_touched(plan))
        if name == "jobs_claim":
            assert plan["Actual Rows"] == 11, (mode, plan["Actual Rows"])  # + claim_meta
    claimed = JobStore().claim(
        conn, queues=["other", "default"], limit=10, lease_ttl_s=30, worker="w"
    )
    assert {job.queue for job in claimed} == {"default"}


def test_a_workers_plans_made_on_an_empty_table_read_jobs_by_its_indexes(db_dsn):
    """The generic plans of the worker's hot statements, made on a new jobs table (no
    rows, never analyzed), as a worker's connection makes them (WORKER_OPTIONS) when it
    prepares them at connect (JobStore.warm). A plan is kept until the table's statistics
    change; one made on an empty table with seq scans allowed updated the claimed and
    the completed rows by a seq scan of jobs, which a held snapshot makes read every
    dead version (tests/process/test_held_snapshot_daemon.py)."""
    ids = {"ids": [1, 2], "tokens": [None, None], "results": [None, None]}
    statements = {
        "jobs_claim": CLAIM_PARAMS,
        "jobs_claim_one": CLAIM_PARAMS,
        "jobs_complete_and_claim": {**CLAIM_PARAMS, **ids},
        "jobs_complete": ids,
        "jobs_completed_by_leases": ids,
        "jobs_next_run_at": {**LEVELS, "queues": ["default", "other"]},
        "jobs_levels": {"queues": ["default", "other"]},
    }
    with psycopg.connect(db_dsn, autocommit=True, options=WORKER_OPTIONS) as conn:
        assert conn.execute(
            "SELECT relpages, reltuples FROM pg_class WHERE oid = 'pgworkerd.jobs'::regclass"
        ).fetchone() == (0, -1)
        for name, params in statements.items():
            plan = explain(conn, name, params, plan_cache_mode=WORKER_PLAN_CACHE_MODE)
            scans = jobs_scans(plan)
            assert scans and ("Seq Scan", None) not in scans, (name, scans)
            assert not unbounded_jobs_reads(plan), (name, unbounded_jobs_reads(plan))


def test_an_index_scan_without_a_condition_counts_as_unbounded() -> None:
    """A plan as PostgreSQL shapes one that walks a whole index (no Index Cond): the
    check above must reject it, where "on an index" alone let it pass."""
    walk = {"Node Type": "Index Scan", "Relation Name": "jobs", "Index Name": "jobs_pkey"}
    bounded = {**walk, "Index Cond": "(jobs.id = ANY ($1))"}
    bitmap = {
        "Node Type": "Bitmap Heap Scan",
        "Relation Name": "jobs",
        "Recheck Cond": "(jobs.id = ANY ($1))",
        "Plans": [{"Node Type": "Bitmap Index Scan", "Index Name": "jobs_pkey"}],
    }
    update = {"Node Type": "ModifyTable", "Relation Name": "jobs"}
    assert unbounded_jobs_reads({**update, "Plans": [walk]}) == [("Index Scan", "jobs_pkey")]
    assert unbounded_jobs_reads({**update, "Plans": [bounded, bitmap]}) == []
    seq = {"Node Type": "Seq Scan", "Relation Name": "jobs"}
    assert unbounded_jobs_reads(seq) == [("Seq Scan", None)]
