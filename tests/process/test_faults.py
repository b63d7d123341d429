"""The faults of docs/faults.md, injected into the real daemon; after each, the
invariants I1-I5 are checked over the recorded history (tests/invariants.py)."""

from __future__ import annotations

import signal
import time
from typing import Any

import psutil
import psycopg
import pytest
from psycopg import sql

import pgworkerd
from tests import invariants
from tests.daemon import BASE_CONFIG, history, job, job_in_state, states, wait_until

ONE_WORKER = [{"queues": ["default"], "concurrency": 1}]


def tree_cpu_s(daemon: Any) -> float:
    """CPU seconds used so far by the supervisor and its live children."""
    total = 0.0
    for proc in [psutil.Process(daemon.pid), *daemon.workers()]:
        try:
            total += sum(proc.cpu_times()[:2])
        except psutil.NoSuchProcess:
            continue
    return total


def drain(daemon: Any) -> None:
    daemon.signal(signal.SIGTERM)
    assert daemon.wait(timeout_s=30) == 0
    assert daemon.alive_children() == []


def test_s1_s3_killed_and_crashing_workers(start_daemon, recorder):
    """docs/faults.md, "Worker killed mid-job": charged, rerun. "Poison job that crashes
    its worker" (exit, segfault): dead after max_attempts with every error, respawns
    back off, the supervisor does not spin."""
    good = pgworkerd.enqueue_many(
        recorder, [{"kind": "work", "payload": {"ms": 20}} for _ in range(30)]
    )
    victim = pgworkerd.enqueue(recorder, "sleep_first_attempt", {"seconds": 30})
    exits = pgworkerd.enqueue(recorder, "crash", {}, max_attempts=3)
    segv = pgworkerd.enqueue(recorder, "segfault", {}, max_attempts=3)
    daemon = start_daemon(workers=[{"queues": ["default"], "concurrency": 2}])
    daemon.worker_running(victim, started_in=recorder).kill()
    wait_until(
        lambda: all(
            job(recorder, i)["state"] in ("succeeded", "dead") for i in [*good, victim, exits, segv]
        ),
        timeout_s=40,
        what="every job to finish",
    )
    supervisor_cpu = sum(psutil.Process(daemon.pid).cpu_times()[:2])
    drain(daemon)

    assert job(recorder, victim)["attempt"] == 2
    for poison, how in ((exits, "exited with status 17"), (segv, "killed by SIGSEGV")):
        row = job(recorder, poison)
        assert (row["state"], row["attempt"]) == ("dead", 3)
        assert [e["error"] for e in row["errors"]] == [
            f"worker process {how} while running the job"
        ] * 3
    assert "respawn delayed" in daemon.log() or "crash_streak" not in daemon.log()
    assert supervisor_cpu < 5, f"the supervisor used {supervisor_cpu:.1f}s of CPU"
    invariants.assert_holds(recorder, [*good, victim, exits, segv], max_runtime_s=30, lease_ttl_s=3)


def test_s2_a_job_that_runs_out_of_memory_is_charged_and_retried(start_daemon, recorder):
    """docs/faults.md, "Job out of memory", with RLIMIT_AS: the allocation fails in the
    job, the worker survives, the job is charged one attempt and retried; the other
    worker's jobs are unaffected."""
    hog = pgworkerd.enqueue(recorder, "hog", {})
    others = pgworkerd.enqueue_many(recorder, [{"kind": "work", "payload": {}} for _ in range(20)])
    daemon = start_daemon()
    wait_until(lambda: states(recorder) == {"succeeded": 21}, what="all jobs")
    row = job(recorder, hog)
    assert row["attempt"] == 2 and row["result"] == "fits now"
    assert "MemoryError" in row["errors"][0]["error"]
    drain(daemon)
    invariants.assert_holds(recorder, [hog, *others], max_runtime_s=30, lease_ttl_s=3)


