"""Wake-ups (issue: fast): the daemon's one LISTEN wakes idle workers at once, only as
many as there is work for; scheduled jobs start on time without a poll; polling alone
still works with notifications off (PgBouncer in transaction mode).

The deadlines here are functional (well inside a poll interval of a minute), not
speed measurements: those are in bench/.
"""

from __future__ import annotations

import select
import time
import uuid
from datetime import UTC, datetime

import pytest

import pgworkerd
from pgworkerd.config import Config
from pgworkerd.housekeeping import ALL_QUEUES, Housekeeper
from pgworkerd.job import Lease
from pgworkerd.storage.channels import cancel_channel
from pgworkerd.storage.queries import statements
from pgworkerd.storage.store import JobStore
from tests.daemon import history, job_in_state, wait_until

SLOW_POLL = {"poll_interval": "60s", "log_level": "debug"}
WOKEN = "woken by the supervisor"


def test_an_enqueue_wakes_one_idle_worker_not_the_herd(start_daemon, history_conn):
    daemon = start_daemon(workers=[{"queues": ["default"], "concurrency": 4}], **SLOW_POLL)
    daemon.wait_for_workers(4)
    run_one_job(history_conn)  # past start-up, when every idle worker is woken once
    # A worker's title says `idle` from its boot, before it has connected and prepared
    # its statements (JobStore.warm); it tells the supervisor it is idle only after its
    # first look finds nothing. Wait for every one of them to be there.
    wait_until(
        lambda: workers_at_their_look(history_conn) == 4,
        timeout_s=10,
        what="4 workers past their first look for work",
    )

    since = utc_now_text()
    run_one_job(history_conn, timeout_s=10, what="the job to run long before the 60 s poll")
    # What the supervisor did with this job's notification (and any still arriving from
    # the warm-up): each woke one worker, with others idle. A wake-up held over from
    # start-up may also reach a worker now: the supervisor never drops one, so it is not
    # counted against the herd.
    lines = notifications_since(daemon, since)
    assert lines, "the job's notification reached the supervisor"
    for line in lines:
        fields = dict(part.split("=") for part in line.split())
        assert fields["queue"] == "default" and fields["woken"] == "1", lines
        assert int(fields["idle"]) >= 2, f"a choice of idle workers, one woken: {lines}"


# batch_size 1: a full batch. 100: the woken worker claims one job (JobStore.claim_one)
# and says there is more, as a full batch does; it used to claim both and run them in
# turn, while its sibling slept.
@pytest.mark.parametrize("batch_size", [1, 100])
def test_a_full_batch_wakes_a_sibling_to_share_the_rest(start_daemon, history_conn, batch_size):
    daemon = start_daemon(
        workers=[{"queues": ["default"], "concurrency": 2}],
        defaults={"batch_size": batch_size, "max_runtime": "30s"},
        **SLOW_POLL,
    )
    daemon.wait_for_workers(2)
    run_one_job(history_conn)
    # Jobs of 4 s: the sibling has that long to be woken and claim the second one
    # before the first worker, done with its job, claims it itself (2 s were once too
    # short beside another test run on the 2 cores).
    ids = pgworkerd.enqueue_many(
        history_conn, [{"kind": "sleep", "payload": {"seconds": 4}} for _ in range(2)]
    )
    history_conn.commit()
    wait_until(
        lambda: all(job_in_state(history_conn, i, "succeeded")() for i in ids),
        timeout_s=20,
        what="both jobs to run",
    )
    # Started, not only claimed (a claimed job is `running` before its handler starts):
    # both handlers began before either ended, in two workers.
    rows = history(history_conn)
    starts = {row[0]: (row[3], row[4]) for row in rows if row[2] == "start" and row[0] in ids}
    ends = [row[4] for row in rows if row[2] == "end" and row[0] in ids]
    assert len({pid for pid, _ in starts.values()}) == 2, starts
    assert max(at for _, at in starts.values()) < min(ends), (starts, ends)


def run_one_job(conn, *, timeout_s: float = 20, what: str = "a job to run") -> None:
    job_id = pgworkerd.enqueue(conn, "record", {})
    conn.commit()
    wait_until(job_in_state(conn, job_id, "succeeded"), timeout_s=timeout_s, what=what)


def workers_at_their_look(conn) -> int:
    """Worker sessions whose last statement was the idle look for the next due job: the
    one a worker runs just before it tells the supervisor it is idle."""
    look = statements("pgworkerd")["jobs_next_run_at"].decode()
    conn.commit()  # the activity is read once a transaction: a fresh one each call
    row = conn.execute(
        "SELECT count(*) FROM pg_stat_activity WHERE application_name LIKE 'pgworkerd worker%%'"
        " AND state = 'idle' AND starts_with(query, %s)",
        (look[: look.index("%(")],),  # up to its first parameter, sent as $1
    ).fetchone()
    conn.commit()
    return int(row[0])


