"""Progress, results and waiting with the real daemon: progress moves while a job runs
(in the row, `jobs show --json` and `status`), a holder that lost the job cannot write
it, the last value is kept, and `wait` returns the final state."""

from __future__ import annotations

import json
import time
from typing import Any

import pgworkerd
from tests.daemon import history, job, wait_until
from tests.process.test_cli import pgworkerd as run_cli


def progress_row(conn: Any, job_id: int) -> tuple[Any, ...]:
    return tuple(
        conn.execute(
            "SELECT state, progress, progress_stage FROM pgworkerd.jobs WHERE id = %s", (job_id,)
        ).fetchone()
    )


def test_progress_moves_while_the_job_runs_and_wait_returns_at_its_end(
    start_daemon, history_conn, db_dsn, tmp_path
):
    # Ten steps of a second: the job still runs after three moves and two CLI starts,
    # each of which took seconds on a busy machine (half a second a step was too short).
    job_id = pgworkerd.enqueue(history_conn, "progress_steps", {"steps": 10, "pause": 1.0})
    start_daemon(workers=[{"queues": ["default"], "concurrency": 1, "threads": 2}])
    seen: list[float] = []

    def moved_three_times() -> bool:
        state, percent, _ = progress_row(history_conn, job_id)
        if state == "running" and percent is not None and (not seen or seen[-1] != percent):
            seen.append(percent)
        return len(seen) >= 3

    wait_until(moved_three_times, 20, "progress to move three times while running")
    assert seen == sorted(seen) and seen[-1] < 100
    cli_env = {"PGWORKERD_DATABASE_URL": db_dsn}
    shown = run_cli("jobs", "show", str(job_id), "--json", env=cli_env, cwd=tmp_path)
    detail = json.loads(shown.stdout)
    assert detail["state"] == "running" and 0 < detail["progress"] < 100, detail
    assert detail["progress_stage"].startswith("step ") and detail["progress_at"]
    status = run_cli("status", env=cli_env, cwd=tmp_path).stdout
    (line,) = [row for row in status.splitlines() if row.split()[:1] == [str(job_id)]]
    assert "progress_steps" in line and "% " in line and "step " in line, status

    assert pgworkerd.wait(history_conn, job_id, timeout=30) == "succeeded"
    assert pgworkerd.result(history_conn, job_id) == "all steps done"
    # 100 was reported just before the handler returned: written onto the success.
    wait_until(
        lambda: progress_row(history_conn, job_id) == ("succeeded", 100.0, "step 10 of 10"),
        5,
        "the last progress reported",
    )


def test_a_holder_that_lost_the_job_cannot_write_its_progress(start_daemon, history_conn):
    job_id = pgworkerd.enqueue(
        history_conn, "progress_steps", {"steps": 400, "pause": 0.05, "ignore_cancel": True}
    )
    start_daemon()
    wait_until(
        lambda: (progress_row(history_conn, job_id)[1] or 0) > 1, 20, "progress while running"
    )
    assert pgworkerd.cancel(history_conn, job_id)
    cancelled_at = history_conn.execute("SELECT clock_timestamp()").fetchone()[0]
    kept = progress_row(history_conn, job_id)
    assert kept[0] == "cancelled"

    def reported_after_cancel() -> int:
        return sum(
            1
            for row in history(history_conn, job_id)
            if row[2].startswith("progress") and row[4] > cancelled_at
        )

    # The handler swallows JobCancelled and goes on reporting until its worker is killed
    # after the grace; none of it lands.
    wait_until(lambda: reported_after_cancel() >= 3, 20, "reports after the cancel")
    time.sleep(1.2)  # two throttle intervals: a write in flight would have landed
    assert progress_row(history_conn, job_id) == kept
    assert job(history_conn, job_id)["state"] == "cancelled"
    assert pgworkerd.wait(history_conn, job_id, timeout=1) == "cancelled"
