"""Enqueue on SQLAlchemy objects (contrib/sqlalchemy.py) against a real server: a sync and
an async Session and Connection on the psycopg driver join their transaction (commit
keeps the job, rollback leaves none); other drivers are refused in one line; SQLAlchemy
is imported only by a caller that passes one of its objects."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from typing import Any

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict
from sqlalchemy import create_engine, text
from sqlalchemy.ext.asyncio import AsyncSession, create_async_engine
from sqlalchemy.orm import Session

import pgworkerd
from pgworkerd.storage.store import JobStore
from tests.daemon import REPO
from tests.tasks import shop


def sqlalchemy_url(dsn: str, driver: str = "psycopg") -> str:
    parts = conninfo_to_dict(dsn)
    return (
        f"postgresql+{driver}://{parts['user']}@{parts['host']}:{parts['port']}/{parts['dbname']}"
    )


def count_jobs(conn: psycopg.Connection[Any]) -> int:
    return conn.execute("SELECT count(*) FROM pgworkerd.jobs").fetchone()[0]


class AppSession(Session):
    """An application's own Session class: still a SQLAlchemy object."""


@pytest.fixture
def engine(db_dsn):
    engine = create_engine(sqlalchemy_url(db_dsn))
    yield engine
    engine.dispose()


def test_a_session_carries_the_job_in_its_transaction(engine, conn):
    with AppSession(engine) as session:
        session.execute(text("CREATE TABLE orders (id int)"))
        session.execute(text("INSERT INTO orders VALUES (1)"))
        job_id = pgworkerd.enqueue(session, "ship", {"order": 1})
        ids = pgworkerd.enqueue_many(session, [{"kind": "bill", "payload": {"order": 1}}])
        task_id = shop.send_receipt.enqueue(session, {"to": "x"})
        # Not yet visible outside the session's transaction.
        assert count_jobs(conn) == 0
        session.commit()
    assert {JobStore().get(conn, i)["kind"] for i in (job_id, *ids, task_id)} == {
        "ship",
        "bill",
        "tests.tasks.shop.send_receipt",
    }
    assert conn.execute("SELECT count(*) FROM orders").fetchone()[0] == 1


def test_a_session_rolled_back_leaves_no_job(engine, conn):
    with Session(engine) as session:
        pgworkerd.enqueue(session, "ship", {"order": 2})
        session.rollback()
        # The session goes on in a new transaction, which commits this one.
        pgworkerd.enqueue(session, "ship", {"order": 3})
        session.commit()
    rows = conn.execute("SELECT payload FROM pgworkerd.jobs").fetchall()
    assert rows == [({"order": 3},)]


def test_a_connection_in_a_begin_block(engine, conn):
    with engine.connect() as connection:
        with connection.begin():
            pgworkerd.enqueue(connection, "ship", {"order": 4})
        transaction = connection.begin()
        pgworkerd.enqueue(connection, "ship", {"order": 5})
        transaction.rollback()
    rows = conn.execute("SELECT payload FROM pgworkerd.jobs").fetchall()
    assert rows == [({"order": 4},)]


def test_async_session_and_connection(db_dsn, conn):
    async def produce() -> list[int]:
        engine = create_async_engine(sqlalchemy_url(db_dsn))
        try:
            async with AsyncSession(engine) as session:
                kept = await pgworkerd.enqueue_async(session, "ship", {"order": 6})
                many = await pgworkerd.enqueue_many_async(
                    session, [{"kind": "bill", "payload": {"order": 6}}]
                )
                await session.commit()
            async with AsyncSession(engine) as session:
                await shop.send_receipt.enqueue_async(session, {"to": "dropped"})
                await session.rollback()
            async with engine.connect() as connection:
                await pgworkerd.enqueue_async(connection, "dropped", {})
                await connection.rollback()
                other = await pgworkerd.enqueue_async(connection, "ship", {"order": 7})
                await connection.commit()
            return [kept, *many, other]
        finally:
            await engine.dispose()

    ids = asyncio.run(produce())
    rows = conn.execute("SELECT id, kind FROM pgworkerd.jobs ORDER BY id").fetchall()
    assert rows == list(zip(ids, ["ship", "bill", "ship"], strict=True))


def test_another_driver_is_refused_in_one_line(tmp_path):
    engine = create_engine(f"sqlite:///{tmp_path / 'app.db'}")
    with Session(engine) as session, pytest.raises(pgworkerd.InvalidJob) as caught:
        pgworkerd.enqueue(session, "ship", {})
    message = str(caught.value)
    assert "\n" not in message
    assert "driver sqlite+pysqlite" in message and "postgresql+psycopg://" in message
    engine.dispose()


def test_a_sync_session_given_to_the_async_function_is_refused(engine):
    async def produce() -> None:
        with Session(engine) as session:
            await pgworkerd.enqueue_async(session, "ship", {})

    with pytest.raises(pgworkerd.InvalidJob) as caught:
        asyncio.run(produce())
    # The hint points the way this object goes: it said "the _async functions take the
    # async ones", the way back, to a Session given to enqueue_async.
    assert str(caught.value) == (
        "cannot enqueue on a SQLAlchemy Session: give an AsyncSession or an AsyncConnection"
        " (Sessions go to the functions without _async: enqueue, enqueue_many)"
    )


