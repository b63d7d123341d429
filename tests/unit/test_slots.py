"""The execution slots of a worker running several jobs at once: threads, coroutines,
per-job JobTimeout, slot accounting (real threads and an event loop; no database)."""

from __future__ import annotations

import asyncio
import os
import select
import threading
import time
from collections.abc import Iterator

import pytest

import pgworkerd
from pgworkerd.job import Job
from pgworkerd.worker.slots import Finished, SlotPool


def job(job_id: int, kind: str = "k") -> Job:
    return Job(id=job_id, kind=kind, queue="q", payload={}, attempt=1, max_attempts=3)


@pytest.fixture
def pool() -> Iterator[SlotPool]:
    r, w = os.pipe()
    os.set_blocking(w, False)
    slots = SlotPool(4, w)
    slots.wake_r = r  # type: ignore[attr-defined]  # the test's end of the wake pipe
    yield slots
    slots.close()
    os.close(r)
    os.close(w)


def wait_finished(pool: SlotPool, count: int, timeout_s: float = 5.0) -> list[Finished]:
    done: list[Finished] = []
    deadline = time.monotonic() + timeout_s
    while len(done) < count:
        left = deadline - time.monotonic()
        assert left > 0, f"only {len(done)} of {count} jobs finished"
        select.select([pool.wake_r], [], [], left)  # type: ignore[attr-defined]
        os.read(pool.wake_r, 1024)  # type: ignore[attr-defined]
        done += pool.finished()
    return done


def sleeper(job: Job) -> int:
    time.sleep(0.3)
    return job.id


def spinner(job: Job) -> None:
    while True:
        time.sleep(0.01)


async def forever(job: Job) -> None:
    await asyncio.sleep(3600)


def test_jobs_run_at_once_and_give_their_slots_back(pool: SlotPool) -> None:
    # All four wait at one barrier: it opens only when the two threads and the two
    # tasks are running at the same time, else each fails with BrokenBarrierError
    # at its timeout. The tasks wait for it off the event loop, so that one task
    # waiting does not stop the other from coming to it.
    together = threading.Barrier(4, timeout=10)

    def meets(job: Job) -> int:
        together.wait()
        return job.id

    async def meets_async(job: Job) -> int:
        await asyncio.to_thread(together.wait)
        return job.id

    for n, handler in enumerate([meets, meets, meets_async, meets_async]):
        pool.start(job(n), handler, pool.take_slot())
    assert (pool.busy, pool.free) == (4, 0)
    done = wait_finished(pool, 4, timeout_s=30)
    assert [f.outcome.kind for f in done] == ["succeeded"] * 4, [f.outcome for f in done]
    results = [f.outcome.result_json for f in done]
    assert sorted(results) == ["0", "1", "2", "3"], [f.outcome for f in done]  # type: ignore[type-var]
    assert sorted(f.slot for f in done) == [0, 1, 2, 3]
    assert (pool.busy, pool.free) == (0, 4)
    assert pool.take_slot() == 0, "the lowest free slot first"


def test_jobtimeout_reaches_a_thread_and_a_task_not_their_neighbours(pool: SlotPool) -> None:
    pool.start(job(1), spinner, pool.take_slot())
    pool.start(job(2), forever, pool.take_slot())
    pool.start(job(3), sleeper, pool.take_slot())
    time.sleep(0.05)
    assert pool.interrupt(1) and pool.interrupt(2)
    done = {f.job.id: f.outcome for f in wait_finished(pool, 3)}
    assert done[1].kind == done[2].kind == "timed_out"
    assert "JobTimeout" in (done[1].error or "") and "JobTimeout" in (done[2].error or "")
    assert done[3].kind == "succeeded"
    assert not pool.interrupt(3), "a job that ended is not interrupted"


def test_jobcancelled_reaches_a_thread_and_a_task_not_their_neighbours(pool: SlotPool) -> None:
    seen: list[str] = []

    def catches(job: Job) -> None:
        try:
            spinner(job)
        except pgworkerd.JobCancelled:
            seen.append("thread")
            raise

    async def catches_async(job: Job) -> None:
        try:
            await forever(job)
        except asyncio.CancelledError:  # how asyncio delivers any interruption
            seen.append("task")
            raise

    pool.start(job(1), catches, pool.take_slot())
    pool.start(job(2), catches_async, pool.take_slot())
    pool.start(job(3), sleeper, pool.take_slot())
    time.sleep(0.05)
    assert pool.interrupt(1, pgworkerd.JobCancelled)
    assert pool.interrupt(2, pgworkerd.JobCancelled)
    done = {f.job.id: f.outcome for f in wait_finished(pool, 3)}
    assert done[1].kind == done[2].kind == "cancelled"
    assert "was cancelled" in (done[2].error or "")
    assert done[3].kind == "succeeded"
    assert sorted(seen) == ["task", "thread"]


def test_an_interruption_before_the_handler_begins_is_not_lost(pool: SlotPool) -> None:
    """Asked for between the job's start and its registration by its thread or task:
    raised as it begins (here: before the pool's thread or loop even exists)."""
    pool.start(job(1), spinner, pool.take_slot())
    pool.start(job(2), forever, pool.take_slot())
    # The registration is a few instructions away in another thread: interrupt at once.
    assert pool.interrupt(1, pgworkerd.JobCancelled)
    assert pool.interrupt(2, pgworkerd.JobCancelled)
    done = {f.job.id: f.outcome.kind for f in wait_finished(pool, 2)}
    assert done == {1: "cancelled", 2: "cancelled"}
    assert not pool.interrupt(1, pgworkerd.JobCancelled)


def test_a_handlers_exceptions_become_outcomes(pool: SlotPool) -> None:
    def discard(job: Job) -> None:
        raise pgworkerd.Discard("no")

    async def retry(job: Job) -> None:
        raise pgworkerd.Retry(after=2)

    pool.start(job(1), discard, pool.take_slot())
    pool.start(job(2), retry, pool.take_slot())
    done = {f.job.id: f.outcome for f in wait_finished(pool, 2)}
    assert (done[1].kind, done[1].error) == ("discarded", "no")
    assert (done[2].kind, done[2].delay_s) == ("retry", 2.0)
