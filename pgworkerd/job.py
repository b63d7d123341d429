"""What a handler receives, and what it may raise to steer the job."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from pgworkerd import progress as _progress


@dataclass(frozen=True, slots=True)
class Job:
    """One claimed job, as a handler sees it.

    `attempt` counts this start (the first run is attempt 1). `lease_token` identifies
    this claim: every write about the job is fenced by it.
    """

    id: int
    kind: str
    queue: str
    payload: Any
    attempt: int
    max_attempts: int
    priority: int = 0
    max_runtime_s: float | None = None  # None: the queue's, else the defaults' setting
    run_at: datetime | None = None
    created_at: datetime | None = None
    key: str | None = None  # the producer's key="...": its unit of key pauses
    lease_token: uuid.UUID | None = field(default=None, repr=False)
    # Position of the job's queue in the claimer's queue list, for ordering a batch.
    queue_order: int = field(default=0, repr=False, compare=False)

    def progress(self, percent: float, stage: str | None = None) -> None:
        """Report how far the job got (0 to 100) and, optionally, in which stage; from
        any thread or coroutine, as often as you like: it never waits for the database.
        Shown by `pgworkerd jobs show` and `status`. Written at most every half second
        (the latest value wins), only while this claim holds the job's lease. A percent
        that is not a number from 0 to 100 raises ValueError."""
        _progress.report(self, percent, stage)

    @property
    def lease(self) -> Lease:
        if self.lease_token is None:
            raise ValueError(f"job {self.id} holds no lease")
        return Lease(self.id, self.lease_token)


@dataclass(frozen=True, slots=True)
class Lease:
    """A claim on a job: the job id and the token its claim drew."""

    job_id: int
    token: uuid.UUID


class Retry(Exception):
    """Raise in a handler to run the job again after `after` seconds.

    The start still counts: a job that keeps asking to retry ends `dead` at
    `max_attempts`, like any other bounded retry.
    """

    def __init__(self, after: float = 0.0, reason: str | None = None) -> None:
        if isinstance(after, bool) or not isinstance(after, int | float) or not after >= 0:
            raise ValueError(f"Retry(after=...) needs seconds >= 0, got {after!r}")
        super().__init__(reason or f"retry requested in {after:g}s")
        self.after = float(after)
        self.reason = reason


class Discard(Exception):
    """Raise in a handler to end the job `dead` at once, with `reason` as its error."""

    def __init__(self, reason: str = "discarded by handler") -> None:
        super().__init__(reason)
        self.reason = reason


class JobTimeout(BaseException):
    """Raised inside a handler when its job passed its max runtime (the soft limit).

    A BaseException so a handler's `except Exception` does not swallow it; the hard
    limit (SIGKILL) follows anyway.
    """


class JobCancelled(BaseException):
    """Raised inside a handler whose job was cancelled while it ran (`pgworkerd jobs
    cancel`, `pgworkerd.cancel`). The job is already `cancelled` in the database: what
    the handler does next changes nothing there. It may clean up; if it has not ended
    after the grace, its process is killed (its neighbours are not charged).

    A BaseException, like JobTimeout, so a handler's `except Exception` does not
    swallow it.
    """
