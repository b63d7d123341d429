"""JobStore.claim_one, the claim of a worker just woken for a new job (jobs_claim_one):
one job by a cheaper statement, with every guarantee of the batch claim."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import psycopg
import pytest

import pgworkerd
from pgworkerd.storage.store import ClaimPositions, JobStore
from tests.integration.store_helpers import claim, db_now
from tests.integration.test_claim_held_snapshot import beside_a_held_snapshot, dead_tuples
from tests.integration.test_claim_plan import (
    PLAN_MODES,
    explain,
    jobs_scans,
    pages_touched,
)
from tests.integration.test_key_pauses import end_pause

OPTIONS: dict[str, Any] = {"queues": ["default"], "lease_ttl_s": 45, "worker": "test-host:1"}


def claim_one(
    store: JobStore, conn: psycopg.Connection[Any], **kwargs: Any
) -> tuple[list[pgworkerd.Job], bool]:
    return store.claim_one(conn, **({"limit": 10} | OPTIONS | kwargs))


def test_it_leases_the_first_job_charges_it_and_says_whether_more_are_ready(conn, store):
    ids = pgworkerd.enqueue_many(conn, [{"kind": "k", "payload": {"n": n}} for n in range(3)])
    before = db_now(conn)
    [job], more = claim_one(store, conn)
    assert (job.id, job.payload, job.attempt, job.max_attempts, more) == (
        ids[0],
        {"n": 0},
        1,
        5,
        True,
    )
    row = store.get(conn, job.id)
    assert (row["state"], row["worker"], row["lease_token"]) == (
        "running",
        "test-host:1",
        job.lease_token,
    )
    expected = before + timedelta(seconds=45)  # the database's clock
    assert abs((row["lease_expires_at"] - expected).total_seconds()) < 5
    assert claim_one(store, conn)[0][0].id == ids[1]
    [last], more = claim_one(store, conn)
    assert (last.id, more) == (ids[2], False), "nothing ready after the last one"
    assert claim_one(store, conn) == ([], False)
    assert len({job.lease_token, last.lease_token}) == 2, "each claim draws its own token"


def test_more_leaves_out_jobs_not_ready_and_jobs_of_a_paused_key(conn, store):
    first = pgworkerd.enqueue(conn, "k", {})
    pgworkerd.enqueue(conn, "k", {}, delay=3600)
    pgworkerd.enqueue(conn, "k", {}, key="a")
    pgworkerd.pause_key(conn, "a", 3600)
    [job], more = claim_one(store, conn)
    assert (job.id, more) == (first, False)


def test_a_paused_queue_is_not_claimed_and_its_position_stays(conn):
    store = JobStore(positions=ClaimPositions(lag_s=0, sweep_every_s=3600))
    past = db_now(conn) - timedelta(hours=1)
    job = pgworkerd.enqueue(conn, "k", {}, run_at=past)
    pgworkerd.pause_queue(conn, "default")
    assert claim_one(store, conn) == ([], False)
    pgworkerd.resume_queue(conn, "default")
    assert [j.id for j in claim_one(store, conn)[0]] == [job], "found without a sweep"


def test_a_paused_key_is_passed_over_and_no_position_moves_while_it_is(conn):
    store = JobStore(positions=ClaimPositions(lag_s=0, sweep_every_s=3600))
    past = db_now(conn) - timedelta(hours=1)
    held = pgworkerd.enqueue(conn, "k", {}, key="a", run_at=past)
    pgworkerd.pause_key(conn, "a", 3600)
    free = pgworkerd.enqueue(conn, "k", {})
    assert [j.id for j in claim_one(store, conn)[0]] == [free]
    end_pause(conn, "a")
    assert [j.id for j in claim_one(store, conn)[0]] == [held], "found without a sweep"


def test_a_job_locked_by_another_claimer_is_skipped_not_waited_for(conn, store, db_dsn):
    ids = pgworkerd.enqueue_many(conn, [{"kind": "k", "payload": {}} for _ in range(2)])
    with psycopg.connect(db_dsn) as other:
        other.execute("SELECT 1 FROM pgworkerd.jobs WHERE id = %s FOR UPDATE", [ids[0]])
        [job], _ = claim_one(store, conn)
        assert job.id == ids[1]


def test_its_positions_are_the_batch_claims(conn):
    """A job behind the position that claim_one moved is left to the sweep, as after
    a batch claim: the positions are the same ClaimPositions."""
    store = JobStore(positions=ClaimPositions(lag_s=0, sweep_every_s=3600))
    pgworkerd.enqueue(conn, "k", {})
    assert len(claim_one(store, conn)[0]) == 1  # nothing after it: to the horizon
    behind = pgworkerd.enqueue(conn, "k", {}, run_at=db_now(conn) - timedelta(hours=1))
    assert claim_one(store, conn) == ([], False)
    assert claim(store, conn) == []  # nor a batch claim: same positions
    store.positions.sweep_soon()
    assert [j.id for j in claim_one(store, conn)[0]] == [behind]


def test_other_queue_lists_take_the_batch_claim(conn, store):
    ids = pgworkerd.enqueue_many(
        conn, [{"kind": "k", "payload": {}, "queue": q} for q in ("a", "b", "a")]
    )
    jobs, full = claim_one(store, conn, queues=["a", "b"], limit=3)
    assert ([j.id for j in jobs], full) == ([ids[0], ids[2], ids[1]], True)
    pgworkerd.enqueue(conn, "k", {}, priority=5)
    pgworkerd.enqueue(conn, "k", {})
    store.positions.sweep_soon()  # learns priority 5: two levels of `default`
    jobs, full = claim_one(store, conn, limit=3)
    assert ([j.priority for j in jobs], full) == ([5, 0], False)


@pytest.mark.slow  # a million rows: filled once a session (tests/integration/conftest.py)
def test_it_stays_on_its_indexes_with_a_million_finished_and_future_rows(
    finished_and_future_conn,
):
    conn = finished_and_future_conn
    params = {
        "level_queues": ["default"],
        "level_priorities": [0],
        "level_after_run_at": [None],
        "level_after_id": [None],
        "queues": ["default"],
        "queue_max_attempts": [5],
        "lease_ttl_s": 30.0,
        "worker": "explain",
    }
    for mode in PLAN_MODES:
        plan = explain(conn, "jobs_claim_one", params, plan_cache_mode=mode)
        scans = jobs_scans(plan)
        assert ("Seq Scan", None) not in scans, (mode, scans)
        assert ("Index Scan", "jobs_pkey") in scans, (mode, scans)  # the update, by id
        assert any(index == "jobs_claim_idx" for _, index in scans), (mode, scans)
        assert plan["Actual Rows"] == 1
        touched = pages_touched(plan)
        assert touched < 100, f"claim_one touched {touched} pages ({mode})"


ONE_WORK = """
SELECT coalesce(sum(shared_blks_hit + shared_blks_read), 0)::bigint, coalesce(sum(calls), 0)
FROM pg_stat_statements
WHERE query LIKE '%%FOR UPDATE OF j SKIP LOCKED%%'
  AND dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
