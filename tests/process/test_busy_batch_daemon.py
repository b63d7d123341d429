"""A one-slot child at batch 100 (the tuned no-op row's shape), in a real daemon: most
of its starts are overwritten on the start board before the supervisor looks, so the
supervisor infers them. Every start still counts once by queue and kind, and a job that
overruns its own max runtime mid-batch is killed and charged alone (round 14's review
of the no-op batch path; the supervisor may keep a claim as its rows)."""

from __future__ import annotations

from typing import Any

import psycopg

import pgworkerd
from pgworkerd.storage.embedded import free_port
from tests.daemon import job, states, wait_until
from tests.process.test_http import get, metric

Conn = psycopg.Connection[Any]
LABELS = [("default", "noop"), ("default", "environment_variable"), ("mail", "noop")]


def _batch(n: int) -> list[dict[str, Any]]:
    """n no-op jobs of three (queue, kind) labels, interleaved."""
    return [
        {"kind": kind, "queue": queue, "payload": {"name": "HOME"}}
        for queue, kind in (LABELS[i % 3] for i in range(n))
    ]


def test_a_busy_one_slot_batch_counts_each_start_and_kills_only_its_overrunning_job(
    start_daemon: Any, history_conn: Conn
) -> None:
    port = free_port()
    start_daemon(
        http={"listen": f"127.0.0.1:{port}"},
        queues={"default": {}, "mail": {}},
        workers=[{"queues": ["default", "mail"], "concurrency": 1}],
        defaults={"max_attempts": 5, "max_runtime": "30s", "batch_size": 100},
    )
    pgworkerd.enqueue_many(history_conn, _batch(300))

    def counted() -> bool:
        _, text = get(port, "/metrics")
        return sum(metric(text, "pgworkerd_jobs_succeeded_total", queue=q, kind=k)
                   for q, k in LABELS) == 300  # fmt: skip

    wait_until(counted, timeout_s=30, what="300 no-op jobs succeeded", interval_s=0.05)
    _, text = get(port, "/metrics")
    for queue, kind in LABELS:
        assert metric(text, "pgworkerd_jobs_started_total", queue=queue, kind=kind) == 100
        assert metric(text, "pgworkerd_jobs_succeeded_total", queue=queue, kind=kind) == 100

    # One job mid-batch overruns its own 1 s (its neighbours have 30 s) blocked where
    # only SIGKILL ends it: its child is killed by its deadline plus the soft timeout's
    # grace and it alone is charged; its neighbours are given back and run again.
    late = {"kind": "block_in_c", "payload": {}, "max_runtime": 1, "max_attempts": 1}
    ids = pgworkerd.enqueue_many(history_conn, [*_batch(40), late, *_batch(40)])
    late_id = ids.pop(40)
    wait_until(lambda: states(history_conn) == {"succeeded": 380, "dead": 1}, timeout_s=30,
               what="the late job dead, its batch succeeded")  # fmt: skip
    assert "exceeded its max runtime of 1s" in job(history_conn, late_id)["last_error"]
    assert {job(history_conn, i)["attempt"] for i in ids} == {1}, "not charged for it"
