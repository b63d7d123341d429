"""Handlers the daemon tests run, importable as `tests.handlers:<name>`.

Each writes what it did to the test's own `history` table (created by the tests) so
the tests can see starts, attempts and pids; the DSN comes from the environment.
"""

from __future__ import annotations

import asyncio
import ctypes
import os
import select
import signal
import subprocess
import sys
import time
from typing import Any

import psycopg

import pgworkerd
from pgworkerd.supervisor import osutil


def _record(job: pgworkerd.Job, event: str) -> None:
    with psycopg.connect(os.environ["PGWORKERD_TEST_HISTORY_DSN"], autocommit=True) as conn:
        conn.execute(
            "INSERT INTO history (job_id, attempt, lease_token, pid, event)"
            " VALUES (%s, %s, %s, %s, %s)",
            (job.id, job.attempt, job.lease_token, os.getpid(), event),
        )


def _pause(seconds: float) -> None:
    """time.sleep, but also under libfaketime with a true monotonic clock (its 0.9.10
    turns Python 3.11's absolute-deadline clock_nanosleep into EINVAL, libfaketime
    #426; select() is left alone). Interrupted by signals as time.sleep is."""
    select.select([], [], [], seconds)


def noop(job: pgworkerd.Job) -> None:
    return None


def environment_variable(job: pgworkerd.Job) -> str | None:
    """What a handler sees of one environment variable (payload["name"])."""
    return os.environ.get(job.payload["name"])


def public_names_not_loaded(job: pgworkerd.Job) -> list[str]:
    """The public names (pgworkerd.result, cancel, ...) this worker would load itself on
    first use: none, if the supervisor loaded them all before its fork."""
    return [name for name in pgworkerd.__all__ if name not in vars(pgworkerd)]


def modules_loaded(job: pgworkerd.Job) -> list[str]:
    """Which of the modules payload["names"] this worker has imported (inherited from
    the supervisor's imports before the fork, or its own since)."""
    return [name for name in job.payload["names"] if name in sys.modules]


def c_sleep(job: pgworkerd.Job) -> dict[str, float]:
    """Blocks in C for payload["seconds"] (libc sleep(3), as a C extension's blocking
    call would), which a signal cuts short; records its start. How long it slept, and
    what it did not."""
    _record(job, "start")
    started = time.monotonic()
    unslept = ctypes.CDLL(None, use_errno=True).sleep(int(job.payload["seconds"]))
    return {"slept_s": round(time.monotonic() - started, 2), "unslept_s": unslept}


def collector_generations(job: pgworkerd.Job) -> dict[str, int]:
    """How many objects this worker's cyclic garbage collector keeps frozen (never
    walked), how many a full collection would walk, and how many of those are the
    worker's own start-up objects (its Worker, made after the fork)."""
    import gc

    walked = gc.get_objects()
    workers = [o for o in walked if type(o).__module__.startswith("pgworkerd.worker.")]
    return {"frozen": gc.get_freeze_count(), "walked": len(walked), "workers": len(workers)}


def record(job: pgworkerd.Job) -> dict[str, Any]:
    _record(job, "start")
    return {"pid": os.getpid()}


def follow_up(job: pgworkerd.Job) -> int:
    """Enqueues a `record` job as an application's handler would: pgworkerd.enqueue on a
    connection of its own, no schema named."""
    with psycopg.connect(os.environ["PGWORKERD_DATABASE_URL"], autocommit=True) as conn:
        return pgworkerd.enqueue(conn, "record", {"after": job.id})


async def record_async(job: pgworkerd.Job) -> str:
    _record(job, "start")
    return "async ok"


def fail(job: pgworkerd.Job) -> None:
    _record(job, "start")
    raise RuntimeError(f"failing on purpose, attempt {job.attempt}")


def fail_then_succeed(job: pgworkerd.Job) -> str:
    _record(job, "start")
    if job.attempt < job.payload.get("succeed_at", 2):
        raise pgworkerd.Retry(after=0.2)
    return "finally"


def discard(job: pgworkerd.Job) -> None:
    _record(job, "start")
    raise pgworkerd.Discard("this job can never work")


def sleep(job: pgworkerd.Job) -> str:
    """Sleeps payload["seconds"]; records start and end."""
    _record(job, "start")
    _pause(job.payload.get("seconds", 1))
    _record(job, "end")
    return "slept"


async def sleep_async(job: pgworkerd.Job) -> str:
    """Awaits payload["seconds"]; records start and end (from a thread: the recording
    is blocking I/O)."""
    await asyncio.to_thread(_record, job, "start")
    await asyncio.sleep(job.payload.get("seconds", 1))
    await asyncio.to_thread(_record, job, "end")
    return "awaited"


