"""The listening worker (docs/design.md, "Round 9: a listening worker"): a pool's #1
LISTENs for its queues' enqueues itself while it waits; the supervisor hands over to it
by a marker in the notification stream and counts, and neither loses a wake-up nor
wakes a herd. Real daemon, real signals; the poll interval is long (60 s) so that a
job picked up within seconds was picked up by a wake-up, never by a poll.

The deadlines are functional (well inside the poll interval), not speed measurements.
"""

from __future__ import annotations

from typing import Any

import psycopg

import pgworkerd
from tests.daemon import job_in_state, wait_until

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
