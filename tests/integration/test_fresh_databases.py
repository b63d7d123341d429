"""The per-test database (tests/conftest.py FreshDatabases): made one ahead by a thread,
it is still a fresh copy of the template for each test, never handed out twice."""

from __future__ import annotations

import os
import signal
import threading

import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import make_conninfo

import pgworkerd
from tests.conftest import FreshDatabases
from tests.daemon import wait_until


def test_a_row_written_in_one_tests_database_is_absent_from_the_next_ones(
    conn, pg_admin_dsn, _fresh_databases
):
    """What the next test gets, taken here from the same session's FreshDatabases that
    gave this test its database: another database, without the row written here."""
    pgworkerd.enqueue(conn, "k", {"left": "behind"})
    assert conn.execute("SELECT count(*) FROM pgworkerd.jobs").fetchone()[0] == 1
    following = _fresh_databases.take()
    try:
        assert following != conn.info.dbname
        with psycopg.connect(make_conninfo(pg_admin_dsn, dbname=following)) as other:
            assert other.execute("SELECT count(*) FROM pgworkerd.jobs").fetchone()[0] == 0
    finally:
        _fresh_databases.give_back(following)


def test_each_take_is_a_new_copy_of_the_template_with_nothing_of_the_ones_before(
    pg_admin_dsn, template_db
):
    databases = FreshDatabases(pg_admin_dsn, template_db, "pgworkerd_fresh_")
    names: list[str] = []
    try:
        for n in range(4):
            name = databases.take()
            names.append(name)
            with psycopg.connect(make_conninfo(pg_admin_dsn, dbname=name)) as conn:
                jobs = conn.execute("SELECT count(*) FROM pgworkerd.jobs").fetchone()[0]
                assert jobs == 0, f"take {n} ({name}) held {jobs} jobs of a take before"
                pgworkerd.enqueue(conn, "k", {"n": n})
            if n % 2:  # given back at once or kept: the next take is new either way
                databases.give_back(name)
    finally:
        databases.close()
    assert len(set(names)) == len(names), names
    with psycopg.connect(pg_admin_dsn, autocommit=True) as admin:
        left = admin.execute(
            "SELECT count(*) FROM pg_database WHERE datname LIKE 'pgworkerd\\_fresh\\_%'"
        ).fetchone()[0]
        for name in names[::2]:  # the ones the test kept
            admin.execute(sql.SQL("DROP DATABASE {}").format(sql.Identifier(name)))
    assert left == 2, "the copy made ahead and those given back are dropped at close"


def test_a_take_interrupted_while_it_waits_leaves_the_copy_to_close(pg_admin_dsn, template_db):
    """A take() cut off while it waits for the copy made ahead (a test's timeout, Ctrl-C)
    does not lose it: close() still drops it. It was left behind in the cluster."""
    databases = FreshDatabases(pg_admin_dsn, template_db, "pgworkerd_cut_")

    def ours() -> list[str]:
        with psycopg.connect(pg_admin_dsn) as admin:
            query = "SELECT datname FROM pg_database WHERE datname LIKE 'pgworkerd\\_cut\\_%'"
            return [name for (name,) in admin.execute(query)]

    first = databases.take()
    databases.give_back(first)  # dropped by the thread after it made the next copy
    wait_until(lambda: first not in ours(), what="the next copy made, the first dropped")
    with psycopg.connect(pg_admin_dsn) as locker:
        locker.execute("LOCK pg_database")  # the copy made ahead from here on waits for this
        databases.give_back(databases.take())  # the one made before the lock
        # Ctrl-C's KeyboardInterrupt, raised by a handler of our own on SIGUSR1: SIGINT
        # itself is ignored in a process started in the background (as `make test` may
        # be), and pytest-timeout holds SIGALRM.
        previous = signal.signal(signal.SIGUSR1, signal.default_int_handler)
        try:
            with pytest.raises(KeyboardInterrupt):  # (caught here even if it came early)
                threading.Timer(0.3, os.kill, (os.getpid(), signal.SIGUSR1)).start()
                databases.take()  # waits for the blocked copy
        finally:
            signal.signal(signal.SIGUSR1, previous)
        locker.rollback()
    databases.close()
    assert ours() == []