def utc_now_text() -> str:
    """Now, as the daemon's text log lines begin (ISO 8601, UTC, milliseconds)."""
    now = datetime.now(UTC)
    return now.strftime("%Y-%m-%dT%H:%M:%S.") + f"{now.microsecond // 1000:03d}Z"


def notifications_since(daemon, since: str) -> list[str]:
    """The supervisor's debug lines about notifications logged since `since`."""
    return [
        line.split("] notified ", 1)[1]
        for line in daemon.log().splitlines()
        if "] notified " in line and line >= since
    ]


def test_a_delayed_job_starts_on_time_without_a_poll(start_daemon, history_conn):
    daemon = start_daemon(**SLOW_POLL)
    daemon.wait_for_workers(2)
    job_id = pgworkerd.enqueue(history_conn, "record", {}, delay=2)
    history_conn.commit()
    enqueued = time.monotonic()
    wait_until(
        job_in_state(history_conn, job_id, "succeeded"), timeout_s=15, what="the delayed job to run"
    )
    assert time.monotonic() - enqueued >= 2, "not before its time"


def test_with_notifications_off_workers_poll(start_daemon, history_conn):
    daemon = start_daemon(notifications=False, poll_interval="300ms")
    daemon.wait_for_workers(2)
    job_id = pgworkerd.enqueue(history_conn, "record", {})
    history_conn.commit()
    wait_until(
        job_in_state(history_conn, job_id, "succeeded"),
        timeout_s=10,
        what="a polling worker to find the job",
    )
    assert WOKEN not in daemon.log()


@pytest.fixture
def keeper(db_dsn):
    """A housekeeper of its own on the test database, as the supervisor makes one."""
    keeper = Housekeeper(
        store=JobStore(), database_url=db_dsn, lease_ttl_s=30, config=Config, daemon_id="test"
    )
    yield keeper
    keeper.close()


def test_a_notification_read_with_another_answer_is_still_found(keeper, conn):
    """The supervisor's connection also renews leases: a notification that arrives
    while it waits for an answer is read with it, and its socket will never wake the
    loop for it. The supervisor drains after every turn; this is what it relies on."""
    fd = keeper.listen_fd()
    assert fd is not None
    assert keeper.notified().queues == {ALL_QUEUES}, "listening afresh: wake everyone"
    pgworkerd.enqueue(conn, "record", {}, queue="mail")
    conn.commit()
    # A housekeeping query (renewal, rescue, prune): reads the notification too.
    renewal = keeper.run_due(time.monotonic(), list, dict)
    assert renewal is not None and renewal.renewed == frozenset()
    assert select.select([fd], [], [], 0.2)[0] == [], "the socket has nothing more"
    assert keeper.notified().queues == {"mail"}


def test_notifications_on_the_socket_are_read_each_once_and_cancels_told_apart(keeper, conn):
    """What the supervisor reads when no query ran since its last look: straight off
    the socket (housekeeping/notifications.py), enqueues by queue, cancels by lease,
    unicode intact, and nothing a second time."""
    fd = keeper.listen_fd()
    assert fd is not None
    assert keeper.notified().queues == {ALL_QUEUES}, "listening afresh: wake everyone"
    assert not keeper.queried_since_drain, "the socket's own path from here on"
    token = uuid.uuid4()
    pgworkerd.enqueue(conn, "record", {}, queue="mail")
    pgworkerd.enqueue(conn, "record", {}, queue="fax ✓")
    conn.execute("SELECT pg_notify(%s, %s)", (cancel_channel("pgworkerd"), f"7:{token}"))
    conn.commit()
    # Read as they come, however many looks that takes; a queue or a cancel read twice
    # across looks shows as a duplicate in the lists.
    queues: list[str] = []
    cancelled: list[Lease] = []
    deadline = time.monotonic() + 10
    while len(queues) < 2 or not cancelled:
        left = deadline - time.monotonic()
        assert left > 0, f"only {queues} and {cancelled} arrived"
        if select.select([fd], [], [], left)[0] == [fd]:
            notified = keeper.notified()
            queues += notified.queues
            cancelled += notified.cancelled
    assert sorted(queues) == sorted(["mail", "fax ✓"])
    assert cancelled == [Lease(7, token)]
    again = keeper.notified()
    assert again.queues == set() and again.cancelled == []
