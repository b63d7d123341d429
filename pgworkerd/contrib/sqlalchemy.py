"""Enqueue on a SQLAlchemy `Session`, `Connection`, `AsyncSession` or `AsyncConnection`
(extra `sqlalchemy`), or a `scoped_session` / `async_scoped_session` (Flask-SQLAlchemy's
`db.session`), which stands for its current session: the job joins that object's
transaction.

The producer asks `is_sqlalchemy` of every connection it is given; only an object of a
SQLAlchemy class (or a subclass) reaches the functions below, so SQLAlchemy is imported
only by a caller that already uses it. What they return is the psycopg connection under
the SQLAlchemy object, inside the transaction SQLAlchemy began (and will commit or roll
back): the session's own connection, never a new one.
"""

from __future__ import annotations

import sys
from typing import Any

import psycopg

from pgworkerd.errors import InvalidJob, WrongConnection

_PREFIX = "sqlalchemy."
# A tuple built once: `Connection | AsyncConnection` in the check made a union object at
# every enqueue.
_PSYCOPG_CONNECTIONS = (psycopg.Connection, psycopg.AsyncConnection)


def is_sqlalchemy(target: Any) -> bool:
    """Whether `target` is a SQLAlchemy object (by its classes' modules: nothing is
    imported to tell)."""
    if isinstance(target, _PSYCOPG_CONNECTIONS):
        return False  # the usual case, answered first
    return any(cls.__module__.startswith(_PREFIX) for cls in type(target).__mro__)


def psycopg_connection(target: Any) -> psycopg.Connection[Any]:
    """The psycopg Connection under a Session or Connection, in its transaction."""
    from sqlalchemy.engine import Connection
    from sqlalchemy.orm import Session, scoped_session

    if isinstance(target, scoped_session):
        # Flask-SQLAlchemy's db.session: the session of the current scope, the one its
        # own methods (add, commit) act on, made by its registry if the scope has none.
        target = target()
    if isinstance(target, Session):
        connection = target.connection()  # begins the session's transaction if need be
    elif isinstance(target, Connection):
        connection = target
    else:
        raise WrongConnection(_unsupported(target, "a Session or a Connection", in_async=False))
    if not connection.in_transaction():
        # As a statement of its own would: SQLAlchemy autobegins, so that the caller's
        # commit() or rollback() ends the transaction the job is in (else SQLAlchemy,
        # knowing of none, would commit nothing and the job would go at close).
        connection.begin()
    driver = connection.connection.driver_connection
    if isinstance(driver, psycopg.AsyncConnection):
        # The sync Session of AsyncSession.run_sync (or an async engine's sync_engine):
        # the right driver, but its connection is an AsyncConnection, which the sync
        # enqueue cannot run on.
        raise WrongConnection(
            "cannot enqueue with the sync enqueue on a session or connection of an async "
            f"engine ({connection.dialect.name}+{connection.dialect.driver}, as in "
            "AsyncSession.run_sync): await enqueue_async on the AsyncSession or "
            "AsyncConnection instead"
        )
    if not isinstance(driver, psycopg.Connection):
        raise InvalidJob(_wrong_driver(connection.dialect))
    return driver


async def psycopg_async_connection(target: Any) -> psycopg.AsyncConnection[Any]:
    """The psycopg AsyncConnection under an AsyncSession or AsyncConnection."""
    from sqlalchemy.ext.asyncio import AsyncConnection, AsyncSession, async_scoped_session

    if isinstance(target, async_scoped_session):
        target = target()  # the AsyncSession of the current scope, as for scoped_session
    if isinstance(target, AsyncSession):
        connection = await target.connection()
    elif isinstance(target, AsyncConnection):
        connection = target
    else:
        raise WrongConnection(
            _unsupported(target, "an AsyncSession or an AsyncConnection", in_async=True)
        )
    if not connection.in_transaction():
        await connection.begin()  # autobegin, as in psycopg_connection
    raw = await connection.get_raw_connection()
    driver = raw.driver_connection
    if not isinstance(driver, psycopg.AsyncConnection):
        raise InvalidJob(_wrong_driver(connection.dialect))
    return driver


def _unsupported(target: Any, wanted: str, *, in_async: bool) -> str:
    """The refusal, with a hint only for an object the other kind of function takes (one
    hint for both told a Session given to enqueue_async that "the _async functions take
    the async ones")."""
    if in_async:
        others = _loaded(
            ("sqlalchemy.orm", "Session"),
            ("sqlalchemy.engine", "Connection"),
            ("sqlalchemy.orm", "scoped_session"),
        )
        where = "the functions without _async: enqueue, enqueue_many"
    else:
        others = _loaded(
            ("sqlalchemy.ext.asyncio", "AsyncSession"),
            ("sqlalchemy.ext.asyncio", "AsyncConnection"),
            ("sqlalchemy.ext.asyncio", "async_scoped_session"),
        )
        where = "the _async functions: enqueue_async, enqueue_many_async"
    hint = next((f" ({c.__name__}s go to {where})" for c in others if isinstance(target, c)), "")
    return f"cannot enqueue on a SQLAlchemy {type(target).__name__}: give {wanted}{hint}"


def _loaded(*names: tuple[str, str]) -> list[type]:
    """The (module, class) named, of the modules already loaded: an object of one was made
    by its module, and the error path imports nothing (sqlalchemy.ext.asyncio needs
    greenlet, which a sync-only install may lack)."""
    found = (getattr(sys.modules.get(module), name, None) for module, name in names)
    return [cls for cls in found if isinstance(cls, type)]


def _wrong_driver(dialect: Any) -> str:
    return (
        f"cannot enqueue on a SQLAlchemy connection of driver "
        f"{dialect.name}+{dialect.driver}: pgworkerd joins psycopg 3 transactions only "
        "(a postgresql+psycopg:// URL)"
    )
