"""A migration that changes the type of a column the daemon's statements return, run
while the daemon works (docs/deploy.md, "Upgrading"): PostgreSQL refuses to run a
statement prepared before it ("cached plan must not change result type", SQLSTATE
0A000), and the daemon prepares its claims, outcomes and renewals. Every job goes on
and runs once, no worker dies, nothing is charged."""

from __future__ import annotations

import signal
from typing import Any

import pytest

import pgworkerd
from tests.daemon import history, job, wait_until

# attempt: returned by every claim and by the failure outcomes; bigint holds every
# value of the integer domain it is (0013), as a migration's wider type would.
WIDEN_A_RETURNED_COLUMN = "ALTER TABLE pgworkerd.jobs ALTER COLUMN attempt TYPE bigint"


def ticks(conn: Any, job_id: int) -> int:
    return len([row for row in history(conn, job_id) if row[2] == "tick"])


@pytest.mark.parametrize(
    ("threads", "queue"),
    [
        (1, {}),
        (4, {}),
        # A limited queue's claim is a transaction (JobStore._claim_limited): the worker
        # drops the connection, as after a network fault, and claims again.
        (1, {"concurrency": 5}),
    ],
)
def test_a_column_type_changed_under_a_running_daemon(start_daemon, history_conn, threads, queue):
    """Jobs before (their statements prepared), one running across the ALTER (its
    outcome written by a statement prepared before it, its lease renewed by one), jobs
    after (claimed by one), a retry (its failure written by one)."""
    daemon = start_daemon(
        queues={"default": queue},
        workers=[{"queues": ["default"], "concurrency": 1, "threads": threads}],
    )
    twelve = [{"kind": "work", "payload": {}} for _ in range(12)]
    before = pgworkerd.enqueue_many(history_conn, twelve)
    wait_until(
        lambda: all(job(history_conn, i)["state"] == "succeeded" for i in before),
        what="the jobs before the change",
    )
    [worker] = daemon.wait_for_workers(1)
    # Long enough for the supervisor to prepare its renewal (psycopg prepares a
    # statement at its sixth run; a renewal every lease_ttl / 3).
    across = pgworkerd.enqueue(history_conn, "tick", {"seconds": 8})
    wait_until(lambda: ticks(history_conn, across) >= 60, what="six seconds of the long job")
    history_conn.execute(WIDEN_A_RETURNED_COLUMN)

    retried = pgworkerd.enqueue(history_conn, "fail_then_succeed", {})
    after = pgworkerd.enqueue_many(history_conn, twelve)
    everything = [*before, across, retried, *after]
    wait_until(
        lambda: all(job(history_conn, i)["state"] in ("succeeded", "dead") for i in everything),
        what="every job to finish",
    )
    daemon.signal(signal.SIGTERM)
    assert daemon.wait(timeout_s=30) == 0

    assert {i: job(history_conn, i)["state"] for i in everything} == dict.fromkeys(
        everything, "succeeded"
    )
    # Nothing charged but the retry's one failure, nothing run twice.
    assert {i: job(history_conn, i)["attempt"] for i in everything} == {
        **dict.fromkeys(everything, 1),
        retried: 2,
    }
    starts = [row[0] for row in history(history_conn) if row[2] == "start"]
    assert sorted(starts) == sorted([*everything, retried])
    assert {row[3] for row in history(history_conn)} == {worker.pid}, "a worker was replaced"
    assert "reason=crashed" not in daemon.log()
    if not queue:  # every statement ran on its own: each is run again, unseen
        assert "cached plan" not in daemon.log()
