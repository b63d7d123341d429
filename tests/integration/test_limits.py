"""Queue limits on a real server (issue 19): a claim of a limited queue takes at most
the room its concurrency (running rows) and its rate (starts in the window, by the
database clock) leave; a Snooze gives its start back; positions never pass what a limit
held back; an unlimited queue in the same claim is not held back; idle workers learn
when a rate frees a place."""

from __future__ import annotations

import threading
from datetime import timedelta

import psycopg

import pgworkerd
from pgworkerd.storage.limits import QueueLimits
from pgworkerd.storage.store import ClaimPositions, JobStore
from tests.integration.store_helpers import claim, db_now


def limited(**limits: QueueLimits) -> JobStore:
    return JobStore(limits=limits)


def running(conn: psycopg.Connection, queue: str = "default") -> int:
    return conn.execute(
        "SELECT count(*) FROM pgworkerd.jobs WHERE state = 'running' AND queue = %s", [queue]
    ).fetchone()[0]


def test_concurrency_caps_the_running_jobs_and_a_completion_frees_a_place(conn):
    store = limited(default=QueueLimits(concurrency=3))
    pgworkerd.enqueue_many(conn, [{"kind": "k", "payload": {}}] * 10)
    first = claim(store, conn, limit=10)
    assert len(first) == 3
    assert claim(store, conn, limit=10) == []
    done, more = store.complete_and_claim(
        conn,
        [(first[0].lease, None)],
        queues=["default"],
        limit=10,
        lease_ttl_s=30,
        worker="w",
    )
    assert done == {first[0].id}
    assert len(more) == 1, "the completion, in the same transaction, freed one place"
    assert running(conn) == 3


def test_a_failed_or_rescued_job_frees_its_place(conn):
    store = limited(default=QueueLimits(concurrency=1))
    pgworkerd.enqueue_many(conn, [{"kind": "k", "payload": {}}] * 3)
    (job,) = claim(store, conn)
    assert claim(store, conn) == []
    store.fail(conn, job.lease, "boom")
    (second,) = claim(store, conn)
    conn.execute(
        "UPDATE pgworkerd.jobs SET lease_expires_at = now() - interval '1 second' WHERE id = %s",
        [second.id],
    )
    assert claim(store, conn) == [], "an expired lease still holds its place until rescued"
    assert len(store.rescue(conn)) == 1
    assert len(claim(store, conn)) == 1


def test_rate_caps_the_starts_in_the_window_and_snooze_gives_one_back(conn):
    store = limited(default=QueueLimits(rate=(4, 3600.0)))
    pgworkerd.enqueue_many(conn, [{"kind": "k", "payload": {}}] * 10)
    jobs = claim(store, conn, limit=3)
    assert len(jobs) == 3
    for job in jobs:
        store.complete(conn, [(job.lease, None)])
    assert len(claim(store, conn, limit=10)) == 1, "completions do not give starts back"
    assert claim(store, conn, limit=10) == [], "the window is full"
    ledger = conn.execute("SELECT count(*) FROM pgworkerd.starts").fetchone()[0]
    assert ledger == 4


def test_a_snooze_removes_its_start_from_the_window(conn):
    store = limited(default=QueueLimits(rate=(1, 3600.0)))
    pgworkerd.enqueue_many(conn, [{"kind": "k", "payload": {}}] * 2)
    (job,) = claim(store, conn)
    assert claim(store, conn) == []
    assert store.snooze(conn, job.lease, delay_s=3600) is not None
    assert conn.execute("SELECT count(*) FROM pgworkerd.starts").fetchone()[0] == 0
    assert len(claim(store, conn)) == 1, "the snoozed start was not charged"


