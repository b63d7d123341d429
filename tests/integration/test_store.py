"""Every state transition of JobStore on a real server, and the lease fence."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import psycopg
import pytest

import pgworkerd
from pgworkerd.storage.store import Backoff, JobStore
from tests.integration.store_helpers import claim, db_now, expire_leases, stale

# -- claim ---------------------------------------------------------------------------------


def test_claim_leases_a_batch_charges_an_attempt_and_uses_the_database_clock(conn, store):
    ids = pgworkerd.enqueue_many(conn, [{"kind": "k", "payload": {"n": n}} for n in range(5)])
    before = db_now(conn)
    jobs = claim(store, conn, limit=3, lease_ttl_s=45)

    assert [j.id for j in jobs] == ids[:3]
    assert all(j.attempt == 1 and j.max_attempts == 5 for j in jobs)
    assert len({j.lease_token for j in jobs}) == 3, "each claim draws its own token"
    for job in jobs:
        row = store.get(conn, job.id)
        assert row["state"] == "running"
        assert row["worker"] == "test-host:1"
        assert row["lease_token"] == job.lease_token
        expected = before + timedelta(seconds=45)
        assert abs((row["lease_expires_at"] - expected).total_seconds()) < 5
    assert [j.id for j in claim(store, conn)] == ids[3:], "claimed jobs are not claimed again"
    assert claim(store, conn) == []


def test_a_claimed_job_reads_as_the_row_does_in_text(conn, store):
    """Claim rows come in binary (store._claim_rows): every field of a Job must be what
    the same row reads as in text, a timestamp's time zone included."""
    conn.execute("SET TIME ZONE 'America/Chicago'")
    payload = {"s": 'ü✓ "q" \\', "n": [1, 2.5, None, True], "big": 2**62}
    first = pgworkerd.enqueue(conn, "k", {"before": True})
    job_id = pgworkerd.enqueue(
        conn, "kind ü", payload, queue="q", priority=4, key="key 1", max_runtime=12.5
    )
    (job,) = [j for j in claim(store, conn, queues=["q"]) if j.id == job_id]
    row = store.get(conn, job_id)
    assert (job.kind, job.queue, job.payload, job.priority, job.key) == (
        "kind ü",
        "q",
        payload,
        4,
        "key 1",
    )
    assert (job.attempt, job.max_attempts, job.max_runtime_s) == (1, 5, 12.5)
    assert job.lease_token == row["lease_token"]
    for field in ("run_at", "created_at"):
        value = getattr(job, field)
        assert value == row[field]
        assert value.utcoffset() == row[field].utcoffset()
        assert value.isoformat() == row[field].isoformat()
    assert claim(store, conn)[0].id == first


def test_claim_starts_a_job_at_its_transactions_time(store, db_dsn):
    """A plain claim's started_at is now() (claim_update): in a caller's transaction, the
    transaction's time, as a completion's finished_at there. (A limited claim's is its
    statement's, after the lock: test_limits.)"""
    with psycopg.connect(db_dsn) as conn:  # a transaction, not autocommit
        job_id = pgworkerd.enqueue(conn, "k", {})
        began = db_now(conn)
        (job,) = claim(store, conn)
        store.complete(conn, [(job.lease, None)])
        row = store.get(conn, job_id)
        assert row["started_at"] == began == row["finished_at"]


def test_claim_order_is_priority_then_run_at_then_id(conn, store):
    now = db_now(conn)
    low = pgworkerd.enqueue(conn, "k", {}, priority=-5)
    late = pgworkerd.enqueue(conn, "k", {}, run_at=now - timedelta(seconds=10))
    early = pgworkerd.enqueue(conn, "k", {}, run_at=now - timedelta(seconds=20))
    high = pgworkerd.enqueue(conn, "k", {}, priority=10)
    mid_a = pgworkerd.enqueue(conn, "k", {}, priority=3)
    mid_b = pgworkerd.enqueue(conn, "k", {}, priority=3)
    one_by_one = [claim(store, conn, limit=1)[0].id for _ in range(6)]
    assert one_by_one == [high, mid_a, mid_b, early, late, low]


def test_claim_prefers_queues_in_the_order_given_then_priority(conn, store):
    bulk = pgworkerd.enqueue_many(
        conn,
        [
            {"kind": "k", "payload": {}, "queue": "bulk", "priority": 100},
            {"kind": "k", "payload": {}, "queue": "critical", "priority": 0},
            {"kind": "k", "payload": {}, "queue": "critical", "priority": 1},
            {"kind": "k", "payload": {}, "queue": "other"},
        ],
    )
    jobs = claim(store, conn, limit=10, queues=["critical", "bulk"])
    assert [j.id for j in jobs] == [bulk[2], bulk[1], bulk[0]], "queue order wins over priority"
    assert store.get(conn, bulk[3])["state"] == "queued", "unlisted queues are left alone"


