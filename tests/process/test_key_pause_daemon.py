"""PauseKey with the real daemon (issue 19): a handler's PauseKey holds back every job of
its key, on every worker, until the pause ends (database clock), uncharged; jobs of
other keys run meanwhile."""

from __future__ import annotations

import pgworkerd
from tests.daemon import history, job_in_state, wait_until

CONFIG = {"workers": [{"queues": ["default"], "concurrency": 2}], "poll_interval": "60s"}


def test_pause_key_holds_back_only_its_key_for_the_time_asked(start_daemon, history_conn):
    daemon = start_daemon(**CONFIG)
    daemon.wait_for_workers(2)
    pauser = pgworkerd.enqueue(history_conn, "pause_key_once", {"seconds": 3}, key="a")
    wait_until(
        lambda: (
            history_conn.execute(
                "SELECT count(*) FROM pgworkerd.paused_keys WHERE key = 'a'"
            ).fetchone()[0]
            == 1
        ),
        what="the handler to pause its key",
    )
    [(until,)] = history_conn.execute(
        "SELECT until FROM pgworkerd.paused_keys WHERE key = 'a'"
    ).fetchall()
    sibling = pgworkerd.enqueue(history_conn, "record", {}, key="a")
    others = pgworkerd.enqueue_many(
        history_conn, [{"kind": "record", "payload": {}, "key": "b"}] * 3
    )
    wait_until(
        lambda: all(job_in_state(history_conn, i, "succeeded")() for i in others),
        what="the other key's jobs to run",
    )
    # The other key went on while key a waits (read together, on the database clock).
    [(now, sibling_state)] = history_conn.execute(
        "SELECT now(), state FROM pgworkerd.jobs WHERE id = %s", (sibling,)
    ).fetchall()
    assert now >= until or sibling_state == "queued"

    # Woken when the pause ends, long before the 60 s poll.
    for job_id in (pauser, sibling):
        wait_until(job_in_state(history_conn, job_id, "succeeded"), timeout_s=30, what="key a")
    pauser_starts = history(history_conn, pauser)
    assert [attempt for _, attempt, *_ in pauser_starts] == [1, 1], "the pause was not charged"
    assert pauser_starts[1][4] >= until, "not before the pause ended (database clock)"
    [sibling_start] = history(history_conn, sibling)
    assert sibling_start[4] >= until


def _pause_of(conn, key: str):
    wait_until(
        lambda: (
            conn.execute(
                "SELECT count(*) FROM pgworkerd.paused_keys WHERE key = %s", (key,)
            ).fetchone()[0]
            == 1
        ),
        what="the handler to pause its key",
    )
    [(until,)] = conn.execute(
        "SELECT until FROM pgworkerd.paused_keys WHERE key = %s", (key,)
    ).fetchall()
    return until


def _started_after_the_pause(conn, pauser: int, siblings: list[int], until) -> None:
    for job_id in (pauser, *siblings):
        wait_until(job_in_state(conn, job_id, "succeeded"), timeout_s=30, what="key a")
    for job_id in siblings:
        [(_, attempt, _, _, at)] = history(conn, job_id)
        assert at >= until, f"job {job_id} of the paused key started inside the pause"
        assert attempt == 1, "given back uncharged"


def test_pause_key_gives_back_the_claimed_jobs_of_its_key_one_thread(start_daemon, history_conn):
    """Review 25 F2: one claim takes the pauser and three jobs of its key; the pause
    holds for those three too, though this worker claimed them before it began (they
    are given back, uncharged, and claimed again when it ends)."""
    pauser = pgworkerd.enqueue(history_conn, "pause_key_once", {"seconds": 3}, key="a")
    siblings = pgworkerd.enqueue_many(
        history_conn, [{"kind": "record", "payload": {}, "key": "a"}] * 3
    )
    start_daemon(
        workers=[{"queues": ["default"], "concurrency": 1, "batch_size": 4}],
        poll_interval="60s",
    )
    until = _pause_of(history_conn, "a")
    _started_after_the_pause(history_conn, pauser, siblings, until)


