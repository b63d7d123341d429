"""A running job cancelled in a queue with a concurrency limit keeps its place until its
handler has ended: the cancel keeps the lease on the cancelled row (a "held" cancelled
row), which the limited claim counts, until the holder reports the handler's end (its
fenced outcome, or the settlement of a killed worker) or a rescue clears the lease of a
holder that died. Before, the cancel cleared the lease at once and a second job of a
`concurrency: 1` queue started while the first handler still ran (up to the 3 s grace)."""

from __future__ import annotations

import signal
import time
from datetime import datetime
from typing import Any

import psutil
import psycopg
import pytest

import pgworkerd
from tests.daemon import Daemon, history, job, wait_until

Conn = psycopg.Connection[Any]


def solo_queue(**overrides: Any) -> dict[str, Any]:
    """One queue of concurrency 1, served by two processes: each could run a job."""
    return {
        "queues": {"solo": {"concurrency": 1}},
        "workers": [{"queues": ["solo"], "concurrency": 2}],
        **overrides,
    }


def first_at(conn: Conn, job_id: int, event: str) -> datetime:
    (at,) = [row[4] for row in history(conn, job_id) if row[2] == event][:1] or [None]
    assert at is not None, f"job {job_id} recorded no {event}"
    return at


def last_sign_of_life(conn: Conn, job_id: int) -> datetime:
    """When the handler last ran: its last recorded event (database clock)."""
    return max(row[4] for row in history(conn, job_id))


def handler_over(conn: Conn, job_id: int) -> bool:
    """The job's handler has ended: it recorded its end, or its process is gone."""
    rows = history(conn, job_id)
    if "end" in [row[2] for row in rows]:
        return True
    (pid,) = {row[3] for row in rows}
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def started(conn: Conn, job_id: int) -> bool:
    return any(row[2] == "start" for row in history(conn, job_id))


@pytest.mark.parametrize(
    ("payload", "lease_ttl"),
    [
        # ignores JobCancelled for good: killed after the grace (or as its unrenewed
        # lease nears its end, with a 3 s lease), the settlement frees the place
        ({}, "3s"),
        ({}, "30s"),
        # ignores it for 1.5 s, then returns: its success is not recorded, the place
        # is freed by that fenced write
        ({"ignore_s": 1.5}, "30s"),
        # ignores it for 1.5 s, then lets JobCancelled go: likewise, by the failure write
        ({"ignore_s": 1.5, "then": "raise"}, "30s"),
    ],
    ids=["killed-3s-lease", "killed-30s-lease", "returns", "raises"],
)
def test_a_cancelled_handler_keeps_its_place_until_it_has_ended(
    start_daemon: Any, history_conn: Conn, payload: dict[str, Any], lease_ttl: str
) -> None:
    first = pgworkerd.enqueue(history_conn, "ticks_past_cancel", payload, queue="solo")
    daemon: Daemon = start_daemon(**solo_queue(lease_ttl=lease_ttl))
    wait_until(lambda: started(history_conn, first), what="the first job's start")
    second = pgworkerd.enqueue(history_conn, "record", {}, queue="solo")
    assert pgworkerd.cancel(history_conn, first) is True
    wait_until(lambda: started(history_conn, second), timeout_s=15, what="the second job")
    wait_until(lambda: handler_over(history_conn, first), timeout_s=15, what="the first's end")
    assert first_at(history_conn, second, "start") > last_sign_of_life(history_conn, first), (
        "the second job started while the cancelled handler still ran"
    )
    wait_until(lambda: job(history_conn, second)["state"] == "succeeded", what="second done")
    row = job(history_conn, first)
    assert (row["state"], row["attempt"], row["result"]) == ("cancelled", 1, None)
    assert row["lease_expires_at"] is None, "its holder released the lease"
    if "ignore_s" in payload:
        assert "end" in [r[2] for r in history(history_conn, first)]
        assert "killing worker" not in daemon.log()
    daemon.signal(signal.SIGTERM)
    assert daemon.wait() == 0