def test_claim_batch_stops_at_the_limit_across_queues(conn, store):
    pgworkerd.enqueue_many(
        conn, [{"kind": "k", "payload": {}, "queue": q} for q in ("a", "a", "b", "b")]
    )
    jobs = claim(store, conn, limit=3, queues=["a", "b"])
    assert [j.queue for j in jobs] == ["a", "a", "b"]
    running = conn.execute("SELECT count(*) FROM pgworkerd.jobs WHERE state = 'running'")
    assert running.fetchone()[0] == 3


def test_claim_skips_jobs_scheduled_for_later(conn, store):
    later = pgworkerd.enqueue(conn, "k", {}, delay=3600)
    ready = pgworkerd.enqueue(conn, "k", {})
    assert [j.id for j in claim(store, conn)] == [ready]
    assert store.get(conn, later)["state"] == "queued"


def test_claim_applies_the_queue_max_attempts_only_to_jobs_without_their_own(conn, store):
    own = pgworkerd.enqueue(conn, "k", {}, max_attempts=9)
    default = pgworkerd.enqueue(conn, "k", {})
    jobs = {j.id: j for j in claim(store, conn, max_attempts=3)}
    assert jobs[own].max_attempts == 9
    assert jobs[default].max_attempts == 3
    assert store.get(conn, default)["max_attempts"] == 3


def test_claim_of_an_empty_queue_returns_nothing(conn, store):
    assert claim(store, conn, queues=["nothing-here"]) == []


# -- complete ------------------------------------------------------------------------------


def test_complete_records_result_and_finish_time(conn, store):
    job_id = pgworkerd.enqueue(conn, "k", {})
    (job,) = claim(store, conn)
    assert store.complete(conn, [(job.lease, '{"answer": 42}')]) == {job_id}
    row = store.get(conn, job_id)
    assert row["state"] == "succeeded"
    assert row["result"] == {"answer": 42}
    assert row["finished_at"] is not None
    assert row["lease_expires_at"] is None
    assert row["lease_token"] == job.lease_token, "kept: a retried complete sees its outcome"


def test_complete_a_batch_in_one_call(conn, store):
    pgworkerd.enqueue_many(conn, [{"kind": "k", "payload": {}} for _ in range(20)])
    jobs = claim(store, conn, limit=20)
    assert store.complete(conn, [(j.lease, None) for j in jobs]) == {j.id for j in jobs}


def test_a_batch_s_results_are_written_each_to_its_job_whatever_their_text(conn, store):
    """The completion's ids, tokens and results go as array literals (storage/arrays.py):
    quotes, backslashes, braces, commas, non-ASCII and None must reach their own job."""
    results = ['"say \\"hi\\", {x}"', '["back\\\\slash", "ü✓"]', None, "null", '{"a": ""}']
    ids = pgworkerd.enqueue_many(conn, [{"kind": "k", "payload": {}} for _ in results])
    jobs = claim(store, conn, limit=len(ids))
    by_id = {job.id: job for job in jobs}
    done = [(by_id[job_id].lease, result) for job_id, result in zip(ids, results, strict=True)]
    assert store.complete(conn, reversed(done)) == set(ids)
    for job_id, result in zip(ids, results, strict=True):
        row = store.get(conn, job_id)
        assert row["state"] == "succeeded"
        assert row["result"] == (None if result is None else json.loads(result))


def test_stale_lease_cannot_complete_fail_renew_or_release(conn, store):
    job_id = pgworkerd.enqueue(conn, "k", {})
    (job,) = claim(store, conn)
    before = store.get(conn, job_id)
    wrong = stale(job.lease)

    assert store.complete(conn, [(wrong, None)]) == set()
    assert store.fail(conn, wrong, "boom") is None
    assert store.retry_after(conn, wrong, 5) is None
    assert store.renew(conn, [wrong], lease_ttl_s=3600) == set()
    assert store.release(conn, [wrong]) == set()
    assert store.get(conn, job_id) == before, "a stale token changed the job"


def test_old_holder_cannot_touch_the_job_after_rescue_and_reclaim(conn, store):
    job_id = pgworkerd.enqueue(conn, "k", {})
    (first,) = claim(store, conn)
    expire_leases(conn)
    store_no_wait = JobStore(backoff=Backoff(base_s=0, max_s=0))
    assert [o.job_id for o in store_no_wait.rescue(conn)] == [job_id]
    (second,) = claim(store, conn)
    assert second.attempt == 2

    assert store.complete(conn, [(first.lease, None)]) == set()
    assert store.renew(conn, [first.lease], 3600) == set()
    assert store.fail(conn, first.lease, "late failure") is None
    row = store.get(conn, job_id)
    assert row["state"] == "running" and row["lease_token"] == second.lease_token
    assert store.complete(conn, [(second.lease, None)]) == {job_id}


