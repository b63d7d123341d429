"""The supervisor's ledger of a child's jobs: every state, every transition, and how
each kill reason settles the jobs, with a fake clock (plain numbers)."""

from __future__ import annotations

import random
import uuid

from pgworkerd.ipc import Claimed, ClaimedJob, StartRecord
from pgworkerd.job import Lease
from pgworkerd.supervisor.ledger import (
    CANCEL_GRACE_S,
    ChildLedger,
    JobState,
    KillReason,
    Moments,
)

T0 = 1000.0  # monotonic seconds


def runtime_for(queue: str, job_max_runtime_s: float | None) -> float:
    return job_max_runtime_s if job_max_runtime_s is not None else 60.0


def claim(ledger: ChildLedger, ids: list[int], *, first: int = 1, at: float = T0) -> None:
    jobs = tuple(ClaimedJob(i, str(uuid.uuid4()), "k", "q", None) for i in ids)
    ledger.claimed(Claimed(first, at, False, jobs), runtime_for)


def states(ledger: ChildLedger) -> dict[int, JobState]:
    return {job.id: job.state for job in ledger.jobs.values()}


def test_claimed_jobs_are_held_unstarted_from_the_claim_time() -> None:
    ledger = ChildLedger()
    claim(ledger, [7, 8], first=1, at=T0)
    assert states(ledger) == {7: JobState.CLAIMED, 8: JobState.CLAIMED}
    assert [job.number for job in ledger.jobs.values()] == [1, 2]
    assert all(job.renewed_at == T0 and job.max_runtime_s == 60.0 for job in ledger.jobs.values())
    assert ledger.claimed_through == 2
    assert len(ledger.leases()) == 2 and bool(ledger)


def test_a_token_sent_as_hex_digits_is_the_lease_the_worker_holds() -> None:
    # Workers send UUID.hex (cheaper than str() on every job); renewals, releases and
    # skips must name the very token the claim drew.
    token = uuid.uuid4()
    ledger = ChildLedger()
    ledger.claimed(Claimed(1, T0, False, (ClaimedJob(7, token.hex, "k", "q", None),)), runtime_for)
    assert ledger.jobs[7].lease == Lease(7, token)


def test_a_posted_start_makes_the_job_running_with_its_start_time() -> None:
    ledger = ChildLedger()
    claim(ledger, [7, 8])
    forbidden, complete = ledger.observe_starts([StartRecord(0, 1, T0 + 1)])
    assert (forbidden, complete) == ([], True)
    job = ledger.jobs[7]
    assert (job.state, job.started_at, job.slot) == (JobState.RUNNING, T0 + 1, 0)
    assert job.deadline() == T0 + 61
    assert ledger.jobs[8].state is JobState.CLAIMED


def test_the_next_start_in_a_slot_means_its_previous_job_returned() -> None:
    ledger = ChildLedger()
    claim(ledger, [7, 8])
    ledger.observe_starts([StartRecord(0, 1, T0 + 1)])
    ledger.observe_starts([StartRecord(0, 2, T0 + 2)])
    assert states(ledger) == {7: JobState.FINISHING, 8: JobState.RUNNING}
    assert ledger.jobs[7].deadline() is None  # no runtime limit once returned


def test_a_start_overwritten_unseen_is_inferred_from_claim_order() -> None:
    ledger = ChildLedger()
    claim(ledger, [7, 8, 9])
    ledger.observe_starts([StartRecord(0, 3, T0 + 5)])  # 1 and 2 ran between two reads
    assert states(ledger) == {7: JobState.FINISHING, 8: JobState.FINISHING, 9: JobState.RUNNING}
    assert ledger.jobs[7].started_at == T0 + 5  # a start is known to have happened


def test_a_start_of_an_unread_claim_is_looked_at_again_later() -> None:
    ledger = ChildLedger()
    claim(ledger, [7])
    assert ledger.observe_starts([StartRecord(0, 2, T0 + 1)]) == ([], False)
    claim(ledger, [8], first=2)
    assert ledger.observe_starts([StartRecord(0, 2, T0 + 1)]) == ([], True)
    assert states(ledger) == {7: JobState.FINISHING, 8: JobState.RUNNING}