def test_the_place_of_a_cancelled_job_whose_daemon_died_is_freed_when_its_lease_expires(
    daemons: Any, db_dsn: str, history_conn: Conn
) -> None:
    """SIGKILL of the whole daemon just after the cancel: nobody is left to report the
    handler's end. The row stays cancelled and holds its place until the lease it was
    running under expires; then another daemon's rescue clears the lease (without
    running the job again) and the next job starts."""
    first = pgworkerd.enqueue(history_conn, "ticks_past_cancel", {}, queue="solo")
    doomed: Daemon = daemons(db_dsn, "doomed", **solo_queue(lease_ttl="3s"))
    wait_until(lambda: started(history_conn, first), what="the first job's start")
    second = pgworkerd.enqueue(history_conn, "record", {}, queue="solo")
    assert pgworkerd.cancel(history_conn, first) is True
    doomed.kill_everything()
    held = job(history_conn, first)
    assert held["state"] == "cancelled"
    assert held["lease_expires_at"] is not None, "the cancel kept the running job's lease"
    survivor: Daemon = daemons(db_dsn, "survivor", **solo_queue(lease_ttl="3s"))
    wait_until(lambda: started(history_conn, second), timeout_s=20, what="the second job")
    assert first_at(history_conn, second, "start") >= held["lease_expires_at"]
    wait_until(lambda: job(history_conn, second)["state"] == "succeeded", what="second done")
    row = job(history_conn, first)
    assert (row["state"], row["attempt"], row["result"]) == ("cancelled", 1, None)
    assert row["lease_expires_at"] is None and row["finished_at"] == held["finished_at"]
    assert [r[2] for r in history(history_conn, first)].count("start") == 1, "not run again"
    assert "released the expired lease of a cancelled job" in survivor.log()
    assert "rescued job with expired lease" not in survivor.log()
    survivor.signal(signal.SIGTERM)
    assert survivor.wait() == 0


def two_queues(threads: int) -> dict[str, Any]:
    """One process serving `other` (no limit) before `solo` (concurrency 1), so that a
    claim takes `other`'s jobs first and a `solo` job waits behind them, claimed and
    not started. A 30 s lease, not renewed once its job is skipped: its expiry is far
    from a release."""
    return {
        "queues": {"other": {}, "solo": {"concurrency": 1}},
        "workers": [{"queues": ["other", "solo"], "concurrency": 1, "threads": threads}],
        "lease_ttl": "30s",
    }


def cancel_claimed_not_started(conn: Conn, job_id: int) -> dict[str, Any]:
    """Cancel `job_id`, claimed in a batch and not started yet; its row just after the
    cancel, which keeps the lease (HELD) until someone releases it."""
    assert job(conn, job_id)["state"] == "running", "claimed, not started"
    assert pgworkerd.cancel(conn, job_id) is True
    held = job(conn, job_id)
    assert held["lease_expires_at"] is not None, "the cancel kept its lease"
    return held


def test_a_job_cancelled_before_its_start_gives_its_place_up_with_one_thread(
    start_daemon: Any, history_conn: Conn
) -> None:
    """The one-thread worker claims [busy, waiting] and runs `busy`; `waiting` is
    cancelled meanwhile, so the worker skips it: it releases the lease its cancelled
    row kept, and the next `solo` job starts as `busy` ends. Before, nothing released
    it: the place stayed taken until the lease expired and a rescue ran (~35 s)."""
    busy = pgworkerd.enqueue(history_conn, "sleep", {"seconds": 3}, queue="other")
    waiting = pgworkerd.enqueue(history_conn, "record", {}, queue="solo")
    daemon: Daemon = start_daemon(**two_queues(threads=1))
    wait_until(lambda: started(history_conn, busy), what="the busy job's start")
    held = cancel_claimed_not_started(history_conn, waiting)
    following = pgworkerd.enqueue(history_conn, "record", {}, queue="solo")
    wait_until(lambda: started(history_conn, following), timeout_s=15, what="the next job")
    assert first_at(history_conn, following, "start") < held["lease_expires_at"], (
        "the next job waited for the skipped job's lease to expire"
    )
    row = job(history_conn, waiting)
    assert (row["state"], row["lease_expires_at"]) == ("cancelled", None)
    assert history(history_conn, waiting) == [], "never started"
    assert "released the expired lease of a cancelled job" not in daemon.log()
    daemon.signal(signal.SIGTERM)
    assert daemon.wait() == 0


def test_a_job_cancelled_in_the_backlog_gives_its_place_up_while_every_slot_is_busy(
    start_daemon: Any, history_conn: Conn
) -> None:
    """The concurrent worker (2 threads) claims [busy, busy, waiting]: `waiting` stays
    in its backlog while both slots run. Cancelled there, it is taken out of the
    backlog and its lease released at once, not when a slot frees for it; the next
    `solo` job starts as soon as a slot is free."""
    busy = pgworkerd.enqueue_many(
        history_conn,
        [{"kind": "until_cancelled", "payload": {}, "queue": "other"} for _ in range(2)],
    )
    waiting = pgworkerd.enqueue(history_conn, "record", {}, queue="solo")
    daemon: Daemon = start_daemon(**two_queues(threads=2))
    wait_until(lambda: all(started(history_conn, b) for b in busy), what="the busy jobs")
    held = cancel_claimed_not_started(history_conn, waiting)
    wait_until(
        lambda: job(history_conn, waiting)["lease_expires_at"] is None,
        timeout_s=15,
        what="the release of the skipped job's lease",
    )
    # The busy jobs run until cancelled: the release did not wait for a free slot.
    assert all(job(history_conn, b)["state"] == "running" for b in busy)
    following = pgworkerd.enqueue(history_conn, "record", {}, queue="solo")
    assert pgworkerd.cancel(history_conn, busy[0]) is True  # a slot for it
    wait_until(lambda: started(history_conn, following), timeout_s=15, what="the next job")
    assert first_at(history_conn, following, "start") < held["lease_expires_at"]
    assert job(history_conn, waiting)["state"] == "cancelled"
    assert history(history_conn, waiting) == [], "never started"
    assert pgworkerd.cancel(history_conn, busy[1]) is True
    daemon.signal(signal.SIGTERM)
    assert daemon.wait() == 0


