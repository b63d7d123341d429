"""Daemons whose clocks are an hour off (docs/faults.md, "Host clock an hour off"):
libfaketime on the daemon only, the PostgreSQL server keeps true time. Leases and
schedules come from the database clock, so neither an early rescue nor an extended
lease can follow."""

from __future__ import annotations

import glob
import signal
import time
from typing import Any

import psycopg
import pytest

import pgworkerd
from tests import invariants
from tests.daemon import job, job_in_state, wait_until
from tests.tools import missing

# Where Debian's libfaketime puts it; scripts/install-test-deps (run by `make test`)
# installs it where it can and looks for it with the same pattern.
LIBFAKETIME = sorted(glob.glob("/usr/lib/*/faketime/libfaketime.so.1"))
ONE_WORKER = [{"queues": ["default"], "concurrency": 1}]
LEASE_TTL_S = 1.0


@pytest.fixture(autouse=True, scope="module")
def _libfaketime() -> None:
    if not LIBFAKETIME:
        missing("libfaketime is not installed (Debian: apt-get install libfaketime)")


def skewed(offset: str) -> dict[str, str]:
    """The environment of a process whose wall clock is `offset` off. Its monotonic
    clock stays true: the supervisor's timers run on it."""
    return {"LD_PRELOAD": LIBFAKETIME[0], "FAKETIME": offset, "FAKETIME_DONT_FAKE_MONOTONIC": "1"}


def clock_offset_s(conn: psycopg.Connection[Any], daemon: Any) -> float:
    """The daemon's wall clock minus the database's, from the start time it put in its
    daemon id (host:pid:unix time) when it registered."""

    def registered() -> tuple[Any, ...] | None:
        return conn.execute(
            "SELECT id, extract(epoch FROM heartbeat_at) FROM pgworkerd.daemons WHERE id LIKE %s",
            (f"%:{daemon.pid}:%",),
        ).fetchone()

    daemon_id, db_epoch = wait_until(registered, what="the daemon to register")
    return int(daemon_id.rsplit(":", 1)[1]) - float(db_epoch)


def lease_horizons(conn: psycopg.Connection[Any], job_id: int, seconds: float) -> list[float]:
    """Samples of how far the job's lease reaches past the database's now()."""
    samples = []
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        row = conn.execute(
            "SELECT extract(epoch FROM lease_expires_at - now())"
            " FROM pgworkerd.jobs WHERE id = %s AND state = 'running'",
            (job_id,),
        ).fetchone()
        if row is not None:
            samples.append(float(row[0]))
        time.sleep(0.05)  # a sampling period, not a synchronisation
    return samples


def kill_and_time_the_rescue(
    conn: psycopg.Connection[Any], holder: Any, victim: int
) -> tuple[float, Any, Any]:
    """SIGKILL the holder's supervisor (its children follow); returns seconds from the
    kill to the rescue, the lease's expiry and the rescue's time (database clock)."""
    (expires_at,) = conn.execute(
        "SELECT lease_expires_at FROM pgworkerd.jobs WHERE id = %s", (victim,)
    ).fetchone()
    killed_at = time.monotonic()
    holder.signal(signal.SIGKILL)
    holder.wait(timeout_s=5)

    def rescued() -> Any:
        return conn.execute(
            "SELECT at FROM transitions WHERE job_id = %s AND"
            " old_state = 'running' AND new_state = 'queued'",
            (victim,),
        ).fetchone()

    (rescued_at,) = wait_until(rescued, timeout_s=20, what="the rescue")
    return time.monotonic() - killed_at, expires_at, rescued_at


def test_s10_clocks_an_hour_off_neither_rescue_early_nor_extend_leases(daemons, db_dsn, recorder):
    config: dict[str, Any] = {"lease_ttl": f"{LEASE_TTL_S}s", "workers": ONE_WORKER}
    # 1. Held by a daemon an hour behind, watched by a rescuer an hour ahead: were
    #    expiry judged by either clock, the job would be rescued at once.
    long_job = pgworkerd.enqueue(recorder, "sleep", {"seconds": 4})
    behind = daemons(db_dsn, "behind", env=skewed("-1h"), **config)
    behind.worker_running(long_job, started_in=recorder)
    ahead = daemons(db_dsn, "ahead", env=skewed("+1h"), **config)
    assert abs(clock_offset_s(recorder, behind) + 3600) < 60
    assert abs(clock_offset_s(recorder, ahead) - 3600) < 60
    horizons = lease_horizons(recorder, long_job, 3.0)
    wait_until(job_in_state(recorder, long_job, "succeeded"), what="the long job")
    row = job(recorder, long_job)
    assert (row["attempt"], row["errors"]) == (1, []), "rescued early"
    # A retry's backoff is counted from the database clock too, on either daemon.
    retried = pgworkerd.enqueue(recorder, "fail_then_succeed", {"succeed_at": 2})
    wait_until(
        job_in_state(recorder, retried, "succeeded"),
        timeout_s=10,
        what="the retry 0.2s later (not an hour)",
    )

    # 2. Held by the daemon an hour ahead, which then dies: were the lease taken from
    #    its clock, it would hold the job for an hour. Rescued just after it expires.
    behind.signal(signal.SIGTERM)
    assert behind.wait() == 0
    victim = pgworkerd.enqueue(recorder, "sleep_first_attempt", {"seconds": 60})
    ahead.worker_running(victim, started_in=recorder)
    horizons += lease_horizons(recorder, victim, 1.5)
    rescuer = daemons(db_dsn, "behind-again", env=skewed("-1h"), **config)
    rescuer.wait_for_workers(1)
    took_s, expires_at, rescued_at = kill_and_time_the_rescue(recorder, ahead, victim)
    assert rescued_at >= expires_at, "rescued before its lease expired"
    assert took_s < LEASE_TTL_S + 4, f"rescued {took_s:.1f}s after the kill"
    wait_until(job_in_state(recorder, victim, "succeeded"), what="the rerun")

    assert horizons, "no lease sampled"
    assert 0 < max(horizons) <= LEASE_TTL_S + 0.05, (
        f"a lease reached {max(horizons):.2f}s past the database's now()"
    )
    rescuer.signal(signal.SIGTERM)
    assert rescuer.wait() == 0
    invariants.assert_holds(
        recorder, [long_job, retried, victim], max_runtime_s=30, lease_ttl_s=LEASE_TTL_S
    )
    print(
        f"clock skew: leases reached at most {max(horizons):.2f}s ahead (ttl {LEASE_TTL_S}s); "
        f"rescue {took_s:.1f}s after the kill"
    )