def test_s1_s15_a_handlers_grandchildren_die_with_its_worker(start_daemon, recorder):
    """docs/faults.md, "Worker killed mid-job" and "Handler past its max runtime, deaf to
    signals", with a handler that started a process of its own: whether the worker
    crashes or is SIGKILLed past its max runtime, nothing of its process group is left
    behind once the supervisor has reaped it; each job is charged and retried."""
    crashing = pgworkerd.enqueue(recorder, "spawn_then_die", {"how": "crash"})
    hanging = pgworkerd.enqueue(recorder, "spawn_then_die", {"how": "block"}, max_runtime=1)
    daemon = start_daemon()
    wait_until(
        lambda: all(job(recorder, i)["state"] == "succeeded" for i in (crashing, hanging)),
        what="both jobs to be rerun",
    )
    grandchildren = [
        int(event.split()[1])
        for _, _, event, _, _ in history(recorder)
        if event.startswith("grandchild ")
    ]
    assert len(grandchildren) == 2
    wait_until(
        lambda: not any(alive_sleep(pid) for pid in grandchildren),
        timeout_s=5,
        what="the grandchildren to be gone",
    )
    log = daemon.log()
    assert "exited with status 17" in log and "reason=timeout" in log
    for job_id in (crashing, hanging):
        assert job(recorder, job_id)["attempt"] == 2
    drain(daemon)
    invariants.assert_holds(recorder, [crashing, hanging], max_runtime_s=1, lease_ttl_s=3)


def alive_sleep(pid: int) -> bool:
    """Whether `pid` is still a live `sleep 600` (not a zombie, not a reused pid)."""
    try:
        proc = psutil.Process(pid)
        return proc.status() != psutil.STATUS_ZOMBIE and proc.cmdline() == ["sleep", "600"]
    except psutil.Error:
        return False


def test_s5_killed_between_handler_success_and_outcome_commit(start_daemon, recorder, db_dsn):
    """docs/faults.md, "Killed between handler success and outcome commit": the handler
    finished but its outcome never committed: the job runs again,
    same id, attempt + 1."""
    victim = pgworkerd.enqueue(recorder, "sleep_first_attempt", {"seconds": 0.5})
    daemon = start_daemon(workers=ONE_WORKER)
    worker = daemon.worker_running(victim, started_in=recorder)
    waiting_backend = (
        "SELECT pid FROM pg_stat_activity WHERE application_name LIKE 'pgworkerd worker%%'"
        " AND wait_event_type = 'Lock'"
    )
    with psycopg.connect(db_dsn) as blocker:
        # Our row lock holds the outcome's UPDATE at the server, uncommitted.
        blocker.execute("SELECT 1 FROM pgworkerd.jobs WHERE id = %s FOR UPDATE", (victim,))
        (backend,) = wait_until(
            lambda: recorder.execute(waiting_backend).fetchone(),
            what="the worker's outcome write to wait on our lock",
        )
        worker.kill()
        # A dead client's statement would still commit once the lock goes: end it too,
        # so the outcome is lost as when the worker dies before sending it.
        recorder.execute("SELECT pg_terminate_backend(%s)", (backend,))
        wait_until(
            lambda: (
                not recorder.execute(
                    "SELECT 1 FROM pg_stat_activity WHERE pid = %s", (backend,)
                ).fetchone()
            ),
            what="the worker's backend to end",
        )
        blocker.rollback()
    wait_until(job_in_state(recorder, victim, "succeeded"), what="the rerun")
    row = job(recorder, victim)
    assert row["attempt"] == 2 and row["result"] == "attempt 2"
    events = [
        (r[0], r[1])
        for r in recorder.execute(
            "SELECT attempt, event FROM history WHERE job_id = %s ORDER BY id", (victim,)
        )
    ]
    assert events == [(1, "start"), (1, "end"), (2, "start"), (2, "end")]
    drain(daemon)
    invariants.assert_holds(recorder, [victim], max_runtime_s=30, lease_ttl_s=3)


def test_s11_a_job_five_times_longer_than_its_lease_runs_once(start_daemon, recorder):
    """docs/faults.md, "Job running far longer than its lease": renewed all along, never
    rescued, though two daemons' rescuers are watching."""
    long_job = pgworkerd.enqueue(recorder, "sleep", {"seconds": 5})
    first = start_daemon("first", lease_ttl="1s")
    second = start_daemon("second", lease_ttl="1s")
    wait_until(job_in_state(recorder, long_job, "succeeded"), what="the long job")
    row = job(recorder, long_job)
    assert row["attempt"] == 1 and row["errors"] == []
    for daemon in (first, second):
        drain(daemon)
    invariants.assert_holds(recorder, [long_job], max_runtime_s=30, lease_ttl_s=1)


