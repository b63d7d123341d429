"""Rows read by position on a connection pgworkerd did not open. The public API (and
pgworkerd.testing) runs its statements on the caller's connection, whose row_factory may
be anything (a web app's `psycopg.connect(dsn, row_factory=dict_row)`); storage reads
those rows by position (or opens its own `conn.cursor(row_factory=dict_row)` where it
reads them by name), so each such read goes through here, never through the
connection's factory. `Statement` is such a read written once for a Connection and an
AsyncConnection alike (the producer's inserts, the waits)."""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Generic, NamedTuple, TypeVar

import psycopg
from psycopg.abc import Params
from psycopg.pq import ExecStatus
from psycopg.rows import RowMaker, TupleRow, namedtuple_row, tuple_row

CursorT = TypeVar("CursorT", psycopg.Cursor[Any], psycopg.AsyncCursor[Any])
TUPLES_OK = ExecStatus.TUPLES_OK
COMMAND_OK = ExecStatus.COMMAND_OK


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


def statement_rows(cursor: psycopg.Cursor[Any]) -> list[Any]:
    """The rows, as tuples, of the statement `cursor` has just run, in or out of pipeline
    mode; [] for a statement without rows (LISTEN). In pipeline mode the result is not
    there yet (`pgresult` is None): psycopg's fetch waits for it (it syncs the
    pipeline)."""
    try:
        return positional(cursor).fetchall() if _may_have_rows(cursor) else []
    except psycopg.ProgrammingError as exc:
        return _no_rows_or_raise(cursor, exc)


async def statement_rows_async(cursor: psycopg.AsyncCursor[Any]) -> list[Any]:
    """`statement_rows` for an AsyncCursor."""
    try:
        return await positional(cursor).fetchall() if _may_have_rows(cursor) else []
    except psycopg.ProgrammingError as exc:
        return _no_rows_or_raise(cursor, exc)


def _may_have_rows(cursor: psycopg.Cursor[Any] | psycopg.AsyncCursor[Any]) -> bool:
    """Whether there are rows to fetch: the statement returned some, or its result is
    still to come (pipeline mode). A statement without rows has none, and fetchall
    would raise. Read from the result's status, not from `cursor.description`, which
    builds a Column per column, each looking its type up, at every access (24 us an
    enqueue under cProfile)."""
    result = cursor.pgresult
    return result is None or result.status == TUPLES_OK


def _no_rows_or_raise(
    cursor: psycopg.Cursor[Any] | psycopg.AsyncCursor[Any], exc: psycopg.ProgrammingError
) -> list[Any]:
    """[] when the fetch of a pipelined statement raised only because the statement
    succeeded without rows (LISTEN: its result, fetched now, is COMMAND_OK); `exc` for
    any other cause."""
    result = cursor.pgresult
    if result is not None and result.status == COMMAND_OK:
        return []
    raise exc


T = TypeVar("T")


@dataclass(slots=True)  # not frozen: that would triple the cost of making one per enqueue
class Statement(Generic[T]):
    """A statement, its parameters and the decoding of its rows, written once; `run`
    and `run_async` are the only lines that differ between a Connection and an
    AsyncConnection, so the producer's sync and async API share everything else."""

    query: bytes
    # named (`%(x)s`) or positional (`%s`); None for a statement without (queries.py)
    params: Mapping[str, Any] | Sequence[Any] | None
    decode: Callable[[list[Any]], T]

    def run(self, conn: psycopg.Connection[Any]) -> T:
        return self.decode(statement_rows(conn.execute(self.query, self.params)))

    async def run_async(self, aconn: psycopg.AsyncConnection[Any]) -> T:
        return self.decode(await statement_rows_async(await aconn.execute(self.query, self.params)))


def c_namedtuple_row(cursor: psycopg.Cursor[Any]) -> RowMaker[NamedTuple]:
    """psycopg's `namedtuple_row` (the same class per set of column names, the same
    rows), each row made by `tuple.__new__` of the class, a C call, not by its
    `_make`, a Python one per row (the claim's rows: one per claimed job). A result
    without rows keeps psycopg's maker."""
    maker = namedtuple_row(cursor)
    row_class = getattr(maker, "__self__", None)  # `_make` is bound to its class
    if not isinstance(row_class, type):
        return maker
    return functools.partial(tuple.__new__, row_class)
