"""`pgworkerd_jobs_started` counts each start of a job once, also when a key pause made
a worker give back jobs it had claimed, whose claim numbers lie below the next job it
starts (a real daemon, its /metrics over HTTP, the handlers' own record of their starts).

The supervisor learns of starts from the start board, where a start of the job numbered
N also says that every job the child claimed before it, and did not give back, started;
the give-back (`released`) is written before that start is posted, but the supervisor
may read the board first."""

from __future__ import annotations

from typing import Any

import pytest

import pgworkerd
from pgworkerd.storage.embedded import free_port
from tests.daemon import history, job_in_state, wait_until
from tests.process.test_http import get, metric

KEYS = 12  # paused keys: as many give-backs, each followed at once by a start
PAUSE_S = 3


def _starts_in_history(conn: Any) -> int:
    [(count,)] = conn.execute("SELECT count(*) FROM history WHERE event = 'start'").fetchall()
    return int(count)


@pytest.mark.parametrize(
    ("threads", "kind", "sleeper"),
    [(1, "record", "sleep"), (2, "record", "sleep"), (2, "record_async", "sleep_async")],
    ids=["one-thread", "threads", "coroutines"],
)
def test_jobs_given_back_by_a_key_pause_are_not_counted_started(
    start_daemon, history_conn, threads, kind, sleeper
):
    port = free_port()
    # Every slot busy for 2 s with a job of its own key, so the rest waits, claimed:
    # for each paused key k, a job of k then one of the unpaused key "free", twice.
    sleepers = pgworkerd.enqueue_many(
        history_conn,
        [
            {"kind": sleeper, "payload": {"seconds": 2}, "key": f"sleeper{n}"}
            for n in range(threads)
        ],
    )
    rest = []
    for _ in range(2):
        for k in range(KEYS):
            rest.append({"kind": kind, "payload": {}, "key": f"paused{k}"})
            rest.append({"kind": kind, "payload": {}, "key": "free"})
    waiting = pgworkerd.enqueue_many(history_conn, rest)
    start_daemon(
        http={"listen": f"127.0.0.1:{port}"},
        workers=[{"queues": ["default"], "concurrency": 1, "threads": threads, "batch_size": 100}],
        poll_interval="60s",
    )
    wait_until(lambda: _starts_in_history(history_conn) == threads, what="the sleepers to start")
    assert all(job_in_state(history_conn, i, "running")() for i in waiting), "claimed with them"
    until = [pgworkerd.pause_key(history_conn, f"paused{k}", PAUSE_S) for k in range(KEYS)]

    for job_id in (*sleepers, *waiting):
        wait_until(job_in_state(history_conn, job_id, "succeeded"), timeout_s=30, what="all")
    assert _starts_in_history(history_conn) == threads + len(waiting)  # each job once
    # Claimed before the pauses, started after them: given back, every paused key's.
    for k in range(KEYS):
        [(_, attempt, _, _, at)] = history(history_conn, waiting[2 * k])
        assert at >= until[k] and attempt == 1

    def counted() -> tuple[float, float]:
        _, text = get(port, "/metrics")
        return (
            metric(text, "pgworkerd_jobs_started_total", queue="default", kind=sleeper),
            metric(text, "pgworkerd_jobs_started_total", queue="default", kind=kind),
        )

    # The last starts' counts may be a turn of the supervisor's loop behind.
    wait_until(lambda: counted()[1] >= len(waiting), timeout_s=10, what="every start counted")
    assert counted() == (threads, len(waiting))
