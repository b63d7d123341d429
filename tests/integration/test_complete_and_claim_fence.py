"""The FENCE of the worker's hot statement, jobs_complete_and_claim: a batch's
successes are written with the next claim, and only the leases still held may land
(promise 2; RELIABILITY.md I3). tests/integration/test_store.py checks `complete`
alone; these check the statement a worker runs on every batch, whose completion and
claim share one snapshot."""

from __future__ import annotations

import random
from typing import Any

import psycopg

import pgworkerd
from pgworkerd.job import Job
from pgworkerd.storage.store import Backoff, JobStore
from tests.integration.store_helpers import claim, expire_leases, stale

Conn = psycopg.Connection[Any]
CLAIM = {"queues": ["default"], "lease_ttl_s": 30, "worker": "test-host:2"}


def row_of(conn: Conn, job_id: int) -> tuple[Any, ...]:
    """What an outcome would change on the job's row."""
    return conn.execute(
        "SELECT state, lease_token, lease_expires_at, finished_at, result, attempt"
        " FROM pgworkerd.jobs WHERE id = %s",
        (job_id,),
    ).fetchone()


def test_a_stale_lease_completes_nothing_and_the_claim_still_runs(conn, store):
    held_id, waiting_id = pgworkerd.enqueue_many(conn, [{"kind": "k", "payload": {}}] * 2)
    (held,) = claim(store, conn, limit=1)
    assert held.id == held_id
    before = row_of(conn, held_id)

    kept, claimed = store.complete_and_claim(
        conn, [(stale(held.lease), '"late"')], limit=5, **CLAIM
    )

    assert kept == set(), "a token the job does not hold completed it"
    assert row_of(conn, held_id) == before, "a stale token changed the job"
    assert [job.id for job in claimed] == [waiting_id]


def test_the_old_holder_cannot_complete_after_rescue_and_reclaim(conn):
    store = JobStore(backoff=Backoff(base_s=0, max_s=0))
    job_id = pgworkerd.enqueue(conn, "k", {})
    (first,) = claim(store, conn)
    expire_leases(conn)
    assert [o.job_id for o in store.rescue(conn)] == [job_id]
    (second,) = claim(store, conn)
    assert second.lease_token != first.lease_token
    before = row_of(conn, job_id)

    kept, _ = store.complete_and_claim(conn, [(first.lease, '"old"')], limit=5, **CLAIM)

    assert kept == set()
    assert row_of(conn, job_id) == before
    kept, _ = store.complete_and_claim(conn, [(second.lease, '"new"')], limit=5, **CLAIM)
    assert kept == {job_id}
    assert row_of(conn, job_id)[0] == "succeeded" and row_of(conn, job_id)[4] == "new"


def test_a_released_job_claimed_again_by_the_same_statement_is_not_completed(conn, store):
    # The completion and the claim of one statement see the same snapshot: the
    # released job is queued in it, so the claim may lease it afresh while the old
    # lease's success is in the same statement. Only the new lease may hold it.
    job_id = pgworkerd.enqueue(conn, "k", {})
    (job,) = claim(store, conn)
    assert store.release(conn, [job.lease]) == {job_id}

    kept, claimed = store.complete_and_claim(conn, [(job.lease, '"old"')], limit=5, **CLAIM)

    assert kept == set()
    assert [again.id for again in claimed] == [job_id]
    state, token, expires, finished, result, attempt = row_of(conn, job_id)
    assert (state, token, finished, result) == ("running", claimed[0].lease_token, None, None)
    assert expires is not None and attempt == 1


def test_a_cancelled_job_stays_cancelled(conn, store):
    job_id = pgworkerd.enqueue(conn, "k", {})
    (job,) = claim(store, conn)
    assert store.cancel(conn, [job_id]) == [job_id]
    before = row_of(conn, job_id)

    kept, _ = store.complete_and_claim(conn, [(job.lease, '"late"')], limit=5, **CLAIM)

    assert kept == set()
    # Nothing of the success is recorded; the lease the cancelled row kept while the
    # handler ran (HELD) is released, now that it has returned.
    state, token, expires, finished, result, attempt = before
    assert expires is not None
    assert row_of(conn, job_id) == (state, token, None, finished, result, attempt)


def test_a_mixed_batch_completes_only_its_live_leases_each_with_its_own_result(conn, store):
    ids = pgworkerd.enqueue_many(conn, [{"kind": "k", "payload": {}}] * 8)
    jobs: list[Job] = claim(store, conn, limit=8)
    assert sorted(job.id for job in jobs) == sorted(ids)
    live, lost = jobs[::2], jobs[1::2]
    lost_rows = {job.id: row_of(conn, job.id) for job in lost}
    done = [(job.lease, f'{{"for": {job.id}}}') for job in live]
    done += [(stale(job.lease), f'{{"for": {-job.id}}}') for job in lost]
    random.Random(15).shuffle(done)

    kept, _ = store.complete_and_claim(conn, done, limit=5, **CLAIM)

    assert kept == {job.id for job in live}
    for job in live:
        state, _, expires, finished, result, _ = row_of(conn, job.id)
        assert (state, expires, result) == ("succeeded", None, {"for": job.id})
        assert finished is not None
    assert {job.id: row_of(conn, job.id) for job in lost} == lost_rows


def test_a_retried_batch_sees_its_own_outcome_and_writes_nothing_twice(conn, store):
    # docs/faults.md, "Outcome committed, reply lost", through complete_and_claim.
    ids = pgworkerd.enqueue_many(conn, [{"kind": "k", "payload": {}}] * 2)
    jobs = claim(store, conn, limit=2)
    done = [(job.lease, f'"{job.id}"') for job in jobs]
    kept, _ = store.complete_and_claim(conn, done, limit=5, **CLAIM)
    assert kept == set(ids)
    finished = {job_id: row_of(conn, job_id) for job_id in ids}

    again = [(lease, '"again"') for lease, _ in done]
    kept, _ = store.complete_and_claim(conn, again, limit=5, **CLAIM)

    assert kept == set(ids)
    assert {job_id: row_of(conn, job_id) for job_id in ids} == finished