def test_an_async_session_given_to_the_sync_function_is_refused(db_dsn):
    async def produce() -> None:
        engine = create_async_engine(sqlalchemy_url(db_dsn))
        try:
            async with AsyncSession(engine) as session:
                pgworkerd.enqueue(session, "ship", {})
        finally:
            await engine.dispose()

    with pytest.raises(pgworkerd.InvalidJob) as caught:
        asyncio.run(produce())
    assert str(caught.value) == (
        "cannot enqueue on a SQLAlchemy AsyncSession: give a Session or a Connection"
        " (AsyncSessions go to the _async functions: enqueue_async, enqueue_many_async)"
    )


def test_an_engine_is_refused_with_no_hint_to_the_other_functions(engine):
    """Neither kind of function takes it: pointing at the other would mislead."""
    with pytest.raises(pgworkerd.InvalidJob) as caught:
        pgworkerd.enqueue(engine, "ship", {})
    assert str(caught.value) == (
        "cannot enqueue on a SQLAlchemy Engine: give a Session or a Connection"
    )


def test_sqlalchemy_is_not_imported_for_a_psycopg_connection(db_dsn):
    script = (
        "import sys, psycopg, pgworkerd\n"
        f"with psycopg.connect({db_dsn!r}) as conn:\n"
        "    pgworkerd.enqueue(conn, 'k', {})\n"
        "assert 'sqlalchemy' not in sys.modules, 'sqlalchemy was imported'\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr


def test_a_connection_in_commit_as_you_go_style(engine, conn):
    with engine.connect() as connection:
        pgworkerd.enqueue(connection, "ship", {"order": 8})
        connection.commit()
        pgworkerd.enqueue(connection, "ship", {"order": 9})
        connection.rollback()
        pgworkerd.enqueue(connection, "ship", {"order": 10})
    # Closed without a commit: SQLAlchemy rolls the last one back.
    rows = conn.execute("SELECT payload FROM pgworkerd.jobs").fetchall()
    assert rows == [({"order": 8},)]


def test_a_scoped_session_enqueues_in_its_current_session(engine, conn):
    """Flask-SQLAlchemy's db.session is a scoped_session: it was refused ("give a
    Session or a Connection"). The job joins the current session's transaction."""
    from sqlalchemy.orm import scoped_session, sessionmaker

    scoped = scoped_session(sessionmaker(engine))
    try:
        pgworkerd.enqueue(scoped, "dropped", {})
        assert scoped.execute(text("SELECT count(*) FROM pgworkerd.jobs")).scalar() == 1
        scoped.rollback()
        kept = pgworkerd.enqueue(scoped, "ship", {"order": 8})
        many = pgworkerd.enqueue_many(scoped, [{"kind": "bill", "payload": {}}])
        assert count_jobs(conn) == 0  # not committed yet
        scoped.commit()
    finally:
        scoped.remove()
    rows = conn.execute("SELECT id, kind FROM pgworkerd.jobs ORDER BY id").fetchall()
    assert rows == [(kept, "ship"), (many[0], "bill")]


def test_an_async_scoped_session_enqueues_in_its_current_session(db_dsn, conn):
    from sqlalchemy.ext.asyncio import async_scoped_session, async_sessionmaker

    async def produce() -> int:
        engine = create_async_engine(sqlalchemy_url(db_dsn))
        scoped = async_scoped_session(async_sessionmaker(engine), scopefunc=asyncio.current_task)
        try:
            await pgworkerd.enqueue_async(scoped, "dropped", {})
            await scoped.rollback()
            kept = await pgworkerd.enqueue_async(scoped, "ship", {"order": 9})
            await scoped.commit()
            return kept
        finally:
            await scoped.remove()
            await engine.dispose()

    kept = asyncio.run(produce())
    assert conn.execute("SELECT id, kind FROM pgworkerd.jobs").fetchall() == [(kept, "ship")]


def test_the_sync_enqueue_in_run_sync_of_an_async_session_says_what_is_wrong(db_dsn, conn):
    """It said the driver was wrong and to use a postgresql+psycopg:// URL: the one in use."""

    async def produce() -> None:
        engine = create_async_engine(sqlalchemy_url(db_dsn))
        try:
            async with AsyncSession(engine) as session:
                await session.run_sync(lambda sync: pgworkerd.enqueue(sync, "ship", {}))
        finally:
            await engine.dispose()

    with pytest.raises(pgworkerd.InvalidJob) as caught:
        asyncio.run(produce())
    assert str(caught.value) == (
        "cannot enqueue with the sync enqueue on a session or connection of an async engine "
        "(postgresql+psycopg, as in AsyncSession.run_sync): await enqueue_async on the "
        "AsyncSession or AsyncConnection instead"
    )
    assert count_jobs(conn) == 0
