"""The supervisor's answers about a batch half way through, asked only then: nothing
reads the ledger's records between the claim and the question (a busy child's usual
case, where a ledger may keep a claim as its rows), so each answer below is the first
look at the batch's jobs. Round 14's review of the no-op batch path; pass on main."""

from __future__ import annotations

import uuid

from pgworkerd.ipc import Claimed, ClaimedJob, StartRecord
from pgworkerd.job import Lease
from pgworkerd.supervisor import limits
from pgworkerd.supervisor.ledger import ChildLedger, JobState, KillReason

T0 = 1000.0
QUEUE_RUNTIME = {"fast": 2.0, "slow": 40.0}  # the config's per queue; else 60
TOKENS = {i: uuid.UUID(int=i) for i in range(1, 20)}


def runtime_for(queue: str, own: float | None) -> float:
    return own if own is not None else QUEUE_RUNTIME.get(queue, 60.0)


def _claim(
    ledger: ChildLedger, first: int, at: float, rows: list[tuple[int, str, float | None]]
) -> None:
    jobs = tuple(
        ClaimedJob(i, TOKENS[i].hex, f"kind-{queue}", queue, own) for i, queue, own in rows
    )
    ledger.claimed(Claimed(first, at, True, jobs), runtime_for)


def _busy_ledger() -> ChildLedger:
    """Two batches of a one-slot child: 1-4 at T0, 5-7 at T0 + 1; the board last showed
    job 6 starting at T0 + 3 (1-5 started and returned unseen), and the child said
    `finishing` of 1-3 and `done` of 1-2."""
    ledger = ChildLedger()
    _claim(ledger, 1, T0, [(1, "fast", None), (2, "slow", None), (3, "q", 0.5), (4, "q", None)])
    _claim(ledger, 5, T0 + 1, [(5, "fast", None), (6, "slow", 7.5), (7, "q", None)])
    ledger.observe_starts([StartRecord(0, 6, T0 + 3)])
    ledger.finishing([1, 2, 3])
    ledger.done([1, 2])
    return ledger


def test_a_child_dead_mid_batch_settles_each_job_by_what_it_was_doing() -> None:
    settled = {s.lease: s.charge_error for s in _busy_ledger().settlements(None, "was killed")}
    returned = "worker process was killed after the job's handler returned, before its outcome"
    assert list(settled) == [Lease(i, TOKENS[i]) for i in (3, 4, 5, 6, 7)], "claim order"
    assert [settled[Lease(i, TOKENS[i])] for i in (3, 4, 5)] == [f"{returned} was recorded"] * 3
    assert settled[Lease(6, TOKENS[6])] == "worker process was killed while running the job"
    assert settled[Lease(7, TOKENS[7])] is None, "never started: given back uncharged"


def test_a_runtime_kill_mid_batch_charges_its_job_with_its_own_limit_only() -> None:
    ledger = _busy_ledger()
    # 6's own 7.5 s, not its queue's 40 nor a neighbour's: due at its start + 7.5.
    assert ledger.moments().next_runtime == T0 + 3 + 7.5
    assert limits.check_runtimes(ledger, T0 + 10.4).soft_timeout == []
    (late,) = limits.check_runtimes(ledger, T0 + 10.5).soft_timeout
    assert (late.id, late.queue, late.kind) == (6, "slow", "kind-slow")
    ledger.blame([late])
    settled = {s.lease.job_id: s.charge_error for s in ledger.settlements(KillReason.TIMEOUT, "")}
    assert settled == {
        3: None,
        4: None,
        5: None,
        6: "exceeded its max runtime of 7.5s: worker killed (SIGKILL)",
        7: None,
    }


def test_drain_mid_batch_gives_back_the_unstarted_and_waits_for_the_rest() -> None:
    ledger = _busy_ledger()
    assert [job.id for job in ledger.release_unstarted()] == [7]
    running = ledger.in_state(JobState.RUNNING)
    assert [(job.id, job.started_at, job.max_runtime_s) for job in running] == [(6, T0 + 3, 7.5)]
    assert [job.id for job in ledger.in_state(JobState.FINISHING)] == [3, 4, 5]
    moments = ledger.moments()
    # Still held (drain waits); the running job's lease needs renewing from the claim.
    assert (moments.held, moments.earliest_renewal) == (True, T0 + 1)
    ledger.finishing([3, 4, 5, 6])
    ledger.done([3, 4, 5, 6])
    assert not ledger and not ledger.jobs


def test_starts_mid_batch_are_counted_once_with_their_queue_and_kind() -> None:
    ledger = _busy_ledger()
    counted = sorted((job.queue, job.kind, job.id) for job in ledger.fresh_starts)
    assert counted == [
        ("fast", "kind-fast", 1),
        ("fast", "kind-fast", 5),
        ("q", "kind-q", 3),
        ("q", "kind-q", 4),
        ("slow", "kind-slow", 2),
        ("slow", "kind-slow", 6),
    ]


def test_a_renewal_mid_batch_judges_every_job_held_at_its_send() -> None:
    ledger = _busy_ledger()
    sent = ledger.leases()
    assert sent == [Lease(i, TOKENS[i]) for i in (3, 4, 5, 6, 7)]
    _claim(ledger, 8, T0 + 4, [(8, "q", None)])  # after the send: not judged
    verdict = ledger.renewal(sent, renewed={3, 4, 5}, sent_at=T0 + 5)
    assert [job.id for job in verdict.lost_running] == [6]
    assert [job.id for job in verdict.given_up] == [7]
    assert {job.id: job.state for job in ledger.jobs.values()} == {
        3: JobState.FINISHING,
        4: JobState.FINISHING,
        5: JobState.FINISHING,
        6: JobState.LOST,
        7: JobState.GIVEN_UP,
        8: JobState.CLAIMED,
    }
    # 8 needs its lease renewed from its claim; 3-5's returned, 6's and 7's are gone.
    assert ledger.moments().earliest_renewal == T0 + 4
