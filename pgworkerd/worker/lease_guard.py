"""A worker's own watch over the leases of the handlers it runs: the backstop for a
supervisor that stopped renewing them while its children ran on (stopped by SIGSTOP or
a debugger, its loop stuck in a slow handler import on HUP, starved by the host). The
supervisor stops a job whose lease went unrenewed for 80 % of lease_ttl itself
(supervisor/limits.py); a supervisor that does not turn cannot, and the lease ran out
under a running handler: another daemon rescued the job and ran it while the first
handler still ran (two handlers of one job, of a concurrency-1 queue).

The guard knows when each running job was claimed (its claim was sent: the lease runs
from no earlier) and reads on the start board when the last renewal that answered was
sent and which claims it covered. A running job whose lease has gone unrenewed for
GUARD_FRACTION of lease_ttl stops the whole worker (SIGKILL to its process group, the
handler's own children with it): its lease may be lost in a moment, and its outcome
could no longer be written anyway. After the supervisor's 80 %, so that a supervisor
that turns acts first, as it always did; before 100 %, when a rescue may take the job.

Its thread looks every CHECK_FRACTION of lease_ttl (at most every second): nothing per
job but a dict write and a delete. A first version slept until the earliest moment a
running job could lapse and was woken by a job's start when idle (an Event set from the
worker's main thread): between jobs it was often idle, and the wake-ups and the GIL's
hand-overs they asked for cost the tuned row 10 % of its rate, the workers 20 % more
CPU a job (bench/results/issue23-round21-20261129.md, section 6). Looking at a fixed
pace, it acts by (GUARD_FRACTION + CHECK_FRACTION) of lease_ttl, before the lease ends.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

GUARD_FRACTION = 0.9
CHECK_FRACTION = 0.05
MAX_CHECK_INTERVAL_S = 1.0


class LeaseGuard:
    def __init__(
        self,
        renewal: Callable[[], tuple[int, float]],  # StartBoard.renewal
        lease_ttl_s: float,
        on_lapse: Callable[[list[int]], None],  # the ids of the lapsed jobs; ends us
        clock: Callable[[], float] = time.monotonic,  # a fake one in tests
    ) -> None:
        self.renewal = renewal
        self.lease_ttl_s = lease_ttl_s
        self.on_lapse = on_lapse
        self.clock = clock
        self._running: dict[int, tuple[int, float]] = {}  # id -> (claim number, claimed at)
        self.interval_s = min(MAX_CHECK_INTERVAL_S, CHECK_FRACTION * lease_ttl_s)
        self._thread: threading.Thread | None = None

    # -- the worker's side (its main thread) ------------------------------------------------

    def started(self, job_id: int, number: int, claimed_at: float) -> None:
        self._running[job_id] = (number, claimed_at)

    def ended(self, job_id: int) -> None:
        self._running.pop(job_id, None)

    def start(self) -> None:
        self._thread = threading.Thread(target=self._watch, name="lease guard", daemon=True)
        self._thread.start()

    # -- the checks (pure but for the board's read) -----------------------------------------

    def lapsed(self, now: float) -> list[int]:
        """The running jobs whose lease has gone unrenewed too long at `now`."""
        return sorted(job_id for job_id, moment in self._moments().items() if now >= moment)

    def _moments(self) -> dict[int, float]:
        covered, renewed_at = self.renewal()
        margin = GUARD_FRACTION * self.lease_ttl_s
        return {
            job_id: (max(claimed_at, renewed_at) if number <= covered else claimed_at) + margin
            for job_id, (number, claimed_at) in list(self._running.items())
        }

    # -- the thread -------------------------------------------------------------------------

    def _watch(self) -> None:
        while True:
            time.sleep(self.interval_s)
            lapsed = self.lapsed(self.clock())
            if lapsed:
                self.on_lapse(lapsed)
                return
