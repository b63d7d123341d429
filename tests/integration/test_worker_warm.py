"""A worker's connection has its hot statements prepared before its first claim, on
every new connection (JobStore.warm, called by WorkerConnection.get), and its claims,
completions and looks then run those prepared statements."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
from psycopg import sql

import pgworkerd
from pgworkerd.storage.store import Backoff, JobStore
from pgworkerd.worker.connection import WorkerConnection
from pgworkerd.worker.spec import WorkerSpec
from tests.integration.test_claim_plan import plan_nodes, unbounded_jobs_reads


@contextlib.contextmanager
def worker_connection(
    dsn: str,
    store: JobStore,
    *,
    wake_fd: int = -1,
    stopping: Callable[[], bool] = lambda: False,
) -> Iterator[WorkerConnection]:
    spec = WorkerSpec(
        pool="default",
        index=1,
        queues=("default",),
        queue_max_attempts=(5,),
        batch_size=10,
        lease_ttl_s=30.0,
        poll_interval_s=1.0,
        database_url=dsn,
        schema="pgworkerd",
        backoff=Backoff(),
        registry={},
        max_jobs=None,
        max_memory_bytes=None,
        log_format="text",
        log_level="warning",
        supervisor_pid=os.getppid(),  # this process stands for a worker: not orphaned
        worker_id="test-host:1/default#1",
    )
    connection = WorkerConnection(spec, wake_fd=wake_fd, stopping=stopping, store=store)
    try:
        yield connection
    finally:
        connection.lost(psycopg.OperationalError("test over"))  # closes it


def prepared(conn: psycopg.Connection[Any]) -> dict[str, tuple[int, int]]:
    """The statements prepared on `conn` (its own session): (generic, custom) plans used."""
    rows = conn.execute(
        "SELECT statement, generic_plans, custom_plans FROM pg_prepared_statements"
    ).fetchall()
    return {statement: (generic, custom) for statement, generic, custom in rows}


def test_a_new_connection_is_warmed_before_its_first_claim_and_its_runs_reuse_it(conn, db_dsn):
    [job_id] = pgworkerd.enqueue_many(conn, [{"kind": "k", "payload": {}}])
    store = JobStore()
    with worker_connection(db_dsn, store) as connection:
        worker_conn = connection.get()
        check_warmed_and_reused(conn, store, worker_conn, job_id)


def check_warmed_and_reused(
    conn: psycopg.Connection[Any],
    store: JobStore,
    worker_conn: psycopg.Connection[Any],
    job_id: int,
) -> None:

    warmed = prepared(worker_conn)
    # Levels, next run, complete, claim one, claim, complete and claim: each run once,
    # on the generic plan that the worker's plan_cache_mode asks for.
    assert len(warmed) == 6
    assert set(warmed.values()) == {(1, 0)}
    # Warming claimed nothing, changed nothing.
    assert conn.execute(
        "SELECT state, attempt, lease_token FROM pgworkerd.jobs WHERE id = %s", (job_id,)
    ).fetchone() == ("queued", 0, None)

    # A worker's first look, woken claim, batch claims and completion: all on the
    # statements prepared, none planned or prepared anew.
    scope: dict[str, Any] = {"queues": ["default"], "lease_ttl_s": 30.0, "worker": "w"}
    assert store.next_run_in(worker_conn, ["default"]) is not None
    [job], _ = store.claim_one(worker_conn, limit=10, **scope)
    assert job.id == job_id
    pgworkerd.enqueue_many(conn, [{"kind": "k", "payload": {}}])
    _, [second] = store.complete_and_claim(worker_conn, [(job.lease, None)], limit=10, **scope)
    assert store.claim(worker_conn, limit=10, **scope) == []
    assert store.complete(worker_conn, [(second.lease, None)]) == {second.id}
    after = prepared(worker_conn)
    assert after.keys() == warmed.keys()
    assert all(generic >= 2 and custom == 0 for generic, custom in after.values())


def test_a_reconnect_warms_the_new_connection(db_dsn):
    with worker_connection(db_dsn, JobStore()) as connection:
        first = connection.get()
        connection.lost(psycopg.OperationalError("gone"))
        assert first.closed
        second = connection.get()
        assert second is not first and connection.epoch == 2
        assert len(prepared(second)) == 6


def generic_plans(conn: psycopg.Connection[Any]) -> dict[str, dict[str, Any]]:
    """The plan cached for each statement prepared on `conn` (its own session), by the
    statement's text: force_generic_plan shows the generic plan whatever the values, so
    each is explained with NULLs."""
    rows = conn.execute(
        "SELECT name, statement, cardinality(parameter_types) FROM pg_prepared_statements"
    ).fetchall()
    plans = {}
    for name, statement, arity in rows:
        nulls = sql.SQL(", ").join([sql.NULL] * arity)
        explain = sql.SQL("EXPLAIN (FORMAT JSON) EXECUTE {} ({})").format(
            sql.Identifier(name), nulls
        )
        plans[statement] = conn.execute(explain).fetchone()[0][0]["Plan"]
    return plans


def jobs_reads(plan: dict[str, Any]) -> list[tuple[str, str | None]]:
    """(node type, index name) of each node of `plan` that reads the jobs table, a
    bitmap heap scan named by its bitmap's index."""
    return [
        (
            node["Node Type"],
            node.get("Index Name")
            or next((c.get("Index Name") for c in plan_nodes(node) if c.get("Index Name")), None),
        )
        for node in plan_nodes(plan)
        if node.get("Relation Name") == "jobs" and node["Node Type"] != "ModifyTable"
    ]


def test_the_plans_warmed_on_an_empty_table_read_jobs_by_its_indexes(db_dsn):
    """Warmed at connect on a new, empty jobs table (never analyzed: no statistics), as
    a fresh install's workers warm them. The plans are kept until the table's statistics
    change, and a seq scan of jobs there reads every dead version while a snapshot is
    held (tests/process/test_held_snapshot_daemon.py). The worker's connection has no
    seq scans (WORKER_OPTIONS): the claims read jobs_claim_idx, the updates by id the
    primary key, as on a big table (tests/integration/test_claim_plan.py)."""
    with worker_connection(db_dsn, JobStore()) as connection:
        worker_conn = connection.get()
        assert worker_conn.execute(
            "SELECT relpages, reltuples FROM pg_class WHERE oid = 'pgworkerd.jobs'::regclass"
        ).fetchone() == (0, -1)
        plans = generic_plans(worker_conn)
    assert len(plans) == 6
    for statement, plan in plans.items():
        reads = jobs_reads(plan)
        assert reads, statement
        assert all(index is not None for _, index in reads), (statement[:40], reads)
        # On an index and bounded by a condition on it: not a walk of the whole index.
        assert not unbounded_jobs_reads(plan), (statement[:40], unbounded_jobs_reads(plan))
        if statement.startswith("WITH RECURSIVE completed"):  # complete and claim
            assert {index for _, index in reads} == {"jobs_pkey", "jobs_claim_idx"}, reads
