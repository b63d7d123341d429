"""Helpers shared by the JobStore tests."""

from __future__ import annotations

import time
import uuid
from datetime import datetime
from typing import Any

import psycopg

import pgworkerd
from pgworkerd.job import Lease
from pgworkerd.storage.store import JobStore

Conn = psycopg.Connection[Any]


def claim(store: JobStore, conn: Conn, limit: int = 10, **kwargs: Any) -> list[pgworkerd.Job]:
    options = {"queues": ["default"], "lease_ttl_s": 30, "worker": "test-host:1"} | kwargs
    return store.claim(conn, limit=limit, **options)


def db_now(conn: Conn) -> datetime:
    return conn.execute("SELECT now()").fetchone()[0]


def expire_leases(conn: Conn) -> None:
    conn.execute(
        "UPDATE pgworkerd.jobs SET lease_expires_at = now() - interval '1 second'"
        " WHERE state = 'running'"
    )


def stale(lease: Lease) -> Lease:
    return Lease(lease.job_id, uuid.uuid4())


def blocked(conn: Conn, session: Conn) -> bool:
    """Whether `session` is waiting for a lock another session holds."""
    row = conn.execute(
        "SELECT cardinality(pg_blocking_pids(%s::int)) > 0", [session.info.backend_pid]
    ).fetchone()
    return bool(row and row[0])


def wait_blocked(conn: Conn, session: Conn, what: str) -> None:
    """Until `session` waits for a lock (seen by `conn`): `what` fails the test if it
    never does within 10 s."""
    deadline = time.monotonic() + 10
    while not blocked(conn, session):
        assert time.monotonic() < deadline, f"{what} never waited for a lock"
        time.sleep(0.02)
