"""The two PostgreSQL facts the listening worker's hand-over rests on (docs/design.md,
"Round 9: a listening worker", step 2): a LISTEN sent in the same simple query as a
pg_notify receives that marker, and it does not receive a notification committed
before it. So every enqueue is either visible to the look after the marker or reaches
the listener after it. Also: a notification committed after the marker comes after it,
and the asynchronous UNLISTEN stops the listening until the next marker."""

from __future__ import annotations

import select

import psycopg
import pytest

import pgworkerd
from pgworkerd.storage.channels import listeners_channel, notify_channel
from pgworkerd.storage.listening import ListeningConnection
from pgworkerd.storage.store import DEFAULT_SCHEMA


@pytest.fixture
def listening(db_dsn):
    listener = ListeningConnection(psycopg.connect(db_dsn, autocommit=True), DEFAULT_SCHEMA)
    yield listener
    listener.close()


def notify(conn, channel: str, payload: str) -> None:
    conn.execute("SELECT pg_notify(%s, %s)", (channel, payload))


def wait_readable(listener: ListeningConnection, timeout_s: float = 5.0) -> bool:
    ready, _, _ = select.select([listener.fileno()], [], [], timeout_s)
    return bool(ready)


def test_the_marker_reaches_its_own_listen_and_an_earlier_notification_does_not(listening, conn):
    queue_channel = notify_channel(DEFAULT_SCHEMA)
    notify(conn, queue_channel, "before")  # committed before the marker's LISTEN
    assert listening.mark("daemon 1 1") == []  # raises if the marker did not come back
    notify(conn, queue_channel, "after")
    assert wait_readable(listening)
    assert listening.received() == ["after"]


def test_the_marker_is_found_among_the_other_listeners_markers(listening, db_dsn, conn):
    other = ListeningConnection(psycopg.connect(db_dsn, autocommit=True), DEFAULT_SCHEMA)
    try:
        assert other.mark("daemon 2 1") == []
        listening.mark("daemon 1 1")
        notify(conn, listeners_channel(DEFAULT_SCHEMA), "daemon 3 1")  # dropped
        pgworkerd.enqueue(conn, "k", {})  # jobs_insert's own notification
        assert wait_readable(other)
        assert other.received() == ["default"]  # the marker after its own: dropped
    finally:
        other.close()


def test_unlisten_sent_unanswered_stops_the_listening_until_the_next_marker(listening, conn):
    queue_channel = notify_channel(DEFAULT_SCHEMA)
    listening.mark("daemon 1 1")
    listening.unlisten()
    assert wait_readable(listening)  # the UNLISTEN's answer, parsed by the next mark
    assert listening.received() == []
    notify(conn, queue_channel, "while busy")
    assert not wait_readable(listening, 0.5), "nothing more came: it does not listen"
    assert listening.mark("daemon 1 2") == []  # reads the UNLISTEN's answer first
    notify(conn, queue_channel, "idle again")
    assert wait_readable(listening)
    assert listening.received() == ["idle again"]