def test_a_start_of_a_settled_job_changes_nothing() -> None:
    ledger = ChildLedger()
    claim(ledger, [7])
    ledger.observe_starts([StartRecord(0, 1, T0)])
    ledger.finishing([7])
    ledger.done([7])
    assert ledger.observe_starts([StartRecord(0, 1, T0)]) == ([], True)
    assert not ledger.jobs and not ledger


def test_several_slots_run_jobs_at_once_each_with_its_own_deadline() -> None:
    ledger = ChildLedger()
    claim(ledger, [7, 8, 9])
    ledger.observe_starts([StartRecord(0, 1, T0), StartRecord(1, 2, T0 + 1)])
    assert states(ledger) == {7: JobState.RUNNING, 8: JobState.RUNNING, 9: JobState.CLAIMED}
    # Slot 0 moves on to job 3: only its own previous job returned.
    ledger.observe_starts([StartRecord(0, 3, T0 + 2), StartRecord(1, 2, T0 + 1)])
    assert states(ledger) == {7: JobState.FINISHING, 8: JobState.RUNNING, 9: JobState.RUNNING}
    assert [ledger.jobs[i].deadline() for i in (8, 9)] == [T0 + 61, T0 + 62]


def test_finishing_done_and_released_messages() -> None:
    ledger = ChildLedger()
    claim(ledger, [7, 8, 9])
    ledger.observe_starts([StartRecord(0, 1, T0)])
    ledger.finishing([7, 99])  # an id it does not hold is ignored
    assert ledger.jobs[7].state is JobState.FINISHING
    ledger.done([7])
    ledger.released([8])
    assert states(ledger) == {9: JobState.CLAIMED}


def test_stopping_releases_exactly_the_unstarted_jobs() -> None:
    ledger = ChildLedger()
    claim(ledger, [7, 8, 9])
    ledger.observe_starts([StartRecord(0, 1, T0)])
    released = ledger.release_unstarted()
    assert [job.id for job in released] == [8, 9]
    assert states(ledger) == {7: JobState.RUNNING}


def test_renewal_moves_renewed_leases_and_judges_the_missing_ones() -> None:
    ledger = ChildLedger()
    claim(ledger, [7, 8, 9])
    ledger.observe_starts([StartRecord(0, 2, T0 + 1)])  # 7 returned, 8 runs, 9 waits
    sent = set(ledger.leases())
    verdict = ledger.renewal(sent, renewed={8}, sent_at=T0 + 10)
    assert ledger.jobs[8].renewed_at == T0 + 10
    assert verdict.lost_running == [] and [j.id for j in verdict.given_up] == [9]
    assert ledger.jobs[7].state is JobState.FINISHING  # ended by its own outcome write
    assert ledger.jobs[9].state is JobState.GIVEN_UP
    verdict = ledger.renewal(sent, renewed=set(), sent_at=T0 + 20)
    assert [j.id for j in verdict.lost_running] == [8]
    assert ledger.jobs[8].state is JobState.LOST
    assert ledger.leases() == [ledger.jobs[7].lease]  # lost and given up: not renewed


def test_renewal_does_not_judge_a_job_claimed_after_it_was_sent() -> None:
    ledger = ChildLedger()
    claim(ledger, [7])
    sent = set(ledger.leases())
    ledger.done([7])
    claim(ledger, [7], first=2)  # the same job, claimed anew: another lease
    verdict = ledger.renewal(sent, renewed=set(), sent_at=T0 + 1)
    assert verdict.lost_running == [] and verdict.given_up == []
    assert ledger.jobs[7].state is JobState.CLAIMED


def test_a_given_up_job_found_started_is_forbidden() -> None:
    ledger = ChildLedger()
    claim(ledger, [7])
    ledger.give_up(ledger.jobs[7])
    forbidden, _ = ledger.observe_starts([StartRecord(0, 1, T0)])
    assert [job.id for job in forbidden] == [7]
    assert ledger.jobs[7].state is JobState.LOST


def test_a_given_up_job_skipped_by_the_child_stays_out_of_everything() -> None:
    ledger = ChildLedger()
    claim(ledger, [7, 8])
    ledger.give_up(ledger.jobs[7])
    ledger.observe_starts([StartRecord(0, 2, T0)])
    assert states(ledger) == {7: JobState.GIVEN_UP, 8: JobState.RUNNING}
    assert ledger.settlements(None, "killed by SIGKILL")[0].lease == ledger.jobs[8].lease
    assert len(ledger.settlements(None, "killed by SIGKILL")) == 1


