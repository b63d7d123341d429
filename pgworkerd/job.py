"""What a handler receives, and what it may raise to steer the job."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from pgworkerd import progress as _progress
from pgworkerd import timestamps
from pgworkerd.timestamps import MAX_DURATION_S


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
    # The W3C trace context (`traceparent`, `tracestate`) the job was enqueued under, or
    # None: the parent of the handler's span when the `otel` extra is installed.
    trace_context: dict[str, str] | None = field(default=None, repr=False, compare=False)
    # The ids of the jobs this one was enqueued after (workflows), () for none.
    after: tuple[int, ...] = field(default=(), compare=False)

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
        # Bounded as Snooze is (seconds only: no timedelta, as documented).
        after = _bounded_seconds("Retry(after=...) needs seconds", after)
        # A reason is stored as text: Retry(reason=exc) passes the exception itself.
        reason = None if reason is None else str(reason)
        super().__init__(reason or f"retry requested in {after:g}s")
        self.after = float(after)
        self.reason = reason


def _snooze_seconds(what: str, after: float | timedelta) -> float:
    if isinstance(after, timedelta):
        after = after.total_seconds()
    return _bounded_seconds(f"{what} needs seconds or a timedelta", after)


def _bounded_seconds(needs: str, after: object) -> float:
    """`after` as seconds from 0 to 100 years, else ValueError("<needs> from 0 to 100
    years ..."): an infinite wait failed its write in the database, and the worker with
    it, at every attempt; one of 1e11 s wrote a run_at in year ~5,000 that no reader
    could load back."""
    if (
        isinstance(after, bool)
        or not isinstance(after, int | float)
        or not 0 <= after <= MAX_DURATION_S
    ):
        raise ValueError(f"{needs} from 0 to 100 years ({MAX_DURATION_S:.0f} s), got {after!r}")
    return float(after)


class Snooze(Exception):
    """Raise in a handler to run the job again `after` seconds (or a timedelta) from
    now (database clock). This start is not charged: `attempt` is given back."""

    def __init__(self, after: float | timedelta = 0.0) -> None:
        self.after = _snooze_seconds("Snooze(after)", after)
        super().__init__(f"snoozed for {self.after:g}s")


class PauseKey(Exception):
    """Raise in a handler to put the job back uncharged and pause its key: no job with
    the same key starts on any daemon for `after` seconds (or a timedelta), or before
    `until` (a timezone-aware datetime, database clock); other keys go on. The job runs
    again when the pause ends. On a job without a key it acts as `Snooze`. A longer
    pause of the key already running is kept."""

    def __init__(
        self, after: float | timedelta | None = None, *, until: datetime | None = None
    ) -> None:
        if (after is None) == (until is None):
            raise ValueError("PauseKey needs after (seconds or a timedelta) or until=, one of them")
        if until is not None and (
            not isinstance(until, datetime) or until.tzinfo is None or until.utcoffset() is None
        ):
            raise ValueError(f"PauseKey(until=...) needs a timezone-aware datetime, got {until!r}")
        if until is not None and not timestamps.readable(until):
            raise ValueError(f"PauseKey(until=...) must fall between {timestamps.bounds()}")
        self.after = None if after is None else _snooze_seconds("PauseKey(after)", after)
        self.until = until
        super().__init__(
            f"key paused until {until.isoformat()}" if until else f"key paused for {self.after:g}s"
        )


class Discard(Exception):
    """Raise in a handler to end the job `dead` at once, with `reason` as its error."""

    def __init__(self, reason: str = "discarded by handler") -> None:
        # As text: `raise Discard(exc)` passes the exception, which the failure's write
        # could not store (the worker exited, and the job ended with its crash instead).
        reason = str(reason)
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