def tick(job: pgworkerd.Job) -> str:
    """Records a "tick" every 0.1 s for payload["seconds"]: while it ticks, its
    handler runs (a killed one stops ticking)."""
    _record(job, "start")
    deadline = time.monotonic() + job.payload.get("seconds", 1)
    while time.monotonic() < deadline:
        _record(job, "tick")
        _pause(0.1)
    _record(job, "end")
    return "ticked"


def spin(job: pgworkerd.Job) -> str:
    """Runs Python for payload["seconds"] in short sleeps, so that JobTimeout, raised in
    its thread, reaches it between two of them; records that it did."""
    _record(job, "start")
    deadline = time.monotonic() + job.payload.get("seconds", 3600)
    try:
        while time.monotonic() < deadline:
            _pause(0.02)
    except pgworkerd.JobTimeout:
        _record(job, "soft_timeout")
        raise
    _record(job, "end")
    return "spun"


def block_in_c(job: pgworkerd.Job) -> None:
    """Masks every signal and blocks in C: only SIGKILL can end it."""
    _record(job, "start")
    signal.pthread_sigmask(signal.SIG_BLOCK, set(signal.Signals) - {signal.SIGKILL, signal.SIGSTOP})
    libc = ctypes.CDLL(None)
    libc.sleep(3600)


def catch_timeout(job: pgworkerd.Job) -> None:
    """Sleeps until the soft timeout, then records that it saw it."""
    _record(job, "start")
    try:
        time.sleep(3600)
    except pgworkerd.JobTimeout:
        _record(job, "soft_timeout")
        raise


def crash(job: pgworkerd.Job) -> None:
    _record(job, "start")
    os._exit(17)


def sleep_first_attempt(job: pgworkerd.Job) -> str:
    """Attempt 1 sleeps payload["seconds"] and answers "first"; later ones answer at once."""
    _record(job, "start")
    if job.attempt == 1:
        _pause(job.payload.get("seconds", 5))
        _record(job, "end")
        return "first"
    _record(job, "end")
    return f"attempt {job.attempt}"


def segfault(job: pgworkerd.Job) -> None:
    _record(job, "start")
    ctypes.string_at(0)


def hog(job: pgworkerd.Job) -> str:
    """Attempt 1 runs out of address space (RLIMIT_AS), as an out-of-memory job does."""
    import resource

    _record(job, "start")
    if job.attempt == 1:
        soft, hard = resource.getrlimit(resource.RLIMIT_AS)
        resource.setrlimit(resource.RLIMIT_AS, (256 * 1024 * 1024, hard))
        try:
            hoard = bytearray(1024 * 1024 * 1024)
            return str(len(hoard))
        finally:
            resource.setrlimit(resource.RLIMIT_AS, (soft, hard))
    _record(job, "end")
    return "fits now"


def work(job: pgworkerd.Job) -> str:
    """Records start, works payload["ms"] milliseconds, records end."""
    _record(job, "start")
    time.sleep(job.payload.get("ms", 10) / 1000)
    _record(job, "end")
    return "worked"