def _ledger_in_every_state() -> ChildLedger:
    """Jobs 1 CLAIMED, 2 FINISHING, 3 RUNNING (slot 0), 4 RUNNING (slot 1), 5 LOST,
    6 GIVEN_UP."""
    ledger = ChildLedger()
    claim(ledger, [1, 2, 3, 4, 5, 6])
    ledger.give_up(ledger.jobs[6])
    ledger.observe_starts([StartRecord(0, 2, T0), StartRecord(1, 4, T0)])  # 1 and 3 ran
    ledger.jobs[1].state, ledger.jobs[1].started_at = JobState.CLAIMED, None
    ledger.jobs[3].state = JobState.RUNNING
    ledger.jobs[5].state = JobState.LOST
    ledger.finishing([2])
    return ledger


def _settled(ledger: ChildLedger, reason: KillReason | None) -> dict[int, str | None]:
    by_lease: dict[Lease, int] = {job.lease: job.id for job in ledger.jobs.values()}
    return {by_lease[s.lease]: s.charge_error for s in ledger.settlements(reason, "how")}


def test_a_child_that_died_by_itself_charges_every_started_job() -> None:
    settled = _settled(_ledger_in_every_state(), None)
    assert settled.keys() == {1, 2, 3, 4, 6}  # a lost job is not ours
    assert settled[1] is None  # unstarted: released uncharged
    assert settled[6] is None  # given up, never started (nothing after it was): likewise
    assert "after the job's handler returned" in (settled[2] or "")
    assert settled[3] == settled[4] == "worker process how while running the job"


def test_shutdown_releases_everything_uncharged() -> None:
    assert set(_settled(_ledger_in_every_state(), KillReason.SHUTDOWN).values()) == {None}


def test_a_runtime_kill_charges_its_job_and_spares_the_neighbours() -> None:
    ledger = _ledger_in_every_state()
    ledger.blame([ledger.jobs[3]])
    settled = _settled(ledger, KillReason.TIMEOUT)
    assert settled[3] == "exceeded its max runtime of 60s: worker killed (SIGKILL)"
    assert settled[4] is None  # a neighbour running in another slot: not its fault
    assert settled[1] is None
    # Its handler returned, its success not yet written: it runs again, and as the kill
    # was not for its sake, that start is given back too (one at its last attempt
    # would otherwise end dead after it had succeeded).
    assert settled[2] is None


def test_an_unfenced_kill_charges_the_jobs_it_is_for_and_spares_the_others() -> None:
    ledger = _ledger_in_every_state()
    ledger.blame([ledger.jobs[3]])
    settled = _settled(ledger, KillReason.UNFENCED)
    assert settled[3] == "worker killed: its supervisor could not renew the job's lease"
    assert settled[4] is None  # its lease was renewed: another job's kept it from running on


def test_a_lease_lost_kill_leaves_the_lost_job_and_spares_the_others() -> None:
    ledger = _ledger_in_every_state()
    ledger.blame([ledger.jobs[5]])
    settled = _settled(ledger, KillReason.LEASE_LOST)
    assert 5 not in settled
    assert settled[3] is None and settled[4] is None


# -- cancelling a running job -------------------------------------------------------------


def test_a_cancelled_running_job_is_not_renewed_has_a_grace_and_is_released_if_killed() -> None:
    ledger = ChildLedger()
    claim(ledger, [7, 8])
    ledger.observe_starts([StartRecord(0, 1, T0), StartRecord(1, 2, T0)])
    assert ledger.cancelling(ledger.jobs[7], T0 + 5) is True
    assert states(ledger) == {7: JobState.CANCELLING, 8: JobState.RUNNING}
    assert ledger.leases() == [ledger.jobs[8].lease]  # its lease is gone: not renewed
    assert ledger.moments().next_runtime == T0 + 5 + CANCEL_GRACE_S  # before 8's deadline
    # Its cancelled row still holds the lease (HELD): a settlement releases it, uncharged.
    settled = {s.lease: s.charge_error for s in ledger.settlements(None, "died")}
    assert settled == {
        ledger.jobs[7].lease: None,
        ledger.jobs[8].lease: "worker process died while running the job",
    }
    assert ledger.cancelling(ledger.jobs[7], T0 + 6) is False  # asked once
    assert ledger.jobs[7].cancelled_at == T0 + 5


