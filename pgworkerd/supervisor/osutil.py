"""Small POSIX/Linux helpers for the process tree."""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import gc
import os
import signal

_PR_SET_PDEATHSIG = 1


def die_with_parent(sig: int = signal.SIGKILL) -> None:
    """Ask Linux to send `sig` to this process when its parent dies (no-op elsewhere)."""
    libc_name = ctypes.util.find_library("c")
    if not libc_name:
        return
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(libc_name, use_errno=True).prctl(_PR_SET_PDEATHSIG, sig, 0, 0, 0)


def close_inherited_fds(keep: set[int]) -> None:
    """Close every descriptor above stderr but `keep`: a forked child must not hold
    its parent's database socket, nor its siblings' pipes."""
    try:
        open_fds = [int(name) for name in os.listdir("/proc/self/fd")]
    except OSError:
        open_fds = list(range(3, os.sysconf("SC_OPEN_MAX") if hasattr(os, "sysconf") else 1024))
    for fd in open_fds:
        if fd > 2 and fd not in keep:
            with contextlib.suppress(OSError):
                os.close(fd)


def describe_exit(status: int, *, oom_hint: bool = True) -> str:
    """A wait status in words: 'exited with status 3', 'killed by SIGKILL'."""
    if os.WIFSIGNALED(status):
        number = os.WTERMSIG(status)
        try:
            name = signal.Signals(number).name
        except ValueError:
            name = f"signal {number}"
        hint = " (perhaps out of memory?)" if oom_hint and number == signal.SIGKILL else ""
        return f"killed by {name}{hint}"
    if os.WIFEXITED(status):
        return f"exited with status {os.WEXITSTATUS(status)}"
    return f"ended with wait status {status}"


def kill_group(pid: int, sig: int) -> None:
    """Signal a child's whole process group (it leads one); gone already is fine."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, sig)


def signal_process(pid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(pid, sig)


def freeze_start_up_heap() -> None:
    """Set what this process built while starting aside from the cyclic garbage
    collector: collect once (start-up's own garbage must not be frozen with the rest: a
    frozen object is never collected), then move every object still tracked to the
    permanent generation, which no collection walks.

    Why: a full (oldest-generation) collection walks every container object the process
    holds. The supervisor's and a worker's start-up leave 50,000 and more of them (the
    imported modules, psycopg, pydantic's models, the config; a Django project's apps
    many more), so each full pass took 13-47 ms on the bench machine, and the collector
    runs one every few seconds in a process that keeps allocating (the supervisor's
    housekeeping, a worker's jobs). A job woken during one waited for it: the slowest
    jobs of the idle latency runs (bench/results/issue23-round23-20261129.md). Those
    objects live as long as the process, so walking them finds nothing.

    Called when a process has finished starting: what it builds later (a reload's
    config, a job's objects) is collected as before. In the supervisor, before it
    forks: the children inherit the frozen generation, so their own call walks only
    what their boot added, and their collections no longer write to the pages of the
    objects they share with the supervisor (copy-on-write keeps them shared)."""
    gc.collect()
    gc.freeze()
