"""A worker child's successes waiting to be written, and when to write them.

Writing each success in its own transaction caps a worker at one commit per job.
Like River's completer, a child keeps its successes here and writes them together
(with its next claim, in one transaction: see `JobStore.complete_and_claim`). A
success not yet written only makes its job run again if the child dies before the
write: at-least-once holds, and the supervisor charges that start at once. So the
buffer is flushed early whenever holding on could cost much:

  * it holds `limit` successes (the batch size);
  * its oldest success has waited `max_wait_s`;
  * the next job is of a kind not known to be quick: it might run for minutes, with
    finished work sitting unwritten behind it.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from pgworkerd.job import Job

MAX_WAIT_S = 0.05  # River's completer waits at most 50 ms (or 100 jobs)
QUICK_JOB_S = 0.01  # a kind whose last run took less than this is expected to be quick


# Not frozen: a frozen dataclass's __init__ sets each field through object.__setattr__,
# about three times the cost, on every job; nothing changes a Success once made.
@dataclass(slots=True)
class Success:
    job: Job
    result_json: str | None
    duration_ms: float


class SuccessBuffer:
    """Only the child's main loop reads and writes it."""

    def __init__(
        self,
        limit: int,
        *,
        max_wait_s: float = MAX_WAIT_S,
        clock: Callable[[], float] = time.monotonic,  # seconds; a fake one in tests
    ) -> None:
        self.limit = max(1, limit)
        self.max_wait_s = max_wait_s
        self._clock = clock
        self._pending: list[Success] = []
        self._oldest_at = 0.0  # monotonic time of the first pending success
        self._last_run_s: dict[str, float] = {}  # job kind -> how long its last run took

    def ran(self, job: Job, seconds: float) -> None:
        """Note how long a job's handler took, whatever its outcome."""
        self._last_run_s[job.kind] = seconds

    def succeeded(self, success: Success, seconds: float) -> None:
        """A success to write, whose handler ran `seconds` (as `ran` notes it for any
        other outcome): pending from now, and the wait starts with the first."""
        self._last_run_s[success.job.kind] = seconds
        pending = self._pending
        if not pending:
            self._oldest_at = self._clock()
        pending.append(success)

    def due(self) -> bool:
        """Full, or its oldest success waited long enough."""
        return bool(self._pending) and (
            len(self._pending) >= self.limit or self._clock() - self._oldest_at >= self.max_wait_s
        )

    def due_in_s(self) -> float | None:
        """Seconds until the oldest success is due to be written (0: now); None: none."""
        if not self._pending:
            return None
        if len(self._pending) >= self.limit:
            return 0.0
        return max(0.0, self._oldest_at + self.max_wait_s - self._clock())

    def due_before(self, job: Job) -> bool:
        """Whether to write what is pending before `job` starts: `due()`, or `job` is of
        a kind not known to be quick. Asked before every job start: `due()`'s test is
        written out here, not called (a call a job)."""
        pending = self._pending
        if not pending:
            return False
        last = self._last_run_s.get(job.kind)
        return (
            last is None
            or last >= QUICK_JOB_S
            or len(pending) >= self.limit
            or self._clock() - self._oldest_at >= self.max_wait_s
        )

    def take(self) -> list[Success]:
        taken, self._pending = self._pending, []
        return taken

    def put_back(self, successes: list[Success]) -> None:
        """Successes whose write failed: still to be written, and first."""
        if successes:
            if not self._pending:
                self._oldest_at = self._clock()
            self._pending = successes + self._pending
