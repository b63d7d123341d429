"""When a worker child's successes are due to be written (success_buffer.py), on a fake
clock: the batch size, the longest wait, a job not known to be quick, and successes put
back after a failed write."""

from __future__ import annotations

import pytest

from pgworkerd.job import Job
from pgworkerd.worker.success_buffer import QUICK_JOB_S, Success, SuccessBuffer

MAX_WAIT_S = 0.5  # and every step below: exact in binary, so `>=` is tested exactly


class Clock:
    """Monotonic seconds that move only when the test says."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def job(job_id: int, kind: str = "k") -> Job:
    return Job(id=job_id, kind=kind, queue="q", payload={}, attempt=1, max_attempts=3)


def success(job_id: int, kind: str = "k") -> Success:
    return Success(job(job_id, kind), f'{{"n": {job_id}}}', 1.0)


@pytest.fixture
def clock() -> Clock:
    return Clock()


def buffer_of(clock: Clock, limit: int = 3) -> SuccessBuffer:
    return SuccessBuffer(limit, max_wait_s=MAX_WAIT_S, clock=clock)


def test_an_empty_buffer_is_never_due(clock: Clock) -> None:
    buffer = buffer_of(clock)
    clock.now += 60
    assert not buffer.due()
    assert buffer.due_in_s() is None
    assert not buffer.due_before(job(1, "never ran"))
    assert buffer.take() == []


def test_due_once_it_holds_the_limit(clock: Clock) -> None:
    buffer = buffer_of(clock, limit=3)
    buffer.succeeded(success(1), 0.0)
    buffer.succeeded(success(2), 0.0)
    assert not buffer.due()
    assert buffer.due_in_s() == MAX_WAIT_S
    buffer.succeeded(success(3), 0.0)
    assert buffer.due()
    assert buffer.due_in_s() == 0.0


def test_a_limit_below_one_is_one(clock: Clock) -> None:
    buffer = buffer_of(clock, limit=0)
    assert buffer.limit == 1
    buffer.succeeded(success(1), 0.0)
    assert buffer.due()


def test_due_once_the_oldest_success_waited_the_longest_wait(clock: Clock) -> None:
    buffer = buffer_of(clock, limit=100)
    buffer.succeeded(success(1), 0.0)
    clock.now += 0.25
    buffer.succeeded(success(2), 0.0)  # a later success does not restart the wait
    assert not buffer.due()
    assert buffer.due_in_s() == 0.25
    clock.now += 0.125
    assert not buffer.due()
    assert buffer.due_in_s() == 0.125
    clock.now += 0.125
    assert buffer.due()
    assert buffer.due_in_s() == 0.0
    clock.now += 5
    assert buffer.due_in_s() == 0.0  # overdue is due now, never negative


def test_due_before_a_job_not_known_to_be_quick(clock: Clock) -> None:
    buffer = buffer_of(clock, limit=100)
    buffer.ran(job(1, "quick"), QUICK_JOB_S / 2)
    buffer.ran(job(2, "slow"), QUICK_JOB_S)  # the bound itself is not quick
    assert not buffer.due_before(job(3, "never ran"))  # nothing pending: nothing to write
    buffer.succeeded(success(1, "quick"), QUICK_JOB_S / 2)
    assert buffer.due_before(job(3, "never ran"))
    assert buffer.due_before(job(4, "slow"))
    assert not buffer.due_before(job(5, "quick"))


def test_a_quick_kind_learns_from_its_last_run(clock: Clock) -> None:
    buffer = buffer_of(clock, limit=100)
    buffer.ran(job(1, "k"), QUICK_JOB_S * 10)
    buffer.succeeded(success(2), 0.0)  # its last run, not its slowest, decides
    assert not buffer.due_before(job(3, "k"))
    buffer.ran(job(3, "k"), QUICK_JOB_S * 10)
    assert buffer.due_before(job(4, "k"))


def test_due_before_even_a_quick_job_once_due(clock: Clock) -> None:
    buffer = buffer_of(clock, limit=2)
    buffer.succeeded(success(1, "quick"), 0.0)
    assert not buffer.due_before(job(2, "quick"))
    clock.now += MAX_WAIT_S
    assert buffer.due_before(job(2, "quick"))
    full = buffer_of(clock, limit=2)
    full.succeeded(success(1, "quick"), 0.0)
    full.succeeded(success(2, "quick"), 0.0)
    assert full.due_before(job(3, "quick"))


def test_take_empties_the_buffer_in_order(clock: Clock) -> None:
    buffer = buffer_of(clock)
    buffer.succeeded(success(1), 0.0)
    buffer.succeeded(success(2), 0.0)
    assert [s.job.id for s in buffer.take()] == [1, 2]
    assert buffer.take() == []
    assert not buffer.due() and buffer.due_in_s() is None


def test_the_wait_starts_again_with_the_first_success_after_a_take(clock: Clock) -> None:
    buffer = buffer_of(clock, limit=100)
    buffer.succeeded(success(1), 0.0)
    clock.now += 1
    buffer.take()
    buffer.succeeded(success(2), 0.0)
    assert not buffer.due()
    assert buffer.due_in_s() == MAX_WAIT_S


def test_put_back_successes_come_first(clock: Clock) -> None:
    buffer = buffer_of(clock, limit=100)
    buffer.succeeded(success(1), 0.0)
    buffer.succeeded(success(2), 0.0)
    failed_write = buffer.take()
    buffer.succeeded(success(3), 0.0)
    buffer.put_back(failed_write)
    assert [s.job.id for s in buffer.take()] == [1, 2, 3]


def test_put_back_into_an_empty_buffer_starts_the_wait_then(clock: Clock) -> None:
    buffer = buffer_of(clock, limit=100)
    buffer.succeeded(success(1), 0.0)
    failed_write = buffer.take()
    clock.now += 10  # the write that failed took this long
    buffer.put_back(failed_write)
    assert not buffer.due()
    assert buffer.due_in_s() == MAX_WAIT_S


def test_put_back_keeps_the_wait_of_what_was_pending(clock: Clock) -> None:
    buffer = buffer_of(clock, limit=100)
    buffer.succeeded(success(1), 0.0)
    failed_write = buffer.take()
    buffer.succeeded(success(2), 0.0)
    clock.now += 0.375
    buffer.put_back(failed_write)
    assert buffer.due_in_s() == 0.125


def test_put_back_counts_toward_the_limit(clock: Clock) -> None:
    buffer = buffer_of(clock, limit=2)
    buffer.succeeded(success(1), 0.0)
    failed_write = buffer.take()
    buffer.succeeded(success(2), 0.0)
    assert not buffer.due()
    buffer.put_back(failed_write)
    assert buffer.due()


def test_put_back_of_nothing_changes_nothing(clock: Clock) -> None:
    buffer = buffer_of(clock, limit=100)
    buffer.put_back([])
    assert buffer.due_in_s() is None
    buffer.succeeded(success(1), 0.0)
    clock.now += 0.375
    buffer.put_back([])
    assert buffer.due_in_s() == 0.125


def test_succeeded_notes_the_run_and_adds_the_success_starting_the_wait_once(
    clock: Clock,
) -> None:
    buffer = buffer_of(clock, limit=3)
    buffer.succeeded(success(1, "quick"), QUICK_JOB_S / 2)
    assert not buffer.due_before(job(2, "quick"))  # its kind is now known to be quick
    clock.now += MAX_WAIT_S / 2
    buffer.succeeded(success(2, "quick"), QUICK_JOB_S / 2)
    assert buffer.due_in_s() == MAX_WAIT_S / 2  # the first success started the wait
    buffer.succeeded(success(3, "slow"), QUICK_JOB_S)
    assert buffer.due_before(job(4, "slow"))
    assert [s.job.id for s in buffer.take()] == [1, 2, 3]


def test_due_before_a_quick_job_follows_due_the_limit_and_the_wait(clock: Clock) -> None:
    buffer = buffer_of(clock, limit=3)
    buffer.succeeded(success(1, "quick"), 0.0)
    buffer.succeeded(success(2, "quick"), 0.0)
    assert not buffer.due_before(job(3, "quick"))
    buffer.succeeded(success(3, "quick"), 0.0)  # the limit
    assert buffer.due_before(job(4, "quick"))
    buffer.take()
    buffer.succeeded(success(4, "quick"), 0.0)
    clock.now += MAX_WAIT_S - 0.25
    assert not buffer.due_before(job(5, "quick"))
    clock.now += 0.25  # the longest wait, exactly
    assert buffer.due_before(job(5, "quick"))