"""


@pytest.mark.slow  # 20,000 jobs, one claim each: ~1 min
@pytest.mark.timeout(600)
def test_its_work_stays_flat_while_a_snapshot_is_held(stats_dsn):
    """test_claim_held_snapshot's scenario (issue 18) for claim_one, one job a claim:
    the buffers a claim touches, sampled every 5,000 jobs, stay within 2x of the first
    sample's (a claim that scans its level from the start grows past that by then)."""
    store = JobStore()
    with beside_a_held_snapshot(stats_dsn) as conn:
        samples: list[tuple[int, float]] = []
        done = 0
        while done < 20_000:
            pgworkerd.enqueue_many(conn, [{"kind": "k", "payload": {}} for _ in range(1_000)])
            if done == 1_000:
                conn.execute("ANALYZE pgworkerd.jobs")  # as test_claim_held_snapshot does
            conn.execute("SELECT pg_stat_statements_reset()")
            while jobs := claim_one(store, conn)[0]:
                done += len(store.complete(conn, [(job.lease, None) for job in jobs]))
            buffers, calls = conn.execute(ONE_WORK).fetchone()
            if done % 5_000 == 0:
                samples.append((done, buffers / calls))
                assert samples[-1][1] <= 2 * samples[0][1], f"buffers per claim grew: {samples}"
        # Waited for until there (it was for the batch test's 100,000: 10 s each run).
        dead = dead_tuples(conn, 20_000)
    print(f"buffers per claim_one (jobs done, buffers): {samples}")
    assert dead >= 20_000, dead  # the versions the jobs left behind were still there
