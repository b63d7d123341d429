"""Queue limits with real daemons (issue 19): two daemons of threaded workers, their
workers SIGKILLed at random throughout, never run more jobs of a queue at once than its
`concurrency` nor start more in a window than its `rate` (tests/limits_history.py
checks the recorded history); every job still succeeds."""

from __future__ import annotations

import random
import time

import psycopg
import pytest

import pgworkerd
from tests import limits_history
from tests.daemon import states, wait_until

STEADY, METERED = 3, (20, 1.0)
JOBS = 120


def _config() -> dict:
    return {
        "queues": {
            "steady": {"concurrency": STEADY},
            "metered": {"rate": f"{METERED[0]}/{METERED[1]:g}s"},
        },
        "workers": [{"queues": ["steady", "metered"], "concurrency": 2, "threads": 4}],
        "defaults": {
            "max_attempts": 25,
            "max_runtime": "30s",
            "batch_size": 2,
            "backoff_base": "100ms",
            "backoff_max": "300ms",
        },
    }


@pytest.mark.slow  # ~20 s
def test_limits_hold_across_daemons_through_worker_kills(daemons, db_dsn):
    with psycopg.connect(db_dsn, autocommit=True) as conn:
        limits_history.install(conn)
        pgworkerd.enqueue_many(
            conn,
            [{"kind": "work", "payload": {"ms": 100}, "queue": "steady"}] * JOBS
            + [{"kind": "work", "payload": {"ms": 10}, "queue": "metered"}] * JOBS,
        )
    first = daemons(db_dsn, "first", **_config())
    second = daemons(db_dsn, "second", **_config())
    first.wait_for_workers(2)
    second.wait_for_workers(2)
    rng = random.Random(19)
    kills = 0
    deadline = time.monotonic() + 6.0
    while time.monotonic() < deadline:
        time.sleep(0.4)  # the kills' own pace; nothing is waited for here
        workers = first.workers() + second.workers()
        if workers:
            rng.choice(workers).kill()
            kills += 1

    def all_succeeded() -> bool:
        with psycopg.connect(db_dsn) as conn:
            return states(conn).get("succeeded", 0) == 2 * JOBS

    wait_until(all_succeeded, timeout_s=120, what="every job to succeed")
    with psycopg.connect(db_dsn) as conn:
        running = limits_history.most_running(conn)
        starts = limits_history.most_starts(conn, METERED[1])
    print(f"limits: {kills} kills, most running {running}, most starts per window {starts}")
    assert kills >= 10
    assert running["steady"] == STEADY, running  # reached, never passed
    assert starts["metered"] == METERED[0], starts
