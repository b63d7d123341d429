"""`pgworkerd run` with a wall-clock mark at each hop of an idle worker's wake-up, for
bench.latency_abab --hops (run by path, not imported: it must work on another
checkout's pgworkerd, which need not have this file).

    BENCH_HOPS_DIR=DIR python bench/hoptrace.py run -c CONFIG

Each process appends `<event> <time.time()> <time.thread_time()>` lines to
DIR/<pid>.hops (the CPU time tells a hop's own work from its waits for a CPU):
  sup_select     the supervisor's select returned with the listening socket readable
  sup_wake       the supervisor wrote `wake` on a child's control pipe
  wk_select      an idle worker's select returned
  wk_claim_sent  a worker is about to claim (complete_and_claim, or claim_one, called)
  wk_claim_back  its claim returned
  wk_handler     the executor is about to call a handler
The handler's own start is also the job's result (bench.handlers.stamp).
With BENCH_HOPS_EXTRA=1 too (bench.latency_abab --tail), what else each process does,
to set beside a slow job's hops: `sup_db:<what>` / `sup_db_end:<what>` around each of
the supervisor's round trips (DatabaseSession.attempt: renewal, rescue, sample...),
`sup_notified` after it read the notifications, `wk_look` / `wk_look_end` around an idle
worker's look for its next due job, and `gc_start:<generation>` / `gc_stop:<generation>`
around every collection of Python's cyclic GC, in every process.
With BENCH_HOPS_PROFILE=1 too, the supervisor's and each worker's `run` run under
cProfile timed by thread CPU time (waits cost nothing), saved to DIR/<pid>.prof.
With BENCH_HOPS_CSW=FILE too, each worker appends to FILE, per claim that reaches a
handler, `<pid> <time> <ms from claim returned to handler called> <its thread CPU ms>
<involuntary context switches between>` (getrusage of the thread: a switch there is a
preemption, e.g. by the supervisor woken by `claimed`). The marks are patched in from
outside (by name; a name the checkout lacks is left alone) and cost a
write system call each.
"""

from __future__ import annotations

import cProfile
import gc
import os
import resource
import runpy
import select
import selectors
import sys
import time
import types
from collections.abc import Callable
from typing import Any

OUT = os.environ.get("BENCH_HOPS_DIR", "")
_state: dict[str, int] = {"pid": -1, "fd": -1}


def mark(event: str) -> None:
    if event in ("wk_claim_back", "wk_handler") and os.environ.get("BENCH_HOPS_CSW"):
        _csw_mark(event)
    t, cpu = time.time(), time.thread_time()
    pid = os.getpid()
    if _state["pid"] != pid:  # a forked child: its inherited descriptor was closed
        _state["fd"] = os.open(
            os.path.join(OUT, f"{pid}.hops"), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644
        )
        _state["pid"] = pid
    os.write(_state["fd"], f"{event} {t:.6f} {cpu:.6f}\n".encode())


_csw: dict[str, tuple[float, float, int]] = {}


def _csw_mark(event: str) -> None:
    """BENCH_HOPS_CSW: the preemptions of a worker from its claim's return to its handler."""
    t, cpu = time.time(), time.thread_time()
    nivcsw = resource.getrusage(resource.RUSAGE_THREAD).ru_nivcsw
    if event == "wk_claim_back":
        _csw["back"] = (t, cpu, nivcsw)
    elif "back" in _csw:
        t0, cpu0, n0 = _csw.pop("back")
        step, own = (t - t0) * 1e3, (cpu - cpu0) * 1e3
        with open(os.environ["BENCH_HOPS_CSW"], "a") as out:
            out.write(f"{os.getpid()} {t:.6f} {step:.3f} {own:.3f} {nivcsw - n0}\n")


def _after(fn: Callable[..., Any], event: str) -> Callable[..., Any]:
    def wrapped(*args: Any, **kwargs: Any) -> Any:
        value = fn(*args, **kwargs)
        mark(event)
        return value

    return wrapped


