"""The kill storm: 2,000 jobs, three workers (one job at a time each, or eight), one
SIGKILLed every few hundred milliseconds for 20 s, PostgreSQL restarted in the middle.
Every job succeeds; reruns stay within what the kills and the restart explain; I1-I5
hold."""

from __future__ import annotations

import random
import signal
import time

import psycopg
import pytest

import pgworkerd
from tests import invariants
from tests.daemon import states, wait_until

JOBS = 2000
STORM_S = 20.0
KILL_EVERY_S = 0.3


@pytest.mark.slow  # ~25 s each
@pytest.mark.parametrize("threads", [1, 8])
def test_kill_storm_with_a_database_restart(daemons, own_cluster, threads):
    dsn = own_cluster.dsn()
    with psycopg.connect(dsn, autocommit=True) as conn:
        invariants.install(conn)
        ids = pgworkerd.enqueue_many(
            # Longer jobs with more slots, so the storm finds them running throughout.
            conn,
            [{"kind": "work", "payload": {"ms": 20 * threads}} for _ in range(JOBS)],
        )
    daemon = daemons(
        dsn,
        workers=[{"queues": ["default"], "concurrency": 3, "threads": threads}],
        defaults={
            "max_attempts": 25,
            "max_runtime": "30s",
            "batch_size": 10,
            "backoff_base": "100ms",
            "backoff_max": "500ms",
        },
    )
    daemon.wait_for_workers(3)
    rng = random.Random(4)
    kills, restarted = 0, False
    started = time.monotonic()
    while (elapsed := time.monotonic() - started) < STORM_S:
        if not restarted and elapsed > STORM_S / 2:
            own_cluster.stop("fast")
            own_cluster.start()
            restarted = True
        busy = [p for p in daemon.workers() if _busy(" ".join(p.cmdline()))]
        if busy:
            rng.choice(busy).kill()
            kills += 1
        time.sleep(KILL_EVERY_S)  # the storm's own pace; nothing is waited for here

    def succeeded() -> bool:
        with psycopg.connect(dsn) as conn:
            return states(conn).get("succeeded", 0) == JOBS

    wait_until(succeeded, timeout_s=90, what="every job to succeed after the storm")
    daemon.signal(signal.SIGTERM)
    assert daemon.wait(timeout_s=30) == 0
    with psycopg.connect(dsn) as conn:
        # A kill reruns at most the jobs its worker was running, and those whose
        # handler returned but whose success waited to be written (up to a claim's
        # worth: threads + batch_size - 1); the restart fails at most the running
        # jobs' own history writes and outcome writes.
        verdict = invariants.assert_holds(
            conn,
            ids,
            max_runtime_s=30,
            lease_ttl_s=3,
            unrecorded_starts=(kills + 3 * 10) * threads,
        )
        rerun_bound = kills * (threads + 10) if threads > 1 else kills
        assert verdict.counts["reruns"] <= rerun_bound + 3 * 2 * threads, (kills, verdict.counts)
    print(f"kill storm, threads {threads}: {kills} kills, restart={restarted}, {verdict.counts}")
    assert kills >= STORM_S / KILL_EVERY_S / 2


def _busy(title: str) -> bool:
    return " job " in title or title.strip().endswith(" busy")
