"""The supervisor's periodic maintenance: renew its children's leases and heartbeat,
rescue expired leases (of any daemon); pruning is retention.py, periodic jobs
periodic.py. Each is one function over a
session and the store; when they run is the schedules' business (see __init__.py)."""

from __future__ import annotations

import json
import logging
import os
import socket
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import psycopg

from pgworkerd import logs, queries
from pgworkerd.housekeeping.session import DatabaseSession, Result
from pgworkerd.job import Lease
from pgworkerd.store import JobStore

log = logging.getLogger("pgworkerd.supervisor")


def renewal_interval_s(lease_ttl_s: float) -> float:
    return lease_ttl_s / 3


def rescue_interval_s(lease_ttl_s: float) -> float:
    return min(5.0, lease_ttl_s / 2)


@dataclass(frozen=True, slots=True)
class Renewal:
    """A renewal round trip that answered."""

    renewed: frozenset[int]  # ids of the leases still ours
    sent_at: float  # monotonic time the renewal was sent: the new expiries are later
    # Of the leases not renewed, the ids of jobs cancelled under them (the others were
    # rescued, released or ended by their holder).
    cancelled: frozenset[int] = frozenset()


def renew(
    session: DatabaseSession,
    store: JobStore,
    *,
    leases: Sequence[Lease],
    info: dict[str, Any],
    daemon_id: str,
    lease_ttl_s: float,
    sent_at: float,
) -> Renewal | None:
    """Renew `leases` and refresh our heartbeat, in one transaction; None when the
    database did not answer. A lease not renewed is looked up (cancelled?) in the same
    round of statements: the usual renewal finds every lease and pays nothing more."""

    def work(conn: psycopg.Connection[Any]) -> tuple[set[int], set[int]]:
        with conn.transaction():
            store.heartbeat(
                conn,
                daemon_id=daemon_id,
                hostname=socket.gethostname(),
                pid=os.getpid(),
                info=json.dumps(info),
            )
            renewed = store.renew(conn, leases, lease_ttl_s)
            missing = [lease for lease in leases if lease.job_id not in renewed]
            return renewed, store.cancelled_among(conn, missing)

    result = session.attempt("renew leases", work)
    if not result.ok:
        return None
    renewed, cancelled = result.value
    return Renewal(frozenset(renewed), sent_at, frozenset(cancelled))


def rescue(session: DatabaseSession, store: JobStore) -> Result[int]:
    """Retry or dead-letter jobs whose lease expired; how many."""

    def work(conn: psycopg.Connection[Any]) -> int:
        outcomes = store.rescue(conn)
        for outcome in outcomes:
            logs.event(
                log,
                logging.WARNING,
                "rescued job with expired lease",
                job=outcome.job_id,
                attempt=outcome.attempt,
                next_state=outcome.state,
            )
        return len(outcomes)

    return session.attempt("rescue", work)


def unregister(session: DatabaseSession, store: JobStore, daemon_id: str) -> Result[None]:
    """Remove our heartbeat row: we are leaving."""
    return session.attempt("unregister", lambda conn: store.remove_daemon(conn, daemon_id))


SAMPLE_INTERVAL_S = 5.0  # queue depth for the metrics: not per scrape


def sample_queues(
    session: DatabaseSession, store: JobStore, queues: Sequence[str]
) -> Result[list[tuple[str, int, float | None]]]:
    """(queue, jobs ready now, age of the oldest in seconds) for each of `queues`."""
    statement = queries.statements(store.schema)["queues_ready"]

    def work(conn: psycopg.Connection[Any]) -> list[tuple[str, int, float | None]]:
        rows = conn.execute(statement, {"queues": list(queues)}).fetchall()
        return [(str(name), int(depth), age) for name, depth, age in rows]

    return session.attempt("sample queues", work)
