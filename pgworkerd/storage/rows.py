"""Rows read by position on a connection pgworkerd did not open. The public API runs its
statements on the caller's connection, whose row_factory may be anything (a web app's
`psycopg.connect(dsn, row_factory=dict_row)`); storage reads those rows by position (or
opens its own `conn.cursor(row_factory=dict_row)` where it reads them by name), so each
such read goes through here instead of the connection's factory."""

from __future__ import annotations

from typing import Any, TypeVar

import psycopg
from psycopg.abc import Params
from psycopg.rows import tuple_row

CursorT = TypeVar("CursorT", psycopg.Cursor[Any], psycopg.AsyncCursor[Any])


def positional(cursor: CursorT) -> CursorT:
    """`cursor`, its rows read as tuples from now on. Set after the execute, so that the
    statement still runs by `conn.execute` (one call, as tests/integration/producer_ways.py
    counts them) and no cursor is made beyond the one it returns: psycopg's setter
    rebuilds the row maker from the result already there (`tuple_row` returns `tuple`
    itself, no new object)."""
    cursor.row_factory = tuple_row
    return cursor


def execute(
    conn: psycopg.Connection[Any], query: bytes, params: Params | None = None
) -> psycopg.Cursor[Any]:
    """`conn.execute(query, params)`, its rows tuples whatever `conn`'s row_factory."""
    return positional(conn.execute(query, params))