def test_a_limited_claim_starts_its_jobs_at_the_time_its_ledger_has(db_dsn):
    """A limited claim's started_at is its statement's time after the lock, the ledger's
    `at` (statement_timestamp()), not its transaction's now(), which is earlier."""
    store = limited(default=QueueLimits(rate=(5, 3600.0)))
    with psycopg.connect(db_dsn) as conn:  # one transaction: now() is its start
        pgworkerd.enqueue_many(conn, [{"kind": "k", "payload": {}}] * 2)
        began = db_now(conn)
        assert len(claim(store, conn)) == 2
        rows = conn.execute(
            "SELECT j.started_at, s.at FROM pgworkerd.jobs AS j"
            " JOIN pgworkerd.starts AS s USING (lease_token)"
        ).fetchall()
        assert len(rows) == 2
        assert all(started == at > began for started, at in rows), (began, rows)


def test_starts_leave_the_window_after_the_period(conn):
    store = limited(default=QueueLimits(rate=(2, 3600.0)))
    pgworkerd.enqueue_many(conn, [{"kind": "k", "payload": {}}] * 4)
    assert len(claim(store, conn)) == 2
    assert claim(store, conn) == []
    # The period passes (as the clock would): the next claim finds room and drops them.
    conn.execute("UPDATE pgworkerd.starts SET at = at - interval '1 hour'")
    assert len(claim(store, conn)) == 2
    assert conn.execute("SELECT count(*) FROM pgworkerd.starts").fetchone()[0] == 2


def test_a_lengthened_period_counts_the_starts_a_shorter_one_left_behind(conn):
    """A reload (or a daemon of a rolling deploy) lengthens the rate from 3/2s to 3/1m:
    the starts of the last minute count, though claims under 3/2s ran meanwhile. Each
    claim used to drop the starts older than its own config's longest period, so the
    1-minute window found one start of four and let two more run."""
    short = limited(default=QueueLimits(rate=(3, 2.0)))
    pgworkerd.enqueue_many(conn, [{"kind": "k", "payload": {}}] * 6)
    assert len(claim(short, conn, limit=3)) == 3
    # Ten seconds pass (as the clock would): out of the 2 s window, in the minute's.
    conn.execute("UPDATE pgworkerd.starts SET at = at - interval '10 seconds'")
    assert len(claim(short, conn, limit=1)) == 1
    longer = limited(default=QueueLimits(rate=(3, 60.0)))
    assert claim(longer, conn, limit=3) == [], "the minute already holds four starts"
    assert conn.execute("SELECT count(*) FROM pgworkerd.starts").fetchone()[0] == 4


def test_an_unlimited_queue_in_the_same_claim_is_not_held_back(conn):
    store = limited(slow=QueueLimits(concurrency=1))
    pgworkerd.enqueue_many(conn, [{"kind": "k", "payload": {}, "queue": "slow"}] * 3)
    pgworkerd.enqueue_many(conn, [{"kind": "k", "payload": {}, "queue": "fast"}] * 3)
    jobs = claim(store, conn, limit=10, queues=["slow", "fast"])
    assert sorted(j.queue for j in jobs) == ["fast", "fast", "fast", "slow"]


def test_priorities_of_a_limited_queue_share_its_room(conn):
    store = limited(default=QueueLimits(concurrency=3))
    high = pgworkerd.enqueue_many(conn, [{"kind": "k", "payload": {}, "priority": 5}] * 2)
    pgworkerd.enqueue_many(conn, [{"kind": "k", "payload": {}}] * 3)
    claim(store, conn, limit=1)  # learns the levels
    jobs = claim(store, conn, limit=10)
    assert len(jobs) == 2
    assert running(conn) == 3
    assert high[1] in {j.id for j in jobs}


def test_positions_do_not_pass_the_jobs_a_limit_held_back(conn):
    store = JobStore(
        positions=ClaimPositions(lag_s=0, sweep_every_s=3600),
        limits={"default": QueueLimits(concurrency=2)},
    )
    past = db_now(conn) - timedelta(hours=1)
    ids = pgworkerd.enqueue_many(conn, [{"kind": "k", "payload": {}, "run_at": past}] * 5)
    first = claim(store, conn, limit=10)
    assert [j.id for j in first] == ids[:2]
    store.complete(conn, [(j.lease, None) for j in first])
    assert [j.id for j in claim(store, conn, limit=10)] == ids[2:4], "no sweep needed"


