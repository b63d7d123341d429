"""What holds back vacuum, as `status`, /metrics and /readyz name it: the oldest holder
of this database's xmin horizon, and the jobs table's dead row versions."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

import pgworkerd
from pgworkerd.client.operations import Operations
from pgworkerd.storage.reads import Reads
from tests.daemon import wait_until


@pytest.fixture
def held(db_dsn: str) -> Iterator[psycopg.Connection[Any]]:
    """A session left idle in a transaction that has an xid, as a forgotten psql does."""
    with psycopg.connect(db_dsn, application_name="forgotten-psql") as other:
        other.execute("SELECT txid_current()")
        yield other
        other.rollback()


def test_no_holder_when_no_transaction_is_open(conn):
    assert Reads("pgworkerd").horizon(conn) is None


def test_an_idle_transaction_is_named_with_its_pid_and_application(conn, held):
    horizon = Reads("pgworkerd").horizon(conn)
    assert horizon is not None
    assert horizon.kind == "transaction"
    assert horizon.pid == held.info.backend_pid
    assert horizon.name == "forgotten-psql"
    assert horizon.state == "idle in transaction"
    assert horizon.age_s is not None and horizon.age_s >= 0
    assert f"pid {held.info.backend_pid} (forgotten-psql)" in horizon.describe()


def test_a_transaction_in_another_database_does_not_hold_this_one(conn, pg_admin_dsn):
    with psycopg.connect(pg_admin_dsn) as elsewhere:
        elsewhere.execute("SELECT txid_current()")
        assert Reads("pgworkerd").horizon(conn) is None
        elsewhere.rollback()


def test_status_warns_past_ten_lease_ttl_and_not_before(conn, held):
    ops = Operations()
    calm = ops.status(conn, lease_ttl_s=3600)["horizon"]
    assert calm["pid"] == held.info.backend_pid and calm["warning"] is None
    # age_s counts from the transaction's start: a lease_ttl this short makes it too old.
    wait_until(
        lambda: ops.status(conn, lease_ttl_s=0.001)["horizon"]["warning"] is not None,
        what="a warning",
    )
    warned = ops.status(conn, lease_ttl_s=0.001)["horizon"]
    assert f"pg_terminate_backend({held.info.backend_pid})" in warned["warning"]


def test_the_jobs_table_counts_the_dead_rows_that_finished_jobs_leave(conn):
    ids = pgworkerd.enqueue_many(conn, [{"kind": "k", "payload": {}} for _ in range(50)])
    assert pgworkerd.cancel(conn, ids[0])
    conn.execute("DELETE FROM pgworkerd.jobs WHERE id = ANY(%s)", (ids[1:],))
    conn.execute("SELECT pg_stat_force_next_flush()")
    reads = Reads("pgworkerd")

    def counted() -> bool:
        table = reads.jobs_table(conn)
        return table is not None and table["dead_tuples"] >= 49

    wait_until(counted, what="the dead rows counted")
    status = Operations().status(conn)["jobs_table"]
    assert status["dead_tuples"] >= 49 and status["live_tuples"] >= 0
