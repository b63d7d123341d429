"""The WorkerSpec of a worker a test runs in a process of its own with no database
behind it (tests/unit/test_worker_*.py): every field such a test repeats, and the ones
it varies as arguments."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from pgworkerd.storage.store import Backoff
from pgworkerd.worker.spec import WorkerSpec


def offline_spec(
    registry: dict[str, Callable[..., Any]],
    *,
    log_level: str = "warning",
    max_jobs: int | None = None,
    max_memory_bytes: int | None = None,
) -> WorkerSpec:
    """Pool `default` #1 over queue `q`, batches of 10, its supervisor the process that
    started this one, its database unreachable (nothing in the test may connect)."""
    return WorkerSpec(
        pool="default", index=1, queues=("q",), queue_max_attempts=(5,), batch_size=10,
        lease_ttl_s=60.0, poll_interval_s=1.0,
        database_url="postgresql://nobody@127.0.0.1:1/none", schema="pgworkerd",
        backoff=Backoff(), registry=registry, log_format="text", log_level=log_level,
        supervisor_pid=os.getppid(), worker_id="test:1/default#1",
        max_jobs=max_jobs, max_memory_bytes=max_memory_bytes,
    )  # fmt: skip
