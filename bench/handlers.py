"""The handlers the benchmark daemon runs, named by import path in its YAML config."""

from __future__ import annotations

import asyncio
import time

import pgworkerd


def noop(job: pgworkerd.Job) -> None:
    """Throughput mode: the queue's own overhead only."""


def stamp(job: pgworkerd.Job) -> dict[str, float]:
    """Latency mode: the wall-clock time the handler started, kept as the job's result.

    The bench reads it back from the database and subtracts the producer's time.time()
    taken just before its enqueue call (payload["t"]): the peers' definition. Going
    through the result column needs no side channel out of the worker processes.
    """
    return {"started": time.time()}


def wait(job: pgworkerd.Job) -> None:
    """I/O-bound mode (bench.iobound), plain handler: blocks payload["ms"] milliseconds,
    as a call to a network service would."""
    time.sleep(job.payload["ms"] / 1000)


async def wait_async(job: pgworkerd.Job) -> None:
    """I/O-bound mode, coroutine handler: awaits payload["ms"] milliseconds."""
    await asyncio.sleep(job.payload["ms"] / 1000)
