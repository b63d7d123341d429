"""Snooze and PauseKey outcomes on a real server (issue 19): back to queued with the
start given back, the key paused in the same statement, and fenced by the lease."""

from __future__ import annotations

from datetime import timedelta

import pgworkerd
from pgworkerd.client.key_pauses import KeyPauses
from tests.integration.store_helpers import claim, db_now, expire_leases, stale


def test_snooze_puts_the_job_back_later_uncharged(conn, store):
    job_id = pgworkerd.enqueue(conn, "k", {}, key="a")
    [job] = claim(store, conn)
    assert job.attempt == 1
    before = db_now(conn)
    done = store.snooze(conn, job.lease, delay_s=60)
    assert done is not None and (done.state, done.attempt) == ("queued", 0)
    row = store.get(conn, job_id)
    assert (row["state"], row["attempt"], row["lease_token"]) == ("queued", 0, None)
    assert before + timedelta(seconds=59) < row["run_at"] <= db_now(conn) + timedelta(seconds=60)
    assert KeyPauses().keys(conn)[0]["paused"] is False, "a snooze pauses no key"
    assert claim(store, conn) == []


def test_pause_key_pauses_the_key_in_the_same_write_and_other_keys_go_on(conn, store):
    mine = pgworkerd.enqueue(conn, "k", {}, key="a")
    [job] = claim(store, conn)
    sibling = pgworkerd.enqueue(conn, "k", {}, key="a")
    other = pgworkerd.enqueue(conn, "k", {}, key="b")
    until = db_now(conn) + timedelta(minutes=5)
    done = store.snooze(conn, job.lease, delay_s=None, until=until, pause_key=True)
    assert done is not None and (done.job_id, done.attempt, done.run_at) == (mine, 0, until)
    [paused] = [k for k in KeyPauses().keys(conn) if k["paused"]]
    assert (paused["key"], paused["paused_until"]) == ("a", until.isoformat())
    assert [j.id for j in claim(store, conn)] == [other]
    assert store.get(conn, sibling)["state"] == "queued"


def test_pause_key_never_shortens_a_longer_pause(conn, store):
    pgworkerd.enqueue(conn, "k", {}, key="a")
    [job] = claim(store, conn)
    long = pgworkerd.pause_key(conn, "a", 3600)
    store.snooze(conn, job.lease, delay_s=10, pause_key=True)
    [listed] = KeyPauses().keys(conn)
    assert listed["paused_until"] == long.isoformat()


def test_pause_key_on_a_job_without_a_key_acts_as_snooze(conn, store):
    pgworkerd.enqueue(conn, "k", {})
    [job] = claim(store, conn)
    done = store.snooze(conn, job.lease, delay_s=30, pause_key=True)
    assert done is not None and (done.state, done.attempt) == ("queued", 0)
    assert KeyPauses().keys(conn) == []


def test_a_lost_lease_changes_neither_the_job_nor_the_key(conn, store):
    job_id = pgworkerd.enqueue(conn, "k", {}, key="a")
    [job] = claim(store, conn)
    assert store.snooze(conn, stale(job.lease), delay_s=60, pause_key=True) is None
    expire_leases(conn)
    store.rescue(conn)
    assert store.snooze(conn, job.lease, delay_s=60, pause_key=True) is None
    row = store.get(conn, job_id)
    assert (row["state"], row["attempt"]) == ("queued", 1), "the rescue charged it"
    assert KeyPauses().keys(conn)[0]["paused"] is False
