"""Notifications received on the session's connection (the daemon's one listening
connection): enqueues, which name their queue, cancels of running jobs, which name
their leases (pgworkerd/housekeeping/cancelling.py), and key pauses, which name their
key (`pause KEY` on the cancel channel: the workers give back the jobs of the key they
claimed and have not started)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import psycopg

from pgworkerd.housekeeping.cancelling import leases_in
from pgworkerd.housekeeping.session import DatabaseSession
from pgworkerd.job import Lease

# A notification on the cancel channel that names a key just paused, not leases.
PAUSE_PREFIX = "pause "

# Stands for every queue: notifications may have been missed while not connected.
ALL_QUEUES = "*"


@dataclass
class Notified:
    """What the notifications received since the last look said."""

    queues: set[str] = field(default_factory=set)  # got a job (ALL_QUEUES: maybe any)
    cancelled: list[Lease] = field(default_factory=list)  # running jobs cancelled
    paused_keys: set[str] = field(default_factory=set)  # keys just paused


class Notifications:
    def __init__(self, session: DatabaseSession, *, enabled: bool, cancel_channel: str) -> None:
        self.session = session
        self.enabled = enabled  # LISTEN on the channels (off behind PgBouncer)
        self.cancel_channel = cancel_channel

    def listen_fd(self) -> int | None:
        """The socket to watch for notifications, connecting if it is time to."""
        if not self.enabled:
            return None
        result = self.session.attempt("listen", lambda conn: conn.fileno())
        return result.value if result.ok else None

    def received(self) -> Notified:
        """The queues named by enqueue notifications received so far (ALL_QUEUES after
        a new connection, whose LISTEN missed whatever was enqueued before it), and the
        leases named by cancel notifications (one missed is caught by the renewal)."""
        notified = Notified()
        queried = self.session.queried_since_drain
        self.session.queried_since_drain = False
        if self.session.take_fresh_listen():
            notified.queues.add(ALL_QUEUES)
        conn = self.session.conn
        if conn is None or conn.closed:
            return notified
        try:
            if queried:
                # A query's answer may have brought some: psycopg keeps those in its
                # backlog, which only notifies() hands out (then it reads the socket).
                received = [(n.channel, n.payload) for n in conn.notifies(timeout=0)]
            else:
                received = self._from_socket(conn)
        except psycopg.Error as exc:
            self.session.failed("receive notifications", exc)
            return notified
        for channel, payload in received:
            if channel == self.cancel_channel:
                if payload.startswith(PAUSE_PREFIX):  # KEY PAUSE NOTICE (queries.sql)
                    notified.paused_keys.add(payload[len(PAUSE_PREFIX) :])
                else:
                    notified.cancelled.extend(leases_in(payload))
            else:
                notified.queues.add(payload)
        return notified

    def _from_socket(self, conn: psycopg.Connection[Any]) -> list[tuple[str, str]]:
        """What the socket brought, read with libpq's two calls. notifies(timeout=0)
        does the same behind a lock, a generator and two waits (the second one's
        timeout ends it): 22-28 µs against 6-8 µs, and 25-35 µs more of the supervisor's
        hop on a wake-up, caches cold (bench/results/idle-latency-20261124.md).
        Only when no query ran since the last look: then psycopg's backlog is empty."""
        pgconn = conn.pgconn
        pgconn.consume_input()  # raises OperationalError on a broken connection
        encoding = conn.info.encoding
        received = []
        while (n := pgconn.notifies()) is not None:
            received.append((n.relname.decode(encoding), n.extra.decode(encoding)))
        return received
