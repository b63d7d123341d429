"""The worker child: what it is told (spec.py), what every child does (base.py), its
loop one job at a time (loop.py) or several at once (concurrent.py, slots.py), its
connection (connection.py), its outcome writes (outcome_writer.py) and the successes
waiting for one (success_buffer.py)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from pgworkerd.contrib import otel_worker
from pgworkerd.ipc import BootError, ControlReader, ExitCode, StartBoard, StatusWriter
from pgworkerd.worker.base import BaseWorker
from pgworkerd.worker.connection import WORKER_OPTIONS, WORKER_PLAN_CACHE_MODE
from pgworkerd.worker.loop import Worker
from pgworkerd.worker.spec import WorkerSpec

__all__ = ["WORKER_OPTIONS", "WORKER_PLAN_CACHE_MODE", "WorkerSpec", "child_main"]


def child_main(
    spec: WorkerSpec,
    status_fd: int,
    control_fd: int,
    board: StartBoard,
    booted: Callable[[], None] = lambda: None,
) -> int:
    """Entry point in the forked child; returns the exit status. `booted` is called
    once the worker is ready, before its first claim."""
    status = StatusWriter(status_fd)
    try:
        if spec.boot is not None:  # after the fork: what must not cross it (Django)
            loaded = spec.boot(spec.worker_id)  # the id the jobs' `worker` column gets
            spec = dataclasses.replace(spec, registry={**spec.registry, **loaded})
        kind: type[BaseWorker] = Worker
        if spec.threads > 1:
            # Imported in the child only: its thread pool and event loop cost the
            # supervisor's start-up nothing when no pool runs threads.
            from pgworkerd.worker.concurrent import ConcurrentWorker

            kind = ConcurrentWorker
        worker = kind(spec, status, ControlReader(control_fd, board), board)
    except Exception as exc:
        status.send(BootError(f"{type(exc).__name__}: {exc}"))
        return ExitCode.BOOT_ERROR
    booted()
    try:
        return worker.run()
    finally:
        # The child ends with os._exit, which runs no atexit handler: the spans an
        # OpenTelemetry SDK still buffers are exported now or never (bounded, and within
        # the drain's deadline when drained).
        otel_worker.flush_spans(worker.exit_deadline)
