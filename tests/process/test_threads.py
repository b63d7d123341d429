"""`threads: N`: a worker process running many jobs at once, plain handlers in threads
and coroutines on its event loop, with every per-job guarantee: runtime limits, the
charge of a process that dies, drain, and neighbours spared a runtime kill."""

from __future__ import annotations

import signal
from typing import Any

import psutil
import psycopg

import pgworkerd
from tests.daemon import Daemon, history, job, states, wait_until

Conn = psycopg.Connection[Any]


def one_process(threads: int, **defaults: Any) -> dict[str, Any]:
    return {
        "workers": [{"queues": ["default"], "concurrency": 1, "threads": threads}],
        "defaults": {"max_attempts": 5, "max_runtime": "30s", "batch_size": 10,
                     "backoff_base": "100ms", "backoff_max": "500ms", **defaults},
    }  # fmt: skip


def events(conn: Conn, event: str) -> list[tuple[Any, ...]]:
    return [row for row in history(conn) if row[2] == event]


def started(conn: Conn, count: int) -> list[tuple[Any, ...]]:
    return wait_until(
        lambda: (rows := events(conn, "start")) and len(rows) >= count and rows,
        what=f"{count} handlers started",
    )


def test_n_sleeping_jobs_run_at_once_in_one_process(start_daemon: Any, history_conn: Conn) -> None:
    ids = pgworkerd.enqueue_many(
        history_conn, [{"kind": "sleep", "payload": {"seconds": 2}} for _ in range(8)]
    )
    daemon: Daemon = start_daemon(**one_process(8))
    starts = started(history_conn, 8)
    titles = wait_until(
        lambda: [t for t in daemon.titles() if "8/8 busy" in t], what="a busy title"
    )
    assert titles == ["pgworkerd: worker default #1 8/8 busy"]
    wait_until(lambda: states(history_conn) == {"succeeded": 8}, what="8 jobs succeeded")
    ends = events(history_conn, "end")
    assert len({row[3] for row in starts + ends}) == 1, "one process ran them all"
    assert max(row[4] for row in starts) < min(row[4] for row in ends), "all ran at once"
    assert all(job(history_conn, i)["attempt"] == 1 for i in ids)
    assert daemon.titles() == ["pgworkerd: worker default #1 idle"]
    daemon.signal(signal.SIGTERM)
    assert daemon.wait() == 0


def test_coroutines_and_threads_share_the_slots(start_daemon: Any, history_conn: Conn) -> None:
    specs = [{"kind": "sleep_async", "payload": {"seconds": 2}} for _ in range(6)]
    specs += [{"kind": "sleep", "payload": {"seconds": 2}} for _ in range(2)]
    ids = pgworkerd.enqueue_many(history_conn, specs)
    daemon: Daemon = start_daemon(**one_process(8))
    wait_until(lambda: states(history_conn) == {"succeeded": 8}, what="8 jobs succeeded")
    starts, ends = events(history_conn, "start"), events(history_conn, "end")
    assert max(row[4] for row in starts) < min(row[4] for row in ends), "all ran at once"
    assert [job(history_conn, i)["result"] for i in ids] == ["awaited"] * 6 + ["slept"] * 2
    daemon.signal(signal.SIGTERM)
    assert daemon.wait() == 0


def test_jobtimeout_reaches_the_job_in_its_own_thread_or_task(
    start_daemon: Any, history_conn: Conn
) -> None:
    late = pgworkerd.enqueue(history_conn, "spin", {}, max_runtime=1, max_attempts=1)
    late_async = pgworkerd.enqueue(
        history_conn, "sleep_async", {"seconds": 3600}, max_runtime=1, max_attempts=1
    )
    neighbour = pgworkerd.enqueue(history_conn, "sleep", {"seconds": 3})
    daemon: Daemon = start_daemon(**one_process(4))
    wait_until(lambda: states(history_conn) == {"dead": 2, "succeeded": 1}, what="all ended")
    for job_id in (late, late_async):
        assert "JobTimeout" in job(history_conn, job_id)["last_error"]
    assert [row[2] for row in history(history_conn, late)] == ["start", "soft_timeout"]
    assert job(history_conn, neighbour)["attempt"] == 1, "its process was never killed"
    assert "killing worker" not in daemon.log()
    daemon.signal(signal.SIGTERM)
    assert daemon.wait() == 0


