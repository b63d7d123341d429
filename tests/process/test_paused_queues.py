"""Paused queues with the real daemon: a paused queue is not claimed while the others
run, its running job finishes, and after `pgworkerd queues resume` it is claimed at
once (the resume's notification, well inside a poll interval of a minute: functional
deadlines, not speed measurements)."""

from __future__ import annotations

import time

import pgworkerd
from tests.daemon import history, job_in_state, wait_until
from tests.process.test_cli import pgworkerd as run_cli

CONFIG = {
    "queues": {"default": {}, "reports": {}},
    # The paused queue first in claim order: unpaused, it would be claimed first.
    "workers": [{"queues": ["reports", "default"], "concurrency": 2}],
    "poll_interval": "60s",
}


def test_a_paused_queue_is_not_claimed_its_running_job_finishes_and_resume_wakes_it(
    start_daemon, history_conn, db_dsn, tmp_path
):
    daemon = start_daemon(**CONFIG)
    daemon.wait_for_workers(2)
    sleeper = pgworkerd.enqueue(history_conn, "sleep", {"seconds": 3}, queue="reports")
    wait_until(lambda: history(history_conn, sleeper), what="the reports job to start")

    assert pgworkerd.pause_queue(history_conn, "reports")
    waiting = pgworkerd.enqueue_many(
        history_conn, [{"kind": "record", "payload": {}, "queue": "reports"}] * 3
    )
    others = pgworkerd.enqueue_many(history_conn, [{"kind": "record", "payload": {}}] * 3)
    wait_until(
        lambda: all(job_in_state(history_conn, i, "succeeded")() for i in others),
        what="the other queue's jobs to run",
    )
    wait_until(
        job_in_state(history_conn, sleeper, "succeeded"),
        what="the job running when its queue was paused to finish",
    )
    # Both workers are free now, and were woken by the enqueues: still, for a while,
    # nothing of the paused queue is claimed.
    watch_until = time.monotonic() + 2
    while time.monotonic() < watch_until:
        assert all(job_in_state(history_conn, i, "queued")() for i in waiting)
        time.sleep(0.1)
    assert [row[0] for row in history(history_conn) if row[0] in waiting] == []

    resumed = run_cli(
        "queues", "resume", "reports", env={"PGWORKERD_DATABASE_URL": db_dsn}, cwd=tmp_path
    )
    assert resumed.returncode == 0, resumed.stderr
    assert resumed.stdout.strip() == "resumed: reports"
    wait_until(
        lambda: all(job_in_state(history_conn, i, "succeeded")() for i in waiting),
        timeout_s=30,
        what="the resumed queue's jobs to run long before the 60 s poll",
    )
    assert "Traceback" not in daemon.log()
