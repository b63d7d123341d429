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
