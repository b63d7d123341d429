"""The statements behind cancelling a running job: jobs_cancel tells the holders of
the running jobs it cancelled (and only them) on the cancel channel, in payloads
that fit NOTIFY's limit; jobs_unrenewed_among tells a cancel from a rescue."""

from __future__ import annotations

from typing import Any

import psycopg

import pgworkerd
from pgworkerd.housekeeping.cancelling import leases_in
from pgworkerd.storage.channels import cancel_channel
from pgworkerd.storage.store import JobStore
from tests.integration.store_helpers import claim, expire_leases

Conn = psycopg.Connection[Any]


def listener(db_dsn: str) -> Conn:
    conn = psycopg.connect(db_dsn, autocommit=True)
    conn.execute(f'LISTEN "{cancel_channel("pgworkerd")}"')
    return conn


def received(conn: Conn) -> list[str]:
    return [n.payload for n in conn.notifies(timeout=0.5, stop_after=None)]


def test_the_holders_of_running_jobs_are_told_by_lease(conn: Conn, store: JobStore, db_dsn: str):
    queued, *_ = pgworkerd.enqueue_many(conn, [{"kind": "k", "payload": {}}] * 3)
    with listener(db_dsn) as listening:
        jobs = claim(store, conn, limit=2)
        assert queued == jobs[0].id
        queued = pgworkerd.enqueue(conn, "k", {})
        assert store.cancel(conn, [jobs[0].id, jobs[1].id, queued]) == sorted(
            [jobs[0].id, jobs[1].id, queued]
        )
        payloads = received(listening)
    assert len(payloads) == 1
    assert sorted(leases_in(payloads[0]), key=lambda lease: lease.job_id) == [
        jobs[0].lease,
        jobs[1].lease,
    ], "the queued job had no holder to tell"


def test_cancelling_only_waiting_jobs_notifies_no_one(conn: Conn, store: JobStore, db_dsn: str):
    ids = pgworkerd.enqueue_many(conn, [{"kind": "k", "payload": {}}] * 2)
    with listener(db_dsn) as listening:
        assert store.cancel(conn, ids) == ids
        assert received(listening) == []


def test_many_running_jobs_are_told_in_payloads_under_the_notify_limit(
    conn: Conn, store: JobStore, db_dsn: str
):
    pgworkerd.enqueue_many(conn, [{"kind": "k", "payload": {}}] * 250)
    jobs = claim(store, conn, limit=250)
    with listener(db_dsn) as listening:
        assert len(store.cancel(conn, [job.id for job in jobs])) == 250
        payloads = received(listening)
    assert len(payloads) == 3 and all(len(p.encode()) < 8000 for p in payloads)
    told = [lease for payload in payloads for lease in leases_in(payload)]
    assert sorted(told, key=lambda lease: lease.job_id) == [job.lease for job in jobs]


def test_a_renewal_miss_is_a_cancel_only_if_cancelled_under_that_lease(conn: Conn, store: JobStore):
    pgworkerd.enqueue_many(conn, [{"kind": "k", "payload": {}}] * 3)
    cancelled, rescued, held = claim(store, conn, limit=3)
    store.cancel(conn, [cancelled.id])
    leases = [cancelled.lease, rescued.lease, held.lease]
    assert store.renew(conn, leases, 30) == {rescued.id, held.id}
    expire_leases(conn)
    store.rescue(conn)  # `rescued` and `held` go back to queued: not cancels
    assert store.unrenewed_among(conn, leases) == (set(), {cancelled.id})
    # A job retried by hand (once its handler has ended: its holder releases the lease
    # the cancelled row kept) and cancelled again is not a cancel of the old lease.
    assert store.release_cancelled(conn, [cancelled.lease, rescued.lease]) == {cancelled.id}
    store.retry_finished(conn, ids=[cancelled.id])
    (again,) = [job for job in claim(store, conn, limit=3) if job.id == cancelled.id]
    store.cancel(conn, [again.id])
    assert store.unrenewed_among(conn, [cancelled.lease]) == (set(), set())
    assert store.unrenewed_among(conn, [again.lease]) == (set(), {again.id})
    assert store.unrenewed_among(conn, []) == (set(), set())
