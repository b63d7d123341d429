"""WAKE (issue 19): every statement that frees a place of a limited queue, not only a
completion, tells that queue's idle workers (a notification on the queues' channel,
the one the supervisor LISTENs on): a failure, a release, a rescue, a snooze (which also
gives its start back to a rate) and a cancel of a running job. A queue without limits
is told nothing by them (its workers do not wait on places)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
from psycopg import sql

import pgworkerd
from pgworkerd.storage.channels import notify_channel
from pgworkerd.storage.limits import QueueLimits
from pgworkerd.storage.store import JobStore
from tests.integration.store_helpers import claim, expire_leases

Heard = Callable[[], list[str]]


@contextmanager
def listening(db_dsn: str) -> Iterator[Heard]:
    """A connection LISTENing on the queues' channel; `heard()` drains what it got."""
    with psycopg.connect(db_dsn, autocommit=True) as listener:
        channel = sql.Identifier(notify_channel("pgworkerd"))
        listener.execute(sql.SQL("LISTEN {}").format(channel))

        def heard() -> list[str]:
            return [n.payload for n in listener.notifies(timeout=0.3)]

        yield heard


def enqueue(conn: psycopg.Connection[Any], count: int) -> None:
    pgworkerd.enqueue_many(conn, [{"kind": "k", "payload": {}}] * count)


def test_each_way_a_place_frees_wakes_the_limited_queue(conn, db_dsn):
    store = JobStore(limits={"default": QueueLimits(concurrency=1)})
    enqueue(conn, 7)
    with listening(db_dsn) as heard:
        heard()  # the enqueue's own notification
        (job,) = claim(store, conn)
        assert heard() == [], "a claim frees no place"
        store.fail(conn, job.lease, "boom")
        assert heard() == ["default"]

        (job,) = claim(store, conn)
        store.release(conn, [job.lease])
        assert heard() == ["default"]

        (job,) = claim(store, conn)
        store.snooze(conn, job.lease, delay_s=0.0)
        assert heard() == ["default"]

        (job,) = claim(store, conn)
        expire_leases(conn)
        assert len(store.rescue(conn)) == 1
        assert heard() == ["default"]

        # A cancel frees no place while the handler may still run (HELD): the end of
        # the handler does, or the rescue of its expired lease.
        (job,) = claim(store, conn)
        assert store.cancel(conn, [job.id]) == [job.id]
        assert heard() == []
        assert store.release_cancelled(conn, [job.lease]) == {job.id}
        assert heard() == ["default"]

        (job,) = claim(store, conn)
        store.cancel(conn, [job.id])
        conn.execute("UPDATE pgworkerd.jobs SET lease_expires_at = now() WHERE id = %s", (job.id,))
        assert [rescued.state for rescued in store.rescue(conn)] == ["cancelled"]
        assert heard() == ["default"]


def test_a_rate_limited_queue_is_woken_by_a_snooze_only(conn, db_dsn):
    store = JobStore(limits={"default": QueueLimits(rate=(1, 3600.0))})
    enqueue(conn, 2)
    with listening(db_dsn) as heard:
        heard()
        (job,) = claim(store, conn)
        store.fail(conn, job.lease, "boom")
        assert heard() == [], "a failure gives no start back"
        expire_leases(conn)
        conn.execute("DELETE FROM pgworkerd.starts")
        conn.execute("UPDATE pgworkerd.jobs SET run_at = now() WHERE state = 'queued'")
        (job,) = claim(store, conn)
        store.snooze(conn, job.lease, delay_s=0.0)
        assert heard() == ["default"], "the snooze gave its start back"


def test_an_unlimited_queue_is_not_told(conn, db_dsn):
    store = JobStore()
    enqueue(conn, 3)
    with listening(db_dsn) as heard:
        heard()
        first, second, third = claim(store, conn)
        store.fail(conn, first.lease, "boom")
        store.release(conn, [second.lease])
        store.snooze(conn, third.lease, delay_s=0.0)
        assert heard() == []
