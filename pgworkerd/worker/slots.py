"""The execution slots of a worker child that runs several jobs at once (`threads: N`).

Plain handlers run in a thread pool of the process; `async def` handlers run as tasks
on one event loop, in a thread of its own. Both share the N slots, numbered 0..N-1:
the number is the job's record on the start board (pgworkerd/ipc/start_board.py).
The threads and the loop start in the child after the fork, on first use: never in
the supervisor.

Only the child's main thread calls these methods; the job threads and the loop hand
finished jobs back through a queue and a byte on `wake_fd`, which the main thread's
select watches. The job threads and the loop never touch the database: the main
thread and its database thread (db_thread.py) do.

A job past its max runtime gets JobTimeout raised in its own thread (an asynchronous
exception: delivered at the handler's next Python instruction, never inside C code,
which is what the supervisor's SIGKILL after the grace is for) or in its task (the
task is cancelled, and the cancellation becomes JobTimeout). A cancelled job gets
JobCancelled the same way.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import inspect
import os
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from queue import SimpleQueue
from typing import Any

from pgworkerd.job import Job, JobCancelled, JobTimeout
from pgworkerd.worker.execution import Outcome, outcome_of_exception, outcome_of_value

Interruption = type[JobTimeout] | type[JobCancelled]


@dataclass(frozen=True, slots=True)
class Finished:
    job: Job
    slot: int
    outcome: Outcome
    ran_s: float


@dataclass
class _Running:
    slot: int
    thread: int | None = None  # ident of the thread running a plain handler
    task: asyncio.Task[Any] | None = None  # the task of a coroutine handler
    interrupted_by: Interruption | None = None


class SlotPool:
    def __init__(self, size: int, wake_fd: int) -> None:
        self.size = size
        self._free = list(range(size - 1, -1, -1))  # pop() takes the lowest
        self._wake_fd = wake_fd
        self._finished: SimpleQueue[Finished] = SimpleQueue()
        # A byte is on its way to the main thread for the jobs handed back since it last
        # took them: the others that end meanwhile write none (one wake-up, not one a
        # job). Cleared by the main thread before it takes them, so a job handed back
        # after that writes one again.
        self._wake_sent = False
        # Job threads and the loop register and unregister their jobs; the main thread
        # reads the registry to interrupt one. The lock makes that read and an
        # interruption one step against the job's end.
        self._lock = threading.Lock()
        self._running: dict[int, _Running] = {}
        # Jobs handed to a thread or the loop and not finished (the main thread's), and
        # the interruptions for those of them not registered yet: raised on registering.
        self._started: set[int] = set()
        self._pending: dict[int, Interruption] = {}
        self._threads: ThreadPoolExecutor | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread: threading.Thread | None = None

    @property
    def busy(self) -> int:
        return self.size - len(self._free)

    @property
    def free(self) -> int:
        return len(self._free)

    def take_slot(self) -> int:
        """A free slot for the next job (the caller checked `free`)."""
        return self._free.pop()

    def start(self, job: Job, handler: Callable[..., Any], slot: int) -> None:
        started = time.monotonic()
        self._started.add(job.id)
        if inspect.iscoroutinefunction(handler):
            coroutine = self._run_task(job, handler, slot, started)
            asyncio.run_coroutine_threadsafe(coroutine, self._event_loop())
        else:
            self._pool().submit(self._run_in_thread, job, handler, slot, started)

    def finished(self) -> list[Finished]:
        """The jobs that ended since the last call; their slots are free again."""
        self._wake_sent = False
        done = []
        while not self._finished.empty():
            item = self._finished.get()
            self._free.append(item.slot)
            self._started.discard(item.job.id)
            if self._pending:
                with self._lock:
                    self._pending.pop(item.job.id, None)
            done.append(item)
        self._free.sort(reverse=True)
        return done

    def interrupt(self, job_id: int, exception: Interruption = JobTimeout) -> bool:
        """Raise JobTimeout (or JobCancelled) in a running job; False if it is not
        running (any more). A job handed to its thread or task but not yet running its
        handler gets it as it begins."""
        with self._lock:
            running = self._running.get(job_id)
            if running is None:
                if job_id not in self._started:
                    return False
                self._pending[job_id] = exception
                return True
            running.interrupted_by = exception
            if running.thread is not None:
                _set_async_exception(running.thread, exception)
            elif running.task is not None and self._loop is not None:
                self._loop.call_soon_threadsafe(running.task.cancel)
            return True

    def close(self, loop_stop_timeout_s: float = 1.0) -> None:
        """Wait for no job thread (the caller ends the process next, with os._exit);
        stop and close the event loop, unless a coroutine blocks it."""
        if self._threads is not None:
            self._threads.shutdown(wait=False, cancel_futures=True)
        loop, thread = self._loop, self._loop_thread
        if loop is not None and thread is not None:
            loop.call_soon_threadsafe(loop.stop)
            thread.join(loop_stop_timeout_s)
            if not thread.is_alive():
                loop.close()
            self._loop = self._loop_thread = None

    # -- in the job threads and the loop --------------------------------------------------

    def _run_in_thread(self, job: Job, handler: Callable[..., Any], slot: int, t0: float) -> None:
        ident = threading.get_ident()
        try:
            with self._lock:  # before it, no JobTimeout can be on its way to this thread
                self._running[job.id] = _Running(slot, thread=ident)
                early = self._pending.pop(job.id, None)
            try:
                if early is not None:
                    raise _interruption(early, job)
                value = handler(job)
                if inspect.isawaitable(value):  # a plain function that returned one
                    value = asyncio.run(_awaited(value))
                outcome = outcome_of_value(value)
            except BaseException as exc:
                outcome = outcome_of_exception(exc)
            finally:
                self._unregister(job.id, ident)
        except (JobTimeout, JobCancelled) as exc:  # arrived just as the handler ended
            self._unregister(job.id, ident)
            outcome = outcome_of_exception(exc)
        self.hand_back(Finished(job, slot, outcome, time.monotonic() - t0))

    def _unregister(self, job_id: int, ident: int) -> None:
        """Forget the job, and any JobTimeout still on its way to this thread: after
        this, none can be sent (the registry no longer has the job)."""
        while True:
            try:
                with self._lock:
                    self._running.pop(job_id, None)
                    _set_async_exception(ident, None)
                return
            except (JobTimeout, JobCancelled):
                continue  # delivered inside the lock's block: forget it again

    async def _run_task(self, job: Job, handler: Callable[..., Any], slot: int, t0: float) -> None:
        running = _Running(slot, task=asyncio.current_task())
        with self._lock:
            self._running[job.id] = running
            running.interrupted_by = self._pending.pop(job.id, None)
        try:
            if running.interrupted_by is not None:
                raise asyncio.CancelledError  # interrupted before it began
            outcome = outcome_of_value(await handler(job))
        except asyncio.CancelledError:
            if running.interrupted_by is None:
                raise  # the loop is closing: the process is ending
            outcome = outcome_of_exception(_interruption(running.interrupted_by, job))
        except BaseException as exc:
            outcome = outcome_of_exception(exc)
        finally:
            with self._lock:
                self._running.pop(job.id, None)
        self.hand_back(Finished(job, slot, outcome, time.monotonic() - t0))

    def hand_back(self, finished: Finished) -> None:
        """A job ended (in any thread): its outcome goes to the main thread."""
        self._finished.put(finished)
        if self._wake_sent:
            return  # the main thread has yet to take the jobs: this one with them
        self._wake_sent = True
        with contextlib.suppress(BlockingIOError, OSError):
            os.write(self._wake_fd, b"j")  # a full pipe already wakes the main thread

    # -- set-up ---------------------------------------------------------------------------

    def _pool(self) -> ThreadPoolExecutor:
        if self._threads is None:
            self._threads = ThreadPoolExecutor(self.size, thread_name_prefix="pgworkerd-job")
        return self._threads

    def _event_loop(self) -> asyncio.AbstractEventLoop:
        if self._loop is None:
            loop = asyncio.new_event_loop()
            thread = threading.Thread(target=loop.run_forever, name="pgworkerd-loop", daemon=True)
            thread.start()
            self._loop, self._loop_thread = loop, thread
        return self._loop


def _interruption(exception: Interruption, job: Job) -> BaseException:
    if exception is JobCancelled:
        return JobCancelled(f"job {job.id} ({job.kind}) was cancelled")
    return JobTimeout(f"job {job.id} ({job.kind}) passed its max runtime")


async def _awaited(awaitable: Any) -> Any:
    return await awaitable


def _set_async_exception(thread_ident: int, exception: type[BaseException] | None) -> None:
    """Raise `exception` in the thread at its next Python instruction (None: take back
    one not yet raised). CPython's own API: there is no other way to interrupt a thread."""
    ctypes.pythonapi.PyThreadState_SetAsyncExc(
        ctypes.c_ulong(thread_ident), ctypes.py_object(exception) if exception else None
    )