def test_s25_no_connection_crosses_a_fork_and_the_supervisor_has_one_thread(start_daemon, recorder):
    daemon = start_daemon()
    daemon.wait_for_workers(2)
    crash = pgworkerd.enqueue(recorder, "crash", {}, max_attempts=1)  # forces a respawn
    wait_until(job_in_state(recorder, crash, "dead"), what="the crash")
    workers = daemon.wait_for_workers(2)
    port = int(recorder.info.port)

    def connections_of(worker: psutil.Process) -> list[Any]:
        return [c for c in worker.net_connections(kind="inet") if c.raddr and c.raddr.port == port]

    for worker in workers:
        # A worker's title says idle once it has booted, just before it connects (the
        # respawned one was once caught in between): its connection, then no other.
        wait_until(lambda w=worker: connections_of(w), what=f"worker {worker.pid} connected")
        sockets = connections_of(worker)
        assert len(sockets) == 1, f"worker {worker.pid} holds {len(sockets)} connections"
        # Its main thread and its lease guard's (worker/lease_guard.py), which only waits.
        assert worker.num_threads() == 2
    assert psutil.Process(daemon.pid).num_threads() == 1
    drain(daemon)


def test_s21_a_database_that_turned_read_only_is_a_connection_fault(start_daemon, recorder):
    """docs/faults.md, "Read-only database after failover": workers reconnect with backoff
    (no crash loop, no traceback, bounded CPU), nothing is charged, and they resume
    alone once the database takes writes again."""
    daemon = start_daemon(workers=ONE_WORKER)
    daemon.wait_for_workers(1)
    database = sql.Identifier(recorder.info.dbname)
    recorder.execute(
        sql.SQL("ALTER DATABASE {} SET default_transaction_read_only = on").format(database)
    )
    recorder.execute(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
        " WHERE application_name LIKE 'pgworkerd%%'"
    )  # new sessions: read-only
    waiting = pgworkerd.enqueue(recorder, "record", {})  # our session still writes
    wait_until(lambda: "read-only transaction" in daemon.log(), what="a read-only error")
    cpu_before = tree_cpu_s(daemon)
    fault_s = 4.0
    time.sleep(fault_s)  # the fault itself lasts this long; nothing is waited for here
    cpu_used = tree_cpu_s(daemon) - cpu_before
    recorder.execute(
        sql.SQL("ALTER DATABASE {} RESET default_transaction_read_only").format(database)
    )
    wait_until(job_in_state(recorder, waiting, "succeeded"), what="the job after the fault")
    assert job(recorder, waiting)["attempt"] == 1, "charged for the database's fault"
    log = daemon.log()
    assert "worker exited" not in log and "Traceback" not in log, log[-2000:]
    assert cpu_used < fault_s * 0.25, f"{cpu_used:.2f}s CPU in a {fault_s}s fault"
    drain(daemon)
    invariants.assert_holds(recorder, [waiting], max_runtime_s=30, lease_ttl_s=3)


def test_s20_jobs_claimed_and_not_started_are_not_charged_for_an_outage(
    start_daemon, recorder, pg_admin_dsn
):
    """docs/faults.md, "Database down for a while": the jobs a worker had claimed and
    not started when their leases lapsed are given back uncharged, not rescued (charged)
    by their own daemon when the database answers again, though the worker reconnects
    after its supervisor (held stopped here: its backoff alone may leave it away up to
    10 s). At max_attempts 1 a charge is a dead job: before the fix, 9 of the 10 died
    unstarted."""
    ids = pgworkerd.enqueue_many(
        recorder,
        [{"kind": "c_sleep", "payload": {"seconds": 0 if n else 1}} for n in range(10)],
    )
    daemon = start_daemon(
        workers=ONE_WORKER, defaults={**BASE_CONFIG["defaults"], "max_attempts": 1}
    )
    wait_until(lambda: history(recorder), what="the first job's start")  # 9 wait behind it
    name = recorder.info.dbname
    allow = sql.SQL("ALTER DATABASE {} ALLOW_CONNECTIONS {}")
    workers = daemon.workers()
    with psycopg.connect(pg_admin_dsn, autocommit=True) as admin:
        try:
            admin.execute(allow.format(sql.Identifier(name), sql.SQL("false")))
            admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                " WHERE datname = %s AND application_name LIKE 'pgworkerd%%'",
                (name,),
            )
            wait_until(
                lambda: "cannot renew leases; stopping their jobs" in daemon.log(),
                timeout_s=10,
                what="the leases to lapse",
            )
            for worker in workers:
                worker.suspend()
            admin.execute(allow.format(sql.Identifier(name), sql.SQL("true")))
            wait_until(lambda: "database reachable again" in daemon.log(), what="the supervisor")
            time.sleep(3.0)  # two of its rescues (every lease_ttl / 2) while the worker is away
        finally:
            admin.execute(allow.format(sql.Identifier(name), sql.SQL("true")))
            for worker in workers:
                worker.resume()
    wait_until(lambda: set(states(recorder)) <= {"succeeded", "dead"}, what="every job to end")
    ended = states(recorder)
    assert ended == {"succeeded": 10}, f"{ended}\n{daemon.log()[-3000:]}"
    drain(daemon)
    invariants.assert_holds(recorder, ids, max_runtime_s=30, lease_ttl_s=3)