def test_only_a_running_job_can_be_interrupted_by_a_cancel() -> None:
    ledger = _ledger_in_every_state()
    for job_id in (1, 2, 5, 6):  # claimed, finishing, lost, given up
        assert ledger.cancelling(ledger.jobs[job_id], T0) is False
    assert ledger.jobs[2].state is JobState.FINISHING


def test_a_cancelled_job_that_returns_is_finishing_and_loses_its_grace() -> None:
    ledger = ChildLedger()
    claim(ledger, [7, 8, 9])
    ledger.observe_starts([StartRecord(0, 1, T0), StartRecord(1, 2, T0)])
    ledger.cancelling(ledger.jobs[7], T0)
    ledger.cancelling(ledger.jobs[8], T0)
    ledger.finishing([7])  # its handler returned (its fenced write will find nothing)
    ledger.observe_starts([StartRecord(1, 3, T0 + 1)])  # 8's slot started job 9
    assert states(ledger) == {7: JobState.FINISHING, 8: JobState.FINISHING, 9: JobState.RUNNING}
    assert ledger.moments().next_runtime == T0 + 1 + 60  # only 9's deadline is left


def test_a_renewal_tells_a_cancelled_job_from_a_rescued_one() -> None:
    ledger = ChildLedger()
    claim(ledger, [7, 8, 9])
    ledger.observe_starts([StartRecord(0, 1, T0), StartRecord(1, 2, T0)])
    verdict = ledger.renewal(ledger.leases(), renewed=set(), sent_at=T0 + 10, cancelled={7, 9})
    assert [job.id for job in verdict.cancelled] == [7]  # running, cancelled: interrupt it
    assert [job.id for job in verdict.lost_running] == [8]  # rescued elsewhere: kill
    assert [job.id for job in verdict.given_up] == [9]  # unstarted: skip, whatever the cause
    assert ledger.jobs[7].state is JobState.RUNNING  # until the caller asks for JobCancelled


def test_a_cancel_kill_spares_every_other_job_of_the_child() -> None:
    ledger = _ledger_in_every_state()
    ledger.cancelling(ledger.jobs[3], T0)
    ledger.blame([ledger.jobs[3]])
    settled = _settled(ledger, KillReason.CANCELLED)
    # cancelled already: its held lease is released, nothing is charged
    assert settled == {1: None, 2: None, 3: None, 4: None, 6: None}


def test_a_job_cancelled_as_it_started_is_interrupted_not_killed() -> None:
    """The cancel named a job the ledger still had unstarted, though the child had
    begun it: seen started, it is CANCELLING (JobCancelled), not LOST (kill)."""
    ledger = ChildLedger()
    claim(ledger, [7, 8])
    ledger.give_up(ledger.jobs[7], cancelled_at=T0 + 1)
    ledger.give_up(ledger.jobs[8])  # lost its lease otherwise (a rescue)
    forbidden, _ = ledger.observe_starts([StartRecord(0, 1, T0 + 2), StartRecord(1, 2, T0 + 2)])
    assert [(job.id, job.state) for job in forbidden] == [
        (7, JobState.CANCELLING),
        (8, JobState.LOST),
    ]
    assert ledger.jobs[7].cancelled_at == T0 + 2  # its grace runs from the start seen
    assert ledger.moments().next_runtime == T0 + 2 + CANCEL_GRACE_S


def test_skipping_gives_the_given_up_jobs_leases_to_release_and_forgets_them() -> None:
    """The child will not start 7 (cancelled), 8 (given up: its lease lapsing, or gone
    to a rescue) nor 9 (no skip of ours: still CLAIMED, a message that cannot be,
    changes nothing): 7's and 8's leases are for the supervisor to release, uncharged
    and fenced (8's finds nothing if a rescue took it first)."""
    ledger = ChildLedger()
    claim(ledger, [6, 7, 8, 9])
    ledger.observe_starts([StartRecord(0, 1, T0)])
    ledger.give_up(ledger.jobs[7], cancelled_at=T0 + 1)
    ledger.give_up(ledger.jobs[8])
    leases = [ledger.jobs[7].lease, ledger.jobs[8].lease]
    assert [job.lease for job in ledger.skipping([7, 8, 9, 99])] == leases
    assert states(ledger) == {6: JobState.RUNNING, 9: JobState.CLAIMED}
    assert ledger.skipping([7, 8]) == []  # said twice: released once
    assert not set(leases) & {s.lease for s in ledger.settlements(None, "killed by SIGKILL")}
    ledger.released([7])  # the child's own release, later: nothing left to forget
    assert 7 not in ledger.jobs


