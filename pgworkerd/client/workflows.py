"""Workflows built on `after=`: `chain` (each job after the one before it) and `batch`
(a callback after every job of a list, whatever their outcomes), sync and async, in the
caller's transaction like every enqueue."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from pgworkerd.client.producer import AsyncConnectable, Connectable, default_producer


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
    whatever their states (after_failure="run"); returns (ids, then's id). All or
    nothing: `then` is checked with the jobs, before any statement."""
    return default_producer().batch(conn, jobs, then=then)


async def batch_async(
    aconn: AsyncConnectable, jobs: Iterable[Mapping[str, Any]], *, then: Mapping[str, Any]
) -> tuple[list[int], int]:
    """`batch` in `aconn`'s transaction."""
    return await default_producer().batch_async(aconn, jobs, then=then)
