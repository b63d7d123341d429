"""Claim positions (store.ClaimPositions): a claim starts each level after what it has
passed, and the sweep finds what a position passed anyway. The sweep interval is set
out of reach (an hour) and sweeps are asked for by name, so nothing here waits on time."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pgworkerd
from pgworkerd.storage.store import ClaimPositions, JobStore
from tests.integration.store_helpers import claim


def no_timed_sweeps() -> JobStore:
    return JobStore(positions=ClaimPositions(sweep_every_s=3600))


def test_a_job_behind_the_position_waits_for_the_sweep_then_is_claimed(conn):
    store = no_timed_sweeps()
    first = pgworkerd.enqueue(conn, "k", {})
    assert [j.id for j in claim(store, conn)] == [first]  # the first claim sweeps
    # Given a run_at far behind the position (as a transaction that committed long
    # after it began would have): the claims that start after the position pass it.
    late = pgworkerd.enqueue(conn, "k", {}, run_at=datetime.now(UTC) - timedelta(hours=1))
    assert claim(store, conn) == []
    store.positions.sweep_soon()
    assert [j.id for j in claim(store, conn)] == [late]


def test_a_job_committed_within_the_look_back_is_claimed_without_a_sweep(conn):
    store = no_timed_sweeps()
    pgworkerd.enqueue(conn, "k", {})
    claim(store, conn)
    # run_at a little in the past, as a producer's transaction that took 200 ms gives.
    recent = pgworkerd.enqueue(
        conn, "k", {}, run_at=datetime.now(UTC) - timedelta(milliseconds=200)
    )
    assert [j.id for j in claim(store, conn)] == [recent]


def test_a_released_job_is_claimed_again_at_once_by_the_releasing_store(conn):
    store = no_timed_sweeps()
    # An hour old: the claim's position lands exactly on the last of them, not on
    # now() - 1 s, and the released ones are behind it.
    old = datetime.now(UTC) - timedelta(hours=1)
    ids = pgworkerd.enqueue_many(conn, [{"kind": "k", "payload": {}, "run_at": old}] * 3)
    jobs = claim(store, conn, limit=3)
    assert store.release(conn, [j.lease for j in jobs[1:]]) == set(ids[1:])
    assert [j.id for j in claim(store, conn, limit=2)] == ids[1:], "they keep their place"


def test_a_new_priority_level_is_learnt_at_the_sweep(conn):
    store = no_timed_sweeps()
    pgworkerd.enqueue(conn, "k", {})
    claim(store, conn)
    urgent = pgworkerd.enqueue(conn, "k", {}, priority=10)
    normal = pgworkerd.enqueue(conn, "k", {})
    # Priority 0 of every queue is always known; a level first seen is learnt at the
    # next sweep and from then on claimed first.
    assert [j.id for j in claim(store, conn, limit=1)] == [normal]
    store.positions.sweep_soon()
    pgworkerd.enqueue(conn, "k", {})
    assert [j.id for j in claim(store, conn, limit=1)] == [urgent]


def test_a_paused_queues_positions_do_not_move_past_its_ready_jobs(conn):
    store = no_timed_sweeps()
    # An hour old: a position moved to now() - 1 s would be past it.
    old = datetime.now(UTC) - timedelta(hours=1)
    waiting = pgworkerd.enqueue(conn, "k", {}, queue="reports", run_at=old)
    pgworkerd.pause_queue(conn, "reports")
    both = ["reports", "default"]
    assert claim(store, conn, queues=both) == []  # comes back short: positions move...
    pgworkerd.resume_queue(conn, "reports")
    # ...but not those of the paused queue: its job is claimed without a sweep.
    assert [j.id for j in claim(store, conn, queues=both)] == [waiting]


def test_positions_never_go_back_nor_past_now_minus_the_look_back():
    positions = ClaimPositions(lag_s=1.0)
    positions.learn(["q"], [])
    now = datetime(2026, 1, 1, tzinfo=UTC)
    job = _job("q", run_at=now - timedelta(seconds=10), job_id=7)
    positions.advance(["q"], [job], db_now=now, exhausted=False, paused=[])
    assert positions.params(["q"], sweep=False)["level_after_id"] == [7]
    positions.advance(["q"], [], db_now=now, exhausted=True, paused=[])
    after = positions.params(["q"], sweep=False)
    assert after["level_after_run_at"] == [now - timedelta(seconds=1)]
    older = _job("q", run_at=now - timedelta(seconds=30), job_id=3)
    positions.advance(["q"], [older], db_now=now, exhausted=False, paused=[])
    assert positions.params(["q"], sweep=False) == after, "a straggler moves nothing back"
    assert positions.params(["q"], sweep=True)["level_after_run_at"] == [None]


def test_a_claims_positions_are_the_last_job_of_each_level_in_claim_order():
    positions = ClaimPositions(lag_s=1.0)
    positions.learn(["q"], [("q", 5)])
    now = datetime(2026, 1, 1, tzinfo=UTC)
    t = now - timedelta(seconds=60)
    jobs = [  # claim order: priority 5 first, then 0; each by (run_at, id)
        _job("q", run_at=t, job_id=4, priority=5),
        _job("q", run_at=t + timedelta(seconds=1), job_id=2, priority=5),
        _job("q", run_at=t, job_id=1),
        _job("q", run_at=t, job_id=3),
    ]
    positions.advance(["q"], jobs, db_now=now, exhausted=False, paused=[])
    params = positions.params(["q"], sweep=False)
    by_level = dict(zip(params["level_priorities"], params["level_after_id"], strict=True))
    assert by_level == {5: 2, 0: 3}
    # Out of order, a position may stay short of the furthest job (a scan more), but
    # never passes a job that was not claimed.
    later = _job("q", run_at=t + timedelta(seconds=5), job_id=9)
    earlier = _job("q", run_at=t + timedelta(seconds=4), job_id=8)
    positions.advance(["q"], [later, earlier], db_now=now, exhausted=False, paused=[])
    params = positions.params(["q"], sweep=False)
    by_level = dict(zip(params["level_priorities"], params["level_after_id"], strict=True))
    assert by_level[0] in {8, 9}


def _job(queue: str, *, run_at: datetime, job_id: int, priority: int = 0) -> pgworkerd.Job:
    return pgworkerd.Job(
        id=job_id,
        kind="k",
        queue=queue,
        payload={},
        attempt=1,
        max_attempts=5,
        priority=priority,
        run_at=run_at,
    )
