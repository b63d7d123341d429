"""Helpers shared by the JobStore tests."""

from __future__ import annotations

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
