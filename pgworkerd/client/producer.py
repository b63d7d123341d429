"""The producer API: `enqueue` and `enqueue_many` in the caller's own transaction, on a
psycopg Connection, and `enqueue_async` and `enqueue_many_async` on an AsyncConnection.

Everything is validated before any SQL runs, so a refused job leaves the caller's
transaction untouched; a whole list is inserted by one statement. The sync and async
API share every decision: `Producer._insert_steps` yields the statements to run and is
sent their results, and `_run` or `_run_async` drives it on the caller's connection.

A SQLAlchemy Session, Connection, AsyncSession or AsyncConnection on the psycopg driver
is taken too: the job goes in on the psycopg connection under it (contrib/sqlalchemy.py).
"""

from __future__ import annotations

import contextlib
import functools
import math
import os
import re
from collections.abc import Generator, Iterable, Iterator, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, TypedDict, Unpack, cast

import psycopg

from pgworkerd import timestamps
from pgworkerd.client.connections import wrong_connection
from pgworkerd.contrib import otel
from pgworkerd.contrib import sqlalchemy as sa_contrib
from pgworkerd.encoding import (
    DEFAULT_MAX_PAYLOAD_BYTES,
    dump_payload,
    dump_records,
    dump_trace_context,
)
from pgworkerd.errors import InvalidJob
from pgworkerd.storage.inserts import (
    DEFAULT_SCHEMA,
    JobInserts,
    all_or_nothing,
    all_or_nothing_async,
)
from pgworkerd.storage.rows import Statement

# C0, DEL and C1 (U+0080-U+009F: U+009B is a terminal's CSI, as ESC [ is): a name is shown
# by the CLI and the dashboard, and must not steer a terminal.
_CONTROL_CHARACTER = re.compile(r"[\x00-\x1f\x7f-\x9f]")
MAX_NAME_CHARS = 255  # kind, queue, unique_key and key
PRIORITY_RANGE = (-(2**31), 2**31 - 1)  # the column is a PostgreSQL integer
MAX_ATTEMPTS_LIMIT = 1_000_000
AFTER_FAILURE_CHOICES = ("cancel", "run")
# `after` of a chain's link: the id drawn for the link before it, known only then.
PREVIOUS: list[int] = []
# Jobs one job may wait for (a batch's callback waits for the whole batch).
MAX_AFTER_IDS = 100_000
# The longest delay, max_runtime, debounce or throttle: 100 years of 365.25 days.
MAX_DURATION_S = timestamps.MAX_DURATION_S
# A record with only these keys (no unique_key, after or mode) goes in by
# jobs_insert_one alone and needs nothing resolved (_insert_and_resolve's first case).
_ONE_STATEMENT_KEYS = frozenset(
    {"kind", "queue", "payload", "priority", "delay_s", "run_at", "max_attempts"}
    | {"max_runtime_s", "key", "trace_context"}
)
# enqueue's barest call, one job given no option but its queue: it goes in by
# jobs_insert_bare, three parameters, validated and run without the record and the
# Statement of the other calls (bench/results/enqueue-one-round9-20261127.md).
_BARE_OPTIONS = frozenset({"queue"})
# Look-up-then-insert rounds for a unique key whose holder finishes while we look.
MAX_UNIQUE_KEY_ROUNDS = 5


class EnqueueOptions(TypedDict, total=False):
    """The keyword arguments of every enqueue call, sync or async, declared once.
    Unset: queue "default", priority 0, no delay, run_at, unique_key or key, and
    the queue's max_attempts and max_runtime. `key` ("tenant:42") is the job's unit of
    key pauses (`pause_key`, `PauseKey`). `debounce` or `throttle` (seconds or a
    timedelta, with `unique_key`): the uniqueness modes, see `_mode_steps`."""

    queue: str
    priority: int
    delay: float | timedelta | None
    run_at: datetime | None
    unique_key: str | None
    max_attempts: int | None
    max_runtime: float | timedelta | None
    key: str | None
    debounce: float | timedelta | None
    throttle: float | timedelta | None
    # Workflows: the job is `waiting` until each of these jobs has succeeded; if one
    # ends dead or cancelled, "cancel" cancels it (the default), "run" queues it anyway.
    after: Sequence[int] | None
    after_failure: str


# What the enqueue functions take: a psycopg connection, or a SQLAlchemy Session or
# Connection (AsyncSession or AsyncConnection) on the psycopg driver; SQLAlchemy's side is
# typed loosely, as SQLAlchemy is an optional extra.
Connectable = psycopg.Connection[Any] | Any
AsyncConnectable = psycopg.AsyncConnection[Any] | Any
ENQUEUE_KEYS = frozenset({"kind", "payload"}) | EnqueueOptions.__optional_keys__
# What the insert's decisions yield (a statement to run), are sent (its decoded result)
# and return (the ids).
Steps = Generator[Statement[Any], Any, list[int]]
# Or, for one job that needs one statement and no span, that statement alone (`_one`).
OneStatement = Statement[list[int]]
# The options that make a list go in statement by statement (`_insert_each`,
# `_insert_with_modes`).
_OPTIONS_IN_PARTS = frozenset({"after", "debounce_s", "throttle_s"})


