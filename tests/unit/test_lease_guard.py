"""A worker's own watch over its running jobs' leases (worker/lease_guard.py): a job
whose lease the supervisor has not renewed for 90 % of lease_ttl, counted from its
claim or from the last renewal that covered it, stops the worker. A fake clock and a
real start board."""

from __future__ import annotations

import os
import time

from pgworkerd.ipc import StartBoard
from pgworkerd.worker.lease_guard import GUARD_FRACTION, LeaseGuard

Lapses = list[list[int]]


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def guard_of(board: StartBoard, clock: Clock, lapses: Lapses) -> LeaseGuard:
    return LeaseGuard(board.renewal, 10.0, lapses.append, clock=clock)


def test_a_job_never_renewed_lapses_at_nine_tenths_of_the_lease_ttl_from_its_claim() -> None:
    board, clock, lapses = StartBoard(), Clock(), Lapses()
    guard = guard_of(board, clock, lapses)
    assert guard.lapsed(2000.0) == [], "nothing runs: nothing to watch"
    guard.started(7, number=1, claimed_at=1000.0)
    assert guard.lapsed(1008.9) == []
    assert guard.lapsed(1009.0) == [7]


def test_a_renewal_that_covered_the_job_moves_its_moment_and_one_that_did_not_does_not() -> None:
    board, clock, lapses = StartBoard(), Clock(), Lapses()
    guard = guard_of(board, clock, lapses)
    guard.started(7, number=1, claimed_at=1000.0)
    guard.started(8, number=2, claimed_at=1002.0)
    # Sent at 1003, it covered the claims up to number 1: job 8's claim was not yet
    # known to the supervisor, so its lease was not in it.
    board.post_renewal(1, 1003.0)
    assert guard.lapsed(1010.9) == []
    assert guard.lapsed(1011.0) == [8]
    board.post_renewal(2, 1006.0)
    assert guard.lapsed(1014.9) == []
    assert guard.lapsed(1015.0) == [7, 8]


def test_an_older_renewal_posted_late_moves_nothing_back() -> None:
    board = StartBoard()
    board.post_renewal(5, 1006.0)
    board.post_renewal(3, 1003.0)
    assert board.renewal() == (5, 1006.0)


def test_a_job_that_ended_is_not_watched() -> None:
    board, clock, lapses = StartBoard(), Clock(), Lapses()
    guard = guard_of(board, clock, lapses)
    guard.started(7, number=1, claimed_at=1000.0)
    guard.ended(7)
    assert guard.lapsed(2000.0) == []


def test_the_renewal_crosses_the_fork() -> None:
    """The supervisor posts in its process; the child reads the same page."""
    board = StartBoard()
    pid = os.fork()
    if pid == 0:  # the child: waits for the parent's post, says what it read
        code = 1
        for _ in range(2000):
            if board.renewal() == (4, 1234.5):
                code = 0
                break
            time.sleep(0.005)
        os._exit(code)
    board.post_renewal(4, 1234.5)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0


def test_its_thread_looks_at_its_pace_and_reports_the_lapse() -> None:
    """The thread, on the real clock: a job starts, then its lapse is reported."""
    board, lapses = StartBoard(), Lapses()
    guard = LeaseGuard(board.renewal, 0.2, lapses.append)
    guard.start()
    guard.started(7, number=1, claimed_at=time.monotonic())
    deadline = time.monotonic() + 10  # generous: the lapse is due at 0.18 s
    while lapses != [[7]] and time.monotonic() < deadline:
        time.sleep(0.01)
    assert lapses == [[7]]


def test_the_board_tells_the_supervisor_the_guard_killed_the_child() -> None:
    board = StartBoard(2)
    assert not board.guard_fired()
    board.post_guard_fired()
    assert board.guard_fired()
    assert board.renewal() == (0, 0.0) and board.records() == [], "nothing else moved"


def test_it_looks_often_enough_to_act_before_the_lease_ends() -> None:
    for ttl in (1.0, 30.0, 600.0):
        guard = LeaseGuard(StartBoard().renewal, ttl, Lapses().append)
        assert guard.interval_s <= 1.0
        assert GUARD_FRACTION * ttl + guard.interval_s < ttl