def _before(fn: Callable[..., Any], event: str) -> Callable[..., Any]:
    def wrapped(*args: Any, **kwargs: Any) -> Any:
        mark(event)
        return fn(*args, **kwargs)

    return wrapped


def _around(fn: Callable[..., Any], before: str, after: str) -> Callable[..., Any]:
    def wrapped(*args: Any, **kwargs: Any) -> Any:
        mark(before)
        value = fn(*args, **kwargs)
        mark(after)
        return value

    return wrapped


class _TracingSelector(selectors.DefaultSelector):  # type: ignore[misc,valid-type]
    def select(self, timeout: float | None = None) -> list[Any]:
        events = super().select(timeout)
        if any(key.data == "listener" for key, _ in events):
            mark("sup_select")
        return events


def _profiled(fn: Callable[..., Any]) -> Callable[..., Any]:
    def wrapped(*args: Any, **kwargs: Any) -> Any:
        profile = cProfile.Profile(time.thread_time)
        profile.enable()
        try:
            return fn(*args, **kwargs)
        finally:
            profile.disable()
            profile.dump_stats(os.path.join(OUT, f"{os.getpid()}.prof"))

    return wrapped


def _on_gc(phase: str, info: dict[str, Any]) -> None:
    mark(f"gc_{phase}:{info['generation']}")


def _install_extra() -> None:
    from pgworkerd.housekeeping import notifications, session
    from pgworkerd.storage import store

    attempt = session.DatabaseSession.attempt

    def traced_attempt(self: Any, what: str, work: Callable[..., Any]) -> Any:
        name = what.replace(" ", "_")
        mark(f"sup_db:{name}")
        try:
            return attempt(self, what, work)
        finally:
            mark(f"sup_db_end:{name}")

    session.DatabaseSession.attempt = traced_attempt  # type: ignore[method-assign]
    notifications.Notifications.received = _after(  # type: ignore[method-assign]
        notifications.Notifications.received, "sup_notified"
    )
    store.JobStore.next_run_in = _around(  # type: ignore[method-assign]
        store.JobStore.next_run_in, "wk_look", "wk_look_end"
    )
    gc.callbacks.append(_on_gc)  # inherited by the forked workers


def install() -> None:
    from pgworkerd.ipc import control
    from pgworkerd.storage import store
    from pgworkerd.supervisor import core
    from pgworkerd.worker import base, execution, loop

    if os.environ.get("BENCH_HOPS_EXTRA"):
        _install_extra()
    if os.environ.get("BENCH_HOPS_PROFILE"):
        core.Supervisor.run = _profiled(core.Supervisor.run)  # type: ignore[method-assign]
        base.BaseWorker._loop = _profiled(loop.Worker._loop)  # type: ignore[method-assign]
        loop.Worker._loop = base.BaseWorker._loop  # type: ignore[method-assign]
    core_selectors = types.SimpleNamespace(**vars(selectors))
    core_selectors.DefaultSelector = _TracingSelector
    core.selectors = core_selectors  # type: ignore[assignment]
    control.ControlWriter.wake = _after(control.ControlWriter.wake, "sup_wake")  # type: ignore[method-assign]
    worker_select = types.SimpleNamespace(**vars(select))
    worker_select.select = _after(select.select, "wk_select")
    loop.select = worker_select  # type: ignore[assignment]
    execution.Executor.run = _before(execution.Executor.run, "wk_handler")  # type: ignore[method-assign]
    store.JobStore.complete_and_claim = _around(  # type: ignore[method-assign]
        store.JobStore.complete_and_claim, "wk_claim_sent", "wk_claim_back"
    )
    if hasattr(store.JobStore, "claim_one"):  # a woken worker's claim, where there is one
        store.JobStore.claim_one = _around(  # type: ignore[method-assign]
            store.JobStore.claim_one, "wk_claim_sent", "wk_claim_back"
        )


if __name__ == "__main__":
    sys.path.pop(0)  # this file's folder (bench/): its modules must not shadow others
    install()
    sys.argv[0] = "pgworkerd"
    runpy.run_module("pgworkerd", run_name="__main__", alter_sys=True)
