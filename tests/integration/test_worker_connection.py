"""A worker's connection keeps its statements prepared from their first run."""

from __future__ import annotations

import os
import re
from typing import Any

import psycopg

import pgworkerd
from pgworkerd.storage import queries
from pgworkerd.storage.store import Backoff, JobStore
from pgworkerd.worker import WorkerSpec
from pgworkerd.worker.connection import WorkerConnection


def worker_spec(dsn: str) -> WorkerSpec:
    return WorkerSpec(
        pool="p",
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
        supervisor_pid=os.getppid(),
        worker_id="test-host:1/p#1",
    )


def as_sent(name: str) -> str:
    """Statement `name` as psycopg sends it: its `%(x)s` numbered by first use."""
    names: list[str] = []

    def placeholder(match: re.Match[str]) -> str:
        if match[1] not in names:
            names.append(match[1])
        return f"${names.index(match[1]) + 1}"

    text = queries.statements("pgworkerd")[name].decode()
    return re.sub(r"%\((\w+)\)s", placeholder, text).replace("%%", "%")


def test_the_woken_claim_and_the_look_are_prepared_at_their_first_run(
    db_dsn: str, conn: psycopg.Connection[Any]
) -> None:
    """A new (or recycled) worker's first claims parsed and planned the claim again at
    every run until psycopg's fifth: its first jobs waited for it."""
    wake_r, wake_w = os.pipe()
    connection = WorkerConnection(worker_spec(db_dsn), wake_r, lambda: False)
    try:
        worker_conn = connection.get()
        store = JobStore()
        pgworkerd.enqueue(conn, "k", {})
        jobs, _ = store.claim_one(
            worker_conn, queues=["default"], limit=10, lease_ttl_s=30, worker="test-host:1"
        )
        assert len(jobs) == 1
        store.next_run_in(worker_conn, ["default"])
        prepared = {
            row[0]
            for row in worker_conn.execute(
                "SELECT statement FROM pg_prepared_statements WHERE NOT from_sql"
            ).fetchall()
        }
        assert as_sent("jobs_claim_one") in prepared
        assert as_sent("jobs_next_run_at") in prepared
        assert worker_conn.execute("SHOW plan_cache_mode").fetchone() == ("force_generic_plan",)
    finally:
        connection._close()
        os.close(wake_r)
        os.close(wake_w)
