"""The supervisor acting on its children's limits: runtime kills, leases about to
lapse, cancels of running jobs, and what a renewal that answered says. The checks are
pure (limits.py, the ledger); this module logs and signals."""

from __future__ import annotations

import logging
import signal
import time
from collections.abc import Collection, Iterable

from pgworkerd import logs
from pgworkerd.housekeeping import Renewal
from pgworkerd.job import Lease
from pgworkerd.supervisor import limits, osutil
from pgworkerd.supervisor.children import ChildProcess
from pgworkerd.supervisor.ledger import JobState, KillReason, LedgerJob

log = logging.getLogger("pgworkerd.supervisor")


def _unkilled(children: Iterable[ChildProcess]) -> list[ChildProcess]:
    return [child for child in children if child.kill_reason is None]


def enforce_runtimes(children: Iterable[ChildProcess], now: float) -> None:
    """Soft timeout for a job past its max runtime; its process killed after the grace."""
    for child in _unkilled(children):
        verdict = limits.check_runtimes(child.ledger, now)
        for job in verdict.soft_timeout:
            logs.event(
                log,
                logging.WARNING,
                "job past its max runtime; soft timeout sent",
                job=job.id,
                kind=job.kind,
                worker=child.name,
                max_runtime_s=job.max_runtime_s,
            )
            child.ledger.soft_timeout_sent(job, now)
            child.control.timeout(job.id)  # which job: the signal only wakes the child
            osutil.signal_process(child.pid, signal.SIGUSR1)
        _kill_for(child, verdict.kill, KillReason.TIMEOUT, "job past its max runtime")
        _kill_for(
            child,
            verdict.cancel_kill,
            KillReason.CANCELLED,
            "cancelled job still running after the grace",
        )


def _kill_for(child: ChildProcess, jobs: list[LedgerJob], reason: KillReason, why: str) -> None:
    """Kill the child for these jobs' sake (none: nothing to do), saying why for each."""
    for job in jobs:
        logs.event(
            log,
            logging.ERROR,
            f"{why}; killing worker",
            job=job.id,
            kind=job.kind,
            worker=child.name,
        )
    if jobs:
        child.kill(reason, jobs)


def stop_cancelled(children: Iterable[ChildProcess], leases: Iterable[Lease], now: float) -> None:
    """Running jobs cancelled under these leases: JobCancelled in their handlers (their
    process killed after the grace). An unstarted one is skipped; a lease we do not
    hold is another daemon's."""
    wanted = set(leases)
    if not wanted:
        return
    for child in _unkilled(children):
        child.sync_starts()  # a job started since the last look is interrupted, not skipped
        jobs = [job for job in child.ledger.jobs.values() if job.lease in wanted]
        _stop(child, [job for job in jobs if job.state is JobState.RUNNING], now)
        unstarted = [job for job in jobs if job.state is JobState.CLAIMED]
        child.give_up(unstarted, cancelled_at=now)


def _stop(child: ChildProcess, jobs: Iterable[LedgerJob], now: float) -> None:
    for job in jobs:
        if not child.ledger.cancelling(job, now):
            continue
        logs.event(
            log,
            logging.INFO,
            "job cancelled while running; JobCancelled sent",
            job=job.id,
            kind=job.kind,
            worker=child.name,
        )
        child.interrupt_cancelled(job)


def next_runtime_moment(children: Iterable[ChildProcess]) -> float | None:
    moments = [limits.next_runtime_moment(child.ledger) for child in _unkilled(children)]
    return min((m for m in moments if m is not None), default=None)


def stop_lapsing_leases(children: Iterable[ChildProcess], now: float, lease_ttl_s: float) -> None:
    """Checked on every turn of the loop, not only when a renewal fails: a renewal
    that hangs, or a loop that was busy, must not let a lease run out under a
    handler that is still running."""
    verdicts = [
        (child, limits.check_lapses(child.ledger, now, lease_ttl_s))
        for child in _unkilled(children)
    ]
    for child, verdict in verdicts:
        if verdict.cancelled and not verdict.running:  # a renewal failure kills it anyway
            _kill_for(
                child,
                verdict.cancelled,
                KillReason.CANCELLED,
                "cancelled job still running as its unrenewed lease nears its end",
            )
    verdicts = [(child, v) for child, v in verdicts if v.running or v.unstarted]
    if not verdicts:
        return
    # Per job: the renewals failing (the database unreachable) stop every job together;
    # one whose row another transaction keeps locked (jobs_renew skips it) is stopped
    # alone, its process's other jobs released uncharged (KillReason.UNFENCED).
    logs.event(
        log,
        logging.ERROR,
        "cannot renew leases; stopping their jobs",
        running=sum(len(v.running) for _, v in verdicts),
        unstarted=sum(len(v.unstarted) for _, v in verdicts),
        jobs=sorted(job.id for _, v in verdicts for job in (*v.running, *v.unstarted)),
    )
    for child, verdict in verdicts:
        if verdict.running:  # its unstarted jobs are released when it is reaped
            child.kill(KillReason.UNFENCED, verdict.running)
        else:
            child.give_up(verdict.unstarted)


def next_lapse(children: Iterable[ChildProcess], lease_ttl_s: float) -> float | None:
    """The next moment a lease of a child not being killed needs us, if unrenewed."""
    moments = [limits.next_lapse(child.ledger, lease_ttl_s) for child in _unkilled(children)]
    return min((m for m in moments if m is not None), default=None)


def judge_renewal(child: ChildProcess, sent: Collection[Lease], renewal: Renewal) -> None:
    """Act on what a renewal of `sent` found: a running job whose lease is gone has
    JobCancelled raised in it if it was cancelled, else (rescued by another daemon)
    its process killed; an unstarted one is skipped."""
    verdict = child.ledger.renewal(
        sent, renewal.renewed, renewal.sent_at, renewal.cancelled, renewal.locked
    )
    _stop(child, verdict.cancelled, time.monotonic())  # a cancel notification missed
    for job in verdict.lost_running:
        logs.event(
            log,
            logging.WARNING,
            "job lease lost (rescued elsewhere); stopping its worker",
            job=job.id,
            worker=child.name,
        )
    if verdict.lost_running:
        child.kill(KillReason.LEASE_LOST, verdict.lost_running)
    if verdict.given_up:
        child.give_up(verdict.given_up)
