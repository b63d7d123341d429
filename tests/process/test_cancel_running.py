"""Cancelling a running job, as an operator does it (`pgworkerd jobs cancel`, or
`pgworkerd.cancel`): the holder learns it from the cancel notification (or, without
notifications, from its next lease renewal), JobCancelled is raised in the handler, a
handler that ignores it has its process killed after the grace with its neighbours
not charged, and the job ends `cancelled` while the pool serves on."""

from __future__ import annotations

import signal
import time
from typing import Any

import psycopg

import pgworkerd
from pgworkerd.storage.embedded import free_port
from tests.daemon import Daemon, history, job, wait_until
from tests.process.test_cli import pgworkerd as run_cli
from tests.process.test_http import get, metric

Conn = psycopg.Connection[Any]


def one_process(threads: int = 1, **overrides: Any) -> dict[str, Any]:
    return {"workers": [{"queues": ["default"], "concurrency": 1, "threads": threads}],
            **overrides}  # fmt: skip


def events(conn: Conn, job_id: int) -> list[str]:
    return [row[2] for row in history(conn, job_id)]


def wait_for_event(conn: Conn, job_id: int, event: str, timeout_s: float = 20) -> None:
    wait_until(lambda: event in events(conn, job_id), timeout_s, f"job {job_id}: {event}")


def pids(conn: Conn, job_id: int) -> set[int]:
    return {row[3] for row in history(conn, job_id)}


def test_a_running_job_cancelled_from_the_cli_ends_cancelled_and_its_worker_serves_on(
    start_daemon: Any, history_conn: Conn, db_dsn: str, tmp_path: Any
) -> None:
    target = pgworkerd.enqueue(history_conn, "until_cancelled", {})
    # Renewals every 10 s: what stops the handler within a few seconds is the
    # notification, not the renewal.
    daemon: Daemon = start_daemon(**one_process(), lease_ttl="30s")
    wait_for_event(history_conn, target, "start")
    result = run_cli("jobs", "cancel", str(target), env={"PGWORKERD_DATABASE_URL": db_dsn},
                     cwd=tmp_path)  # fmt: skip
    assert result.returncode == 0, result.stderr
    asked = time.monotonic()
    wait_for_event(history_conn, target, "cancelled", timeout_s=5)
    assert time.monotonic() - asked < 5, "told by the notification, not a renewal"
    row = job(history_conn, target)
    assert (row["state"], row["attempt"], row["last_error"]) == ("cancelled", 1, None)
    # The same process runs the next job: it was not killed.
    after = pgworkerd.enqueue(history_conn, "record", {})
    wait_until(lambda: job(history_conn, after)["state"] == "succeeded", what="next job")
    assert pids(history_conn, after) == pids(history_conn, target)
    log = daemon.log()
    assert "job cancelled while running; JobCancelled sent" in log
    assert "job cancelled while running" in log.split("JobCancelled sent", 1)[1]  # the worker
    assert "killing worker" not in log
    daemon.signal(signal.SIGTERM)
    assert daemon.wait() == 0


