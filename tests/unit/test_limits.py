"""Runtime and lease-lapse checks on a fake clock (plain numbers)."""

from __future__ import annotations

import uuid

from pgworkerd.ipc import Claimed, ClaimedJob, StartRecord
from pgworkerd.supervisor import limits
from pgworkerd.supervisor.ledger import (
    CANCEL_GRACE_S,
    SOFT_TIMEOUT_GRACE_S,
    ChildLedger,
    JobState,
)

T0 = 500.0
TTL = 30.0


def ledger_with(runtimes: list[float], *, started: int, at: float = T0) -> ChildLedger:
    ledger = ChildLedger()
    jobs = tuple(ClaimedJob(i + 1, str(uuid.uuid4()), "k", "q", r) for i, r in enumerate(runtimes))
    ledger.claimed(Claimed(1, at, False, jobs), lambda queue, runtime: runtime or 60.0)
    ledger.observe_starts([StartRecord(slot, slot + 1, at) for slot in range(started)])
    return ledger


def test_no_action_before_the_max_runtime() -> None:
    ledger = ledger_with([10.0], started=1)
    verdict = limits.check_runtimes(ledger, T0 + 9.99)
    assert verdict.soft_timeout == [] and verdict.kill == []
    assert limits.next_runtime_moment(ledger) == T0 + 10


def test_soft_timeout_at_the_max_runtime_then_kill_after_the_grace() -> None:
    ledger = ledger_with([10.0], started=1)
    verdict = limits.check_runtimes(ledger, T0 + 10)
    assert [job.id for job in verdict.soft_timeout] == [1] and verdict.kill == []
    ledger.soft_timeout_sent(verdict.soft_timeout[0], T0 + 10)
    grace_ends = T0 + 10 + SOFT_TIMEOUT_GRACE_S
    assert limits.next_runtime_moment(ledger) == grace_ends
    assert limits.check_runtimes(ledger, grace_ends - 0.01).kill == []
    verdict = limits.check_runtimes(ledger, grace_ends)
    assert [job.id for job in verdict.kill] == [1] and verdict.soft_timeout == []


def test_each_running_job_has_its_own_deadline() -> None:
    ledger = ledger_with([10.0, 20.0], started=2)
    assert [j.id for j in limits.check_runtimes(ledger, T0 + 15).soft_timeout] == [1]
    assert [j.id for j in limits.check_runtimes(ledger, T0 + 20).soft_timeout] == [1, 2]


def test_jobs_not_running_have_no_runtime_limit() -> None:
    ledger = ledger_with([10.0, 10.0], started=1)
    ledger.finishing([1])
    assert ledger.jobs[2].state is JobState.CLAIMED
    assert limits.check_runtimes(ledger, T0 + 1000).soft_timeout == []
    assert limits.next_runtime_moment(ledger) is None


def test_leases_lapse_at_a_fraction_of_the_ttl_after_their_last_renewal() -> None:
    ledger = ledger_with([60.0, 60.0, 60.0], started=2)  # 1, 2 running; 3 unstarted
    ledger.finishing([1])  # returned: only its fenced write is left, nothing to stop
    moment = T0 + limits.UNFENCED_FRACTION * TTL
    assert limits.next_lapse(ledger, TTL) == moment
    early = limits.check_lapses(ledger, moment - 0.01, TTL)
    assert early.running == [] and early.unstarted == []
    verdict = limits.check_lapses(ledger, moment, TTL)
    assert [j.id for j in verdict.running] == [2]
    assert [j.id for j in verdict.unstarted] == [3]


def test_a_renewal_pushes_the_lapse_back() -> None:
    ledger = ledger_with([60.0], started=1)
    ledger.renewal(set(ledger.leases()), renewed={1}, sent_at=T0 + 10)
    assert limits.next_lapse(ledger, TTL) == T0 + 10 + limits.UNFENCED_FRACTION * TTL


def test_given_up_and_lost_jobs_need_nothing_more() -> None:
    ledger = ledger_with([60.0, 60.0], started=1)
    ledger.renewal(set(ledger.leases()), renewed=set(), sent_at=T0)
    assert {j.state for j in ledger.jobs.values()} == {JobState.LOST, JobState.GIVEN_UP}
    assert limits.next_lapse(ledger, TTL) is None


