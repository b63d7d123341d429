"""A job cancelled while it ran keeps its lease on the cancelled row (HELD in
storage/sql/queries.sql) until its holder says the handler has ended or the rescue
finds the lease expired. Meanwhile it takes its place under a concurrency limit, and
every other reader sees a cancelled job: retry and pruning leave it alone, the holder's
outcome (success or failure) is not recorded but releases the lease, the rescue
releases an expired one without running the job again, and dependents are handled at
the cancel, once."""

from __future__ import annotations

import uuid
from typing import Any

import psycopg
import pytest

import pgworkerd
from pgworkerd.housekeeping.retention import Policy, prune_round
from pgworkerd.job import Lease
from pgworkerd.storage.limits import QueueLimits
from pgworkerd.storage.store import JobStore
from tests.integration.store_helpers import claim

Conn = psycopg.Connection[Any]


def lease_of(conn: Conn, job_id: int) -> tuple[str, Any]:
    row = conn.execute(
        "SELECT state, lease_expires_at FROM pgworkerd.jobs WHERE id = %s", (job_id,)
    ).fetchone()
    assert row is not None
    return row[0], row[1]


def expire(conn: Conn, job_id: int) -> None:
    conn.execute(
        "UPDATE pgworkerd.jobs SET lease_expires_at = now() - interval '1 second' WHERE id = %s",
        (job_id,),
    )


def held_cancelled(conn: Conn, store: JobStore, queue: str = "default") -> pgworkerd.Job:
    pgworkerd.enqueue(conn, "k", {}, queue=queue)
    (job,) = claim(store, conn, limit=1, queues=[queue])
    assert store.cancel(conn, [job.id]) == [job.id]
    state, expires = lease_of(conn, job.id)
    assert state == "cancelled" and expires is not None, "the cancel keeps the lease"
    return job


def test_a_held_cancelled_job_keeps_its_place_under_a_concurrency_limit(conn: Conn) -> None:
    store = JobStore(limits={"solo": QueueLimits(concurrency=1)})
    first = held_cancelled(conn, store, queue="solo")
    second = pgworkerd.enqueue(conn, "k", {}, queue="solo")
    assert claim(store, conn, queues=["solo"]) == [], "its place is still taken"
    assert store.release_cancelled(conn, [first.lease]) == {first.id}
    assert [job.id for job in claim(store, conn, queues=["solo"])] == [second]
    assert lease_of(conn, first.id) == ("cancelled", None)


@pytest.mark.parametrize("outcome", ["complete", "fail", "snooze", "release"])
def test_the_holders_outcome_releases_the_lease_and_records_nothing(
    conn: Conn, store: JobStore, outcome: str
) -> None:
    job = held_cancelled(conn, store)
    before = conn.execute(
        "SELECT finished_at, attempt, last_error, errors, result, run_at"
        " FROM pgworkerd.jobs WHERE id = %s",
        (job.id,),
    ).fetchone()
    if outcome == "complete":
        assert store.complete(conn, [(job.lease, '{"done": true}')]) == set()
    elif outcome == "fail":
        assert store.fail(conn, job.lease, "JobCancelled") is None
    elif outcome == "snooze":
        assert store.snooze(conn, job.lease, delay_s=5) is None
    else:
        assert store.release(conn, [job.lease]) == set()
    assert lease_of(conn, job.id) == ("cancelled", None)
    after = conn.execute(
        "SELECT finished_at, attempt, last_error, errors, result, run_at"
        " FROM pgworkerd.jobs WHERE id = %s",
        (job.id,),
    ).fetchone()
    assert after == before, "a cancelled job's handler leaves no outcome"


def test_a_stale_lease_releases_nothing(conn: Conn, store: JobStore) -> None:
    job = held_cancelled(conn, store)
    assert store.release_cancelled(conn, [Lease(job.id, uuid.uuid4())]) == set()
    assert lease_of(conn, job.id)[1] is not None


def test_the_rescue_releases_an_expired_held_lease_and_runs_nothing_again(
    conn: Conn, store: JobStore
) -> None:
    job = held_cancelled(conn, store)
    assert store.rescue(conn) == [], "not expired yet: left alone"
    expire(conn, job.id)
    (rescued,) = store.rescue(conn)
    assert (rescued.job_id, rescued.state, rescued.attempt) == (job.id, "cancelled", 1)
    assert lease_of(conn, job.id) == ("cancelled", None)
    assert claim(store, conn) == []


def test_retry_refuses_a_held_job_until_its_handler_has_ended(conn: Conn, store: JobStore) -> None:
    job = held_cancelled(conn, store)
    assert pgworkerd.retry(conn, job.id) is False
    assert lease_of(conn, job.id)[0] == "cancelled"
    store.release_cancelled(conn, [job.lease])
    assert pgworkerd.retry(conn, job.id) is True
    assert lease_of(conn, job.id) == ("queued", None)


@pytest.mark.parametrize("archive", [False, True])
def test_pruning_skips_a_held_job_until_released(
    conn: Conn, store: JobStore, archive: bool
) -> None:
    job = held_cancelled(conn, store)
    conn.execute(
        "UPDATE pgworkerd.jobs SET finished_at = now() - interval '30 days' WHERE id = %s",
        (job.id,),
    )
    policy = Policy({"succeeded": 3600.0, "dead": 3600.0, "cancelled": 3600.0}, archive=archive)
    assert prune_round(conn, "pgworkerd", policy).total == 0
    assert lease_of(conn, job.id)[0] == "cancelled"
    store.release_cancelled(conn, [job.lease])
    assert prune_round(conn, "pgworkerd", policy).total == 1
    assert conn.execute("SELECT count(*) FROM pgworkerd.jobs").fetchone() == (0,)


def test_a_held_job_counts_as_cancelled_and_its_dependents_go_at_the_cancel(
    conn: Conn, store: JobStore
) -> None:
    parent = pgworkerd.enqueue(conn, "k", {})
    child = pgworkerd.enqueue(conn, "k", {}, after=[parent])
    (job,) = claim(store, conn, limit=1)
    assert job.id == parent
    store.cancel(conn, [parent])
    assert lease_of(conn, child) == ("cancelled", None), "cancelled with its dependency"
    store.release_cancelled(conn, [job.lease])
    assert lease_of(conn, child) == ("cancelled", None)
    states = dict(conn.execute("SELECT state, count(*) FROM pgworkerd.jobs GROUP BY state"))
    assert states == {"cancelled": 2}


def test_no_other_state_may_hold_a_lease(conn: Conn) -> None:
    job_id = pgworkerd.enqueue(conn, "k", {})
    with pytest.raises(psycopg.errors.CheckViolation) as caught:
        conn.execute("UPDATE pgworkerd.jobs SET lease_expires_at = now() WHERE id = %s", (job_id,))
    assert caught.value.diag.constraint_name == "jobs_running_is_leased"
    with pytest.raises(psycopg.errors.CheckViolation):
        conn.execute(
            "UPDATE pgworkerd.jobs SET state = 'cancelled', finished_at = now(),"
            " lease_expires_at = now() WHERE id = %s",
            (job_id,),
        )  # a cancelled row's lease needs its token
