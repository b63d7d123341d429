"""Paused queues on a real server: the claim statements leave them out, a resume puts
them back and announces them, and both are safe to repeat."""

from __future__ import annotations

import psycopg
import pytest

import pgworkerd
from pgworkerd.client.operations import Operations
from pgworkerd.client.pausing import QueuePauses
from pgworkerd.errors import InvalidJob
from pgworkerd.storage import migrations
from pgworkerd.storage.channels import notify_channel
from pgworkerd.storage.store import JobStore
from tests.integration.store_helpers import claim


def test_a_paused_queue_is_not_claimed_and_is_after_resume(conn, store):
    reports = pgworkerd.enqueue_many(conn, [{"kind": "k", "payload": {}, "queue": "reports"}] * 3)
    mail = pgworkerd.enqueue(conn, "k", {}, queue="mail")
    assert pgworkerd.pause_queue(conn, "reports") is True

    # A worker of both queues takes only the other one's job, and is told nothing is
    # ready (it would otherwise wake in a loop for jobs it may not claim).
    both = ["reports", "mail"]
    assert [j.id for j in claim(store, conn, queues=both)] == [mail]
    assert claim(store, conn, queues=both) == []
    assert claim(store, conn, queues=["reports"]) == []
    assert store.next_run_in(conn, both) is None

    assert pgworkerd.resume_queue(conn, "reports") is True
    assert store.next_run_in(conn, both) < 0, "ready now"
    assert [j.id for j in claim(store, conn, queues=both)] == reports


def test_complete_and_claim_skips_a_paused_queue_and_still_completes(conn, store):
    first, second = pgworkerd.enqueue_many(conn, [{"kind": "k", "payload": {}}] * 2)
    [job] = claim(store, conn, limit=1)
    assert job.id == first
    pgworkerd.pause_queue(conn, "default")
    done, claimed = store.complete_and_claim(
        conn,
        [(job.lease, None)],
        queues=["default"],
        limit=10,
        lease_ttl_s=30,
        worker="w",
    )
    assert done == {first}, "the job running when its queue was paused finishes"
    assert claimed == []
    assert store.get(conn, second)["state"] == "queued"


def test_a_job_claimed_before_the_pause_is_completed_fenced_as_ever(conn, store):
    job_id = pgworkerd.enqueue(conn, "k", {}, queue="q")
    [job] = claim(store, conn, queues=["q"])
    pgworkerd.pause_queue(conn, "q")
    assert store.complete(conn, [(job.lease, None)]) == {job_id}
    assert store.fail(conn, job.lease, "late") is None, "the fence holds, paused or not"


def test_pause_and_resume_are_idempotent_and_kept_in_the_database(conn, db_dsn):
    pauses = QueuePauses()
    assert pauses.pause(conn, ["b", "a", "a"]) == ["a", "b"]
    first_paused_at = pauses.paused(conn)["a"]
    assert pauses.pause(conn, ["a", "c"]) == ["c"]
    assert pauses.paused(conn)["a"] == first_paused_at, "pausing again changes nothing"
    with psycopg.connect(db_dsn, autocommit=True) as other:
        assert set(QueuePauses().paused(other)) == {"a", "b", "c"}
    assert pauses.resume(conn, ["a", "zzz"]) == ["a"]
    assert pauses.resume(conn, ["a"]) == []
    assert pgworkerd.resume_queue(conn, "a") is False
    assert pgworkerd.pause_queue(conn, "b") is False
    assert set(pauses.paused(conn)) == {"b", "c"}


def test_a_pause_in_a_rolled_back_transaction_never_happened(db_dsn):
    with psycopg.connect(db_dsn) as conn:
        pgworkerd.pause_queue(conn, "default")
        conn.rollback()
        assert QueuePauses().paused(conn) == {}


@pytest.mark.parametrize("name", ["", "  ", "a\x00b", "x" * 256])
def test_a_bad_queue_name_is_refused_before_any_sql(conn, name):
    with pytest.raises(InvalidJob, match="queue"):
        pgworkerd.pause_queue(conn, name)
    assert QueuePauses().paused(conn) == {}


def test_resume_announces_each_resumed_queue_at_commit(db_dsn):
    with psycopg.connect(db_dsn, autocommit=True) as listener, psycopg.connect(db_dsn) as conn:
        QueuePauses().pause(conn, ["mail", "reports"])
        conn.commit()
        listener.execute(f'LISTEN "{notify_channel("pgworkerd")}"')
        QueuePauses().resume(conn, ["mail", "reports", "never-paused"])
        assert list(listener.notifies(timeout=0.5, stop_after=1)) == [], "not before commit"
        conn.commit()
        received = sorted(n.payload for n in listener.notifies(timeout=2, stop_after=2))
    assert received == ["mail", "reports"], "resumed queues only, by name"


def test_queue_listing_names_configured_jobs_and_paused_queues(conn, store):
    pgworkerd.enqueue_many(conn, [{"kind": "k", "payload": {}, "queue": "mail"}] * 2)
    claim(store, conn, queues=["mail"], limit=1)
    pgworkerd.pause_queue(conn, "idle-but-paused")
    listing = QueuePauses().queues(conn, ["default", "mail"])
    by_name = {q["queue"]: q for q in listing}
    assert [q["queue"] for q in listing] == ["default", "idle-but-paused", "mail"]
    assert by_name["mail"]["counts"] == {
        "waiting": 0,
        "queued": 1,
        "running": 1,
        "succeeded": 0,
        "dead": 0,
        "cancelled": 0,
    }
    assert (by_name["mail"]["configured"], by_name["mail"]["paused"]) == (True, False)
    assert by_name["mail"]["paused_at"] is None
    paused = by_name["idle-but-paused"]
    assert (paused["configured"], paused["paused"]) == (False, True)
    assert paused["paused_at"] is not None
    assert by_name["default"]["counts"]["queued"] == 0


def test_status_shows_whether_each_queue_is_paused(conn):
    pgworkerd.enqueue(conn, "k", {}, queue="mail")
    pgworkerd.enqueue(conn, "k", {}, queue="reports")
    pgworkerd.pause_queue(conn, "reports")
    pgworkerd.pause_queue(conn, "nothing-yet")
    queues = {q["queue"]: q for q in Operations().status(conn)["queues"]}
    assert sorted(queues) == ["mail", "nothing-yet", "reports"]
    assert [queues[q]["paused"] for q in sorted(queues)] == [False, True, True]
    assert queues["nothing-yet"]["counts"]["queued"] == 0
    assert queues["reports"]["paused_at"] is not None and queues["mail"]["paused_at"] is None


def test_the_schema_of_the_store_is_used(conn):
    """pause_queue names its schema as enqueue does: a pause in another schema leaves
    this one's claims alone."""
    job_id = pgworkerd.enqueue(conn, "k", {})
    migrations.migrate(conn, "elsewhere")
    pgworkerd.pause_queue(conn, "default", schema="elsewhere")
    assert [j.id for j in claim(JobStore(), conn)] == [job_id]
    assert [j.id for j in claim(JobStore("elsewhere"), conn)] == []