def test_jobs_given_up_unstarted_are_spared_and_given_back_uncharged_at_the_childs_death() -> None:
    """Renewals failed (the database away): 8 and 9 were given up before they started.
    Our rescue spares them, and the leases we renew, until they are given back: by the
    child, by us when it says `skipping`, or by us when it dies, uncharged. Not 7,
    cancelled (its row is not `running`), nor a job passed by a later start (it may
    have started: left to the rescue, which charges it)."""
    ledger = ChildLedger()
    claim(ledger, [6, 7, 8, 9])
    ledger.observe_starts([StartRecord(0, 1, T0)])
    for job_id in (7, 8, 9):
        ledger.give_up(ledger.jobs[job_id], cancelled_at=T0 + 1 if job_id == 7 else None)
    assert ledger.spared() == [ledger.jobs[i].lease for i in (6, 8, 9)]
    settled = {s.lease.job_id: s.charge_error for s in ledger.settlements(None, "killed")}
    assert settled == {6: "worker process killed while running the job", 7: None, 8: None, 9: None}
    ledger.observe_starts([StartRecord(0, 4, T0 + 2)])  # 9 started: 8 may have, too
    assert 8 not in {s.lease.job_id for s in ledger.settlements(None, "killed")}


def test_a_renewal_marks_an_unstarted_cancelled_job_for_interruption() -> None:
    ledger = ChildLedger()
    claim(ledger, [7])
    ledger.renewal(ledger.leases(), renewed=set(), sent_at=T0 + 3, cancelled={7})
    assert (ledger.jobs[7].state, ledger.jobs[7].cancelled_at) == (JobState.GIVEN_UP, T0 + 3)


# -- a claim kept as its rows: records made only when asked for -----------------------------


def test_jobs_passed_by_later_starts_read_as_finishing_from_them_in_claim_order() -> None:
    # Nothing asks about a job until the end: every record is made from the batch then.
    ledger = ChildLedger()
    claim(ledger, [7, 8, 9, 10, 11])
    ledger.observe_starts([StartRecord(0, 2, T0 + 1)])  # 7 passed, 8 runs
    ledger.observe_starts([StartRecord(0, 4, T0 + 2)])  # 8 returned, 9 passed, 10 runs
    assert [(job.id, job.number, job.state, job.started_at) for job in ledger.jobs.values()] == [
        (7, 1, JobState.FINISHING, T0 + 1),
        (8, 2, JobState.FINISHING, T0 + 1),
        (9, 3, JobState.FINISHING, T0 + 2),
        (10, 4, JobState.RUNNING, T0 + 2),
        (11, 5, JobState.CLAIMED, None),
    ]
    assert all(job.renewed_at == T0 and job.max_runtime_s == 60.0 for job in ledger.jobs.values())


def test_the_moments_of_jobs_without_a_record() -> None:
    ledger = ChildLedger()
    claim(ledger, [7, 8, 9], at=T0)
    claim(ledger, [10, 11], first=4, at=T0 + 5)
    assert ledger.moments() == Moments(True, T0, None)
    ledger.observe_starts([StartRecord(0, 2, T0 + 6)])  # 7 passed, 8 runs
    assert ledger.moments() == Moments(True, T0, T0 + 66)  # 9 is unstarted still
    ledger.released([9])
    ledger.observe_starts([StartRecord(0, 4, T0 + 7)])  # 8 returned, 10 runs
    assert ledger.moments() == Moments(True, T0 + 5, T0 + 67)  # 10 and 11: the 2nd claim
    ledger.released([11])
    ledger.finishing([7, 8, 10])
    # Handlers returned, nothing unstarted: held, but no lease needs us to keep it.
    assert ledger.moments() == Moments(True, None, None)
    ledger.done([7, 8, 10])
    assert ledger.moments() == Moments(False, None, None) and not ledger.jobs


def test_a_pass_outlives_the_batch_before_it() -> None:
    ledger = ChildLedger()
    claim(ledger, [1, 2])
    claim(ledger, [3, 4, 5], first=3)
    ledger.observe_starts([StartRecord(0, 4, T0 + 1)])  # 1, 2, 3 passed in one span
    ledger.finishing([1, 2])
    ledger.done([1, 2])  # the first batch is forgotten
    assert (ledger.jobs[3].state, ledger.jobs[3].started_at) == (JobState.FINISHING, T0 + 1)


