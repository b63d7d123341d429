"""The supervisor watches its listening socket only while a child could be woken
(pgworkerd/supervisor/core.py, _watch_listener): while every child is busy a
notification would cost a turn of the loop and wake no one; the turn reads it anyway.

Real pipes and a real socket stand for the child and the listening connection; no
process is forked and no database is reached (the housekeeper is not started)."""

from __future__ import annotations

import os
import socket
import uuid
from collections.abc import Iterator

import pytest

from pgworkerd.config import parse
from pgworkerd.ipc import Claimed, ClaimedJob, ControlWriter, StartBoard, StatusReader
from pgworkerd.supervisor.children import PAUSE_LINES_MAX, ChildProcess
from pgworkerd.supervisor.core import State, Supervisor


@pytest.fixture
def supervisor() -> Iterator[Supervisor]:
    config = parse("handlers: {k: tests.handlers:noop}\n")
    sup = Supervisor(config, None, {}, "postgresql://unused")
    listening, other_end = socket.socketpair()
    sup.listen_fd = listening.fileno()  # as _watch_listener sets it once connected
    status_r, status_w = os.pipe()
    control_r, control_w = os.pipe()
    board = StartBoard(1)
    child = ChildProcess(
        pid=-1,  # never signalled here
        pool="default",
        index=1,
        status=StatusReader(status_r),
        control=ControlWriter(control_w, board),
        board=board,
        queues=frozenset({"default"}),
    )
    sup.children[child.pid] = child
    yield sup
    child.close()
    for fd in (status_w, control_r):
        os.close(fd)
    sup.selector.close()
    listening.close()
    other_end.close()


def watched(sup: Supervisor) -> bool:
    return sup.listen_fd in sup.selector.get_map()


def test_the_listening_socket_is_watched_only_while_a_child_is_idle(supervisor: Supervisor) -> None:
    (child,) = supervisor.children.values()
    child.idle = False  # claiming or running: a notification has no one to wake
    supervisor._watch_listener()
    assert not watched(supervisor)

    child.idle = True  # said `idle`: the next notification wakes it at once
    supervisor._watch_listener()
    assert watched(supervisor)

    child.wake()  # woken: it claims anyway, whatever comes next
    supervisor._watch_listener()
    assert not watched(supervisor)


def test_draining_nothing_is_woken_so_the_socket_is_not_watched(supervisor: Supervisor) -> None:
    (child,) = supervisor.children.values()
    child.idle = True
    supervisor.state = State.DRAINING
    supervisor._watch_listener()
    assert not watched(supervisor)


def test_a_lost_connection_leaves_the_selector(supervisor: Supervisor) -> None:
    (child,) = supervisor.children.values()
    child.idle = True
    supervisor._watch_listener()
    assert watched(supervisor)
    supervisor._forget_listener()
    assert supervisor.listen_fd is None and not supervisor.selector.get_map()
    supervisor._watch_listener()  # no housekeeper: stays unconnected, nothing registered
    assert not supervisor.selector.get_map()


def test_pause_lines_go_only_to_a_child_with_unstarted_jobs_and_are_bounded(
    supervisor: Supervisor,
) -> None:
    # Review 25: a child in a long handler reads no line, and every key paused meanwhile
    # wrote one more: a full pipe drops the `cancel` and `skip` lines the child must get.
    child = next(iter(supervisor.children.values()))
    child.pause_keys(["k"])
    assert child.board.control_lines() == 0  # nothing claimed: an idle child is not told
    jobs = tuple(ClaimedJob(i, uuid.uuid4().hex, "k", "default", None) for i in (7, 8))
    child.ledger.claimed(Claimed(1, 0.0, False, jobs), lambda kind, own: 60.0)
    child.pause_keys(f"key{i}" for i in range(PAUSE_LINES_MAX + 10))
    assert child.board.control_lines() == PAUSE_LINES_MAX
