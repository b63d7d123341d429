"""The child protocol: message encoding, the status pipe's framing, the start board and
the control pipe (real pipes and shared memory, within one process)."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

import pytest

from pgworkerd.ipc import (
    BootError,
    Claimed,
    ClaimedJob,
    ControlReader,
    ControlWriter,
    Done,
    Finishing,
    Idle,
    Message,
    Released,
    Skip,
    Skipping,
    StartBoard,
    StartRecord,
    StatusReader,
    StatusWriter,
    Stopping,
)
from pgworkerd.ipc.messages import decode, encode

EVERY_MESSAGE: list[Message] = [
    Claimed(
        3, 12.5, True, (ClaimedJob(7, "tok", "send", "q", 1.5), ClaimedJob(8, "t", "k", "q", None))
    ),
    # Every job of one kind, queue and max runtime: each column goes as one value.
    Claimed(1, 0.5, False, tuple(ClaimedJob(i, f"{i:032x}", "k", "q", None) for i in range(3))),
    Claimed(1, 0.5, False, ()),
    Finishing((7, 8)),
    Done((7,)),
    Done((7, 8), (("succeeded", 0.25), ("dead", 1.0))),
    Released(()),
    Skipping((9, 12)),
    Idle(),
    Stopping(),
    BootError("ImportError: no module named 'x'\nsecond line"),
]


@pytest.mark.parametrize("message", EVERY_MESSAGE, ids=lambda m: type(m).__name__)
def test_every_message_round_trips_as_one_line(message: Message) -> None:
    line = encode(message)
    assert line.endswith(b"\n") and line.count(b"\n") == 1
    assert decode(line.rstrip(b"\n")) == message


@pytest.mark.parametrize(
    "line",
    [
        b'{"t":"claimed","first":1',
        b"not json",
        b'{"t":"ready"}',
        b'{"ids":[1]}',
        b'{"t":"done"}',
        # Outcome columns that do not line up with the ids, or are not what encode() writes.
        b'{"t":"done","ids":[1],"os":"succeeded","dt":[1,2]}',
        b'{"t":"done","ids":[1,2],"os":["succeeded"],"dt":[1,2]}',
        b'{"t":"done","ids":[1],"os":[1],"dt":[1]}',
        b'{"t":"done","ids":[1],"os":"succeeded","dt":["1"]}',
        b'{"t":"done","ids":[1],"os":"succeeded","dt":1}',
        b'{"t":"done","ids":[1],"dt":[1]}',
        b'{"t":"claimed","first":1,"at":0,"full":false,"jobs":[[1,"t"]]}',
        b'{"t":"claimed","first":1,"at":0,"full":false,"jobs":["abcde"]}',
        b'{"t":"claimed","first":1,"at":0,"full":false,"jobs":[1]}',
        # Columns of a claim that do not line up, or are not what encode() writes.
        b'{"t":"claimed","first":1,"at":0,"full":false,"ids":[1,2],"tokens":"a",'
        b'"kinds":"k","queues":"q","runtimes":null}',
        b'{"t":"claimed","first":1,"at":0,"full":false,"ids":[1],"tokens":"a",'
        b'"kinds":["k","l"],"queues":"q","runtimes":null}',
        b'{"t":"claimed","first":1,"at":0,"full":false,"ids":"1","tokens":"a",'
        b'"kinds":"k","queues":"q","runtimes":null}',
        b'{"t":"claimed","first":1,"at":0,"full":false,"ids":[1],"tokens":"a",'
        b'"kinds":"k","queues":"q"}',
        b"[]",
    ],
)
def test_fragments_and_unknown_messages_decode_to_none(line: bytes) -> None:
    assert decode(line) is None


def test_a_claim_of_one_kind_queue_and_runtime_sends_each_once() -> None:
    jobs = tuple(ClaimedJob(i, f"{i:032x}", "a-kind", "a-queue", None) for i in range(1, 4))
    line = encode(Claimed(1, 0.5, True, jobs))
    assert line.count(b"a-kind") == 1 and line.count(b"a-queue") == 1
    assert decode(line.rstrip(b"\n")) == Claimed(1, 0.5, True, jobs)


def test_a_done_of_one_outcome_sends_it_once_and_its_seconds_as_ticks() -> None:
    line = encode(Done((1, 2), (("succeeded", 0.0123), ("succeeded", 0.0))))
    assert line == b'{"t":"done","ids":[1,2],"os":"succeeded","dt":[123,0]}\n'
    assert decode(line) == Done((1, 2), (("succeeded", 0.0123), ("succeeded", 0.0)))


def test_a_done_without_outcomes_is_encoded_as_before() -> None:
    assert encode(Done((1, 2))) == b'{"t":"done","ids":[1,2]}\n'
    assert decode(b'{"t":"done","ids":[1,2]}') == Done((1, 2), ())


@pytest.fixture
def pipe() -> Iterator[tuple[int, int]]:
    r, w = os.pipe()
    yield r, w
    for fd in (r, w):
        with contextlib.suppress(OSError):
            os.close(fd)


def test_status_reader_yields_complete_lines_and_keeps_a_partial_one(pipe: tuple[int, int]) -> None:
    r, w = pipe
    reader, writer = StatusReader(r), StatusWriter(w)
    writer.send(Idle())
    data = encode(Done((1, 2)))
    os.write(w, data[:5])
    assert list(reader.read()) == [Idle()]
    os.write(w, data[5:] + b"garbage-from-a-killed-child\n")
    assert list(reader.read()) == [Done((1, 2))]
    os.close(w)
    assert list(reader.read()) == [] and reader.closed


def test_status_reader_reads_a_pipe_it_empties_once_and_sees_its_end_later(
    pipe: tuple[int, int], monkeypatch: pytest.MonkeyPatch
) -> None:
    # A read shorter than asked for emptied the pipe: no second read (a system call and
    # a BlockingIOError a turn of the supervisor) to hear so.
    r, w = pipe
    reader, writer = StatusReader(r), StatusWriter(w)
    reads = []

    def counted_read(fd: int, size: int) -> bytes:
        reads.append(fd)
        return real_read(fd, size)

    real_read = os.read
    monkeypatch.setattr(os, "read", counted_read)  # the module status_pipe reads with
    writer.send(Idle(), Done((1, 2)))
    assert list(reader.read()) == [Idle(), Done((1, 2))]
    assert reads == [r]
    writer.send(Idle())
    os.close(w)
    assert list(reader.read()) == [Idle()]
    # The end of file is heard on the next read: the selector reports it readable.
    assert list(reader.read()) == [] and reader.closed


def test_start_board_holds_one_record_per_slot() -> None:
    board = StartBoard(slots=3)
    assert board.records() == [] and board.starts_posted() == 0
    board.post_start(1, slot=0)
    board.post_start(2, slot=2)
    records = board.records()
    assert [(r.slot, r.number) for r in records] == [(0, 1), (2, 2)]
    assert all(isinstance(r, StartRecord) and r.started_at > 0 for r in records)
    assert board.starts_posted() == 2
    board.post_start(3, slot=0)  # slot 0 moves on: its previous record is gone
    assert [(r.slot, r.number) for r in board.records()] == [(0, 3), (2, 2)]
    board.close()


def test_start_board_is_shared_with_a_forked_child() -> None:
    board = StartBoard()
    pid = os.fork()
    if pid == 0:
        board.post_start(41)
        os._exit(0)
    os.waitpid(pid, 0)
    assert [r.number for r in board.records()] == [41]
    board.close()


def test_control_lines_are_read_only_when_the_board_counts_news(pipe: tuple[int, int]) -> None:
    r, w = pipe
    board = StartBoard()
    writer, reader = ControlWriter(w, board), ControlReader(r, board)
    assert not reader.has_news() and not reader.is_skipped(7, "tok")
    writer.skip(Skip(7, "tok"))
    assert reader.has_news()
    assert reader.is_skipped(7, "tok") and not reader.is_skipped(7, "other-token")
    assert not reader.has_news()
    writer.wake()
    assert reader.read() is True
    assert reader.read() is False  # nothing new: not woken again
    board.close()


def test_timeout_and_cancel_lines_name_their_job(pipe: tuple[int, int]) -> None:
    r, w = pipe
    board = StartBoard()
    writer, reader = ControlWriter(w, board), ControlReader(r, board)
    writer.timeout(7)
    writer.cancel(8)
    writer.cancel(9)
    assert reader.has_news() and reader.read() is False  # neither is a wake
    assert (reader.timeouts, reader.cancels) == ({7}, {8, 9})
    board.close()


def test_a_pause_line_names_its_key_spaces_and_all(pipe: tuple[int, int]) -> None:
    r, w = pipe
    board = StartBoard()
    writer, reader = ControlWriter(w, board), ControlReader(r, board)
    writer.pause_key("tenant 42")
    writer.pause_key("skip 1 2")  # a key that reads like another line is still a key
    assert reader.has_news() and reader.read() is False
    assert reader.paused_keys == {"tenant 42", "skip 1 2"}
    assert not reader.skipped and not reader.new_skips
    board.close()


def test_a_read_from_a_signal_handler_inside_a_read_leaves_the_lines_to_it(
    pipe: tuple[int, int], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The worker's USR1 handler reads the pipe, and Python may run it in the middle of
    a read of the main thread (a mask does not stop it when another thread takes the
    signal). Here it comes just after the outer read took a chunk that ends inside a
    line: a nested read took the line's rest and dropped it as a line of its own, and
    the outer one lost the `cancel`; now the nested read leaves it to the outer one."""
    r, w = pipe
    board = StartBoard()
    reader = ControlReader(r, board)
    os.write(w, b"skip 1 tok\ncan")
    board.wrote_control_line()
    real_read = os.read
    signalled: list[bool] = []
    nested: list[bool] = []

    def read_then_signal(fd: int, size: int) -> bytes:
        chunk = real_read(fd, size)
        if not signalled:  # the signal's handler runs here, once
            signalled.append(True)
            os.write(w, b"cel 2\n")
            board.wrote_control_line()
            nested.append(reader.read())
        return chunk

    monkeypatch.setattr(os, "read", read_then_signal)
    assert reader.read() is False
    assert nested == [False]
    assert (reader.skipped, reader.cancels) == ({(1, "tok")}, {2})
    assert not reader.has_news()
    board.close()


