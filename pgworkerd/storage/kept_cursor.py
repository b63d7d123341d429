"""The cursor enqueue's barest call keeps with the caller's connection
(bench/results/enqueue-one-round10-20261128.md; docs/design.md, "Producer API").

`conn.execute` makes a new psycopg cursor at each call: its AdaptersMap copy and its
Transformer are ~38,000 client instructions of a ~105,000-instruction insert. The
barest enqueue (`JobInserts.insert_bare`) instead runs on a cursor kept in a plain dict on
the connection object, keyed by `threading.get_ident()`:

- one per connection and thread, so two threads on one Connection never share one
  (the lock psycopg takes is the connection's, and a cursor's result is read after it
  is released);
- taken out of the dict while in use and put back only after the caller's id is read
  (`run_on_kept_cursor`): a second call on the same thread while the first is between
  its execute and its read (a signal handler, a finaliser) finds none and makes its
  own, and so do the asyncio tasks of one AsyncConnection, which share a thread;
- not a `threading.local` (its per-thread dicts hang off the thread state, out of the
  cycle GC's sight, so a connection dropped unclosed would live, open, as long as the
  thread) nor a WeakKeyDictionary (its value, the cursor, holds its key alive). The
  price is a cycle, connection -> dict -> cursor -> connection: a connection dropped
  without close() is freed, and its session ended, at the next cycle collection
  instead of at once (tests/integration/test_kept_cursor.py);
- made with `row_factory=tuple_row`: the caller reads only the id, from the result's
  text, so the connection's row_factory (then or later) is never called;
- keeping the adapters the connection had when it was made (psycopg copies them into
  each cursor): a dumper registered on the connection later is not used for the
  three str parameters (queue, kind, payload JSON) of that thread's barest enqueues;
- kept with the client_encoding it was made under, and replaced when the connection's
  differs: psycopg keeps a cursor's Transformer, and the str dumpers it cached with
  the encoding of their making, while the same query object runs again, so a kept
  cursor would send text in the old encoding after a `SET client_encoding`;
- holding its last query's dumped parameters (the payload JSON) and result until this
  thread's next barest enqueue on the connection (psycopg has no public way to drop
  them but closing the cursor): at most MAX_CURSORS payloads per connection.

A connection that is not OK (closed, broken) or is in pipeline mode takes
`conn.execute` as before, with its errors as before; in pipeline mode the call then
waits for its own result with a fetch (psycopg's fetch methods sync the pipeline; its
`pgresult` alone is None until then).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from threading import get_ident
from typing import Any, TypeVar

import psycopg
from psycopg.pq import ConnStatus
from psycopg.rows import tuple_row

from pgworkerd.storage.rows import statement_rows, statement_rows_async

T = TypeVar("T")
OK = ConnStatus.OK
# The attribute, on the connection object, of the dict {thread id: (cursor, encoding)}.
CURSORS = "_pgworkerd_kept_cursors"
# Thread ids are reused as threads come and go; a connection shared by more threads than
# this starts its dict afresh rather than grow it without bound.
MAX_CURSORS = 64
ENCODING = b"client_encoding"


def run_on_kept_cursor(
    conn: psycopg.Connection[Any],
    query: bytes,
    params: Sequence[Any],
    read: Callable[[psycopg.Cursor[Any]], T],
) -> T:
    """`read(conn.execute(query, params))`, on the cursor this thread keeps with `conn`."""
    pgconn = conn.pgconn
    if pgconn.status != OK or pgconn.pipeline_status:
        cursor = conn.execute(query, params)  # as before: the same errors
        statement_rows(cursor)  # in pipeline mode, waits for the result
        return read(cursor)
    key = get_ident()
    encoding = pgconn.parameter_status(ENCODING)
    try:
        cursor, made_under = conn.__dict__[CURSORS].pop(key)
    except KeyError:  # no dict yet, or no cursor of this thread's in it
        cursor, made_under = _new_cursor(conn), encoding
    if made_under != encoding:  # a SET client_encoding since it was made
        cursor = _new_cursor(conn)
    value = read(cursor.execute(query, params))
    # Only now may another call of this thread have it.
    conn.__dict__[CURSORS][key] = (cursor, encoding)
    return value


async def run_on_kept_cursor_async(
    aconn: psycopg.AsyncConnection[Any],
    query: bytes,
    params: Sequence[Any],
    read: Callable[[psycopg.AsyncCursor[Any]], T],
) -> T:
    """`run_on_kept_cursor` on an AsyncConnection: its tasks share a thread, and one
    task's cursor is out of the dict from before its execute until its id is read."""
    pgconn = aconn.pgconn
    if pgconn.status != OK or pgconn.pipeline_status:
        cursor = await aconn.execute(query, params)
        await statement_rows_async(cursor)
        return read(cursor)
    key = get_ident()
    encoding = pgconn.parameter_status(ENCODING)
    try:
        cursor, made_under = aconn.__dict__[CURSORS].pop(key)
    except KeyError:
        cursor, made_under = _new_cursor(aconn), encoding
    if made_under != encoding:
        cursor = _new_cursor(aconn)
    value = read(await cursor.execute(query, params))
    aconn.__dict__[CURSORS][key] = (cursor, encoding)
    return value


def _new_cursor(conn: Any) -> Any:
    """A new cursor for this thread, its dict made if need be (the caller puts it in)."""
    cursors: dict[int, tuple[Any, bytes | None]] = conn.__dict__.setdefault(CURSORS, {})
    if len(cursors) >= MAX_CURSORS:
        cursors.clear()
    return conn.cursor(row_factory=tuple_row)
