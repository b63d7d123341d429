"""The producer's statements: every way a job goes into the jobs table of one schema, as
a `Statement` (or, for enqueue's barest call, run at once on a kept cursor).

Apart from `storage/store.py` (the lease life cycle and the rest of a job's
transitions): an application that enqueues loads this module, the statements' loader
and the row helpers, and none of the claim, completion or handler side (`pgworkerd.job`,
its progress reporting, the limits), which a web process would otherwise load on its
first enqueue (bench/results/first-call-round14-20261128.md).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator, Mapping
from contextlib import asynccontextmanager, contextmanager
from typing import Any, NamedTuple

import psycopg
from psycopg import sql

from pgworkerd.storage import queries
from pgworkerd.storage.channels import notify_channel
from pgworkerd.storage.kept_cursor import run_on_kept_cursor, run_on_kept_cursor_async
from pgworkerd.storage.rows import Statement

DEFAULT_SCHEMA = "pgworkerd"


class JobInserts:
    """The inserts into the jobs table of one schema."""

    def __init__(self, schema: str = DEFAULT_SCHEMA) -> None:
        self.schema = schema
        self._sql = queries.statements(schema)
        self.notify_channel = notify_channel(schema)
        # The identity sequence, quoted for a ::regclass cast.
        self._sequence = f"{_quote_ident(schema)}.jobs_id_seq"

    def insert_statement(
        self, records_json: str, *, unique_keys: bool = True
    ) -> Statement[list[int | None]]:
        """Insert jobs, given as a JSON array of records (see `jobs_insert`), in one
        statement; ids in input order. An id is None where the job's unique_key is held
        by a live job: see `find_live_statement`. `unique_keys=False` promises that no
        record has one, for the cheaper statement."""
        params = {
            "sequence": self._sequence,
            "channel": self.notify_channel,
            "jobs": records_json,
        }
        statement = "jobs_insert" if unique_keys else "jobs_insert_without_unique_keys"
        return Statement(self._sql[statement], params, _ids_or_none)

    def insert_one_statement(
        self, record: Mapping[str, Any], payload_json: str, trace_context_json: str | None
    ) -> Statement[list[int]]:
        """`insert_statement(unique_keys=False)` for one job: its record (as
        `jobs_insert` reads it, without a unique_key), with its payload and trace context
        already JSON text. The cheaper statement of enqueue's usual call: its parameters
        positional, in `jobs_insert_one`'s order (the record is not encoded as one JSON
        document, and psycopg looks no names up)."""
        get = record.get
        params = (
            record["queue"],
            record["kind"],
            payload_json,
            get("priority"),
            get("run_at"),
            get("delay_s"),
            get("max_attempts"),
            get("max_runtime_s"),
            trace_context_json,
            get("key"),
        )
        return Statement(self._sql["jobs_insert_one"], params, _only_id)

    def insert_bare(
        self, conn: psycopg.Connection[Any], queue: str, kind: str, payload_json: str
    ) -> int:
        """Insert a job given only its queue, kind and payload (JSON text), as
        `insert_one_statement` would with no other option; its id. Run here, without a
        `Statement` around it: enqueue's barest call (`Producer.enqueue`), on the cursor
        this thread keeps with `conn` (storage/kept_cursor.py)."""
        params = (queue, kind, payload_json)
        return run_on_kept_cursor(conn, self._sql["jobs_insert_bare"], params, _returned_id)

    async def insert_bare_async(
        self, aconn: psycopg.AsyncConnection[Any], queue: str, kind: str, payload_json: str
    ) -> int:
        """`insert_bare` on an AsyncConnection."""
        query, params = self._sql["jobs_insert_bare"], (queue, kind, payload_json)
        return await run_on_kept_cursor_async(aconn, query, params, _returned_id)

    def insert_after_statement(self, records_json: str) -> Statement[AfterInsert]:
        """Insert jobs that each run after the jobs of their record's `after` (a JSON
        array of records, see `jobs_insert_after`), in one statement: their ids in input
        order, or none and the first job (by position) that names ids which do not
        exist, with those ids."""
        params = {
            "sequence": self._sequence,
            "channel": self.notify_channel,
            "jobs": records_json,
        }
        return Statement(self._sql["jobs_insert_after"], params, _after_insert)

    def find_live_statement(self, unique_key: str) -> Statement[int | None]:
        """The id of the queued or running job holding `unique_key`, if any."""
        query = self._sql["jobs_find_live_by_unique_key"]
        return Statement(query, {"unique_key": unique_key}, _first_id)

    def throttled_statement(self, record_json: str) -> Statement[int]:
        """Insert one job with `throttle` (its record, with throttle_s, as a JSON array of
        one): the id of the job created in the key's current window, this one or an
        earlier one (`jobs_insert_throttled`)."""
        return Statement(self._sql["jobs_insert_throttled"], self._one_job(record_json), _id)

    def debounced_statement(self, record_json: str) -> Statement[tuple[int, bool]]:
        """Take the key's slot for one job with `debounce` (`jobs_insert_debounced`):
        (the slot's job id, whether this statement created it). Not created: run
        `debounce_fold_statement` next, in the same transaction."""
        query = self._sql["jobs_insert_debounced"]
        return Statement(query, self._one_job(record_json), _id_and_created)

    def debounce_fold_statement(self, record_json: str, target: int) -> Statement[int]:
        """Fold the job into the slot's job `target` if still queued, else make a new
        one; its id (`jobs_debounce_fold`)."""
        params = {**self._one_job(record_json), "target": target}
        return Statement(self._sql["jobs_debounce_fold"], params, _id)

    def _one_job(self, record_json: str) -> dict[str, Any]:
        return {"sequence": self._sequence, "channel": self.notify_channel, "jobs": record_json}


def _quote_ident(name: str) -> str:
    return sql.Identifier(name).as_string(None)


def _ids_or_none(rows: list[Any]) -> list[int | None]:
    return [None if left_out else job_id for job_id, left_out in rows]


def _returned_id(cursor: psycopg.Cursor[Any] | psycopg.AsyncCursor[Any]) -> int:
    """The id in the first column of the one row a statement returned, read from the
    result's text (`conn.execute` and the kept cursor are text cursors) without
    psycopg's fetch: no row maker, no loaders called, and the connection's row_factory
    (a dict_row, say) does not change what is read. About 2,400 client instructions
    less than fetchall (bench/results/enqueue-one-round9-20261127.md)."""
    result = cursor.pgresult
    value = None if result is None else result.get_value(0, 0)
    if value is None:  # the id column is NOT NULL and the statement returns one row
        raise AssertionError("the insert returned no id")
    return int(value)


def _only_id(rows: list[Any]) -> list[int]:  # a job without a unique_key always goes in
    return [rows[0][0]]


def _id(rows: list[Any]) -> int:
    job_id: int = rows[0][0]
    return job_id


def _id_and_created(rows: list[Any]) -> tuple[int, bool]:
    return rows[0][0], rows[0][1]


class AfterInsert(NamedTuple):
    """What `jobs_insert_after` did: `ids` in input order, or none when a job names ids
    that do not exist: then `missing_at`, the first such job's position (from 0), and
    `missing`, those ids."""

    ids: list[int]
    missing_at: int | None
    missing: list[int]


def _after_insert(rows: list[Any]) -> AfterInsert:
    ids, missing_at, missing = rows[0]
    return AfterInsert(list(ids), None if missing_at is None else missing_at - 1, list(missing))


# A producer call that runs several statements (a list with jobs `after` others or with
# uniqueness modes) runs them all or none: a refused list (ids that do not exist) or a
# failed statement must leave nothing of the call behind.
SAVEPOINT = b"SAVEPOINT pgworkerd_enqueue"
RELEASE = b"RELEASE SAVEPOINT pgworkerd_enqueue"
ROLLBACK_TO = b"ROLLBACK TO SAVEPOINT pgworkerd_enqueue"


@contextmanager
def all_or_nothing(conn: psycopg.Connection[Any]) -> Iterator[None]:
    """The statements run in the `with` take effect together or not at all. On an
    autocommit connection, one transaction (one commit instead of one per statement). In
    the caller's transaction (opened now by psycopg's first statement if none is open), a
    savepoint: a failure takes back this call's statements only and leaves the caller's
    transaction usable. Not `conn.transaction()` there: on a connection whose transaction
    has not begun yet (Django's `atomic()` before its first query) it would COMMIT at its
    end, and the caller's rollback would no longer take the jobs back."""
    if conn.autocommit:
        with conn.transaction():
            yield
        return
    conn.execute(SAVEPOINT)
    try:
        yield
    except BaseException:
        if conn.pgconn.status == psycopg.pq.ConnStatus.OK:  # else there is nothing to undo
            conn.execute(ROLLBACK_TO)
            conn.execute(RELEASE)
        raise
    conn.execute(RELEASE)


@asynccontextmanager
async def all_or_nothing_async(aconn: psycopg.AsyncConnection[Any]) -> AsyncIterator[None]:
    """`all_or_nothing` on an AsyncConnection."""
    if aconn.autocommit:
        async with aconn.transaction():
            yield
        return
    await aconn.execute(SAVEPOINT)
    try:
        yield
    except BaseException:
        if aconn.pgconn.status == psycopg.pq.ConnStatus.OK:
            await aconn.execute(ROLLBACK_TO)
            await aconn.execute(RELEASE)
        raise
    await aconn.execute(RELEASE)


def _first_id(rows: list[Any]) -> int | None:
    return rows[0][0] if rows else None