@pytest.mark.slow  # ~15 s
def test_s20_s22_postgresql_restarts_and_outages(daemons, own_cluster):
    """docs/faults.md, "PostgreSQL restart or terminated connections" (fast, then
    immediate, mid-flow) and "Database down for a while": no crash loop, bounded CPU,
    resumes alone, nothing lost."""
    dsn = own_cluster.dsn()
    with psycopg.connect(dsn, autocommit=True) as conn:
        invariants.install(conn)
        ids = pgworkerd.enqueue_many(
            conn, [{"kind": "work", "payload": {"ms": 30}} for _ in range(300)]
        )
    daemon = daemons(dsn, poll_interval="200ms")
    daemon.wait_for_workers(2)

    def done() -> int:
        with psycopg.connect(dsn) as conn:
            return states(conn).get("succeeded", 0)

    for mode, target in (("fast", 60), ("immediate", 120)):
        wait_until(lambda target=target: done() >= target, timeout_s=30, what=f"{target} done")
        own_cluster.stop(mode)
        own_cluster.start()
    wait_until(lambda: done() >= 180, timeout_s=30, what="progress after the restarts")

    own_cluster.stop("fast")  # an outage: docs/faults.md, "Database down for a while"
    exits_before = daemon.log().count("worker exited")
    cpu_before = tree_cpu_s(daemon)
    outage_s = 6.0
    time.sleep(outage_s)  # the fault itself lasts this long; nothing is waited for here
    cpu_used = tree_cpu_s(daemon) - cpu_before
    own_cluster.start()
    try:
        wait_until(lambda: done() == 300, timeout_s=40, what="every job after the outage")
    except AssertionError:
        with psycopg.connect(dsn) as conn:
            print(
                conn.execute(
                    "SELECT id, state, attempt, run_at - now(), lease_expires_at"
                    " - now(), worker, last_error FROM pgworkerd.jobs"
                    " WHERE state <> 'succeeded'"
                ).fetchall()
            )
            print(
                conn.execute(
                    "SELECT * FROM transitions WHERE job_id IN (SELECT id FROM"
                    " pgworkerd.jobs WHERE state <> 'succeeded')"
                ).fetchall()
            )
        raise
    assert cpu_used < outage_s * 0.25, f"{cpu_used:.2f}s CPU in a {outage_s}s outage"
    # Workers wait for the database; at most one kill each (a handler that would have
    # outlived its unrenewed lease), never a crash loop.
    assert daemon.log().count("worker exited") - exits_before <= 2
    drain(daemon)
    with psycopg.connect(dsn) as conn:
        # Starts without a history row: the handler's own history write fails while the
        # server is down (the job fails, charged). Bounded by the batches held. (Jobs
        # claimed but given up unstarted when renewals failed are no longer charged:
        # test_s20_jobs_claimed_and_not_started_are_not_charged_for_an_outage.)
        verdict = invariants.assert_holds(
            conn, ids, max_runtime_s=30, lease_ttl_s=3, unrecorded_starts=3 * 2 * 10
        )
    print("restarts and outage:", verdict.counts)
