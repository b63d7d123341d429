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

    Called when a process has finished starting: what it builds later (a job's
    objects) is collected as before; what a reload loads is frozen in its turn
    (freeze_after_reload). In the supervisor, before it forks: the children inherit
    the frozen generation, so their own call walks only what their boot added, and
    their collections no longer write to the pages of the objects they share with the
    supervisor (copy-on-write keeps them shared)."""
    gc.collect()
    gc.freeze()


def freeze_after_reload() -> None:
    """Freeze what a HUP's load left: the handler modules it imported for the first
    time (a big library, a model) and the new config. Left in the collected
    generations, with a module of 400,000 objects, the supervisor's full passes walked
    them all again (30-32 ms a pass, against 0.05), and each worker forked after the
    reload walked them in its boot's collection and so copied every page they sit on
    (its USS 7 -> 32 MB).

    Collect, then freeze, as at start-up; what was frozen before stays frozen. Thawing
    it first (gc.unfreeze()) would let the collector free cyclic garbage of the old
    configuration that had been frozen, but it costs a full pass over the whole heap at
    every HUP (76-111 ms with 450,000 objects; this costs one pass over what the load
    added, 40 ms for those 400,000, then 0.05 ms a HUP), and that pass writes to every
    object's header, so the pages the supervisor shares with the workers still
    draining are copied (a draining worker's USS 11 -> 45 MB). And it found nothing to
    free: over 50 reloads the frozen count stayed within 452,277-452,287 without it
    (452,262-452,268 with it; docs/design.md, round 23), since what a reload replaces
    (the config, the registry, the retired children) holds no reference cycle and is
    freed by its reference count, frozen or not. Only a cycle alive at this freeze and
    dropped after it would stay for good."""
    gc.collect()
    gc.freeze()