class _MissingAfter(InvalidJob):
    """An `after` names ids that do not exist; `missing` says which (a batch's `then`
    words its own refusal from them)."""

    def __init__(self, message: str, missing: list[int]) -> None:
        super().__init__(message)
        self.missing = missing


# A unique, debounced or throttled job's enqueue returns the id of its key's job, which
# retention may have pruned since it finished; a chain's next link or a batch's `then`
# then waits on an id that no longer exists.
_PRUNED_HOLDER = "a unique or throttled job's id whose job retention has pruned since"


@dataclass(frozen=True)
class AllOrNothing:
    """Steps that may run several statements, each inserting jobs: the drivers run them
    inside `all_or_nothing` (storage/inserts.py), so a list refused halfway (an `after`
    id that does not exist) or a statement that fails leaves none of its jobs."""

    steps: Steps


# The environment's names ProducerSettings (client/settings.py) reads, as
# pydantic_settings matches them: case-insensitively, each name lowercased
# (tests/unit/test_producer_settings.py checks these are its fields' names).
SETTINGS_NAMES = frozenset({"pgworkerd_database__schema", "pgworkerd_max_payload_bytes"})


class Producer:
    """Enqueues into the jobs table of one schema."""

    def __init__(
        self, *, schema: str = DEFAULT_SCHEMA, max_payload_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES
    ) -> None:
        self.store = JobInserts(schema)
        self.max_payload_bytes = max_payload_bytes

    def enqueue(
        self,
        conn: Connectable,
        kind: str,
        payload: Any,
        **options: Unpack[EnqueueOptions],
    ) -> int:
        """Enqueue one job in `conn`'s transaction; returns its id (or, for a
        `unique_key` held by a queued or running job, that job's id)."""
        if options.keys() <= _BARE_OPTIONS and not otel.tracing():
            target = _psycopg(conn, "enqueue")  # first, as below: the same errors in the same order
            return self.store.insert_bare(target, *self._bare(kind, payload, options))
        return _run(_psycopg(conn, "enqueue"), self._one(kind, payload, options))[0]

    async def enqueue_async(
        self,
        aconn: AsyncConnectable,
        kind: str,
        payload: Any,
        **options: Unpack[EnqueueOptions],
    ) -> int:
        """`enqueue` in `aconn`'s transaction."""
        if options.keys() <= _BARE_OPTIONS and not otel.tracing():
            bare = self._bare(kind, payload, options)
            target = await _psycopg_async(aconn, "enqueue_async")
            return await self.store.insert_bare_async(target, *bare)
        steps = self._one(kind, payload, options)
        return (await _run_async(await _psycopg_async(aconn, "enqueue_async"), steps))[0]

    def enqueue_many(self, conn: Connectable, jobs: Iterable[Mapping[str, Any]]) -> list[int]:
        """Enqueue dicts with `enqueue`'s argument names in one statement (a list with
        jobs `after` others or with uniqueness modes: in a few, all or nothing); ids in
        order."""
        return _run(_psycopg(conn, "enqueue_many"), self._many(jobs))

    async def enqueue_many_async(
        self, aconn: AsyncConnectable, jobs: Iterable[Mapping[str, Any]]
    ) -> list[int]:
        """`enqueue_many` in `aconn`'s transaction."""
        steps = self._many(jobs)
        return await _run_async(await _psycopg_async(aconn, "enqueue_many_async"), steps)

    # -- internals ------------------------------------------------------------------------

    # _one and _many check the arguments when called; the steps check the payloads as
    # they encode them, before their first statement (and _one the payload of the
    # statement it returns alone, before returning it): no SQL runs for a refused job.
    def _bare(self, kind: Any, payload: Any, options: EnqueueOptions) -> tuple[str, str, str]:
        """(queue, kind, payload JSON) of a job given no option but its queue: the checks
        `_job_record` and `_insert_one` make of those three, in their order, with their
        errors, and no record built."""
        queue = options.get("queue", "default")
        _check_name("kind", kind)
        _check_name("queue", queue)
        return queue, kind, dump_payload(payload, max_bytes=self.max_payload_bytes)

    def _one(self, kind: Any, payload: Any, options: EnqueueOptions) -> Steps | OneStatement:
        try:
            record = _job_record(kind=kind, payload=payload, **options)
        except TypeError:
            _refuse_unknown_options(options)
            raise
        if _ONE_STATEMENT_KEYS.issuperset(record) and not otel.tracing():
            # enqueue's usual call: no span to open and one statement to run, the one
            # _insert_steps would yield; given to the driver as it is, without the
            # generators around it, whose cost a call pays several times over once its
            # round trip has cooled the caches (bench/results/enqueue-one-round3-*.md).
            return self._insert_one(record, label_index=False)
        return self._insert_steps([record], record.keys(), label_index=False)

    def chain(self, conn: Connectable, jobs: Iterable[Mapping[str, Any]]) -> list[int]:
        """Enqueue `jobs` (as `enqueue_many` items) each to run after the previous one
        succeeded (a link that ends dead or cancelled cancels the rest); ids in order."""
        return _run(_psycopg(conn, "chain"), self._chain(jobs))

    async def chain_async(
        self, aconn: AsyncConnectable, jobs: Iterable[Mapping[str, Any]]
    ) -> list[int]:
        """`chain` in `aconn`'s transaction."""
        steps = self._chain(jobs)
        return await _run_async(await _psycopg_async(aconn, "chain_async"), steps)

    def batch(
        self, conn: Connectable, jobs: Iterable[Mapping[str, Any]], *, then: Mapping[str, Any]
    ) -> tuple[list[int], int]:
        """Enqueue `jobs` (as `enqueue_many` items) and `then`, which runs once when every
        one of them is final, whatever their states; (their ids, then's id). All or
        nothing: `then` is checked with the jobs, before any statement."""
        *ids, then_id = _run(_psycopg(conn, "batch"), self._batch(jobs, then))
        return ids, then_id

    async def batch_async(
        self, aconn: AsyncConnectable, jobs: Iterable[Mapping[str, Any]], *, then: Mapping[str, Any]
    ) -> tuple[list[int], int]:
        """`batch` in `aconn`'s transaction."""
        steps = self._batch(jobs, then)
        *ids, then_id = await _run_async(await _psycopg_async(aconn, "batch_async"), steps)
        return ids, then_id

    def _batch(self, jobs: Iterable[Mapping[str, Any]], then: Any) -> AllOrNothing:
        records = self.validated(jobs)
        if not records:
            raise InvalidJob("a batch needs at least one job")
        if len(records) > MAX_AFTER_IDS:  # then waits for them all
            raise InvalidJob(f"a batch holds at most {MAX_AFTER_IDS} jobs, got {len(records)}")
        if not isinstance(then, Mapping):
            raise InvalidJob(f"then must be a dict, got {type(then).__name__}")
        if "after" in then or "after_failure" in then:
            raise InvalidJob("then: a batch sets after itself")
        if then.get("unique_key") is not None:  # as a chain's later links
            raise InvalidJob(
                "then: a batch's then may not have a unique_key "
                "(it waits for the batch, and a waiting job holds no key)"
            )
        try:  # as it will go in, but for its ids, not drawn yet
            (callback,) = self.validated([{**then, "after": [1], "after_failure": "run"}])
            self._encode([callback], label_index=False)  # its payload
        except InvalidJob as exc:
            raise InvalidJob(f"then: {str(exc).removeprefix('jobs[0]: ')}") from None
        options = set().union(*records)
        return AllOrNothing(self._batch_steps(records, options, callback))

    def _batch_steps(
        self, records: list[dict[str, Any]], options: AbstractSet[str], callback: dict[str, Any]
    ) -> Steps:
        ids = yield from self._insert_steps(records, options, label_index=True)
        # Unique keys may give two jobs one id: the callback waits for each job once.
        callback["after"] = list(dict.fromkeys(ids))
        try:
            (then_id,) = yield from self._insert_steps(
                [callback], callback.keys(), label_index=False
            )
        except _MissingAfter as exc:
            gone = ", ".join(f"jobs[{i}] (job {j})" for i, j in enumerate(ids) if j in exc.missing)
            raise InvalidJob(
                f"then: cannot wait for {gone}: no such job ({_PRUNED_HOLDER})"
            ) from None
        return [*ids, then_id]

    def _chain(self, jobs: Iterable[Mapping[str, Any]]) -> Steps | AllOrNothing:
        specs = list(jobs)
        for index, spec in enumerate(specs):  # before `validated`, which says less
            if isinstance(spec, Mapping):
                if "after" in spec:
                    raise InvalidJob(f"jobs[{index}]: a chain sets after itself")
                if "after_failure" in spec:
                    raise InvalidJob(f"jobs[{index}]: a chain sets after_failure itself")
        records = self.validated(specs)
        for index, record in enumerate(records):
            if index:
                if "unique_key" in record:  # as enqueue refuses unique_key with after
                    raise InvalidJob(
                        f"jobs[{index}]: only a chain's first job may have a unique_key"
                        " (the others wait, and a waiting job holds no key)"
                    )
                record["after"] = PREVIOUS  # the id drawn for the link before
                record["after_failure"] = "cancel"
        return self._list_steps(records)

    def _many(self, jobs: Iterable[Mapping[str, Any]]) -> Steps | AllOrNothing:
        return self._list_steps(self.validated(jobs))

    def _list_steps(self, records: list[dict[str, Any]]) -> Steps | AllOrNothing:
        """The steps of a list, to be run all or nothing when they may run several
        statements that each insert jobs (a list with jobs `after` others or with a
        uniqueness mode; not one that only looks up or retries the holders of unique
        keys after its one insert: each of those statements is a whole enqueue)."""
        options = set().union(*records)  # every key of any record, in one pass in C
        steps = self._insert_steps(records, options, label_index=True)
        if len(records) > 1 and not options.isdisjoint(_OPTIONS_IN_PARTS):
            return AllOrNothing(steps)
        return steps

    def validated(self, jobs: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
        records = []
        for index, spec in enumerate(jobs):
            # A bulk list's usual item: a dict of a kind, a payload and maybe a queue,
            # named as items before it were. Its record is `_job_record`'s for those
            # three, made without the calls and the option checks (two fifths of the
            # client's time of a 1,000-job call: bench/results/issue23-round20-20261129.md).
            if type(spec) is dict and spec.keys() <= _PLAIN_ITEM_KEYS:
                kind, queue = spec.get("kind"), spec.get("queue", "default")
                if (
                    type(kind) is str  # and not unhashable, for the set
                    and type(queue) is str
                    and kind in _CHECKED_NAMES
                    and queue in _CHECKED_NAMES
                    and "payload" in spec
                ):
                    records.append({"kind": kind, "queue": queue, "payload": spec["payload"]})
                    continue
            if not isinstance(spec, Mapping):
                raise InvalidJob(f"jobs[{index}] must be a dict, got {type(spec).__name__}")
            unknown = sorted(set(spec) - ENQUEUE_KEYS, key=str)
            if unknown:
                names = ", ".join(map(str, unknown))
                raise InvalidJob(f"jobs[{index}] has unknown key(s): {names}")
            for required in ("kind", "payload"):
                if required not in spec:
                    raise InvalidJob(f"jobs[{index}] lacks {required!r}")
            try:
                record = _job_record(**spec)
            except InvalidJob as exc:
                raise InvalidJob(f"jobs[{index}]: {exc}") from None
            records.append(record)
        return records

    def _insert_steps(
        self, records: list[dict[str, Any]], options: AbstractSet[str], *, label_index: bool
    ) -> Steps:
        """The insert's decisions, without I/O, inside the PRODUCER span of the `otel`
        extra (None without it), which records the trace context with the jobs.
        `options`: every key that some record has."""
        if not records:
            return []
        span = otel.start_send(records)
        try:
            if "after" in options:
                ids = yield from self._insert_each(records, label_index)
            elif "debounce_s" in options or "throttle_s" in options:
                ids = yield from self._insert_with_modes(records, label_index)
            else:
                unique_keys = "unique_key" in options
                ids = yield from self._insert_and_resolve(records, unique_keys, label_index)
        except BaseException as exc:
            otel.end_send(span, error=exc)
            raise
        otel.end_send(span, ids)
        return ids

    def _insert_and_resolve(
        self, records: list[dict[str, Any]], unique_keys: bool, label_index: bool
    ) -> Steps:
        """Encoding, the last check, happens before the first statement is yielded.
        `unique_keys`: whether any record has one."""
        if len(records) == 1 and not unique_keys:  # enqueue's usual call
            ids: list[int | None] = yield self._insert_one(records[0], label_index)
        else:
            text = self._encode(records, label_index=label_index)
            ids = yield self.store.insert_statement(text, unique_keys=unique_keys)
        if None not in ids:  # the usual case: every job went in
            return cast(list[int], ids)
        inserted_by_key: dict[str, int] = {}
        resolved: list[int] = []
        for record, job_id in zip(records, ids, strict=True):
            key = record.get("unique_key")
            if job_id is not None:
                if key is not None:
                    inserted_by_key.setdefault(key, job_id)
                resolved.append(job_id)
                continue
            assert key is not None  # only a unique key can leave a job out
            # Its holder is an earlier job of this list, or a live job this transaction
            # can see now; or it finished meanwhile and our job goes in after all.
            holder = inserted_by_key.get(key)
            if holder is None:
                holder = yield from self._live_or_insert_steps(record)
            resolved.append(holder)
        return resolved

    def _insert_one(self, record: dict[str, Any], label_index: bool) -> Statement[Any]:
        """The statement of one job without a unique key. Only its payload (and the trace
        context, when `otel` wrote one) is JSON: the rest of the record goes as
        parameters of their own, and `dump_payload` refuses what `_encode` would."""
        try:
            payload = dump_payload(record["payload"], max_bytes=self.max_payload_bytes)
        except InvalidJob as exc:
            raise InvalidJob(f"jobs[0]: {exc}" if label_index else str(exc)) from None
        trace_context = record.get("trace_context")
        trace_json = None if trace_context is None else dump_trace_context(trace_context)
        return self.store.insert_one_statement(record, payload, trace_json)

    def _insert_with_modes(self, records: list[dict[str, Any]], label_index: bool) -> Steps:
        """A list in which some jobs have `debounce` or `throttle`: the others go in as
        usual, in one statement; each of these, one after the other (`_mode_steps`)."""
        self._encode(records, label_index=label_index)  # every payload, before any SQL
        ids: list[int] = [0] * len(records)
        plain = [i for i, r in enumerate(records) if not _has_mode(r)]
        if plain:
            subset = [records[i] for i in plain]
            unique_keys = any("unique_key" in r for r in subset)
            got = yield from self._insert_and_resolve(subset, unique_keys, label_index)
            for index, job_id in zip(plain, got, strict=True):
                ids[index] = job_id
        for index in _moded_in_key_order(records):
            ids[index] = yield from self._mode_steps(records[index])
        return ids

    def _mode_steps(self, record: dict[str, Any]) -> Generator[Statement[Any], Any, int]:
        """One job with a uniqueness mode; the key's row in `unique_slots` arbitrates
        between producers (docs/design.md, "Debounce and throttle").
        throttle: one statement; the job of the key's current window (maybe this one).
        debounce: the first statement takes the key's slot (and makes the job when the
        key has none); the second folds this enqueue into the slot's job while it is
        queued (last payload, runs debounce after now) or makes a new one."""
        text = self._encode([record], label_index=False)
        if "throttle_s" in record:
            throttled: int = yield self.store.throttled_statement(text)
            return throttled
        target, created = yield self.store.debounced_statement(text)
        if created:
            return cast(int, target)
        folded: int = yield self.store.debounce_fold_statement(text, target)
        return folded

    def _insert_each(self, records: list[dict[str, Any]], label_index: bool) -> Steps:
        """A list with jobs that run `after` others: those without `after` first, as
        `_insert_with_modes` takes a list (the plain ones in one statement, then those
        with a uniqueness mode, never one with `after`, in key order); then those with
        their `after` given, in one statement (`jobs_insert_after`: a fan-out of
        thousands is one); then a chain's later links in order, one statement each,
        each naming the id drawn for the link before it."""
        for index, record in enumerate(records):  # every payload checked before any SQL
            try:
                dump_payload(record["payload"], max_bytes=self.max_payload_bytes)
            except InvalidJob as exc:
                raise InvalidJob(f"jobs[{index}]: {exc}" if label_index else str(exc)) from None
        ids: list[int] = [0] * len(records)
        without = [i for i, r in enumerate(records) if "after" not in r]
        if without:
            subset = [records[i] for i in without]
            got = yield from self._insert_with_modes(subset, label_index=False)
            for index, job_id in zip(without, got, strict=True):
                ids[index] = job_id
        given = [i for i, r in enumerate(records) if "after" in r and r["after"] is not PREVIOUS]
        links = [i for i, r in enumerate(records) if r.get("after") is PREVIOUS]
        for group in ([given] if given else []) + [[i] for i in links]:
            part = [records[i] for i in group]
            if part[0]["after"] is PREVIOUS:
                part = [{**part[0], "after": ids[group[0] - 1 : group[0]]}]
            inserted = yield self.store.insert_after_statement(
                self._encode(part, label_index=False)
            )
            if inserted.missing_at is not None:
                index = group[inserted.missing_at]
                where = f"jobs[{index}]: " if label_index else ""
                names = ", ".join(map(str, inserted.missing))
                if (
                    records[index]["after"] is PREVIOUS
                ):  # a chain's link: no `after` of the caller's
                    raise _MissingAfter(
                        f"{where}cannot run after jobs[{index - 1}] (job {names}): no such job "
                        f"({_PRUNED_HOLDER})",
                        inserted.missing,
                    )
                raise _MissingAfter(
                    f"{where}after names jobs that do not exist: {names}", inserted.missing
                )
            for index, job_id in zip(group, inserted.ids, strict=True):
                ids[index] = job_id
        return ids

    def _live_or_insert_steps(self, record: dict[str, Any]) -> Generator[Statement[Any], Any, int]:
        key = record["unique_key"]
        for _ in range(MAX_UNIQUE_KEY_ROUNDS):
            live: int | None = yield self.store.find_live_statement(key)
            if live is not None:
                return live
            inserted: list[int | None] = yield self.store.insert_statement(
                self._encode([record], label_index=False)
            )
            if inserted[0] is not None:
                return inserted[0]
        raise InvalidJob(  # a holder that keeps appearing and finishing: give up clearly
            f"unique_key {key!r} kept changing hands; try again"
        )

    def _encode(self, records: list[dict[str, Any]], *, label_index: bool) -> str:
        """The records as one JSON array, or InvalidJob naming the payload at fault."""
        text = dump_records(records, max_payload_bytes=self.max_payload_bytes)
        if text is not None:
            return text
        for index, record in enumerate(records):  # the slow path: find the culprit
            try:
                dump_payload(record["payload"], max_bytes=self.max_payload_bytes)
            except InvalidJob as exc:
                raise InvalidJob(f"jobs[{index}]: {exc}" if label_index else str(exc)) from None
        # Each passes alone: the list's own two levels were what the caller's stack,
        # nearly full, could not take (dump_records' RecursionError).
        raise InvalidJob("jobs could not be encoded: the caller's stack is too deep")


def check_options(kind: Any, options: Mapping[str, Any]) -> None:
    """InvalidJob unless enqueue accepts `kind` with `options` (the payload aside): the
    same checks and messages, made where the options are written down
    (`@pgworkerd.task`), not first at each enqueue."""
    try:
        _job_record(kind=kind, payload=None, **options)
    except TypeError:
        _refuse_unknown_options(options)
        raise


def _refuse_unknown_options(options: Mapping[str, Any]) -> None:
    """InvalidJob naming the options enqueue does not take: Python's TypeError for them
    named `_job_record`, a private function, not the option's caller."""
    unknown = sorted(set(options) - EnqueueOptions.__optional_keys__)
    if unknown:
        raise InvalidJob(f"unknown option(s): {', '.join(unknown)}")


def _job_record(
    *,
    kind: Any,
    payload: Any,
    queue: Any = "default",
    priority: Any = 0,
    delay: Any = None,
    run_at: Any = None,
    unique_key: Any = None,
    max_attempts: Any = None,
    max_runtime: Any = None,
    key: Any = None,
    debounce: Any = None,
    throttle: Any = None,
    after: Any = None,
    after_failure: Any = None,
) -> dict[str, Any]:
    """One job's validated record, as `jobs_insert` reads it; unset options left out."""
    _check_name("kind", kind)
    _check_name("queue", queue)
    record: dict[str, Any] = {"kind": kind, "queue": queue, "payload": payload}
    if unique_key is not None:
        _check_name("unique_key", unique_key)
        record["unique_key"] = unique_key
    if key is not None:
        _check_name("key", key)
        record["key"] = key
    if isinstance(priority, bool) or not isinstance(priority, int):
        raise InvalidJob(f"priority must be an integer, got {type(priority).__name__}")
    if not PRIORITY_RANGE[0] <= priority <= PRIORITY_RANGE[1]:
        raise InvalidJob(f"priority must fit in 32 bits, got {brief(priority)}")
    if priority:
        record["priority"] = priority
    if delay is not None and run_at is not None:
        raise InvalidJob("give delay or run_at, not both")
    if delay is not None:
        record["delay_s"] = _seconds("delay", delay, allow_zero=True)
    if run_at is not None:
        if not isinstance(run_at, datetime):
            raise InvalidJob(f"run_at must be a datetime, got {type(run_at).__name__}")
        if run_at.tzinfo is None or run_at.utcoffset() is None:
            raise InvalidJob("run_at must be timezone-aware (a naive datetime is ambiguous)")
        check_instant("run_at", run_at)
        # In UTC, the same instant to the microsecond: PostgreSQL takes offsets up to
        # ±15:59 in whole seconds, Python's go to ±23:59:59.999999 (+20:00 aborted the
        # caller's transaction; +00:00:00.5 was cut to +00:00:00).
        record["run_at"] = run_at.astimezone(UTC).isoformat()
    if max_attempts is not None:
        if (
            isinstance(max_attempts, bool)
            or not isinstance(max_attempts, int)
            or not 1 <= max_attempts <= MAX_ATTEMPTS_LIMIT
        ):
            raise InvalidJob(
                f"max_attempts must be an integer from 1 to {MAX_ATTEMPTS_LIMIT}, "
                f"got {brief(max_attempts)}"
            )
        record["max_attempts"] = max_attempts
    if max_runtime is not None:
        record["max_runtime_s"] = _seconds("max_runtime", max_runtime, allow_zero=False)
    if debounce is not None or throttle is not None:
        _add_mode(record, debounce, throttle)
    if after_failure is not None and after_failure not in AFTER_FAILURE_CHOICES:
        raise InvalidJob(f'after_failure must be "cancel" or "run", got {after_failure!r}')
    if after is None and after_failure is not None:
        # Said, not dropped: a caller who wrote "run" expects the job to wait for something.
        raise InvalidJob("after_failure goes with after")
    if after is not None:
        record["after"] = _after_ids(after)
        record["after_failure"] = after_failure or "cancel"
        if unique_key is not None:
            # A waiting job holds no unique key, and its release must never fail on one.
            raise InvalidJob("give unique_key or after, not both")
    return record


def _add_mode(record: dict[str, Any], debounce: Any, throttle: Any) -> None:
    if debounce is not None and throttle is not None:
        raise InvalidJob("give debounce or throttle, not both")
    mode = "debounce" if debounce is not None else "throttle"
    if "unique_key" not in record:
        raise InvalidJob(f"{mode} needs a unique_key (the key it debounces or throttles)")
    if debounce is not None:
        if "delay_s" in record or "run_at" in record:
            raise InvalidJob("debounce sets when the job runs: give no delay or run_at")
        record["debounce_s"] = _seconds("debounce", debounce, allow_zero=False)
    else:
        record["throttle_s"] = _seconds("throttle", throttle, allow_zero=False)


def _has_mode(record: dict[str, Any]) -> bool:
    return "debounce_s" in record or "throttle_s" in record


def _moded_in_key_order(records: list[dict[str, Any]]) -> list[int]:
    """The indexes of the records with a uniqueness mode, in key order (list order within
    a key: the last payload wins). Two lists that name the same keys then lock their
    slots in the same order, so they cannot deadlock."""
    return sorted(
        (i for i, r in enumerate(records) if _has_mode(r)),
        key=lambda i: str(records[i]["unique_key"]),
    )


def _after_ids(after: Any) -> list[int]:
    """The job ids of `after=`, without repeats, in order; InvalidJob unless a non-empty
    list of ids."""
    if isinstance(after, str | bytes | Mapping) or not isinstance(after, Iterable):
        raise InvalidJob(f"after must be a list of job ids, got {type(after).__name__}")
    ids: list[int] = []
    for job_id in after:
        if isinstance(job_id, bool) or not isinstance(job_id, int) or not 1 <= job_id <= BIGINT_MAX:
            # Past bigint, the server refused it, aborting the caller's transaction.
            raise InvalidJob(
                f"after must hold job ids (integers from 1 to 2**63-1), got {brief(job_id)}"
            )
        if job_id not in ids:
            ids.append(job_id)
    if not ids:
        raise InvalidJob("after must name at least one job")
    if len(ids) > MAX_AFTER_IDS:
        raise InvalidJob(f"after names {len(ids)} jobs, over the limit of {MAX_AFTER_IDS}")
    return ids


# Names that passed _check_name: a bulk list repeats a few kinds and queues thousands
# of times. Bounded, so a stream of distinct unique keys cannot grow it without end.
_CHECKED_NAMES: set[str] = set()
_CHECKED_NAMES_MAX = 4096
# The keys of an item `Producer.validated` may take by its fast path: no option to check
# but the queue's name.
_PLAIN_ITEM_KEYS = frozenset({"kind", "payload", "queue"})


BIGINT_MAX = 2**63 - 1


def check_job_id(job_id: Any) -> int:
    """`job_id` if it can be a job's id (an int, not a bool, within bigint): the check of
    `cancel`, `retry`, `result` and `wait` before any SQL. A string "12" is refused, not
    read: `cancel(conn, "12")` cancelled job 12 and reported False (bench/results/
    issue23-round20-20261129.md)."""
    if isinstance(job_id, bool) or not isinstance(job_id, int):
        raise TypeError(f"job_id must be an int, got {type(job_id).__name__}")
    if not -BIGINT_MAX - 1 <= job_id <= BIGINT_MAX:
        raise ValueError(f"job_id must fit in 64 bits, got {job_id}")
    return job_id


def check_instant(what: str, value: datetime) -> None:
    """InvalidJob unless `value` (timezone-aware) is one every reader can load back
    (timestamps.readable): outside, every read of its row (`jobs list`, the dashboard,
    a worker's claim) would fail."""
    if not timestamps.readable(value):
        raise InvalidJob(f"{what} must fall between {timestamps.bounds()}, got {value.isoformat()}")


def check_name(what: str, value: Any) -> None:
    """InvalidJob unless `value` is a name enqueue accepts for `what` (a queue's, a
    kind's): a non-blank string of at most 255 characters, no control characters."""
    _check_new_name(what, value)


def _check_name(what: str, value: Any) -> None:
    if type(value) is str and value in _CHECKED_NAMES:
        return
    _check_new_name(what, value)
    if len(_CHECKED_NAMES) >= _CHECKED_NAMES_MAX:
        _CHECKED_NAMES.clear()
    _CHECKED_NAMES.add(value)


def _check_new_name(what: str, value: Any) -> None:
    if not isinstance(value, str):
        raise InvalidJob(f"{what} must be a string, got {type(value).__name__}")
    if not value.strip():
        raise InvalidJob(f"{what} must not be empty")
    if len(value) > MAX_NAME_CHARS:
        raise InvalidJob(f"{what} is {len(value)} characters, over the limit of {MAX_NAME_CHARS}")
    if _CONTROL_CHARACTER.search(value):
        raise InvalidJob(f"{what} must not contain control characters (NUL included)")
    if not value.isascii():
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:  # a lone surrogate: bytes that were not UTF-8
            raise InvalidJob(f"{what} is not valid Unicode text") from None


def _seconds(what: str, value: Any, *, allow_zero: bool) -> float | None:
    if value is None:
        return None
    if isinstance(value, timedelta):
        value = value.total_seconds()
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidJob(f"{what} must be seconds or a timedelta, got {type(value).__name__}")
    # An int is finite, and may be too large for a float (math.isfinite(10**400) raises
    # OverflowError): compared as it is, then bounded below, before float().
    finite = isinstance(value, int) or math.isfinite(value)
    if not finite or value < 0 or (value == 0 and not allow_zero):
        bound = ">= 0" if allow_zero else "> 0"
        raise InvalidJob(f"{what} must be a finite number of seconds {bound}, got {brief(value)}")
    # PostgreSQL keeps intervals in whole microseconds (a duration that must be > 0 and
    # rounds to 0 breaks a CHECK), and a run_at past year 9999 is one psycopg cannot read
    # back (past 294276, one PostgreSQL cannot write): refused here, not by the server,
    # which would abort the caller's transaction.
    if not allow_zero and value < 1e-6:
        raise InvalidJob(f"{what} must be at least a microsecond, got {value!r}")
    if value > MAX_DURATION_S:
        limit = f"{MAX_DURATION_S:.0f} s"
        raise InvalidJob(f"{what} must be at most 100 years ({limit}), got {brief(value)}")
    return float(value)


def brief(value: Any) -> str:
    """`value!r` for an error message, an int of more than 30 digits said by its size:
    its repr is as long, and past 4,300 digits raises ValueError itself."""
    if isinstance(value, int) and not -(10**30) < value < 10**30:
        return f"an integer of {value.bit_length()} bits"
    return repr(value)


@functools.cache
def default_producer() -> Producer:
    """The producer behind `pgworkerd.enqueue`, configured from the environment once
    (client/settings.py). Without any of its names there, pydantic_settings would give
    the defaults, which are Producer's: it is not imported (~0.25 s, in a process's first
    enqueue)."""
    if not any(name.lower() in SETTINGS_NAMES for name in os.environ):
        return Producer()
    from pgworkerd.client.settings import ProducerSettings

    settings = ProducerSettings()
    return Producer(schema=settings.database__schema, max_payload_bytes=settings.max_payload_bytes)


SCHEMA_ENV = "PGWORKERD_DATABASE__SCHEMA"


def set_default_schema(schema: str | None) -> None:
    """`schema` (None: the environment's own, else `pgworkerd`) becomes the one
    `pgworkerd.enqueue`, `wait`, `result`, `cancel`, `chain`, `batch` and the tasks'
    `enqueue` use. A worker sets its daemon's at boot, so jobs its handlers enqueue (and
    what they start) go to that schema: `database.schema` set in the config file alone
    reached no handler, whose follow-up jobs went to the default schema. Through the
    environment, where these read it."""
    if schema is None:
        os.environ.pop(SCHEMA_ENV, None)
    else:
        os.environ[SCHEMA_ENV] = schema
    default_producer.cache_clear()


@contextlib.contextmanager
def default_schema(schema: str) -> Iterator[None]:
    """`set_default_schema(schema)` until the block ends (`testing.drain`)."""
    before = os.environ.get(SCHEMA_ENV)
    set_default_schema(schema)
    try:
        yield
    finally:
        set_default_schema(before)


def schema_of(schema: str | None) -> str:
    """The schema a client call works on: the one it was given, else enqueue's (from the
    environment, `PGWORKERD_DATABASE__SCHEMA`, else `pgworkerd`)."""
    return schema if schema is not None else default_producer().store.schema


def enqueue(conn: Connectable, kind: str, payload: Any, **options: Unpack[EnqueueOptions]) -> int:
    """`Producer.enqueue` with the environment's settings (see `default_producer`)."""
    return default_producer().enqueue(conn, kind, payload, **options)


def enqueue_many(conn: Connectable, jobs: Iterable[Mapping[str, Any]]) -> list[int]:
    """`Producer.enqueue_many` with the environment's settings."""
    return default_producer().enqueue_many(conn, jobs)


async def enqueue_async(
    aconn: AsyncConnectable,
    kind: str,
    payload: Any,
    **options: Unpack[EnqueueOptions],
) -> int:
    """`Producer.enqueue_async` with the environment's settings."""
    return await default_producer().enqueue_async(aconn, kind, payload, **options)


async def enqueue_many_async(
    aconn: AsyncConnectable, jobs: Iterable[Mapping[str, Any]]
) -> list[int]:
    """`Producer.enqueue_many_async` with the environment's settings."""
    return await default_producer().enqueue_many_async(aconn, jobs)


# A SQLAlchemy object stands for the psycopg connection under it. The check reads class
# names only: SQLAlchemy is imported by contrib/sqlalchemy.py when such an object comes.
# Anything else is refused before any statement runs (client/connections.py): a sync
# Connection given to an _async function ran the INSERT before failing.
def _psycopg(conn: Any, call: str) -> psycopg.Connection[Any]:
    if isinstance(conn, psycopg.Connection):
        return conn
    if sa_contrib.is_sqlalchemy(conn):
        return sa_contrib.psycopg_connection(conn)
    raise wrong_connection(conn, call, in_async=False, sqlalchemy=True)


async def _psycopg_async(aconn: Any, call: str) -> psycopg.AsyncConnection[Any]:
    if isinstance(aconn, psycopg.AsyncConnection):
        return aconn
    if sa_contrib.is_sqlalchemy(aconn):
        return await sa_contrib.psycopg_async_connection(aconn)
    raise wrong_connection(aconn, call, in_async=True, sqlalchemy=True)


# The two drivers of `Producer._insert_steps` (or of the one statement `_one` returns
# alone): the only producer code written per I/O style. A statement that fails leaves
# the steps unfinished; steps wrapped in `AllOrNothing` run inside `all_or_nothing`,
# which takes back the statements run before it. A failed statement is thrown into the
# steps, so that they see it (the span records it) before it reaches the caller.
def _run(conn: psycopg.Connection[Any], steps: Steps | OneStatement | AllOrNothing) -> list[int]:
    if isinstance(steps, Statement):
        return steps.run(conn)  # no cast(): a call, and a new list[int] alias, per enqueue
    if isinstance(steps, AllOrNothing):
        with all_or_nothing(conn):
            return _drive(conn, steps.steps)
    return _drive(conn, steps)


def _drive(conn: psycopg.Connection[Any], steps: Steps) -> list[int]:
    result = None  # the first send starts the steps
    try:
        while True:
            statement = steps.send(result)
            try:
                result = statement.run(conn)
            except BaseException as exc:
                steps.throw(exc)
                raise
    except StopIteration as done:
        ids: list[int] = done.value
        return ids


async def _run_async(
    aconn: psycopg.AsyncConnection[Any], steps: Steps | OneStatement | AllOrNothing
) -> list[int]:
    if isinstance(steps, Statement):
        return await steps.run_async(aconn)
    if isinstance(steps, AllOrNothing):
        async with all_or_nothing_async(aconn):
            return await _drive_async(aconn, steps.steps)
    return await _drive_async(aconn, steps)


async def _drive_async(aconn: psycopg.AsyncConnection[Any], steps: Steps) -> list[int]:
    result = None
    try:
        while True:
            statement = steps.send(result)
            try:
                result = await statement.run_async(aconn)
            except BaseException as exc:
                steps.throw(exc)
                raise
    except StopIteration as done:
        ids: list[int] = done.value
        return ids
