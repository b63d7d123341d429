"""The cursor of connections.connect after a column's type changed under a statement it
had prepared (tests/process/test_schema_change.py runs it in the daemon)."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

from pgworkerd.storage import connections

RETURNS_A_COLUMN = "SELECT n FROM widened"


@pytest.fixture
def widened(conn: psycopg.Connection[Any]) -> psycopg.Connection[Any]:
    conn.execute("CREATE TABLE widened (n integer)")
    conn.execute("INSERT INTO widened VALUES (1)")
    return conn


def prepared(db_dsn: str) -> psycopg.Connection[Any]:
    ours = connections.connect(db_dsn, application_name="test")
    ours.execute(RETURNS_A_COLUMN, prepare=True)
    ours.execute("SELECT 2", prepare=True)  # another one prepared, dropped alike
    return ours


def test_a_statement_on_its_own_is_run_again_once_its_plan_is_stale(widened, db_dsn):
    with prepared(db_dsn) as ours:
        widened.execute("ALTER TABLE widened ALTER COLUMN n TYPE bigint")
        assert ours.execute(RETURNS_A_COLUMN).fetchall() == [(1,)]
        assert ours.execute("SELECT 2").fetchall() == [(2,)]
        # psycopg prepares them afresh, with the new type.
        assert ours.execute(RETURNS_A_COLUMN, prepare=True).fetchall() == [(1,)]
        names = ours.execute("SELECT count(*) FROM pg_prepared_statements").fetchone()
        assert names == (1,)


def test_in_a_transaction_it_ends_the_transaction_as_a_lost_connection(widened, db_dsn):
    with prepared(db_dsn) as ours:
        widened.execute("ALTER TABLE widened ALTER COLUMN n TYPE bigint")
        with pytest.raises(connections.StalePreparedStatement) as raised, ours.transaction():
            ours.execute("INSERT INTO widened VALUES (2)")
            ours.execute(RETURNS_A_COLUMN)
        assert isinstance(raised.value, psycopg.OperationalError)
        assert "cached plan must not change result type" in str(raised.value)
        # The rollback dropped the prepared statements: the next run plans afresh.
        assert ours.execute(RETURNS_A_COLUMN).fetchall() == [(1,)]


def test_another_feature_not_supported_is_raised_as_it_was(db_dsn):
    with connections.connect(db_dsn, application_name="test") as ours:
        # 0A000 too, from elsewhere: not run again, not made a connection fault.
        with pytest.raises(psycopg.errors.FeatureNotSupported) as raised:
            ours.execute("SELECT count(*) FROM pg_class FOR UPDATE")
        assert not connections.stale_prepared_statement(raised.value)
        assert ours.execute("SELECT 1").fetchone() == (1,)
