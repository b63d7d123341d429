"""JobStore on a real server: failures, retries with backoff, dead-lettering."""

from __future__ import annotations

import itertools
from datetime import timedelta

import pgworkerd
from pgworkerd.storage.store import Backoff, JobStore
from tests.integration.store_helpers import claim, db_now

# -- fail, retry_after, backoff ------------------------------------------------------------


def test_fail_retries_later_then_dead_letters_with_bounded_history(conn):
    store = JobStore(backoff=Backoff(base_s=0, max_s=0))  # retry at once: no waiting here
    job_id = pgworkerd.enqueue(conn, "k", {}, max_attempts=25)
    for attempt in range(1, 26):
        (job,) = claim(store, conn)
        assert job.attempt == attempt
        outcome = store.fail(conn, job.lease, f"error number {attempt}")
        assert outcome is not None
        assert outcome.state == ("dead" if attempt == 25 else "queued")
    row = store.get(conn, job_id)
    assert row["state"] == "dead" and row["finished_at"] is not None
    assert row["last_error"] == "error number 25"
    assert len(row["errors"]) == 20, "the history keeps the last 20 errors"
    assert [e["attempt"] for e in row["errors"]] == list(range(6, 26))
    assert claim(store, conn) == []


def test_fail_schedules_the_retry_from_the_database_clock_with_backoff(conn):
    store = JobStore(backoff=Backoff(base_s=100, max_s=1000))
    job_id = pgworkerd.enqueue(conn, "k", {})
    (job,) = claim(store, conn)
    before = db_now(conn)
    outcome = store.fail(conn, job.lease, "boom")
    assert outcome.state == "queued"
    assert before <= outcome.run_at <= before + timedelta(seconds=101)
    assert claim(store, conn) == [] or outcome.run_at <= db_now(conn)
    row = store.get(conn, job_id)
    assert row["attempt"] == 1 and row["lease_token"] is None


def test_backoff_grows_exponentially_is_capped_and_jittered(conn):
    """Over 200 jobs per attempt: delays stay under base*2^(n-1) (capped), spread over
    that range (full jitter), and their mean doubles from one attempt to the next."""
    base, cap, jobs_per_attempt = 10.0, 80.0, 200
    store = JobStore(backoff=Backoff(base_s=base, max_s=cap))
    delays_by_attempt: dict[int, list[float]] = {}
    for attempt in range(1, 6):
        # Fake the earlier attempts so each job fails at exactly this attempt.
        pgworkerd.enqueue_many(
            conn,
            [{"kind": "k", "payload": {}, "queue": f"a{attempt}"} for _ in range(jobs_per_attempt)],
        )
        conn.execute(
            "UPDATE pgworkerd.jobs SET attempt = %s WHERE queue = %s", (attempt - 1, f"a{attempt}")
        )
        jobs = claim(store, conn, limit=jobs_per_attempt, queues=[f"a{attempt}"], max_attempts=99)
        delays = []
        for job in jobs:
            now = db_now(conn)
            outcome = store.fail(conn, job.lease, "boom")
            delays.append((outcome.run_at - now).total_seconds())
        delays_by_attempt[attempt] = delays

    means = []
    for attempt, delays in delays_by_attempt.items():
        ceiling = min(cap, base * 2 ** (attempt - 1))
        assert all(-0.5 <= d <= ceiling + 0.5 for d in delays), (attempt, max(delays))
        assert max(delays) - min(delays) > ceiling * 0.8, "full jitter spreads the delays"
        means.append(sum(delays) / len(delays))
    uncapped = means[:4]  # attempts 1..4
    for earlier, later in itertools.pairwise(uncapped):
        assert 1.5 < later / earlier < 2.6, means
    assert means[4] < cap * 0.65, "attempt 5 is capped at 80s, not 160s"


def test_discard_dead_letters_at_once(conn, store):
    job_id = pgworkerd.enqueue(conn, "k", {}, max_attempts=10)
    (job,) = claim(store, conn)
    outcome = store.fail(conn, job.lease, "bad input, will never work", discard=True)
    assert outcome.state == "dead"
    row = store.get(conn, job_id)
    assert row["state"] == "dead" and row["attempt"] == 1
    assert row["last_error"] == "bad input, will never work"


def test_retry_after_uses_the_explicit_delay(conn, store):
    job_id = pgworkerd.enqueue(conn, "k", {})
    (job,) = claim(store, conn)
    now = db_now(conn)
    outcome = store.retry_after(conn, job.lease, 120)
    assert outcome.state == "queued"
    assert timedelta(seconds=119) < outcome.run_at - now < timedelta(seconds=125)
    assert store.get(conn, job_id)["attempt"] == 1


def test_retry_after_on_the_last_attempt_is_dead(conn, store):
    job_id = pgworkerd.enqueue(conn, "k", {}, max_attempts=1)
    (job,) = claim(store, conn)
    assert store.retry_after(conn, job.lease, 1).state == "dead"
    assert "retry requested" in store.get(conn, job_id)["last_error"]


def test_error_text_with_nul_and_huge_size_is_stored_escaped_and_cut(conn, store):
    job_id = pgworkerd.enqueue(conn, "k", {})
    (job,) = claim(store, conn)
    assert store.fail(conn, job.lease, "bad\x00byte " + "x" * 100_000) is not None
    row = store.get(conn, job_id)
    assert row["last_error"].startswith("bad\\u0000byte")
    assert len(row["last_error"]) < 33_000
    assert len(row["errors"][0]["error"]) == 4000
