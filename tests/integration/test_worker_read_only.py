"""A worker's connect to a server that takes no writes (a standby, a node a failover
left us on: here `default_transaction_read_only` on the database) fails in its warm-up
(JobStore.warm), not at the connect itself: the log names the cause once, and the
worker retries with its connect backoff as for any connection fault (docs/faults.md,
"Read-only database after failover"; tests/process/test_faults.py, s21)."""

from __future__ import annotations

import logging
import os
from typing import Any

import psycopg
import pytest
from psycopg import sql

from pgworkerd.storage.store import JobStore
from tests.integration.test_worker_warm import worker_connection


def test_a_read_only_server_is_named_once_and_retried_with_backoff(
    conn: psycopg.Connection[Any], db_dsn: str, caplog: pytest.LogCaptureFixture
) -> None:
    database = sql.Identifier(conn.info.dbname)
    conn.execute(
        sql.SQL("ALTER DATABASE {} SET default_transaction_read_only = on").format(database)
    )
    read_fd, write_fd = os.pipe()
    attempts = 3
    asked: list[bool] = []

    def stopping() -> bool:  # asked once after each failed attempt: stop after the third
        asked.append(True)
        return len(asked) >= attempts

    try:
        with (
            caplog.at_level(logging.DEBUG, logger="pgworkerd.worker"),
            worker_connection(db_dsn, JobStore(), wake_fd=read_fd, stopping=stopping) as connection,
            pytest.raises(psycopg.errors.ReadOnlySqlTransaction),
        ):
            connection.get()
    finally:
        conn.execute(
            sql.SQL("ALTER DATABASE {} RESET default_transaction_read_only").format(database)
        )
        os.close(read_fd)
        os.close(write_fd)
    faults = [r for r in caplog.records if "retrying" in r.getMessage()]
    assert len(faults) == attempts  # each attempt failed and was retried, as before
    assert [r.levelno for r in faults] == [logging.WARNING] + [logging.DEBUG] * (attempts - 1)
    assert all("read-only" in r.getMessage() for r in faults)
    assert not any("unreachable" in r.getMessage() for r in caplog.records)
    with worker_connection(db_dsn, JobStore()) as connection:  # writable again: it connects
        assert not connection.get().closed
