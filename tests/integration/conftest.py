"""Fixtures of the integration tier: the million-row table of the claim-plan tests; the
producer's two ways (sync, async) and their connection, for test_producer and
test_uniqueness_modes."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from psycopg.conninfo import make_conninfo

import pgworkerd
from tests.conftest import _create_database, _drop_database
from tests.integration.producer_ways import AsyncWay, SyncWay


def fill_finished_and_future(conn: psycopg.Connection[Any]) -> None:
    """A million finished jobs, a million scheduled a day ahead, 20 ready; analysed."""
    conn.execute("""
        INSERT INTO pgworkerd.jobs (queue, kind, payload, state, attempt, max_attempts,
                                    finished_at)
        SELECT 'default', 'k', '{}', 'succeeded', 1, 5, now()
        FROM generate_series(1, 1000000)""")
    conn.execute("""
        INSERT INTO pgworkerd.jobs (queue, kind, payload, run_at)
        SELECT 'default', 'k', '{}', now() + interval '1 day'
        FROM generate_series(1, 1000000)""")
    pgworkerd.enqueue_many(conn, [{"kind": "k", "payload": {}} for _ in range(20)])
    conn.execute("VACUUM ANALYZE pgworkerd.jobs")


@pytest.fixture(scope="session")
def _finished_and_future_template(pg_admin_dsn: str, template_db: str) -> Iterator[str]:
    """A database filled by fill_finished_and_future once per session (~10 s), for
    test_claim_plan's and test_claim_one's tests of it to copy."""
    name = f"pgworkerd_million_{uuid.uuid4().hex[:8]}"
    _create_database(pg_admin_dsn, name, template_db)
    with psycopg.connect(make_conninfo(pg_admin_dsn, dbname=name), autocommit=True) as conn:
        fill_finished_and_future(conn)
    yield name
    _drop_database(pg_admin_dsn, name)


@pytest.fixture
def finished_and_future_conn(
    pg_admin_dsn: str, _finished_and_future_template: str
) -> Iterator[psycopg.Connection[Any]]:
    """An autocommit connection to a database of the test's own holding
    fill_finished_and_future's rows: a file copy of the session's filled database
    (heap, indexes, visibility map and statistics as the fill left them), in ~1 s."""
    name = f"pgworkerd_test_{uuid.uuid4().hex[:12]}"
    _create_database(pg_admin_dsn, name, _finished_and_future_template, "FILE_COPY")
    try:
        with psycopg.connect(make_conninfo(pg_admin_dsn, dbname=name), autocommit=True) as conn:
            # The fill's last step again, on this connection: its first statements
            # would otherwise count the catalog pages a new backend reads into its caches
            # (75 of the 104 pages claim_one's first EXPLAIN showed; 29 after the fill).
            conn.execute("VACUUM ANALYZE pgworkerd.jobs")
            yield conn
    finally:
        _drop_database(pg_admin_dsn, name)


@pytest.fixture(params=["sync", "async"])
def way(request: pytest.FixtureRequest) -> Iterator[SyncWay | AsyncWay]:
    """How the test calls the producer: see producer_ways.py."""
    if request.param == "sync":
        yield SyncWay()
        return
    async_way = AsyncWay()
    try:
        yield async_way
    finally:
        async_way.close()


@pytest.fixture
def pconn(way: SyncWay | AsyncWay, db_dsn: str) -> Iterator[Any]:
    """An autocommit connection of `way` to the test's database, for the producer
    calls; the `conn` fixture checks what they did."""
    with way.connect(db_dsn, autocommit=True) as connection:
        yield connection
