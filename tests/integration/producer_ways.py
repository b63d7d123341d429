"""The two ways of calling the producer that tests/integration/test_producer.py runs
every case both ways with: on a psycopg Connection (`enqueue`, `enqueue_many`, `chain`,
`batch`) and on an AsyncConnection (their `_async` twins).

The async way runs its connections on an event loop in a thread of its own and
blocks the calling thread on each call, so a test reads the same either way. That
loop keeps running while a test thread waits: an async enqueue stuck behind another
transaction's lock must leave the loop free to commit that transaction.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Iterator
from contextlib import AbstractAsyncContextManager, contextmanager
from typing import Any, TypeVar
from unittest import mock

import psycopg

import pgworkerd
from pgworkerd import Producer

T = TypeVar("T")
CALL_TIMEOUT_S = 60


class SyncWay:
    """`pgworkerd.enqueue` and `enqueue_many` (or a Producer's) on a Connection."""

    name = "sync"

    @contextmanager
    def connect(self, dsn: str, **kwargs: Any) -> Iterator[psycopg.Connection[Any]]:
        with psycopg.connect(dsn, **kwargs) as conn:
            yield conn

    def enqueue(
        self, conn: Any, kind: Any, payload: Any, *, producer: Producer | None = None, **opts: Any
    ) -> int:
        return (producer or pgworkerd).enqueue(conn, kind, payload, **opts)

    def enqueue_many(self, conn: Any, jobs: Any) -> list[int]:
        return pgworkerd.enqueue_many(conn, jobs)

    def chain(self, conn: Any, jobs: Any) -> list[int]:
        return pgworkerd.chain(conn, jobs)

    def batch(self, conn: Any, jobs: Any, then: Any) -> tuple[list[int], int]:
        return pgworkerd.batch(conn, jobs, then=then)

    def fetch_all(self, conn: Any, query: str) -> list[Any]:
        """`query`'s rows, run on the producer's connection `conn`."""
        rows: list[Any] = conn.execute(query).fetchall()
        return rows

    def count_statements(self) -> Any:
        """A mock counting the statements producer calls run, while in its `with`: on
        the cursor, where `conn.execute` runs them and the barest enqueue's kept cursor
        (storage/kept_cursor.py) too."""
        real = psycopg.Cursor.execute
        return mock.patch.object(psycopg.Cursor, "execute", autospec=True, side_effect=real)


class AsyncWay:
    """`pgworkerd.enqueue_async` and `enqueue_many_async` (or a Producer's) on an
    AsyncConnection, wrapped in a `BlockingConnection`."""

    name = "async"

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name="async-way")
        self._thread.start()

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join()
        self.loop.close()

    def call(self, awaitable: Awaitable[T]) -> T:
        """Run `awaitable` on the loop and wait for its result in this thread."""

        async def run() -> T:
            return await awaitable

        return asyncio.run_coroutine_threadsafe(run(), self.loop).result(CALL_TIMEOUT_S)

    @contextmanager
    def enter(self, manager: AbstractAsyncContextManager[T]) -> Iterator[T]:
        """`async with manager`, from this thread."""
        value = self.call(manager.__aenter__())
        try:
            yield value
        except BaseException as exc:
            if not self.call(manager.__aexit__(type(exc), exc, exc.__traceback__)):
                raise
        else:
            self.call(manager.__aexit__(None, None, None))

    @contextmanager
    def connect(self, dsn: str, **kwargs: Any) -> Iterator[BlockingConnection]:
        aconn = self.call(psycopg.AsyncConnection.connect(dsn, **kwargs))
        with self.enter(aconn):
            yield BlockingConnection(self, aconn)

    def enqueue(
        self, conn: Any, kind: Any, payload: Any, *, producer: Producer | None = None, **opts: Any
    ) -> int:
        job_id: int = self.call(
            (producer or pgworkerd).enqueue_async(conn.aconn, kind, payload, **opts)
        )
        return job_id

    def enqueue_many(self, conn: Any, jobs: Any) -> list[int]:
        return self.call(pgworkerd.enqueue_many_async(conn.aconn, jobs))

    def chain(self, conn: Any, jobs: Any) -> list[int]:
        return self.call(pgworkerd.chain_async(conn.aconn, jobs))

    def batch(self, conn: Any, jobs: Any, then: Any) -> tuple[list[int], int]:
        return self.call(pgworkerd.batch_async(conn.aconn, jobs, then=then))

    def fetch_all(self, conn: Any, query: str) -> list[Any]:
        async def rows() -> list[Any]:
            cursor = await conn.aconn.execute(query)
            return await cursor.fetchall()

        return self.call(rows())

    def count_statements(self) -> Any:
        real = psycopg.AsyncCursor.execute
        return mock.patch.object(psycopg.AsyncCursor, "execute", autospec=True, side_effect=real)


class BlockingConnection:
    """The part of a Connection's interface the tests use, on an AsyncConnection."""

    def __init__(self, way: AsyncWay, aconn: psycopg.AsyncConnection[Any]) -> None:
        self.way = way
        self.aconn = aconn

    @property
    def info(self) -> psycopg.ConnectionInfo:
        return self.aconn.info

    def commit(self) -> None:
        self.way.call(self.aconn.commit())

    def rollback(self) -> None:
        self.way.call(self.aconn.rollback())

    def transaction(self, **kwargs: Any) -> Any:
        return self.way.enter(self.aconn.transaction(**kwargs))