def test_an_outcome_is_accepted_once_and_a_retried_complete_sees_it(conn, store):
    """docs/faults.md, "Outcome committed, reply lost": the first complete committed but
    its reply was lost; the holder
    retries and is told its outcome stands, and nothing is written twice."""
    job_id = pgworkerd.enqueue(conn, "k", {})
    (job,) = claim(store, conn)
    assert store.complete(conn, [(job.lease, None)]) == {job_id}
    finished = store.get(conn, job_id)
    assert store.complete(conn, [(job.lease, '"again"')]) == {job_id}
    assert store.fail(conn, job.lease, "late") is None
    assert store.get(conn, job_id) == finished, "the retry wrote nothing"
    assert store.complete(conn, [(stale(job.lease), None)]) == set()


# -- release, renew ------------------------------------------------------------------------


def test_release_gives_the_job_back_uncharged_and_in_place(conn, store):
    first, second = pgworkerd.enqueue_many(conn, [{"kind": "k", "payload": {}}] * 2)
    jobs = claim(store, conn, limit=2)
    assert store.release(conn, [j.lease for j in jobs]) == {first, second}
    for job_id in (first, second):
        row = store.get(conn, job_id)
        assert row["state"] == "queued" and row["attempt"] == 0
        assert row["lease_token"] is None
    assert [j.id for j in claim(store, conn, limit=1)] == [first], "keeps its place"


def test_renew_extends_live_leases_only(conn, store):
    pgworkerd.enqueue_many(conn, [{"kind": "k", "payload": {}}] * 2)
    kept, lost = claim(store, conn, limit=2, lease_ttl_s=5)
    store.cancel(conn, [lost.id])
    now = db_now(conn)
    assert store.renew(conn, [kept.lease, lost.lease], lease_ttl_s=600) == {kept.id}
    expires = store.get(conn, kept.id)["lease_expires_at"]
    assert timedelta(seconds=590) < expires - now < timedelta(seconds=610)


def test_renew_skips_a_locked_row_and_says_it_is_still_held(conn, store, db_dsn):
    """Review 25 F4: another transaction's row lock on one leased job (a producer's open
    `enqueue(after=[it])` locks it FOR SHARE) is skipped, not waited on; the others are
    renewed, and the skipped lease is told from a lost one."""
    pgworkerd.enqueue_many(conn, [{"kind": "k", "payload": {}}] * 3)
    locked, free, lost = claim(store, conn, limit=3, lease_ttl_s=5)
    store.cancel(conn, [lost.id])
    leases = [locked.lease, free.lease, lost.lease]
    with psycopg.connect(db_dsn) as holder:
        holder.execute("SELECT 1 FROM pgworkerd.jobs WHERE id = %s FOR SHARE", (locked.id,))
        conn.execute("SET lock_timeout = '2s'")  # a wait would fail the test, not hang it
        assert store.renew(conn, leases, lease_ttl_s=600) == {free.id}
        missing = [locked.lease, lost.lease]
        assert store.unrenewed_among(conn, missing) == ({locked.id}, {lost.id})
    assert store.renew(conn, leases, lease_ttl_s=600) == {locked.id, free.id}


# -- rescue --------------------------------------------------------------------------------


def test_rescue_charges_the_attempt_and_dead_letters_at_max_attempts(conn):
    store = JobStore(backoff=Backoff(base_s=0, max_s=0))
    job_id = pgworkerd.enqueue(conn, "k", {}, max_attempts=3)
    for attempt in (1, 2, 3):
        (job,) = claim(store, conn)
        assert job.attempt == attempt
        expire_leases(conn)
        (outcome,) = store.rescue(conn)
        assert outcome.job_id == job_id
        assert outcome.state == ("dead" if attempt == 3 else "queued")
    row = store.get(conn, job_id)
    assert row["state"] == "dead" and row["attempt"] == 3
    assert "lease expired" in row["last_error"] and "test-host:1" in row["last_error"]
    assert [e["attempt"] for e in row["errors"]] == [1, 2, 3]


def test_rescue_leaves_live_leases_alone(conn, store):
    pgworkerd.enqueue_many(conn, [{"kind": "k", "payload": {}}] * 3)
    claim(store, conn, limit=3, lease_ttl_s=60)
    assert store.rescue(conn) == []
    assert (
        conn.execute("SELECT count(*) FROM pgworkerd.jobs WHERE state = 'running'").fetchone()[0]
        == 3
    )


