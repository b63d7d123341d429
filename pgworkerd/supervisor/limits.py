"""Limit checks on a child's jobs: max runtime and lease lapse. Pure: given a ledger
and the time (host's CLOCK_MONOTONIC), they say what to do; the supervisor does it.

Runtime: a job past its max runtime first gets a soft timeout (JobTimeout raised in
its handler, which may clean up); SOFT_TIMEOUT_GRACE_S later its process is killed.
The kill is the only authority on runtime. A cancelled running job likewise: its
process is killed CANCEL_GRACE_S after JobCancelled was asked for, if it still runs.

Lease lapse: a lease is renewed every lease_ttl / 3. When renewals keep failing (or
keep skipping one job's row, locked by another transaction: jobs_renew never waits on
it) and a job's last good renewal is UNFENCED_FRACTION of lease_ttl old, its lease is
about to lapse: a handler still running would soon run unfenced, so its process is
killed, and jobs not started are given up (their child told to skip them) and left for
a rescue. Each job by its own last renewal: a skipped lease stops its own job only.
A cancelled job still running (CANCELLING) is not renewed, but its cancelled row holds
its lease and its place under a concurrency limit until the handler ends (HELD in
storage/sql/queries.sql): its process is killed at the same moment before that lease
lapses, if the cancel's grace has not ended it first, so that a rescue never frees the
place while the handler runs.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from pgworkerd.supervisor.ledger import (
    CANCEL_GRACE_S,
    SOFT_TIMEOUT_GRACE_S,
    ChildLedger,
    JobState,
    LedgerJob,
)

UNFENCED_FRACTION = 0.8  # of lease_ttl without a renewal: stop the jobs ourselves


@dataclass(frozen=True, slots=True)
class RuntimeVerdict:
    soft_timeout: list[LedgerJob]  # past max runtime: raise JobTimeout in them now
    kill: list[LedgerJob]  # past the grace too: kill their process (KillReason.TIMEOUT)
    # cancelled, still running at the end of the grace: kill (KillReason.CANCELLED)
    cancel_kill: list[LedgerJob] = field(default_factory=list)


def check_runtimes(ledger: ChildLedger, now: float) -> RuntimeVerdict:
    moment = ledger.moments().next_runtime
    if moment is None or now < moment:
        return _NO_RUNTIME_ACTION  # the loop's usual case: nothing is due
    soft, kill = [], []
    for job in ledger.in_state(JobState.RUNNING):
        deadline = job.deadline()
        if deadline is None or now < deadline:
            continue
        if job.soft_timeout_at is None:
            soft.append(job)
        elif now >= job.soft_timeout_at + SOFT_TIMEOUT_GRACE_S:
            kill.append(job)
    cancel_kill = [
        job
        for job in ledger.in_state(JobState.CANCELLING)
        if job.cancelled_at is not None and now >= job.cancelled_at + CANCEL_GRACE_S
    ]
    return RuntimeVerdict(soft, kill, cancel_kill)


def next_runtime_moment(ledger: ChildLedger) -> float | None:
    """The next moment check_runtimes has something to say about these jobs."""
    return ledger.moments().next_runtime


_NO_RUNTIME_ACTION = RuntimeVerdict([], [])


@dataclass(frozen=True, slots=True)
class LapseVerdict:
    running: list[LedgerJob]  # their handlers run: kill the process (KillReason.UNFENCED)
    unstarted: list[LedgerJob]  # give them up
    # cancelled, still running as their held lease nears its end: kill the process for
    # their sake (KillReason.CANCELLED)
    cancelled: list[LedgerJob] = field(default_factory=list)


def lapse_moment(job: LedgerJob, lease_ttl_s: float) -> float:
    return job.renewed_at + UNFENCED_FRACTION * lease_ttl_s


def check_lapses(ledger: ChildLedger, now: float, lease_ttl_s: float) -> LapseVerdict:
    moment = next_lapse(ledger, lease_ttl_s)
    if moment is None or now < moment:
        return _NO_LAPSE  # the loop's usual case: renewals keep up
    # Jobs whose handler returned need nothing from us: only their fenced write is left.
    lapsing = [
        job
        for job in ledger.jobs.values()
        if job.state in (JobState.CLAIMED, JobState.RUNNING, JobState.CANCELLING)
        and now >= lapse_moment(job, lease_ttl_s)
    ]
    return LapseVerdict(
        [job for job in lapsing if job.state is JobState.RUNNING],
        [job for job in lapsing if job.state is JobState.CLAIMED],
        [job for job in lapsing if job.state is JobState.CANCELLING],
    )


def next_lapse(ledger: ChildLedger, lease_ttl_s: float) -> float | None:
    """The next moment a lease of these jobs needs us, if it goes unrenewed."""
    earliest = ledger.moments().earliest_renewal
    return None if earliest is None else earliest + UNFENCED_FRACTION * lease_ttl_s


_NO_LAPSE = LapseVerdict([], [])
