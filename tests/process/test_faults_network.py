"""Network faults through a loopback proxy of our own (tests/proxy.py): a cut past the
lease (docs/faults.md, "Network cut past the lease"), a lost reply to a committed
outcome (docs/faults.md, "Outcome committed, reply lost"). Handlers write their history
directly, off the faulty path."""

from __future__ import annotations

import signal
import threading
import time
from typing import Any

import psutil
import psycopg
import pytest

import pgworkerd
from tests import invariants
from tests.daemon import history, job, job_in_state, wait_until


def test_the_proxy_cuts_heals_drops_and_loses_a_reply(proxy, db_dsn):
    """The fault injector itself: a blackholed query waits and completes after the
    heal; a drop breaks the connection; a lost reply's statement still commits."""
    with psycopg.connect(proxy.dsn(db_dsn), autocommit=True) as conn:
        assert conn.execute("SELECT 1").fetchone() == (1,)
        proxy.blackhole()
        answer: list[Any] = []
        waiter = threading.Thread(target=lambda: answer.append(conn.execute("SELECT 2").fetchone()))
        waiter.start()
        waiter.join(timeout=1.0)
        assert waiter.is_alive() and not answer, "the cut let a query through"
        proxy.heal()
        waiter.join(timeout=5)
        assert answer == [(2,)]
        assert proxy.drop() == 1
        with pytest.raises(psycopg.OperationalError):
            conn.execute("SELECT 3")
    with psycopg.connect(proxy.dsn(db_dsn), autocommit=True) as conn:
        conn.execute("CREATE TABLE lost_reply (x int)")
        proxy.lose_reply_to(b"INSERT INTO lost_reply")
        with pytest.raises(psycopg.OperationalError):
            conn.execute("INSERT INTO lost_reply VALUES (1)")
    assert proxy.replies_lost == 1
    with psycopg.connect(db_dsn) as direct:
        assert direct.execute("SELECT x FROM lost_reply").fetchall() == [(1,)]


ONE_WORKER = [{"queues": ["default"], "concurrency": 1}]


def gone(proc: psutil.Process) -> bool:
    try:
        return proc.status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def drain(daemon: Any) -> None:
    daemon.signal(signal.SIGTERM)
    assert daemon.wait(timeout_s=30) == 0
    assert daemon.alive_children() == []


def test_s8_network_cut_past_the_lease(daemons, proxy, db_dsn, recorder):
    """docs/faults.md, "Network cut past the lease": the database stops answering a
    daemon (every byte held, no TCP error: a half-open path). Its supervisor stops the
    job itself before the lease runs out; another daemon rescues and runs it; after the
    heal the cut daemon's late writes (a renewal held in the network, its charge of the
    killed job) change nothing."""
    victim = pgworkerd.enqueue(recorder, "sleep_first_attempt", {"seconds": 60})
    cut = daemons(proxy.dsn(db_dsn), "cut", history_dsn=db_dsn, workers=ONE_WORKER, lease_ttl="3s")
    worker = cut.worker_running(victim, started_in=recorder)
    proxy.blackhole()
    cut_at = time.monotonic()
    wait_until(lambda: gone(worker), timeout_s=10, what="the cut daemon to stop its job")
    stopped_after = time.monotonic() - cut_at
    # Before its lease ran out (database clock): it never ran unfenced.
    row = recorder.execute(
        "SELECT state, attempt, lease_expires_at - now() FROM pgworkerd.jobs WHERE id = %s",
        (victim,),
    ).fetchone()
    assert row[:2] == ("running", 1) and row[2].total_seconds() > 0, row
    assert "cannot renew leases; stopping their jobs" in cut.log()

    direct = daemons(db_dsn, "direct", workers=ONE_WORKER, lease_ttl="3s")
    during_cut = pgworkerd.enqueue_many(
        recorder, [{"kind": "record", "payload": {}} for _ in range(5)]
    )
    wait_until(job_in_state(recorder, victim, "succeeded"), what="the rescue and rerun")
    wait_until(
        lambda: all(job(recorder, i)["state"] == "succeeded" for i in during_cut),
        what="the jobs enqueued during the cut",
    )
    taken = job(recorder, victim)
    assert (taken["attempt"], taken["result"]) == (2, "attempt 2")
    direct_pids = {p.pid for p in direct.workers()}
    assert {r[3] for r in history(recorder) if r[0] in during_cut} <= direct_pids

    proxy.heal()
    wait_until(lambda: "database reachable again" in cut.log(), what="the cut daemon back")
    cut.wait_for_workers(1)
    row = job(recorder, victim)
    assert (row["state"], row["attempt"], row["result"], row["finished_at"]) == (
        "succeeded",
        2,
        "attempt 2",
        taken["finished_at"],
    )
    for daemon in (cut, direct):
        drain(daemon)
    assert "could not settle every job" not in cut.log()
    invariants.assert_holds(recorder, [victim, *during_cut], max_runtime_s=30, lease_ttl_s=3)
    print(f"network cut: cut -> job stopped in {stopped_after:.2f}s (lease_ttl 3s)")


def test_s6_an_outcome_commits_but_its_reply_is_lost(daemons, proxy, db_dsn, recorder):
    """docs/faults.md, "Outcome committed, reply lost": the complete statement commits,
    then the connection dies before its answer arrives. The worker reconnects, writes
    the outcome again and sees its own (the token stays on the finished row): no rerun,
    attempt 1, one start."""
    # A batch's successes are written with the next claim (jobs_complete_and_claim), a
    # statement the worker prepared on connecting (JobStore.warm): its text is not sent
    # again, its parameters are. The reply lost is the one to the message that carries
    # this job's result (`record` returns {"pid": ...}) in the results array literal.
    proxy.lose_reply_to(b'{"{\\"pid\\": ')
    done = pgworkerd.enqueue(recorder, "record", {})
    daemon = daemons(proxy.dsn(db_dsn), history_dsn=db_dsn, workers=ONE_WORKER)
    wait_until(lambda: "job succeeded" in daemon.log(), what="the worker to see it succeed")
    assert proxy.replies_lost == 1
    row = job(recorder, done)
    assert (row["state"], row["attempt"]) == ("succeeded", 1)
    assert [r[2] for r in history(recorder, done)] == ["start"]
    log = daemon.log()
    assert "database connection lost" in log and "outcome discarded" not in log
    drain(daemon)
    invariants.assert_holds(recorder, [done], max_runtime_s=30, lease_ttl_s=3)
