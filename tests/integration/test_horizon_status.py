"""`status` names the transaction that holds back vacuum (issue 18): its pid,
application name and age, the jobs table's dead tuples, and a warning once it is older
than 10 lease periods."""

from __future__ import annotations

import time

import psycopg

import pgworkerd
from pgworkerd import cli_format
from pgworkerd.operations import Operations


def test_status_names_the_holder_of_the_horizon_and_warns_past_ten_leases(conn, db_dsn):
    ops = Operations()
    assert ops.status(conn)["horizon"]["pid"] is None, "nothing else holds anything"
    with psycopg.connect(db_dsn, application_name="nightly report") as holder:
        holder.execute("SELECT txid_current()")  # an xid, left idle in transaction
        pid = holder.info.backend_pid
        horizon = ops.status(conn, lease_ttl_s=30)["horizon"]
        assert (horizon["pid"], horizon["application_name"]) == (pid, "nightly report")
        assert horizon["state"] == "idle in transaction"
        assert horizon["warning"] is False
        # With a lease of 50 ms the holder passes 10 leases at 0.5 s: poll for it.
        deadline = time.monotonic() + 30
        while not (horizon := ops.status(conn, lease_ttl_s=0.05)["horizon"])["warning"]:
            assert time.monotonic() < deadline, horizon
            time.sleep(0.1)
        assert horizon["age_s"] > 0.5
        text = cli_format.horizon(horizon)
        assert text.startswith(f"WARNING: pid {pid} has held a transaction open")
        assert "nightly report" in text
        holder.rollback()
    assert ops.status(conn)["horizon"]["pid"] is None


def test_status_counts_the_dead_tuples_of_the_jobs_table(conn):
    ids = pgworkerd.enqueue_many(conn, [{"kind": "k", "payload": {}}] * 10)
    conn.execute("DELETE FROM pgworkerd.jobs WHERE id = ANY(%s)", (ids,))
    # Statistics reach the view at most once a second: poll for them.
    deadline = time.monotonic() + 30
    while (dead := Operations().status(conn)["horizon"]["jobs_dead_tuples"]) in (None, 0):
        assert time.monotonic() < deadline
        conn.execute("SELECT pg_stat_clear_snapshot()")
        time.sleep(0.2)
    assert dead >= 10
