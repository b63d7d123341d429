"""The connection a client call was given, checked before any statement runs.

A psycopg Connection given to an `_async` function ran the INSERT (its `execute` is
synchronous) and only then failed, on awaiting the cursor: once the caller committed, the
job existed, and a caller retrying with `enqueue` committed a duplicate. An
AsyncConnection given to a sync function failed on a coroutine never awaited; a DSN, None
or Django's `connection` on a missing attribute. Each is refused here with one line
naming what was given and what to give; the message shows the given object's type only
(a DSN may hold a password).
"""

from __future__ import annotations

from typing import Any

import psycopg

from pgworkerd.errors import WrongConnection


def checked(conn: Any, call: str) -> psycopg.Connection[Any]:
    """`conn`, if a psycopg Connection (for `call`, a sync function taking only that)."""
    if isinstance(conn, psycopg.Connection):
        return conn
    raise wrong_connection(conn, call, in_async=False, sqlalchemy=False)


def checked_async(aconn: Any, call: str) -> psycopg.AsyncConnection[Any]:
    """`aconn`, if a psycopg AsyncConnection (for `call`, an async function taking only
    that)."""
    if isinstance(aconn, psycopg.AsyncConnection):
        return aconn
    raise wrong_connection(aconn, call, in_async=True, sqlalchemy=False)


def wrong_connection(given: Any, call: str, *, in_async: bool, sqlalchemy: bool) -> WrongConnection:
    """The refusal of `given` by `call` (`sqlalchemy`: the call takes SQLAlchemy objects
    too, and says so)."""
    if in_async:
        wanted = "a psycopg AsyncConnection"
        if sqlalchemy:
            wanted += " (or a SQLAlchemy AsyncSession or AsyncConnection)"
    else:
        wanted = "a psycopg Connection"
        if sqlalchemy:
            wanted += " (or a SQLAlchemy Session or Connection)"
    hint = _hint(given, call, in_async)
    return WrongConnection(
        f"pgworkerd.{call} cannot run on {_described(given)}: give {wanted}{hint}"
    )


def _described(given: Any) -> str:
    if given is None:
        return "None"
    cls = type(given)
    return f"a {cls.__module__}.{cls.__qualname__}"


# The sync calls with an `_async` twin (the twin's name is theirs with `_async`).
_WITH_ASYNC_TWIN = frozenset({"enqueue", "enqueue_many", "chain", "batch", "wait"})


def _hint(given: Any, call: str, in_async: bool) -> str:
    if isinstance(given, psycopg.Connection) and in_async:
        return f" (a Connection goes to {call.removesuffix('_async')}, without _async)"
    if isinstance(given, psycopg.AsyncConnection) and not in_async:
        if call in _WITH_ASYNC_TWIN:
            return f" (an AsyncConnection goes to {call}_async)"
        return ""
    if isinstance(given, (str, bytes)):
        return " (a connection string: connect with psycopg first)"
    if type(given).__module__.startswith("django."):
        # Django's `connection` (a proxy) and its wrappers are not psycopg's.
        return " (in Django, enqueue with the pgworkerd.contrib.django tasks backend)"
    return ""
