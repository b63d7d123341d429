"""Notifications received on the session's connection (the daemon's one listening
connection): enqueues, which name their queue, and cancels of running jobs, which
name their leases (pgworkerd/housekeeping/cancelling.py)."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import psycopg

from pgworkerd.housekeeping.cancelling import leases_in
from pgworkerd.housekeeping.session import DatabaseSession
from pgworkerd.job import Lease

# Stands for every queue: notifications may have been missed while not connected.
ALL_QUEUES = "*"


@dataclass(frozen=True, slots=True)
class Marker:
    """A listening worker's marker (docs/design.md, "Round 9: a listening worker"):
    "<host>:<supervisor pid> <worker pid> <number>"."""

    payload: str


@dataclass
class Notified:
    """What the notifications received since the last look said."""

    # Enqueue notifications by queue, with multiplicity: two jobs of one queue committed
    # apart are two notifications, and the listening worker's hand-over counts them.
    queues: Counter[str] = field(default_factory=Counter)  # ALL_QUEUES: maybe any
    cancelled: list[Lease] = field(default_factory=list)  # running jobs cancelled
    # The enqueues' queues and the listening workers' markers, in the order received
    # (ALL_QUEUES first when listening afresh): the hand-over counts from a marker on.
    arrivals: list[str | Marker] = field(default_factory=list)


class Notifications:
    def __init__(
        self,
        session: DatabaseSession,
        *,
        enabled: bool,
        cancel_channel: str,
        listeners_channel: str,
    ) -> None:
        self.session = session
        self.enabled = enabled  # LISTEN on the channels (off behind PgBouncer)
        self.cancel_channel = cancel_channel
        self.listeners_channel = listeners_channel

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
            notified.queues[ALL_QUEUES] += 1
            notified.arrivals.append(ALL_QUEUES)
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
                notified.cancelled.extend(leases_in(payload))
            elif channel == self.listeners_channel:
                notified.arrivals.append(Marker(payload))
            else:
                notified.queues[payload] += 1
                notified.arrivals.append(payload)
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