def test_a_job_claimed_anew_while_held_replaces_its_record() -> None:
    ledger = ChildLedger()
    claim(ledger, [7, 8])
    claim(ledger, [7], first=3)  # lost and claimed again: another lease, another number
    ledger.observe_starts([StartRecord(0, 3, T0 + 1)])
    assert (ledger.jobs[7].number, ledger.jobs[7].state) == (3, JobState.RUNNING)
    assert ledger.jobs[8].state is JobState.FINISHING


def test_each_start_is_taken_once_with_its_queue_and_kind() -> None:
    ledger = ChildLedger()
    jobs = tuple(
        ClaimedJob(i, uuid.uuid4().hex, kind, queue, None)
        for i, kind, queue in [(7, "a", "q1"), (8, "b", "q2"), (9, "c", "q1"), (10, "d", "q3")]
    )
    ledger.claimed(Claimed(1, T0, False, jobs), runtime_for)
    assert ledger.labels(8) == ("q2", "b") and ledger.labels(99) is None
    ledger.observe_starts([StartRecord(0, 3, T0 + 1)])  # 7 and 8 passed, 9 seen
    assert sorted(ledger.take_started()) == [("q1", "a"), ("q1", "c"), ("q2", "b")]
    assert list(ledger.take_started()) == []
    ledger.finishing([9, 10])  # 10 started and returned unseen
    assert list(ledger.take_started()) == [("q3", "d")]
    assert ledger.labels(10) == ("q3", "d")  # it has a record now
    ledger.done([7, 8, 9, 10])
    assert ledger.labels(7) is None and not ledger


def _view(ledger: ChildLedger) -> list[tuple[object, ...]]:
    return [
        (job.id, job.number, job.state, job.started_at, job.renewed_at, job.slot)
        for job in ledger.jobs.values()
    ]


def test_records_made_late_answer_as_records_made_at_the_claim() -> None:
    """Random claims, starts (two slots, some overwritten unseen), finishing, done,
    releases and skips, applied to a ledger whose `jobs` is read after every step (every
    job gets its record at once) and to one read only now and then: same answers."""
    rng = random.Random(23)
    for _ in range(300):
        eager, lazy = ChildLedger(), ChildLedger()
        number, next_id, started, at = 0, 1, 0, T0
        for _ in range(40):
            held = list(eager.jobs)
            step = rng.random()
            if step < 0.25:
                ids = [next_id + i for i in range(rng.randint(1, 5))]
                next_id += len(ids)
                if held and rng.random() < 0.1:
                    ids.append(rng.choice(held))  # claimed anew while held
                at += 1
                rows = tuple(ClaimedJob(i, uuid.uuid4().hex, "k", "q", None) for i in ids)
                for ledger in (eager, lazy):
                    ledger.claimed(Claimed(number + 1, at, False, rows), runtime_for)
                number += len(ids)
            elif step < 0.55 and started < number:
                started = rng.randint(started + 1, number)
                at += 1
                records = [StartRecord(rng.randint(0, 1), started, at)]
                (forbidden, complete), (forbidden2, complete2) = (
                    ledger.observe_starts(records) for ledger in (eager, lazy)
                )
                assert ([j.id for j in forbidden], complete) == (
                    [j.id for j in forbidden2],
                    complete2,
                )
            elif step < 0.9 and held:
                ids = rng.sample(held, rng.randint(1, len(held)))
                verb = rng.choice(["finishing", "done", "released"])
                for ledger in (eager, lazy):
                    getattr(ledger, verb)(ids)
            elif held:
                job_id = rng.choice(held)
                for ledger in (eager, lazy):
                    ledger.give_up(ledger.jobs[job_id], cancelled_at=None)
            assert lazy.moments() == eager.moments()
            assert sorted(lazy.take_started()) == sorted(eager.take_started())
            if rng.random() < 0.1:
                assert _view(lazy) == _view(eager)
            _view(eager)
        assert _view(lazy) == _view(eager)
        assert [s.lease for s in lazy.settlements(None, "how")] == [
            s.lease for s in eager.settlements(None, "how")
        ]
