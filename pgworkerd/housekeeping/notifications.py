"""Enqueue notifications, received on the session's connection (the daemon's one
listening connection)."""

from __future__ import annotations

import psycopg

from pgworkerd.housekeeping.session import DatabaseSession

# Stands for every queue: notifications may have been missed while not connected.
ALL_QUEUES = "*"


class Notifications:
    def __init__(self, session: DatabaseSession, *, enabled: bool) -> None:
        self.session = session
        self.enabled = enabled  # LISTEN on the enqueue channel (off behind PgBouncer)

    def listen_fd(self) -> int | None:
        """The socket to watch for notifications, connecting if it is time to."""
        if not self.enabled:
            return None
        result = self.session.attempt("listen", lambda conn: conn.fileno())
        return result.value if result.ok else None

    def notified_queues(self) -> set[str]:
        """The queues named by notifications received so far (ALL_QUEUES after a new
        connection, whose LISTEN missed whatever was enqueued before it)."""
        queues: set[str] = set()
        self.session.queried_since_drain = False
        if self.session.take_fresh_listen():
            queues.add(ALL_QUEUES)
        conn = self.session.conn
        if conn is None or conn.closed:
            return queues
        try:
            queues.update(n.payload for n in conn.notifies(timeout=0))
        except psycopg.Error as exc:
            self.session.failed("receive notifications", exc)
        return queues