def test_a_snapshot_is_one_moment_across_slots() -> None:
    board = StartBoard(slots=2)
    board.post_start(1, slot=0)
    board.post_start(2, slot=1)
    posted, _, records = board.snapshot()
    assert posted == 2 and [(r.slot, r.number) for r in records] == [(0, 1), (1, 2)]

    # A post landing between two slots' reads: the snapshot reads again.
    reads = 0
    real_records = board.records

    def records_with_a_post_in_between() -> list[StartRecord]:
        nonlocal reads
        reads += 1
        if reads == 1:
            board.post_start(3, slot=1)
        return real_records()

    board.records = records_with_a_post_in_between  # type: ignore[method-assign]
    posted, _, records = board.snapshot()
    assert reads == 2 and posted == 3
    assert [(r.slot, r.number) for r in records] == [(0, 1), (1, 3)]
    board.close()


def test_a_snapshot_says_the_released_sent_before_the_last_start() -> None:
    """The count of `released` messages goes on the board with the next start, not when
    sent: the supervisor waits for a `released` only when a start came after it."""
    board = StartBoard(slots=2)
    board.post_start(1, slot=0)
    board.sent_released()
    assert board.snapshot()[:2] == (1, 0)
    board.post_start(3, slot=1)
    assert board.snapshot()[:2] == (2, 1)
    board.post_start(4, slot=0)
    assert board.snapshot()[:2] == (3, 1)
    board.close()
