"""Rows read by position on a connection pgworkerd did not open. The public API (and
pgworkerd.testing) runs its statements on the caller's connection, whose row_factory may
be anything (a web app's `psycopg.connect(dsn, row_factory=dict_row)`); storage reads
those rows by position (or opens its own `conn.cursor(row_factory=dict_row)` where it
reads them by name), so each such read goes through here, never through the
connection's factory."""

from __future__ import annotations

from typing import Any, TypeVar

import psycopg
from psycopg.abc import Params
from psycopg.rows import TupleRow, tuple_row

CursorT = TypeVar("CursorT", psycopg.Cursor[Any], psycopg.AsyncCursor[Any])


def execute(
    conn: psycopg.Connection[Any], query: bytes, params: Params | None = None
) -> psycopg.Cursor[TupleRow]:
    """`conn.execute(query, params)`, its rows tuples whatever `conn`'s row_factory: on a
    cursor made with `tuple_row`, as `conn.execute` makes one with the connection's (so
    no more objects and no more cost), and the connection's factory is never called (a
    `namedtuple_row` refuses a statement that returns two columns of the same name)."""
    return conn.cursor(row_factory=tuple_row).execute(query, params)


def positional(cursor: CursorT) -> CursorT:
    """`cursor` (a producer's or a wait's `Statement`, run by `conn.execute`), its rows
    read as tuples from now on. Set after the execute, so that those statements are still
    one `conn.execute` each (tests/integration/producer_ways.py counts them): psycopg's
    setter rebuilds the row maker from the result already there, and `tuple_row` returns
    `tuple` itself, no new object (~0.2 us a call; skipped on a connection already on
    `tuple_row`). Their columns have distinct names, which the connection's factory,
    called by the execute, may require."""
    if cursor.row_factory is not tuple_row:
        cursor.row_factory = tuple_row
    return cursor