def test_with_threads_a_cancel_stops_one_job_and_a_stubborn_one_costs_its_neighbours_nothing(
    start_daemon: Any, history_conn: Conn
) -> None:
    polite = pgworkerd.enqueue(history_conn, "until_cancelled_async", {})
    stubborn = pgworkerd.enqueue(history_conn, "until_cancelled", {"stubborn": True})
    neighbours = pgworkerd.enqueue_many(
        history_conn, [{"kind": "sleep", "payload": {"seconds": 6}} for _ in range(6)]
    )
    port = free_port()
    daemon: Daemon = start_daemon(
        **one_process(threads=8), lease_ttl="30s", http={"listen": f"127.0.0.1:{port}"}
    )
    for job_id in [polite, stubborn, *neighbours]:
        wait_for_event(history_conn, job_id, "start")
    (worker_pid,) = pids(history_conn, polite)

    assert pgworkerd.cancel(history_conn, polite) is True
    wait_for_event(history_conn, polite, "cancelled", timeout_s=5)
    assert pgworkerd.cancel(history_conn, stubborn) is True
    wait_for_event(history_conn, stubborn, "cancelled", timeout_s=5)
    # It ignored JobCancelled: its process is killed after the grace (3 s).
    wait_until(lambda: "still running after the grace" in daemon.log(), 15, what="the kill")
    wait_until(
        lambda: all(job(history_conn, n)["state"] == "succeeded" for n in neighbours),
        timeout_s=40,
        what="the neighbours to run again and succeed",
    )
    for job_id in neighbours:
        row = job(history_conn, job_id)
        assert row["attempt"] == 1, "killed for another job's sake: that start is given back"
        assert events(history_conn, job_id) == ["start", "start", "end"]
        assert worker_pid in pids(history_conn, job_id) and len(pids(history_conn, job_id)) == 2
    for job_id in (polite, stubborn):
        row = job(history_conn, job_id)
        assert (row["state"], row["attempt"]) == ("cancelled", 1)
        assert "end" not in events(history_conn, job_id)
    _, text = get(port, "/metrics")
    for kind in ("until_cancelled_async", "until_cancelled"):  # ended, and killed
        assert metric(text, "pgworkerd_jobs_cancelled_total", queue="default", kind=kind) == 1
    assert metric(text, "pgworkerd_jobs_succeeded_total", queue="default", kind="sleep") == 6
    log = daemon.log()
    assert log.count("JobCancelled sent") == 2
    assert "job lease lost" not in log  # neither was mistaken for a rescued job
    daemon.signal(signal.SIGTERM)
    assert daemon.wait() == 0


def test_without_notifications_the_renewal_finds_the_cancel(
    start_daemon: Any, history_conn: Conn
) -> None:
    target = pgworkerd.enqueue(history_conn, "until_cancelled", {})
    # lease_ttl 3 s: a renewal every second, the fallback when nothing is listened to
    # (as behind PgBouncer in transaction mode).
    daemon: Daemon = start_daemon(**one_process(), notifications=False, lease_ttl="3s")
    wait_for_event(history_conn, target, "start")
    assert pgworkerd.cancel(history_conn, target) is True
    wait_for_event(history_conn, target, "cancelled", timeout_s=10)
    assert job(history_conn, target)["state"] == "cancelled"
    after = pgworkerd.enqueue(history_conn, "record", {})
    wait_until(lambda: job(history_conn, after)["state"] == "succeeded", what="next job")
    assert pids(history_conn, after) == pids(history_conn, target), "not killed"
    log = daemon.log()
    assert "JobCancelled sent" in log and "killing worker" not in log
    assert "job lease lost" not in log
    daemon.signal(signal.SIGTERM)
    assert daemon.wait() == 0


def test_a_job_rescued_elsewhere_is_still_stopped_at_once(
    start_daemon: Any, history_conn: Conn
) -> None:
    """Not a cancel: another daemon took the job over (its lease was lost). The
    renewal must not take that for a cancel: the handler is killed at once, not asked
    to stop, since another run of the job may have begun."""
    target = pgworkerd.enqueue(history_conn, "until_cancelled", {"stubborn": True})
    daemon: Daemon = start_daemon(**one_process(), lease_ttl="3s")
    wait_for_event(history_conn, target, "start")
    history_conn.execute(
        "UPDATE pgworkerd.jobs SET state = 'queued', lease_token = NULL,"
        " lease_expires_at = NULL, run_at = now() + interval '1 hour' WHERE id = %s",
        (target,),
    )
    wait_until(lambda: "job lease lost (rescued elsewhere)" in daemon.log(), 10, what="kill")
    assert "cancelled" not in events(history_conn, target)
    assert "JobCancelled sent" not in daemon.log()
    daemon.signal(signal.SIGTERM)
    assert daemon.wait() == 0
