"""Workflows built on `after=`: `chain` (each job after the one before it) and `batch`
(a callback after every job of a list, whatever their outcomes), sync and async, in the
caller's transaction like every enqueue."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from pgworkerd.client.producer import (
    AsyncConnectable,
    Connectable,
    default_producer,
    enqueue_many,
    enqueue_many_async,
)
from pgworkerd.errors import InvalidJob


def chain(conn: Connectable, jobs: Iterable[Mapping[str, Any]]) -> list[int]:
    """Enqueue `jobs` (as `enqueue_many` items) so that each runs after the previous
    one succeeded (a dead or cancelled link cancels the rest); ids in order."""
    return default_producer().chain(conn, jobs)


async def chain_async(aconn: AsyncConnectable, jobs: Iterable[Mapping[str, Any]]) -> list[int]:
    """`chain` in `aconn`'s transaction."""
    return await default_producer().chain_async(aconn, jobs)


def batch(
    conn: Connectable, jobs: Iterable[Mapping[str, Any]], *, then: Mapping[str, Any]
) -> tuple[list[int], int]:
    """Enqueue `jobs` and `then`, which runs once when every job of the batch is final,
    whatever their states (after_failure="run"); returns (ids, then's id)."""
    jobs = list(jobs)
    _check_callback(then, jobs)
    ids = enqueue_many(conn, jobs)
    (then_id,) = enqueue_many(conn, [{**then, "after": ids, "after_failure": "run"}])
    return ids, then_id


async def batch_async(
    aconn: AsyncConnectable, jobs: Iterable[Mapping[str, Any]], *, then: Mapping[str, Any]
) -> tuple[list[int], int]:
    """`batch` in `aconn`'s transaction."""
    jobs = list(jobs)
    _check_callback(then, jobs)
    ids = await enqueue_many_async(aconn, jobs)
    (then_id,) = await enqueue_many_async(aconn, [{**then, "after": ids, "after_failure": "run"}])
    return ids, then_id


def _check_callback(then: Any, jobs: list[Any]) -> None:
    """Refuse a bad `then` before anything is inserted (enqueue_many checks the jobs)."""
    if not isinstance(then, Mapping):
        raise InvalidJob(f"then must be a dict, got {type(then).__name__}")
    if "after" in then or "after_failure" in then:
        raise InvalidJob("then: a batch sets after itself")
    if not jobs:
        raise InvalidJob("a batch needs at least one job")
    default_producer().validated([{**then, "after": [1]}])
