"""Enqueue on a SQLAlchemy `Session`, `Connection`, `AsyncSession` or `AsyncConnection`
(extra `sqlalchemy`): the job joins that object's transaction.

The producer asks `is_sqlalchemy` of every connection it is given; only an object of a
SQLAlchemy class (or a subclass) reaches the functions below, so SQLAlchemy is imported
only by a caller that already uses it. What they return is the psycopg connection under
the SQLAlchemy object, inside the transaction SQLAlchemy began (and will commit or roll
back): the session's own connection, never a new one.
"""

from __future__ import annotations

from typing import Any

import psycopg

from pgworkerd.errors import InvalidJob

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
    from sqlalchemy.orm import Session

    if isinstance(target, Session):
        connection = target.connection()  # begins the session's transaction if need be
    elif isinstance(target, Connection):
        connection = target
    else:
        raise InvalidJob(_unsupported(target, "a Session or a Connection"))
    if not connection.in_transaction():
        # As a statement of its own would: SQLAlchemy autobegins, so that the caller's
        # commit() or rollback() ends the transaction the job is in (else SQLAlchemy,
        # knowing of none, would commit nothing and the job would go at close).
        connection.begin()
    driver = connection.connection.driver_connection
    if not isinstance(driver, psycopg.Connection):
        raise InvalidJob(_wrong_driver(connection.dialect))
    return driver


async def psycopg_async_connection(target: Any) -> psycopg.AsyncConnection[Any]:
    """The psycopg AsyncConnection under an AsyncSession or AsyncConnection."""
    from sqlalchemy.ext.asyncio import AsyncConnection, AsyncSession

    if isinstance(target, AsyncSession):
        connection = await target.connection()
    elif isinstance(target, AsyncConnection):
        connection = target
    else:
        raise InvalidJob(_unsupported(target, "an AsyncSession or an AsyncConnection"))
    if not connection.in_transaction():
        await connection.begin()  # autobegin, as in psycopg_connection
    raw = await connection.get_raw_connection()
    driver = raw.driver_connection
    if not isinstance(driver, psycopg.AsyncConnection):
        raise InvalidJob(_wrong_driver(connection.dialect))
    return driver


def _unsupported(target: Any, wanted: str) -> str:
    return (
        f"cannot enqueue on a SQLAlchemy {type(target).__name__}: give {wanted} "
        "(the _async functions take the async ones)"
    )


def _wrong_driver(dialect: Any) -> str:
    return (
        f"cannot enqueue on a SQLAlchemy connection of driver "
        f"{dialect.name}+{dialect.driver}: pgworkerd joins psycopg 3 transactions only "
        "(a postgresql+psycopg:// URL)"
    )
