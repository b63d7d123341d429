"""What a batch's status messages and ledger entries must keep, whatever their encoding:
odd values survive the pipe, each job of a batch keeps its own runtime deadline, and
every start is counted once (round 13's review of the no-op batch path)."""

from __future__ import annotations

import uuid

import pytest

from pgworkerd.ipc import Claimed, ClaimedJob, Done, Finishing, Message, Released, StartRecord
from pgworkerd.ipc.messages import decode, encode
from pgworkerd.supervisor import limits
from pgworkerd.supervisor.ledger import ChildLedger, JobState

T0 = 1000.0
INT64_MAX = 2**63 - 1
# Kinds and queues are any text but control characters through the producer; a plain
# SQL INSERT (the documented way to enqueue) may store anything text can hold.
ODD_NAMES = ["a,b", 'say "hi"', "back\\slash", "ünïcødé ✓", "{x}", "", "new\nline", "tab\there"]


def _jobs(ids: list[int], kinds: list[str], runtimes: list[float | None]) -> tuple[ClaimedJob, ...]:
    return tuple(
        ClaimedJob(i, uuid.UUID(int=i % 2**128).hex, kind, kind[::-1], runtime)
        for i, kind, runtime in zip(ids, kinds, runtimes, strict=True)
    )


ODD_MESSAGES: list[Message] = [
    Claimed(
        INT64_MAX - 7,
        12.345678901234567,
        True,
        _jobs(
            [INT64_MAX - len(ODD_NAMES) + n for n in range(len(ODD_NAMES))],
            ODD_NAMES,
            [None, 0.1, 1 / 3, 900.0, 1e-6, None, 86400.5, 2.0],
        ),
    ),
    Claimed(1, 0.0, False, _jobs([1, 2, 3], ["k", "k", "k"], [None, None, 5.0])),
    Claimed(1, 0.0, True, _jobs(list(range(1, 1001)), ["k"] * 1000, [None] * 1000)),
    Done((1, INT64_MAX), (("succeeded", 0.0001), ("lost", 123.4567))),
    Done((5, 6, 7), (("succeeded", 0.0), ("failed", 1e-4), ("dead", 3600.0))),
    Done(tuple(range(1, 1001)), tuple(("succeeded", n / 10000) for n in range(1000))),
    Finishing((INT64_MAX, 1)),
    Released((INT64_MAX,)),
]


@pytest.mark.parametrize("message", ODD_MESSAGES, ids=lambda m: type(m).__name__)
def test_odd_values_cross_the_pipe_unchanged(message: Message) -> None:
    line = encode(message)
    assert line.endswith(b"\n") and line.count(b"\n") == 1  # one message, one line
    assert decode(line.rstrip(b"\n")) == message


def _claimed(ledger: ChildLedger, jobs: tuple[ClaimedJob, ...]) -> None:
    def runtime_for(queue: str, own: float | None) -> float:
        return 60.0 if own is None else own

    ledger.claimed(Claimed(1, T0, True, jobs), runtime_for)


def test_each_job_of_a_batch_keeps_its_own_runtime_deadline() -> None:
    """A batch whose jobs differ in max runtime, started one after another: each is
    timed out at its own start + its own max runtime, no sooner and no later."""
    ledger = ChildLedger()
    _claimed(ledger, _jobs([11, 12, 13], ["k", "k", "k"], [None, 5.0, None]))
    ledger.observe_starts([StartRecord(0, 1, T0 + 1)])
    assert ledger.moments().next_runtime == T0 + 61
    ledger.observe_starts([StartRecord(0, 2, T0 + 2)])  # 11 returned, 12 runs
    assert ledger.moments().next_runtime == T0 + 7
    assert limits.check_runtimes(ledger, T0 + 6.9).soft_timeout == []
    assert [j.id for j in limits.check_runtimes(ledger, T0 + 7).soft_timeout] == [12]
    ledger.observe_starts([StartRecord(0, 3, T0 + 30)])  # 12 returned, 13 runs
    assert ledger.moments().next_runtime == T0 + 90
    assert limits.check_runtimes(ledger, T0 + 89).soft_timeout == []
    assert [j.id for j in limits.check_runtimes(ledger, T0 + 90).soft_timeout] == [13]


def test_two_slots_of_one_batch_each_have_their_own_deadline() -> None:
    ledger = ChildLedger()
    _claimed(ledger, _jobs([21, 22], ["k", "k"], [10.0, 3.0]))
    ledger.observe_starts([StartRecord(0, 1, T0), StartRecord(1, 2, T0 + 4)])
    assert ledger.moments().next_runtime == T0 + 7  # 22's: started later, shorter limit
    assert [j.id for j in limits.check_runtimes(ledger, T0 + 7).soft_timeout] == [22]
    assert [j.id for j in limits.check_runtimes(ledger, T0 + 10).soft_timeout] == [21, 22]


def test_every_start_of_a_batch_is_counted_once_whichever_way_it_was_seen() -> None:
    """Seen on the board, inferred from a later start, or from a `finishing` of a job
    never seen started; a job given back unstarted is never counted."""
    ledger = ChildLedger()
    _claimed(ledger, _jobs([1, 2, 3, 4, 5, 6], ["k"] * 6, [None] * 6))
    ledger.observe_starts([StartRecord(0, 1, T0)])  # 1 seen
    ledger.observe_starts([StartRecord(0, 3, T0 + 1)])  # 2 inferred, 3 seen
    ledger.observe_starts([StartRecord(0, 3, T0 + 1)])  # again: nothing new
    ledger.finishing([1, 2, 3, 4])  # 4 started and returned unseen
    ledger.finishing([4])
    released = ledger.release_unstarted()
    assert sorted(job.id for job in ledger.fresh_starts) == [1, 2, 3, 4]
    assert sorted(job.id for job in released) == [5, 6]
    ledger.done([1, 2, 3, 4])
    assert not ledger.jobs and ledger.moments().next_runtime is None


def test_a_done_with_a_lost_job_counts_only_the_written_ones() -> None:
    """`done` of a batch where one lease was lost: the ledger forgets them all."""
    ledger = ChildLedger()
    _claimed(ledger, _jobs([1, 2], ["k", "k"], [None, None]))
    ledger.observe_starts([StartRecord(0, 2, T0)])
    ledger.finishing([1, 2])
    message = decode(encode(Done((1, 2), (("succeeded", 0.001), ("lost", 0.002)))).rstrip())
    assert isinstance(message, Done) and message.outcomes[1][0] == "lost"
    ledger.done(message.ids)
    assert not ledger.jobs and ledger.in_state(JobState.FINISHING) == []