def spawn_then_die(job: pgworkerd.Job) -> str:
    """Attempt 1 starts a grandchild (`sleep`, in the worker's process group), records
    its pid, then crashes its worker (payload how="crash") or blocks in C with every
    signal masked (how="block": only the runtime SIGKILL ends it). Later attempts
    succeed."""
    _record(job, "start")
    if job.attempt == 1:
        grandchild = subprocess.Popen(
            ["sleep", "600"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        _record(job, f"grandchild {grandchild.pid}")
        if job.payload["how"] == "crash":
            os._exit(17)
        signal.pthread_sigmask(
            signal.SIG_BLOCK, set(signal.Signals) - {signal.SIGKILL, signal.SIGSTOP}
        )
        ctypes.CDLL(None).sleep(3600)
    _record(job, "end")
    return "no grandchild this time"


def until_file(job: pgworkerd.Job) -> str:
    """Runs until the file at payload["path"] exists (the test creates it when it has
    seen what it waited for), at most payload["seconds"] (default a minute); records
    start and end. A job as long as the test needs, no sleep sized to a guess."""
    _record(job, "start")
    path = job.payload["path"]
    deadline = time.monotonic() + job.payload.get("seconds", 60)
    while not os.path.exists(path) and time.monotonic() < deadline:
        _pause(0.05)
    _record(job, "end")
    return "file seen"


def until_cancelled(job: pgworkerd.Job) -> str:
    """Runs Python in short sleeps for payload["seconds"] (default an hour); records
    "cancelled" when JobCancelled reaches it. With payload["stubborn"], it records that
    and goes on as if nothing happened: only the SIGKILL after the grace ends it."""
    _record(job, "start")
    deadline = time.monotonic() + job.payload.get("seconds", 3600)
    while time.monotonic() < deadline:
        try:
            _pause(0.02)
        except pgworkerd.JobCancelled:
            _record(job, "cancelled")
            if not job.payload.get("stubborn"):
                raise
    _record(job, "end")
    return "never cancelled"


def ticks_past_cancel(job: pgworkerd.Job) -> str:
    """Records a "tick" every 0.05 s for payload["seconds"] (default an hour), taking
    no notice of JobCancelled for payload["ignore_s"] seconds after it came (default
    for ever: only the SIGKILL after the grace ends it), then records "end" and
    returns (a success, as far as it knows), or with payload["then"] == "raise" raises
    JobCancelled. Its last tick or end is when its handler last ran. JobCancelled is
    asked for once, and may come during a tick's own write as well as its sleep."""
    _record(job, "start")
    deadline = time.monotonic() + job.payload.get("seconds", 3600)
    stop_at: float | None = None
    while time.monotonic() < deadline and (stop_at is None or time.monotonic() < stop_at):
        try:
            _record(job, "tick")
            _pause(0.05)
        except pgworkerd.JobCancelled:
            stop_at = time.monotonic() + job.payload.get("ignore_s", 3600)
            _record(job, "cancelled")
    _record(job, "end")
    if stop_at is not None and job.payload.get("then") == "raise":
        raise pgworkerd.JobCancelled(f"job {job.id} stopped at last")
    return "ended all the same"


async def until_cancelled_async(job: pgworkerd.Job) -> str:
    """Awaits payload["seconds"]; records "cancelled" when its task is interrupted."""
    await asyncio.to_thread(_record, job, "start")
    try:
        await asyncio.sleep(job.payload.get("seconds", 3600))
    except asyncio.CancelledError:
        await asyncio.shield(asyncio.to_thread(_record, job, "cancelled"))
        raise
    return "never cancelled"


def orphan(job: pgworkerd.Job) -> str:
    """Leaves an orphan behind: a double fork whose middle process exits at once, so
    the grandchild is re-parented to whoever reaps orphans (PID 1 of its namespace).
    The grandchild writes "<its pid> <its new parent's pid>" to payload["path"] once
    re-parented, waits for the file <path>.exit (at most 30 s), then exits: someone
    must reap it."""
    path = job.payload["path"]
    middle = os.fork()
    if middle == 0:
        os.setsid()  # out of the worker's process group: nothing kills it with the worker
        osutil.close_inherited_fds(set())  # not the worker's connection nor its pipes
        middle_pid = os.getpid()
        if os.fork() == 0:
            deadline = time.monotonic() + 10
            while os.getppid() == middle_pid and time.monotonic() < deadline:
                _pause(0.01)
            with open(path + ".tmp", "w") as out:
                out.write(f"{os.getpid()} {os.getppid()}")
            os.rename(path + ".tmp", path)
            deadline = time.monotonic() + 30
            while not os.path.exists(path + ".exit") and time.monotonic() < deadline:
                _pause(0.02)
            os._exit(0)
        os._exit(0)
    os.waitpid(middle, 0)
    return "left an orphan"


def progress_steps(job: pgworkerd.Job) -> str:
    """Reports progress from 0 to 100 in payload["steps"] steps, payload["pause"] seconds
    apart, each report also kept in the history ("progress <percent>"); returns right
    after reporting 100. With payload["ignore_cancel"], a JobCancelled is swallowed and
    the reports go on (until the kill after the grace)."""
    steps, pause = job.payload["steps"], job.payload["pause"]
    step = 0
    while step <= steps:
        try:
            if step:
                _pause(pause)
            percent = round(100 * step / steps, 2)
            job.progress(percent, f"step {step} of {steps}")
            _record(job, f"progress {percent}")
            step += 1
        except pgworkerd.JobCancelled:
            if not job.payload.get("ignore_cancel"):
                raise
    return "all steps done"


def pause_key_once(job: pgworkerd.Job) -> str:
    """Records each start; the first start of the job pauses its key for
    payload["seconds"] (PauseKey), the next one succeeds."""
    with psycopg.connect(os.environ["PGWORKERD_TEST_HISTORY_DSN"], autocommit=True) as conn:
        row = conn.execute(
            "SELECT count(*) FROM history WHERE job_id = %s AND event = 'start'", (job.id,)
        ).fetchone()
    _record(job, "start")
    if row is not None and row[0] == 0:
        raise pgworkerd.PauseKey(job.payload["seconds"])
    return "ran"