def test_pause_key_gives_back_the_claimed_jobs_of_its_key_threads(start_daemon, history_conn):
    """As above with a worker of two threads: its backlog's jobs of the key are given
    back (the other slot is busy with a job of another key meanwhile)."""
    pauser = pgworkerd.enqueue(history_conn, "pause_key_once", {"seconds": 3}, key="a")
    pgworkerd.enqueue(history_conn, "sleep", {"seconds": 1}, key="b")
    siblings = pgworkerd.enqueue_many(
        history_conn, [{"kind": "record", "payload": {}, "key": "a"}] * 3
    )
    start_daemon(
        workers=[{"queues": ["default"], "concurrency": 1, "threads": 2, "batch_size": 4}],
        poll_interval="60s",
    )
    until = _pause_of(history_conn, "a")
    _started_after_the_pause(history_conn, pauser, siblings, until)


def _operator_pause_while_claimed(start_daemon, conn, worker: dict, others: list[dict]) -> None:
    """The first job of key a runs 2 s, the next three of its key were claimed with it
    (and `others` too); the operator pauses key a for 4 s while the first runs."""
    first = pgworkerd.enqueue(conn, "sleep", {"seconds": 2}, key="a")
    if others:
        pgworkerd.enqueue_many(conn, others)
    siblings = pgworkerd.enqueue_many(conn, [{"kind": "record", "payload": {}, "key": "a"}] * 3)
    start_daemon(workers=[worker], poll_interval="60s")
    wait_until(lambda: history(conn, first), what="the first job to start")
    assert job_in_state(conn, siblings[0], "running")(), "claimed with the first"
    until = pgworkerd.pause_key(conn, "a", 4)
    _started_after_the_pause(conn, first, siblings, until)


def test_an_operator_pause_gives_back_the_claimed_jobs_of_its_key_one_thread(
    start_daemon, history_conn
):
    """Review 25 F2, an operator's pause: the daemon hears of it (a notification, then
    a control line) and its worker gives back the jobs of the key it had claimed."""
    worker = {"queues": ["default"], "concurrency": 1, "batch_size": 4}
    _operator_pause_while_claimed(start_daemon, history_conn, worker, [])


def test_an_operator_pause_gives_back_the_claimed_jobs_of_its_key_threads(
    start_daemon, history_conn
):
    worker = {"queues": ["default"], "concurrency": 1, "threads": 2, "batch_size": 4}
    other = [{"kind": "sleep", "payload": {"seconds": 3}, "key": "b"}]
    _operator_pause_while_claimed(start_daemon, history_conn, worker, other)


def test_a_handlers_pause_gives_back_what_another_worker_claimed_of_its_key(
    start_daemon, history_conn
):
    """A PauseKey in one pool's worker: the other pool's worker, which claimed jobs of
    the key before, hears of the pause (jobs_snooze's notification) and gives them back."""
    first = pgworkerd.enqueue(history_conn, "sleep", {"seconds": 2}, key="a")
    siblings = pgworkerd.enqueue_many(
        history_conn, [{"kind": "record", "payload": {}, "key": "a"}] * 3
    )
    start_daemon(
        queues={"default": {}, "pauser": {}},
        workers=[
            {"queues": ["default"], "concurrency": 1, "batch_size": 4},
            {"queues": ["pauser"], "concurrency": 1},
        ],
        poll_interval="60s",
    )
    wait_until(lambda: history(history_conn, first), what="the first job to start")
    pauser = pgworkerd.enqueue(
        history_conn, "pause_key_once", {"seconds": 4}, key="a", queue="pauser"
    )
    until = _pause_of(history_conn, "a")
    _started_after_the_pause(history_conn, pauser, siblings, until)