def test_rescue_spares_the_expired_leases_it_is_told_to(conn, store):
    """A daemon's rescue spares the leases of jobs its own workers never started (it
    gives them back uncharged itself); the other expired leases are rescued."""
    pgworkerd.enqueue_many(conn, [{"kind": "k", "payload": {}}] * 2)
    spared, other = claim(store, conn, limit=2)
    expire_leases(conn)
    assert [o.job_id for o in store.rescue(conn, spared=[spared.lease])] == [other.id]
    assert store.release(conn, [spared.lease]) == {spared.id}
    row = store.get(conn, spared.id)
    assert (row["state"], row["attempt"]) == ("queued", 0), "given back uncharged"


def test_rescue_skips_a_row_locked_by_a_completion_in_flight(conn, store, db_dsn):
    job_id = pgworkerd.enqueue(conn, "k", {})
    (job,) = claim(store, conn)
    expire_leases(conn)
    with psycopg.connect(db_dsn) as completer:  # a transaction, not autocommit
        assert store.complete(completer, [(job.lease, None)]) == {job_id}
        assert store.rescue(conn) == [], "rescue must skip, not wait for or override, the row"
        completer.commit()
    assert store.get(conn, job_id)["state"] == "succeeded"


# -- cancel, retry (pruning: test_retention.py) ------------------------------------------


def test_cancel_queued_and_running_but_not_finished_jobs(conn, store):
    queued, running, done = pgworkerd.enqueue_many(conn, [{"kind": "k", "payload": {}}] * 3)
    jobs = claim(store, conn, limit=2)
    store.complete(conn, [(jobs[0].lease, None)])  # `queued` is done now
    done_id, running_id = jobs[0].id, jobs[1].id
    assert store.cancel(conn, [queued, running, done]) == sorted({running_id, done})
    assert store.get(conn, done_id)["state"] == "succeeded"
    assert store.get(conn, running_id)["state"] == "cancelled"
    assert store.complete(conn, [(jobs[1].lease, None)]) == set(), "holder lost its lease"


def test_retry_finished_requeues_dead_jobs_with_one_more_attempt(conn, store):
    dead_a, dead_b, other_queue = pgworkerd.enqueue_many(
        conn,
        [
            {"kind": "k", "payload": {}, "max_attempts": 1},
            {"kind": "k", "payload": {}, "max_attempts": 1},
            {"kind": "k", "payload": {}, "max_attempts": 1, "queue": "other"},
        ],
    )
    for job in claim(store, conn, limit=3, queues=["default", "other"]):
        store.fail(conn, job.lease, "boom")
    assert store.retry_finished(conn, ids=[dead_a]) == [dead_a]
    assert store.retry_finished(conn, queue="default") == [dead_b]
    assert store.retry_finished(conn) == [other_queue]
    row = store.get(conn, dead_a)
    assert row["state"] == "queued" and row["finished_at"] is None
    assert row["attempt"] == 1 and row["max_attempts"] == 2
    (job, *_) = claim(store, conn, limit=1)
    assert job.attempt == 2


def test_retry_finished_leaves_a_job_whose_unique_key_is_live_again(conn, store):
    first = pgworkerd.enqueue(conn, "k", {}, unique_key="report-1", max_attempts=1)
    (job,) = claim(store, conn)
    store.fail(conn, job.lease, "boom")
    second = pgworkerd.enqueue(conn, "k", {}, unique_key="report-1")
    assert second != first
    assert store.retry_finished(conn, ids=[first]) == []
    assert store.get(conn, first)["state"] == "dead"


def test_run_at_far_past_and_far_future_are_accepted(conn, store):
    past = pgworkerd.enqueue(conn, "k", {}, run_at=datetime(1970, 1, 1, tzinfo=UTC))
    future = pgworkerd.enqueue(conn, "k", {}, run_at=datetime(9999, 1, 1, tzinfo=UTC))
    assert [j.id for j in claim(store, conn)] == [past]
    assert store.get(conn, future)["run_at"].year == 9999


@pytest.mark.parametrize("schema", ["tenant_a", 'we"ird; DROP TABLE x; --'])
def test_a_custom_schema_is_used_as_data(empty_db_dsn, schema):
    from pgworkerd.storage.migrations import migrate

    with psycopg.connect(empty_db_dsn, autocommit=True) as conn:
        migrate(conn, schema)
        producer = pgworkerd.Producer(schema=schema)
        job_id = producer.enqueue(conn, "k", {"x": 1})
        store = JobStore(schema)
        (job,) = store.claim(conn, queues=["default"], limit=1, lease_ttl_s=30, worker="w")
        assert job.id == job_id
        assert store.complete(conn, [(job.lease, None)]) == {job_id}
        tables = {
            row[0]
            for row in conn.execute(
                "SELECT tablename FROM pg_tables WHERE schemaname = %s", (schema,)
            )
        }
        assert tables >= {
            "jobs",
            "daemons",
            "migrations",
            "paused_queues",
            "periodic_entries",
            "jobs_archive",
        }
