"""The control pipe, supervisor -> child: `skip <id> <token>`, `wake`, `timeout <id>`,
`cancel <id>` and `pause <key>` lines.

The writer counts each line on the start board after writing it; the reader looks at
that count before reading, and reads the pipe only when it moved (a read per job
start would otherwise be a system call per job).
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass, field

from pgworkerd.ipc.start_board import StartBoard


@dataclass(frozen=True, slots=True)
class Skip:
    """Do not start this job: its lease (this token) is gone."""

    job_id: int
    token: str


WAKE = b"wake\n"
_READ_SIZE = 4096


def encode_skip(skip: Skip) -> bytes:
    return f"skip {skip.job_id} {skip.token}\n".encode()


class ControlWriter:
    """The supervisor's end: non-blocking writes; a full or closed pipe drops the line
    (a child that does not read is stuck or dying, and is dealt with otherwise)."""

    def __init__(self, fd: int, board: StartBoard) -> None:
        self.fd = fd
        self.board = board
        os.set_blocking(fd, False)

    def skip(self, skip: Skip) -> None:
        self._write(encode_skip(skip))

    def wake(self) -> None:
        self._write(WAKE)

    def timeout(self, job_id: int) -> None:
        """The job passed its max runtime: JobTimeout in it. A child running several
        jobs learns which from this line; SIGUSR1, sent after it, wakes the child."""
        self._write(f"timeout {job_id}\n".encode())

    def cancel(self, job_id: int) -> None:
        """The running job was cancelled: JobCancelled in it. SIGUSR1 follows, as for
        `timeout`."""
        self._write(f"cancel {job_id}\n".encode())

    def pause_key(self, key: str) -> None:
        """The key was just paused: start none of its jobs claimed so far (a key has no
        control character: one line; at most 255 characters: one atomic write)."""
        self._write(f"pause {key}\n".encode())

    def _write(self, line: bytes) -> None:
        with contextlib.suppress(OSError):
            os.write(self.fd, line)
            self.board.wrote_control_line()  # after the write: the child then finds it

    def close(self) -> None:
        with contextlib.suppress(OSError):
            os.close(self.fd)


@dataclass
class ControlReader:
    """The child's end. `skipped` gathers the (job id, token) pairs not to start,
    `timeouts` the ids of running jobs past their max runtime, `cancels` those of
    running jobs cancelled (both taken by the reader), `paused_keys` the keys paused
    since the child's last claim was sent (the worker clears it then: that claim saw
    the pauses)."""

    fd: int
    board: StartBoard
    skipped: set[tuple[int, str]] = field(default_factory=set)
    timeouts: set[int] = field(default_factory=set)
    cancels: set[int] = field(default_factory=set)
    paused_keys: set[str] = field(default_factory=set)
    woken: bool = False  # a `wake` was read; the reader that acts on it resets this
    new_skips: bool = False  # a `skip` was read; likewise
    _lines_read: int = 0  # the board's count of control lines when last read
    _buffer: bytes = b""
    # A read runs in the main thread, and so does a signal's Python handler, at any
    # bytecode of it: a handler that reads too (the worker's USR1) finds `_reading` set
    # and leaves its lines to the read under way, which reads again before it returns
    # (`_reread`). Blocking the signal in the main thread would not do: the kernel
    # gives it to another thread (the lease guard's), and Python still runs the
    # handler in the main thread.
    _reading: bool = False
    _reread: bool = False

    def __post_init__(self) -> None:
        os.set_blocking(self.fd, False)

    def has_news(self) -> bool:
        return self.board.control_lines() != self._lines_read

    def read(self) -> bool:
        """Take in whatever lines wait; True if one of them was `wake`. Called again
        from a signal's handler while a read is under way, it returns False at once:
        the read under way takes the lines in."""
        if self._reading:
            self._reread = True
            return False
        self._reading = True
        woken = False
        try:
            while True:
                self._reread = False
                woken = self._read_once() or woken
                if not self._reread:
                    return woken
        finally:
            self._reading = False

    def _read_once(self) -> bool:
        self._lines_read = self.board.control_lines()  # before: no line is missed
        with contextlib.suppress(BlockingIOError, OSError):
            while chunk := os.read(self.fd, _READ_SIZE):
                self._buffer += chunk
                if len(chunk) < _READ_SIZE:
                    # The pipe is empty: a second read would only raise (on a wake-up,
                    # that is time before the claim). A line written after this read
                    # moves the board's count past _lines_read: it is read next time.
                    break
        *lines, self._buffer = self._buffer.split(b"\n")
        return any([self._take(line) for line in lines])

    def is_skipped(self, job_id: int, token: object) -> bool:
        """`token`: the lease token, compared as text (a UUID is turned into text only
        when some skip is known: asked before every job start, it rarely is)."""
        if self.board.control_lines() != self._lines_read:  # has_news(), asked every job
            self.read()
        return bool(self.skipped) and (job_id, str(token)) in self.skipped

    def _take(self, line: bytes) -> bool:
        if line.startswith(b"pause "):  # the key is the rest of the line, spaces and all
            self.paused_keys.add(line[6:].decode(errors="replace"))
            return False
        verb, job_id, token = [*line.decode(errors="replace").split(" "), "", ""][:3]
        if verb == "skip" and job_id.isdigit():
            self.skipped.add((int(job_id), token))
            self.new_skips = True
        elif verb == "timeout" and job_id.isdigit():
            self.timeouts.add(int(job_id))
        elif verb == "cancel" and job_id.isdigit():
            self.cancels.add(int(job_id))
        if verb == "wake":
            self.woken = True
            return True
        return False
