"""Queue limits with real daemons (issue 19): two daemons of threaded workers, their
workers SIGKILLed at random throughout, never run more jobs of a queue at once than its
`concurrency` nor start more in a window than its `rate` (tests/limits_history.py
checks the recorded history); every job still succeeds."""

from __future__ import annotations

import random
import time
from typing import Any

import psycopg
import pytest

import pgworkerd
from tests import limits_history
from tests.daemon import states, wait_until

STEADY, METERED = 3, (20, 1.0)
KEY_CONCURRENCY, KEY_RATE = 2, (5, 1.0)
JOBS = 120
KEYS = 6


def _config() -> dict:
    return {
        "queues": {
            "steady": {"concurrency": STEADY},
            "metered": {"rate": f"{METERED[0]}/{METERED[1]:g}s"},
            "tenants": {
                "per_key": {
                    "concurrency": KEY_CONCURRENCY,
                    "rate": f"{KEY_RATE[0]}/{KEY_RATE[1]:g}s",
                },
            },
        },
        "workers": [{"queues": ["steady", "metered", "tenants"], "concurrency": 2, "threads": 4}],
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
    _limits_hold(daemons, db_dsn)


@pytest.mark.slow  # ~30 s
def test_limits_hold_through_worker_kills_and_a_database_restart(daemons, own_cluster):
    _limits_hold(daemons, own_cluster.dsn(), restart=own_cluster)


def _limits_hold(daemons: Any, db_dsn: str, restart: Any = None) -> None:
    """Two daemons, workers SIGKILLed every 0.4 s for 6 s (and, with `restart`, the
    cluster stopped fast and started again in the middle); then the history is checked."""
    with psycopg.connect(db_dsn, autocommit=True) as conn:
        limits_history.install(conn)
        pgworkerd.enqueue_many(
            conn,
            [{"kind": "work", "payload": {"ms": 100}, "queue": "steady"}] * JOBS
            + [{"kind": "work", "payload": {"ms": 10}, "queue": "metered"}] * JOBS
            + [
                {"kind": "work", "payload": {"ms": 150}, "queue": "tenants", "key": f"t{n % KEYS}"}
                for n in range(JOBS)
            ],
        )
    first = daemons(db_dsn, "first", **_config())
    second = daemons(db_dsn, "second", **_config())
    first.wait_for_workers(2)
    second.wait_for_workers(2)
    rng = random.Random(19)
    kills = 0
    started = time.monotonic()
    while (elapsed := time.monotonic() - started) < 6.0:
        if restart is not None and elapsed > 3.0:
            restart.stop("fast")
            restart.start()
            restart = None
        time.sleep(0.4)  # the kills' own pace; nothing is waited for here
        workers = first.workers() + second.workers()
        if workers:
            rng.choice(workers).kill()
            kills += 1

    def all_succeeded() -> bool:
        with psycopg.connect(db_dsn) as conn:
            return states(conn).get("succeeded", 0) == 3 * JOBS

    wait_until(all_succeeded, timeout_s=180, what="every job to succeed")
    with psycopg.connect(db_dsn) as conn:
        running = limits_history.most_running(conn)
        starts = limits_history.most_starts(conn, METERED[1])
        key_running = limits_history.most_running(conn, by_key=True)
        key_starts = limits_history.most_starts(conn, KEY_RATE[1], by_key=True)
    print(f"limits: {kills} kills, most running {running}, most starts per window {starts}")
    print(f"per key: most running {key_running}, most starts per window {key_starts}")
    assert kills >= 10
    assert running["steady"] == STEADY, running  # reached, never passed
    assert starts["metered"] == METERED[0], starts
    assert len(key_running) == KEYS
    assert max(key_running.values()) == KEY_CONCURRENCY, key_running
    assert max(key_starts.values()) <= KEY_RATE[0], key_starts
    assert running["tenants"] > KEY_CONCURRENCY, "keys ran side by side"


def test_fair_keys_start_the_small_keys_within_the_first_starts(daemons, db_dsn):
    """One key with 10,000 ready jobs and 10 keys with 10 each: every small key's job
    starts within the first 200 starts (round-robin: 11 keys a round)."""
    with psycopg.connect(db_dsn, autocommit=True) as conn:
        limits_history.install(conn)
        pgworkerd.enqueue_many(conn, [{"kind": "noop", "payload": {}, "key": "big"}] * 10_000)
        small = pgworkerd.enqueue_many(
            conn,
            [{"kind": "noop", "payload": {}, "key": f"small{n}"} for n in range(10)] * 10,
        )
    daemon = daemons(
        db_dsn,
        queues={"default": {"fair": True}},
        workers=[{"queues": ["default"], "concurrency": 2, "threads": 2}],
    )
    daemon.wait_for_workers(2)
    with psycopg.connect(db_dsn, autocommit=True) as conn:

        def enough() -> bool:
            return conn.execute("SELECT count(*) FROM claims").fetchone()[0] >= 200

        wait_until(enough, timeout_s=60, what="200 starts")
        first = [row[0] for row in conn.execute("SELECT job_id FROM claims ORDER BY id LIMIT 200")]
    missing = set(small) - set(first)
    assert not missing, f"{len(missing)} small-key jobs not among the first 200 starts"