def test_a_job_cancelled_before_its_start_gives_its_place_up_while_one_thread_is_busy(
    start_daemon: Any, history_conn: Conn
) -> None:
    """The one-thread worker claims [busy, waiting] and runs `busy`, which runs until
    cancelled; `waiting` is cancelled meanwhile. Its worker reads the skip in the
    handler's thread (SIGUSR1) and says it will not start it; the supervisor releases
    the lease its cancelled row kept, within seconds, while `busy` still runs: a `solo`
    job starts elsewhere before `busy` ends. Before, the place stayed taken until the
    worker came to `waiting` in its batch, after `busy` had ended."""
    busy = pgworkerd.enqueue(history_conn, "until_cancelled", {}, queue="other")
    waiting = pgworkerd.enqueue(history_conn, "record", {}, queue="solo")
    daemon: Daemon = start_daemon(**two_queues(threads=1))
    wait_until(lambda: started(history_conn, busy), what="the busy job's start")
    held = cancel_claimed_not_started(history_conn, waiting)
    wait_until(
        lambda: job(history_conn, waiting)["lease_expires_at"] is None,
        timeout_s=5,
        what="the release of the skipped job's lease",
    )
    assert job(history_conn, busy)["state"] == "running", "released while busy still runs"
    # A second daemon serving `solo` alone: the place the release freed is its to take.
    following = pgworkerd.enqueue(history_conn, "record", {}, queue="solo")
    other: Daemon = start_daemon(
        "solo-only",
        queues={"solo": {"concurrency": 1}},
        workers=[{"queues": ["solo"], "concurrency": 1}],
        lease_ttl="30s",
    )
    wait_until(lambda: started(history_conn, following), timeout_s=15, what="the next job")
    assert job(history_conn, busy)["state"] == "running", "the next job started beside busy"
    assert "end" not in [row[2] for row in history(history_conn, busy)]
    assert first_at(history_conn, following, "start") < held["lease_expires_at"]
    assert pgworkerd.cancel(history_conn, busy) is True
    wait_until(
        lambda: job(history_conn, busy)["lease_expires_at"] is None,
        timeout_s=15,
        what="the end of busy's handler",
    )
    row = job(history_conn, waiting)
    assert (row["state"], row["lease_expires_at"]) == ("cancelled", None)
    assert row["finished_at"] == held["finished_at"]
    assert history(history_conn, waiting) == [], "never started"
    assert "released the expired lease of a cancelled job" not in daemon.log()
    assert f"releasing the lease of a cancelled job its worker will not start job={waiting}" in (
        daemon.log()
    )
    for each in (daemon, other):
        each.signal(signal.SIGTERM)
        assert each.wait() == 0


def test_a_cancel_in_a_queue_without_a_limit_does_not_interrupt_the_running_handler(
    start_daemon: Any, history_conn: Conn
) -> None:
    """The one-thread worker claims [busy, waiting], both of `other` (no limit), and
    `waiting` is cancelled while `busy` blocks in C. Its lease takes no place, so the
    supervisor does not signal the worker for it (it is skipped when its turn comes):
    USR1 would have cut `busy`'s C call short (libc sleep returns early on a signal)."""
    busy = pgworkerd.enqueue(history_conn, "c_sleep", {"seconds": 3}, queue="other")
    waiting = pgworkerd.enqueue(history_conn, "record", {}, queue="other")
    daemon: Daemon = start_daemon(**two_queues(threads=1))
    wait_until(lambda: job(history_conn, waiting)["state"] == "running", what="both jobs claimed")
    wait_until(lambda: started(history_conn, busy), what="busy's start")
    time.sleep(0.5)  # into its sleep
    assert pgworkerd.cancel(history_conn, waiting) is True
    wait_until(lambda: job(history_conn, busy)["state"] == "succeeded", what="busy's end")
    assert job(history_conn, busy)["result"]["unslept_s"] == 0, "its sleep was cut short"
    wait_until(
        lambda: job(history_conn, waiting)["lease_expires_at"] is None,
        what="the skipped job's release when its turn came",
    )
    assert job(history_conn, waiting)["state"] == "cancelled"
    assert history(history_conn, waiting) == [], "never started"
    daemon.signal(signal.SIGTERM)
    assert daemon.wait() == 0