def test_a_hung_job_is_killed_and_charged_and_its_neighbours_are_not(
    start_daemon: Any, history_conn: Conn
) -> None:
    hung = pgworkerd.enqueue(history_conn, "block_in_c", {}, max_runtime=1, max_attempts=1)
    neighbours = pgworkerd.enqueue_many(
        history_conn, [{"kind": "sleep", "payload": {"seconds": 6}} for _ in range(3)]
    )
    daemon: Daemon = start_daemon(**one_process(4))
    wait_until(lambda: states(history_conn) == {"dead": 1, "succeeded": 3}, timeout_s=40,
               what="the hung job dead, its neighbours succeeded")  # fmt: skip
    assert "exceeded its max runtime" in job(history_conn, hung)["last_error"]
    for job_id in neighbours:
        row = job(history_conn, job_id)
        assert row["attempt"] == 1, "killed for another job's sake: that start is given back"
        assert [r[2] for r in history(history_conn, job_id)] == ["start", "start", "end"]
    assert "killing worker" in daemon.log()
    daemon.signal(signal.SIGTERM)
    assert daemon.wait() == 0


def test_sigkill_of_a_threaded_process_charges_each_running_job_once(
    start_daemon: Any, history_conn: Conn
) -> None:
    ids = pgworkerd.enqueue_many(
        history_conn, [{"kind": "sleep", "payload": {"seconds": 4}} for _ in range(4)]
    )
    daemon: Daemon = start_daemon(**one_process(4))
    (worker,) = daemon.wait_for_workers(1)
    started(history_conn, 4)
    worker.kill()
    wait_until(lambda: states(history_conn) == {"succeeded": 4}, timeout_s=40, what="reruns")
    for job_id in ids:
        row = job(history_conn, job_id)
        assert row["attempt"] == 2, "charged once for the kill, then succeeded"
        assert "killed by SIGKILL" in row["errors"][0]["error"]
        assert [r[1] for r in history(history_conn, job_id) if r[2] == "start"] == [1, 2]
    daemon.signal(signal.SIGTERM)
    assert daemon.wait() == 0


def test_slots_go_on_while_a_write_waits_on_the_database(
    start_daemon: Any, history_conn: Conn, db_dsn: str
) -> None:
    """The claims and writes of successes are made off the main thread: one that waits
    on the database (here a lock) holds up no slot; the jobs claimed go on starting."""
    ids = pgworkerd.enqueue_many(
        history_conn, [{"kind": "sleep", "payload": {"seconds": 0.3}} for _ in range(11)]
    )
    # One claim takes all 11 (2 free slots + batch_size - 1); the lease outlasts the lock.
    daemon: Daemon = start_daemon(**one_process(2), lease_ttl="20s")
    started(history_conn, 2)
    with psycopg.connect(db_dsn) as locker:
        # Every write to the jobs table waits: the first successes' among them.
        locker.execute("LOCK TABLE pgworkerd.jobs IN SHARE MODE")
        starts = wait_until(
            lambda: (rows := events(history_conn, "start")) and len(rows) == 11 and rows,
            timeout_s=4,
            what="all 11 claimed jobs started while the write of the first waits",
        )
        assert states(history_conn) == {"running": 11}, "no outcome written yet"
    wait_until(lambda: states(history_conn) == {"succeeded": 11}, what="all written")
    assert {row[0] for row in starts} == set(ids)
    assert all(job(history_conn, i)["attempt"] == 1 for i in ids)
    daemon.signal(signal.SIGTERM)
    assert daemon.wait() == 0


def test_drain_with_every_slot_busy(start_daemon: Any, history_conn: Conn) -> None:
    ids = pgworkerd.enqueue_many(
        history_conn, [{"kind": "sleep", "payload": {"seconds": 2}} for _ in range(6)]
    )
    daemon: Daemon = start_daemon(**one_process(4))
    starts = started(history_conn, 4)
    daemon.signal(signal.SIGTERM)
    assert daemon.wait() == 0
    ran = {row[0] for row in starts}
    assert len(ran) == 4
    for job_id in ids:
        row = job(history_conn, job_id)
        if job_id in ran:
            assert (row["state"], row["attempt"]) == ("succeeded", 1), "finished in the drain"
        else:
            assert (row["state"], row["attempt"]) == ("queued", 0), "given back uncharged"
    assert daemon.alive_children() == []
    assert not any(p.status() != psutil.STATUS_ZOMBIE for p in daemon.workers())


def test_jobtimeout_still_reaches_a_job_while_its_process_drains(
    start_daemon: Any, history_conn: Conn
) -> None:
    late = pgworkerd.enqueue(history_conn, "spin", {}, max_runtime=2, max_attempts=1)
    daemon: Daemon = start_daemon(**one_process(2), shutdown_timeout="20s")
    started(history_conn, 1)
    daemon.signal(signal.SIGTERM)  # drain: the job may finish, up to its runtime
    assert daemon.wait() == 0
    assert [row[2] for row in history(history_conn, late)] == ["start", "soft_timeout"]
    row = job(history_conn, late)
    assert row["state"] == "dead" and "JobTimeout" in row["last_error"]
    assert "killing worker" not in daemon.log(), "the soft timeout was enough"
