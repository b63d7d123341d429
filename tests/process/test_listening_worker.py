"""The listening worker (docs/design.md, "Round 9: a listening worker"): a pool's #1
LISTENs for its queues' enqueues itself while it waits; the supervisor hands over to it
by a marker in the notification stream and counts, and neither loses a wake-up nor
wakes a herd. Real daemon, real signals; the poll interval is long (60 s) so that a
job picked up within seconds was picked up by a wake-up, never by a poll.

The deadlines are functional (well inside the poll interval), not speed measurements.
"""

from __future__ import annotations

import os
import random
import signal
import time
from typing import Any

import psycopg

import pgworkerd
from tests.daemon import _title, history, job_in_state, wait_until

SLOW_POLL = {"poll_interval": "60s", "log_level": "debug"}
HEARD = "heard an enqueue"
LISTENERS = (
    "SELECT count(*) FROM pg_stat_activity WHERE application_name LIKE 'pgworkerd listener %'"
)


def listeners(conn: psycopg.Connection[Any]) -> int:
    return int(conn.execute(LISTENERS).fetchone()[0])


def run_one_job(conn, *, timeout_s: float = 10, what: str = "a job to run") -> int:
    job_id = pgworkerd.enqueue(conn, "record", {})
    conn.commit()
    wait_until(job_in_state(conn, job_id, "succeeded"), timeout_s=timeout_s, what=what)
    return job_id


def test_the_pools_first_worker_hears_an_enqueue_itself(start_daemon, history_conn):
    daemon = start_daemon(
        workers=[
            {"queues": ["default"], "concurrency": 2},
            # Runs several jobs at once: keeps the supervisor's wake-ups, no listener.
            {"queues": ["default"], "concurrency": 1, "threads": 2},
        ],
        **SLOW_POLL,
    )
    daemon.wait_for_workers(3)
    for _ in range(3):  # the first one past start-up, when every idle worker is woken
        run_one_job(history_conn)
    assert HEARD in daemon.log()
    assert listeners(history_conn) == 1, "one listening connection: the first pool's #1"


def enqueue_singly(conn, count: int, *, seed: int, sleep_every: int = 0) -> list[tuple[int, float]]:
    """`count` jobs, one a transaction, with random pauses between: each job's id and
    the wall-clock time just before its enqueue. `sleep_every`: every such job sleeps
    1.5 s (the rest record and end at once), with pauses of 0.25-0.5 s, so that one
    worker at a time is busy for long and the jobs enqueued meanwhile must wake
    another: a wake-up lost to a busy listener shows as a job started late."""
    rng = random.Random(seed)
    enqueued = []
    for n in range(count):
        at = time.time()
        if sleep_every and n % sleep_every == 0:
            job_id = pgworkerd.enqueue(conn, "sleep", {"seconds": 1.5})
        else:
            job_id = pgworkerd.enqueue(conn, "record", {})
        conn.commit()
        enqueued.append((job_id, at))
        time.sleep(rng.uniform(0.25, 0.5) if sleep_every else rng.uniform(0, 0.05))
    return enqueued


def start_delays(conn, enqueued: list[tuple[int, float]]) -> dict[int, float]:
    """Each job's handler start (its history row) minus the time before its enqueue."""
    ids = [job_id for job_id, _ in enqueued]
    wait_until(
        lambda: all(job_in_state(conn, i, "succeeded")() for i in ids),
        timeout_s=20,
        what="every job to run, long before the 60 s poll",
    )
    rows = conn.execute(
        "SELECT job_id, extract(epoch FROM min(at)) FROM history"
        " WHERE event = 'start' AND job_id = ANY(%s) GROUP BY job_id",
        (ids,),
    ).fetchall()
    started = {job_id: float(at) for job_id, at in rows}
    return {job_id: started[job_id] - at for job_id, at in enqueued}


def test_no_wake_up_is_lost_across_the_hand_overs(start_daemon, history_conn):
    """Single enqueues with random small pauses between: the listener hands over to the
    supervisor and back again and again, busy for long now and then; every job starts
    within 1 s of its enqueue (a lost one would wait for the busy listener's next claim,
    1.5 s, or for the 60 s poll)."""
    daemon = start_daemon(workers=[{"queues": ["default"], "concurrency": 2}], **SLOW_POLL)
    daemon.wait_for_workers(2)
    run_one_job(history_conn)  # past start-up
    enqueued = enqueue_singly(history_conn, 48, seed=9, sleep_every=8)
    delays = start_delays(history_conn, enqueued)
    late = {job_id: round(d, 2) for job_id, d in delays.items() if d > 1.0}
    assert not late, f"jobs started late (s after enqueue): {late}"
    log = daemon.log()
    assert log.count(HEARD) >= 5, "the listener took part"
    assert "listener claimed" in log, "and the supervisor counted its hand-overs"


