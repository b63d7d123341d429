"""What a worker child is told at fork time."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from pgworkerd.storage.limits import QueueLimits
from pgworkerd.storage.store import Backoff, ClaimScope


@dataclass(frozen=True)
class WorkerSpec:
    """Everything a child needs, fixed at fork time."""

    pool: str
    index: int  # 1-based within the pool
    queues: tuple[str, ...]  # in claim order
    queue_max_attempts: tuple[int, ...]
    batch_size: int
    lease_ttl_s: float
    poll_interval_s: float
    database_url: str
    schema: str
    backoff: Backoff
    registry: Mapping[str, Callable[..., Any]]
    max_jobs: int | None
    max_memory_bytes: int | None
    log_format: str
    log_level: str
    supervisor_pid: int
    worker_id: str  # written into jobs.worker: hostname:supervisor pid/pool#index
    # The drain's bound: the supervisor kills us this long after it sends its SIGTERM.
    shutdown_timeout_s: float = 30.0
    threads: int = 1  # execution slots: jobs run at once (one start-board record each)
    # More handlers, loaded by the child after the fork (Django's: handlers.child_loader).
    # Called with worker_id, the id this worker writes into jobs.worker.
    boot: Callable[[str], Mapping[str, Callable[..., Any]]] | None = None
    # The flow-control limits of its limited queues (storage/limits.py); empty: none.
    limits: Mapping[str, QueueLimits] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return f"{self.pool}#{self.index}"

    def claim_scope(self) -> ClaimScope:
        """What every claim of this worker names (the spec is fixed for its life): its
        claims' and its connection's warm-up of them (JobStore.warm)."""
        return ClaimScope(
            queues=self.queues,
            lease_ttl_s=self.lease_ttl_s,
            worker=self.worker_id,
            max_attempts=self.queue_max_attempts,
        )