def test_an_idle_worker_sleeps_until_the_soonest_start_leaves_the_window(conn):
    store = limited(default=QueueLimits(rate=(1, 30.0)))
    pgworkerd.enqueue_many(conn, [{"kind": "k", "payload": {}}] * 2)
    assert len(claim(store, conn)) == 1
    assert claim(store, conn) == []
    wait = store.next_run_in(conn, ["default"])
    assert wait is not None and 25 < wait <= 30, "not 0: the ready job is held back"


def test_concurrent_claimers_never_exceed_the_limit(db_dsn):
    limits = {"default": QueueLimits(concurrency=5)}
    with psycopg.connect(db_dsn, autocommit=True) as conn:
        pgworkerd.enqueue_many(conn, [{"kind": "k", "payload": {}}] * 200)
    claimed: list[int] = []
    lock = threading.Lock()

    def claimer() -> None:
        store = JobStore(limits=limits)
        with psycopg.connect(db_dsn, autocommit=True) as own:
            for _ in range(20):
                jobs = claim(store, own, limit=3)
                with lock:
                    claimed.extend(j.id for j in jobs)

    threads = [threading.Thread(target=claimer) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(claimed) == 5


def keyed(key: str, count: int, **extra: object) -> list[dict[str, object]]:
    return [{"kind": "k", "payload": {}, "key": key, **extra}] * count


def test_per_key_concurrency_caps_each_key(conn):
    store = limited(default=QueueLimits(key_concurrency=2))
    pgworkerd.enqueue_many(conn, keyed("a", 5) + keyed("b", 5) + keyed("c", 1))
    none = pgworkerd.enqueue(conn, "k", {})
    jobs = claim(store, conn, limit=20)
    by_key: dict[str | None, int] = {}
    for job in jobs:
        by_key[job.key] = by_key.get(job.key, 0) + 1
    assert by_key == {"a": 2, "b": 2, "c": 1, None: 1}, "jobs without a key: no per-key limit"
    assert none in {j.id for j in jobs}
    assert claim(store, conn, limit=20) == []
    a_job = next(j for j in jobs if j.key == "a")
    store.complete(conn, [(a_job.lease, None)])
    assert [j.key for j in claim(store, conn, limit=20)] == ["a"]


def test_per_key_rate_caps_each_keys_starts(conn):
    store = limited(default=QueueLimits(key_rate=(3, 3600.0)))
    pgworkerd.enqueue_many(conn, keyed("a", 5) + keyed("b", 2))
    jobs = claim(store, conn, limit=20)
    assert sorted(j.key or "" for j in jobs) == ["a", "a", "a", "b", "b"]
    store.complete(conn, [(j.lease, None) for j in jobs])
    assert claim(store, conn, limit=20) == [], "completions give no start back"
    pgworkerd.enqueue_many(conn, keyed("c", 1))
    assert [j.key for j in claim(store, conn, limit=20)] == ["c"]


def test_a_hot_key_at_its_limit_does_not_hold_back_the_others(conn):
    store = limited(default=QueueLimits(key_concurrency=1))
    pgworkerd.enqueue_many(conn, keyed("hot", 500))
    pgworkerd.enqueue_many(conn, keyed("cold", 1))
    first = claim(store, conn, limit=10)
    assert sorted(j.key or "" for j in first) == ["cold", "hot"]


def test_fair_keys_take_turns(conn):
    store = limited(default=QueueLimits(fair=True))
    pgworkerd.enqueue_many(conn, keyed("big", 50))
    small = [pgworkerd.enqueue_many(conn, keyed(f"small{n}", 3)) for n in range(3)]
    order: list[str | None] = []
    for _ in range(4):
        for job in claim(store, conn, limit=2):
            order.append(job.key)
            store.complete(conn, [(job.lease, None)])
    # Round-robin: every key gets a turn before any gets a second.
    assert sorted(order[:4]) == ["big", "small0", "small1", "small2"], order
    assert sorted(order[4:8]) == ["big", "small0", "small1", "small2"], order
    assert small


def test_fair_priority_first(conn):
    store = limited(default=QueueLimits(fair=True))
    pgworkerd.enqueue_many(conn, keyed("a", 3))
    urgent = pgworkerd.enqueue_many(conn, keyed("b", 2, priority=5))
    claim(store, conn, limit=1)  # learns the levels; takes the first of priority 5
    [job] = claim(store, conn, limit=1)
    assert job.id in urgent


def test_a_keyed_queues_positions_never_move_so_jobs_behind_them_are_found(conn):
    # Key "a"'s jobs are older than key "b"'s: a claim that takes a1 and b1 has passed
    # (b1.run_at, b1.id), which is ahead of a2 and a3. A keyed queue's claims walk keys,
    # so a position moved there would hide a2 and a3 from the idle worker's look for
    # work (next_run_in), until a sweep (an hour away here).
    store = JobStore(
        positions=ClaimPositions(lag_s=0, sweep_every_s=3600),
        limits={"default": QueueLimits(key_concurrency=1)},
    )
    now = db_now(conn)
    older = pgworkerd.enqueue_many(conn, keyed("a", 3, run_at=now - timedelta(hours=2)))
    (later,) = pgworkerd.enqueue_many(conn, keyed("b", 1, run_at=now - timedelta(hours=1)))
    first = claim(store, conn, limit=2)
    assert sorted(j.id for j in first) == [older[0], later]
    store.complete(conn, [(j.lease, None) for j in first])
    wait = store.next_run_in(conn, ["default"])
    assert wait is not None and wait < 0, "a2 and a3 are ready, behind where the claim went"
    assert [j.id for j in claim(store, conn, limit=2)] == [older[1]]


def test_a_keys_concurrency_is_shared_by_its_priority_levels(conn):
    """A key with jobs at several priorities gets its room once per claim, not once per
    level: each level's walk counts the key's room from the rows before the claim, so
    the picks are cut to it per key across levels (review 25 F1: with key k at
    priorities 0, 5 and 10, one claim ran 3 of k against a limit of 1). The highest
    priority gets the room first; another key keeps its own."""
    store = limited(default=QueueLimits(key_concurrency=2))
    (top,) = pgworkerd.enqueue_many(conn, keyed("k", 1, priority=10))
    middle = pgworkerd.enqueue_many(conn, keyed("k", 2, priority=5))
    pgworkerd.enqueue_many(conn, keyed("k", 2))
    (other,) = pgworkerd.enqueue_many(conn, keyed("m", 1, priority=5))
    jobs = claim(store, conn, limit=10)
    assert sorted(j.id for j in jobs) == sorted([top, middle[0], other])
    assert claim(store, conn, limit=10) == [], "k has 2 running, its limit"
    (done,) = [j for j in jobs if j.id == top]
    store.complete(conn, [(done.lease, None)])
    assert [j.id for j in claim(store, conn, limit=10)] == [middle[1]]


def test_a_keys_rate_is_shared_by_its_priority_levels(conn):
    """As above for a per-key rate: 2 starts of k in the window, not 2 per level (review
    25 F1: 6 starts of 2 in one claim with k at three priorities)."""
    store = limited(default=QueueLimits(key_rate=(2, 3600.0)))
    top = pgworkerd.enqueue_many(conn, keyed("k", 2, priority=10))
    for priority in (5, 0):
        pgworkerd.enqueue_many(conn, keyed("k", 2, priority=priority))
    jobs = claim(store, conn, limit=10)
    assert sorted(j.id for j in jobs) == top
    store.complete(conn, [(j.lease, None) for j in jobs])
    assert claim(store, conn, limit=10) == [], "the window is full"
    assert conn.execute("SELECT count(*) FROM pgworkerd.starts").fetchone()[0] == 2