def test_a_hand_over_wakes_at_most_one_worker_for_nothing(start_daemon, history_conn):
    """Herd: claims that came back empty after a wake-up (the worker's debug line), at
    most one per hand-over (the listener's claim reported to the supervisor)."""
    daemon = start_daemon(workers=[{"queues": ["default"], "concurrency": 4}], **SLOW_POLL)
    daemon.wait_for_workers(4)
    run_one_job(history_conn)
    since = len(daemon.log().splitlines())
    enqueued = enqueue_singly(history_conn, 40, seed=23)
    start_delays(history_conn, enqueued)
    lines = daemon.log().splitlines()[since:]
    empty = sum("woken; claimed nothing" in line for line in lines)
    hand_overs = sum("listener claimed" in line for line in lines)
    assert hand_overs >= 5, "the listener took part"
    assert empty <= hand_overs, (empty, hand_overs)


def worker_one(daemon) -> int | None:
    """The pid of the pool's #1 (the listener), once it is up."""
    ones = [p.pid for p in daemon.workers() if "worker default #1 " in _title(p)]
    return ones[0] if ones else None


def test_a_killed_listener_is_replaced_and_jobs_are_still_picked_up(start_daemon, history_conn):
    daemon = start_daemon(workers=[{"queues": ["default"], "concurrency": 2}], **SLOW_POLL)
    daemon.wait_for_workers(2)
    run_one_job(history_conn)
    old = wait_until(lambda: worker_one(daemon), what="#1")
    os.kill(old, signal.SIGKILL)
    new = wait_until(
        lambda: worker_one(daemon) not in (None, old) and worker_one(daemon), what="a new #1"
    )
    wait_until(lambda: listeners(history_conn) == 1, what="one listening connection again")
    daemon.wait_for_workers(2)
    delays = start_delays(history_conn, enqueue_singly(history_conn, 24, seed=5, sleep_every=8))
    late = {job_id: round(d, 2) for job_id, d in delays.items() if d > 1.0}
    assert not late, f"jobs started late (s after enqueue): {late}"
    assert f"worker default#1:{new}] {HEARD}" in daemon.log(), "the new #1 listens"


def test_a_draining_listener_claims_nothing_new(start_daemon, history_conn):
    """TERM: the listener, idle or busy, starts no job enqueued after it."""
    daemon = start_daemon(workers=[{"queues": ["default"], "concurrency": 1}], **SLOW_POLL)
    daemon.wait_for_workers(1)
    run_one_job(history_conn)
    busy = pgworkerd.enqueue(history_conn, "sleep", {"seconds": 1})
    history_conn.commit()
    wait_until(
        lambda: [row for row in history(history_conn, busy) if row[2] == "start"],
        what="the listener busy: its handler started",
    )
    daemon.signal(signal.SIGTERM)
    time.sleep(0.2)  # the TERM delivered; the enqueue below comes after it
    late = pgworkerd.enqueue(history_conn, "record", {})
    history_conn.commit()
    assert daemon.wait() == 0
    assert job_in_state(history_conn, busy, "succeeded")()
    assert job_in_state(history_conn, late, "queued")(), "nothing new started while draining"

    daemon = start_daemon("idle", workers=[{"queues": ["default"], "concurrency": 1}], **SLOW_POLL)
    daemon.wait_for_workers(1)
    wait_until(job_in_state(history_conn, late, "succeeded"), what="the next daemon runs it")
    wait_until(lambda: listeners(history_conn) == 1, what="the idle listener listening")
    daemon.signal(signal.SIGTERM)
    time.sleep(0.2)
    after_term = pgworkerd.enqueue(history_conn, "record", {})
    history_conn.commit()
    assert daemon.wait() == 0
    assert job_in_state(history_conn, after_term, "queued")(), "the idle listener claimed it"


def test_the_listener_listens_again_after_a_postgresql_restart(daemons, own_cluster):
    dsn = own_cluster.dsn()
    daemon = daemons(dsn, workers=[{"queues": ["default"], "concurrency": 2}], **SLOW_POLL)
    daemon.wait_for_workers(2)

    def run_noop(what: str) -> None:
        with psycopg.connect(dsn) as conn:
            job_id = pgworkerd.enqueue(conn, "noop", {})
            conn.commit()
            wait_until(job_in_state(conn, job_id, "succeeded"), timeout_s=10, what=what)

    def listening() -> bool:
        with psycopg.connect(dsn) as conn:
            return listeners(conn) == 1

    run_noop("a job before the restart")
    wait_until(listening, what="the listener listening")
    own_cluster.stop("fast")
    own_cluster.start()
    wait_until(listening, timeout_s=30, what="the listener listening again")
    heard_before = daemon.log().count(HEARD)
    for n in range(5):
        run_noop(f"job {n} after the restart, long before the 60 s poll")
        time.sleep(0.3)
    assert "listening connection lost" in daemon.log()
    assert daemon.log().count(HEARD) > heard_before, "the listener hears again"
    daemon.signal(signal.SIGTERM)
    assert daemon.wait() == 0
