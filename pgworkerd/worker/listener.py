"""The listening worker's side of the hand-over (docs/design.md, "Round 9: a listening
worker"): a pool's #1 LISTENs for its queues' enqueues on a connection of its own
while it waits, so a new job wakes it without the supervisor's hop.

Its marker in the notification stream designates it to the supervisor; from there it
counts the enqueue notifications naming its queues (k) and reports k with its next
claim (`Heard` in `claimed` or `idle`), so the supervisor, which counted the same
stream from the same marker, knows which it covered.
"""

from __future__ import annotations

import contextlib
import logging
import os
import random
import socket
import time

from pgworkerd import logs
from pgworkerd.ipc import Heard
from pgworkerd.storage import connections
from pgworkerd.storage.listening import ListeningConnection, marker_payload
from pgworkerd.worker.connection import CONNECTION_FAULTS, RECONNECT_MAX_S
from pgworkerd.worker.spec import WorkerSpec

log = logging.getLogger("pgworkerd.worker")


class Listener:
    def __init__(self, spec: WorkerSpec) -> None:
        self.spec = spec
        self.queues = frozenset(spec.queues)
        self._daemon = f"{socket.gethostname()}:{spec.supervisor_pid}"
        self.conn: ListeningConnection | None = None
        self.listening = False  # LISTENs now (from a marker until it goes busy)
        self._markers = 0  # markers sent
        self._marker: int | None = None  # the marker whose hearing is not reported yet
        self._heard = 0  # k: notifications naming our queues read since that marker
        self._retry_at = 0.0  # no connection before then (after a failure)
        self._delay_s = 0.1

    def mark(self) -> bool:
        """Listen (once since the last report), sending a marker: whether an enqueue
        of our queues came after it already. False too when the connection failed:
        then this wait goes without listening, and the supervisor, which saw no
        marker, wakes us by the pipe as it wakes any child."""
        if self._marker is not None:
            return False  # still listening since that marker: it counts on
        conn = self._connection()
        if conn is None:
            return False
        self._markers += 1
        try:
            after = conn.mark(marker_payload(self._daemon, os.getpid(), self._markers))
        except CONNECTION_FAULTS as exc:
            self.lost(exc)
            return False
        self._marker, self._heard, self.listening = self._markers, 0, True
        return self._count(after)

    def fileno(self) -> int | None:
        return self.conn.fileno() if self.conn is not None and self.listening else None

    def read(self) -> bool:
        """What the socket brought: whether it named one of our queues."""
        assert self.conn is not None
        try:
            return self._count(self.conn.received())
        except CONNECTION_FAULTS as exc:
            self.lost(exc)
            return False

    def take_heard(self) -> Heard | None:
        """What we heard since the marker, for the claim just answered (the first since
        the marker); None when none is pending."""
        if self._marker is None:
            return None
        heard = Heard(self._marker, self._heard)
        self._marker, self._heard = None, 0
        return heard

    def busy(self) -> None:
        """A job was claimed: stop listening before its handler runs, without waiting
        for the answer (a backend whose client reads nothing while a long handler runs
        would hold the server's notification queue back)."""
        if not self.listening or self.conn is None:
            return
        self.listening = False
        try:
            self.conn.unlisten()
        except CONNECTION_FAULTS as exc:
            self.lost(exc)

    def lost(self, exc: BaseException) -> None:
        """The listening connection failed (a PostgreSQL restart): closed; the next
        mark() reconnects, with backoff. What was heard is still reported."""
        logs.event(
            log,
            logging.WARNING,
            "listening connection lost",
            error=connections.describe_error(exc, self.spec.database_url),
        )
        self._close()
        self._retry_at = time.monotonic() + self._delay_s
        self._delay_s = min(RECONNECT_MAX_S, self._delay_s * 2) * random.uniform(0.5, 1.0) + 0.05

    def close(self) -> None:
        self._close()

    def _count(self, queues: list[str]) -> bool:
        mine = sum(1 for queue in queues if queue in self.queues)
        self._heard += mine
        return mine > 0

    def _connection(self) -> ListeningConnection | None:
        if self.conn is not None:
            return self.conn
        if time.monotonic() < self._retry_at:
            return None
        spec = self.spec
        try:
            conn = connections.connect(
                spec.database_url,
                application_name=f"pgworkerd listener {spec.pool} #{spec.index}",
                tcp_user_timeout=int(min(30.0, spec.lease_ttl_s) * 1000),
            )
        except CONNECTION_FAULTS as exc:
            self.lost(exc)
            return None
        self.conn = ListeningConnection(conn, spec.schema)
        self._delay_s = 0.1
        return self.conn

    def _close(self) -> None:
        self.listening = False
        if self.conn is not None:
            with contextlib.suppress(Exception):  # closing a broken connection may fail too
                self.conn.close()
        self.conn = None