def test_a_cancelled_job_still_running_after_the_grace_is_killed() -> None:
    ledger = ledger_with([10.0, 3600.0], started=2)
    ledger.cancelling(ledger.jobs[2], T0 + 1)
    grace_ends = T0 + 1 + CANCEL_GRACE_S
    assert limits.next_runtime_moment(ledger) == grace_ends
    early = limits.check_runtimes(ledger, grace_ends - 0.01)
    assert early.cancel_kill == [] and early.kill == []
    verdict = limits.check_runtimes(ledger, grace_ends)
    assert [job.id for job in verdict.cancel_kill] == [2] and verdict.kill == []
    # Its max runtime no longer applies; the neighbour's still does.
    assert [job.id for job in limits.check_runtimes(ledger, T0 + 10).soft_timeout] == [1]


def test_a_cancelled_job_still_running_is_killed_before_its_held_lease_lapses() -> None:
    """Its cancelled row keeps the lease (and its place under a concurrency limit) until
    the handler ends; unrenewed, that lease lapses from its last renewal on: the child is
    killed for the job's sake before a rescue could free the place."""
    ledger = ledger_with([3600.0, 3600.0], started=2)
    ledger.cancelling(ledger.jobs[1], T0 + 1)
    lapse = T0 + limits.UNFENCED_FRACTION * TTL
    assert limits.next_lapse(ledger, TTL) == lapse
    before = limits.check_lapses(ledger, lapse - 0.01, TTL)
    assert (before.running, before.unstarted, before.cancelled) == ([], [], [])
    ledger.renewal([ledger.jobs[2].lease], renewed={2}, sent_at=T0 + 5)  # only 2 renewed
    verdict = limits.check_lapses(ledger, lapse, TTL)
    assert [job.id for job in verdict.cancelled] == [1]
    assert verdict.running == [] and verdict.unstarted == []  # 2's lease is fine


def test_the_history_checker_counts_overlaps_and_windows() -> None:
    from datetime import datetime, timedelta

    from tests.limits_windows import most_at_once, most_in_window

    t0 = datetime(2026, 1, 1)

    def at(s: float) -> datetime:
        return t0 + timedelta(seconds=s)

    # An end at the instant of a start frees the place first.
    assert most_at_once([(at(0), at(2)), (at(1), at(3)), (at(2), at(4))]) == 2
    assert most_at_once([(at(0), at(5)), (at(1), at(2)), (at(1.5), at(3))]) == 3
    # Windows are (t - period, t]: a start exactly one period earlier has left.
    assert most_in_window([at(0), at(0.5), at(1.0), at(1.2)], 1.0) == 3
    assert most_in_window([at(0), at(1), at(2)], 1.0) == 1


def test_a_lease_a_renewal_skipped_as_locked_lapses_alone() -> None:
    """Review 25 F4: the renewal answered, but skipped job 1's locked row: its lease
    keeps its last renewal and lapses from it; job 2, renewed, runs on."""
    ledger = ledger_with([600.0, 600.0], started=2)
    sent = set(ledger.leases())
    verdict = ledger.renewal(sent, renewed={2}, sent_at=T0 + 10, locked={1})
    assert verdict.lost_running == [] and verdict.given_up == []
    assert ledger.jobs[1].state is JobState.RUNNING and ledger.jobs[1].renewed_at == T0
    assert ledger.jobs[2].renewed_at == T0 + 10
    assert ledger.last_renewed(sent) == T0, "what the child's lease guard may be told"
    lapse = T0 + limits.UNFENCED_FRACTION * TTL
    assert limits.next_lapse(ledger, TTL) == lapse
    lapsing = limits.check_lapses(ledger, lapse, TTL)
    assert [job.id for job in lapsing.running] == [1] and lapsing.unstarted == []
    ledger.renewal(sent, renewed={1, 2}, sent_at=T0 + 20)  # the lock went: renewed again
    assert limits.check_lapses(ledger, lapse, TTL).running == []
