"""Key pauses on a real server (issue 19): the claim passes over the jobs of a key paused
until later (database clock), and only those; a pause that ended, or was resumed, holds
nothing back; the claim's positions never pass the jobs held back; idle workers learn
when a pause ends."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import psycopg
import pytest

import pgworkerd
from pgworkerd.client.key_pauses import KeyPauses
from pgworkerd.errors import InvalidJob
from pgworkerd.storage.channels import notify_channel
from pgworkerd.storage.store import ClaimPositions, JobStore
from tests.integration.store_helpers import claim, db_now


def end_pause(conn: psycopg.Connection, key: str) -> None:
    """The pause's end passes (as the clock would), without a resume."""
    conn.execute(
        "UPDATE pgworkerd.paused_keys SET until = now() - interval '1 second' WHERE key = %s",
        [key],
    )


def test_a_key_paused_until_later_is_passed_over_and_other_keys_go_on(conn, store):
    a = pgworkerd.enqueue_many(conn, [{"kind": "k", "payload": {}, "key": "a"}] * 2)
    b = pgworkerd.enqueue(conn, "k", {}, key="b")
    none = pgworkerd.enqueue(conn, "k", {})
    until = pgworkerd.pause_key(conn, "a", 60)
    assert timedelta(seconds=59) < until - db_now(conn) <= timedelta(seconds=60)

    assert sorted(j.id for j in claim(store, conn)) == [b, none]
    assert claim(store, conn) == []
    assert store.get(conn, a[0])["state"] == "queued"

    assert pgworkerd.resume_key(conn, "a") is True
    assert pgworkerd.resume_key(conn, "a") is False, "resuming twice changes nothing"
    assert sorted(j.id for j in claim(store, conn)) == a


def test_a_pause_whose_until_has_passed_holds_nothing_back(conn, store):
    job = pgworkerd.enqueue(conn, "k", {}, key="a")
    pgworkerd.pause_key(conn, "a", db_now(conn) - timedelta(seconds=1))
    assert [j.id for j in claim(store, conn)] == [job]


def test_positions_do_not_pass_the_jobs_a_pause_held_back(conn):
    # No lag and no sweep: only the positions decide what the claim looks at.
    store = JobStore(positions=ClaimPositions(lag_s=0, sweep_every_s=3600))
    past = db_now(conn) - timedelta(hours=1)
    held = pgworkerd.enqueue_many(
        conn, [{"kind": "k", "payload": {}, "key": "a", "run_at": past}] * 2
    )
    pgworkerd.pause_key(conn, "a", 3600)
    free = pgworkerd.enqueue(conn, "k", {})
    assert [j.id for j in claim(store, conn)] == [free]  # the first claim sweeps
    assert claim(store, conn) == []
    end_pause(conn, "a")
    assert sorted(j.id for j in claim(store, conn)) == held, "found without a sweep"


def test_idle_workers_sleep_until_a_pause_ends(conn, store):
    pgworkerd.enqueue(conn, "k", {}, key="a")
    pgworkerd.pause_key(conn, "a", 60)
    due = store.next_run_in(conn, ["default"])
    assert due is not None and 55 < due <= 60, "wake when the pause ends, not before"
    end_pause(conn, "a")
    assert store.next_run_in(conn, ["default"]) < 0, "ready now"


def test_pause_replaces_and_extend_keeps_the_longer_pause(conn):
    pauses = KeyPauses()
    long = pauses.pause(conn, "a", 3600)
    assert pauses.pause(conn, "a", 10, extend=True) == long, "a handler never shortens it"
    short = pauses.pause(conn, "a", timedelta(seconds=10))
    assert short < long, "an operator's pause means what it says"
    [listed] = pauses.keys(conn)
    assert (listed["key"], listed["paused"]) == ("a", True)
    assert 0 < listed["paused_for_s"] <= 10


def test_keys_lists_running_ready_and_paused_keys(conn, store):
    pgworkerd.enqueue_many(conn, [{"kind": "k", "payload": {}, "key": "busy"}] * 3)
    pgworkerd.enqueue(conn, "k", {}, key="later", delay=3600)
    pgworkerd.enqueue(conn, "k", {})
    claim(store, conn, limit=1)
    pgworkerd.pause_key(conn, "idle", 60)
    pgworkerd.pause_key(conn, "ended", 60)
    end_pause(conn, "ended")
    listing = {
        k["key"]: (k["running"], k["ready"], k["queued"], k["paused"])
        for k in KeyPauses().keys(conn)
    }
    assert listing == {
        "busy": (1, 2, 2, False),
        "later": (0, 0, 1, False),
        "idle": (0, 0, 0, True),
    }


def test_resume_announces_the_queues_holding_the_key_at_commit(db_dsn):
    with psycopg.connect(db_dsn, autocommit=True) as listener, psycopg.connect(db_dsn) as conn:
        pgworkerd.enqueue(conn, "k", {}, key="a", queue="mail")
        pgworkerd.enqueue(conn, "k", {}, key="a", queue="reports")
        pgworkerd.enqueue(conn, "k", {}, key="b", queue="other")
        pgworkerd.pause_key(conn, "a", 60)
        conn.commit()
        listener.execute(f'LISTEN "{notify_channel("pgworkerd")}"')
        assert pgworkerd.resume_key(conn, "a") is True
        assert list(listener.notifies(timeout=0.5, stop_after=1)) == [], "not before commit"
        conn.commit()
        received = sorted(n.payload for n in listener.notifies(timeout=2, stop_after=2))
    assert received == ["mail", "reports"]


@pytest.mark.parametrize(
    ("key", "until", "message"),
    [
        ("a\x00", 10, "key must not contain control characters"),
        ("a", -1, "seconds >= 0"),
        ("a", "soon", "until must be a datetime, a timedelta or seconds"),
        ("a", float("nan"), "seconds >= 0"),
        # Database errors that aborted the caller's transaction (the first two were
        # stored by the CLI's own transaction, then unreadable by `keys` and `status`).
        ("a", 1e13, "at most 100 years"),
        ("a", timedelta.max, "at most 100 years"),
        ("a", datetime(1, 1, 1, tzinfo=timezone(timedelta(hours=14))), "between 0001-01-02"),
        ("a", datetime(9999, 12, 31, 23, 30, tzinfo=UTC), "and 9999-12-30 \\(UTC\\)"),
    ],
)
def test_a_bad_pause_is_refused_before_any_sql(conn, key, until, message):
    with pytest.raises(InvalidJob, match=message):
        pgworkerd.pause_key(conn, key, until)
    assert KeyPauses().keys(conn) == []


@pytest.mark.parametrize("name", [123, "a\x00", None])
def test_a_bad_name_to_resume_is_refused_before_any_sql(db_dsn, name):
    # resume_key(conn, 123) was a database error; resume_queue(conn, 123) said False.
    with psycopg.connect(db_dsn) as tx:
        tx.execute("SELECT 1")
        for resume in (pgworkerd.resume_key, pgworkerd.resume_queue):
            with pytest.raises(InvalidJob):
                resume(tx, name)
        assert tx.info.transaction_status == psycopg.pq.TransactionStatus.INTRANS


def test_a_naive_until_is_refused(conn):
    with pytest.raises(InvalidJob, match="timezone-aware"):
        pgworkerd.pause_key(conn, "a", db_now(conn).replace(tzinfo=None))
