"""The status pipe, child -> supervisor: whole lines written, complete lines decoded."""

from __future__ import annotations

import contextlib
import errno
import os
import signal
from collections.abc import Iterator

from pgworkerd.ipc.messages import Message, decode, encode

# Signals whose Python handlers in the child also write to the pipe: held off while a
# message is half-written, so lines never interleave.
_HELD_SIGNALS = {signal.SIGTERM, signal.SIGUSR1}
_READ_SIZE = 65536  # a Linux pipe's default capacity: one read takes all it holds


class StatusWriter:
    """The child's end: blocking writes, whole lines."""

    def __init__(self, fd: int) -> None:
        self.fd = fd

    def send(self, *messages: Message) -> None:
        """Send `messages` in order, in one write: a child that has two to say at once
        (`done`, then `claimed`, after a claim that also wrote successes) wakes its
        supervisor once, not twice."""
        data = b"".join(map(encode, messages))
        previous = signal.pthread_sigmask(signal.SIG_BLOCK, _HELD_SIGNALS)
        try:
            view = memoryview(data)
            while view:
                try:
                    written = os.write(self.fd, view)
                except BrokenPipeError:
                    return  # the supervisor is gone; the parent check ends this child
                view = view[written:]
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, previous)


class StatusReader:
    """The supervisor's end: non-blocking reads, complete lines decoded."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        os.set_blocking(fd, False)
        self._buffer = b""
        self.closed = False

    def read(self) -> Iterator[Message]:
        """Every complete message available now; sets `closed` at end of file."""
        while True:
            try:
                chunk = os.read(self.fd, _READ_SIZE)
            except BlockingIOError:
                break
            except OSError as exc:
                if exc.errno != errno.EBADF:
                    raise
                chunk = b""
            if not chunk:
                self.closed = True
                break
            self._buffer += chunk
            if len(chunk) < _READ_SIZE:
                # The pipe is empty now: a read to hear so would be a system call and a
                # BlockingIOError a turn. What comes later, end of file too, wakes the
                # selector again.
                break
        *lines, self._buffer = self._buffer.split(b"\n")
        for line in lines:
            if line.strip():
                message = decode(line)
                if message is not None:  # a fragment of a child killed mid-line: skip
                    yield message

    def close(self) -> None:
        with contextlib.suppress(OSError):
            os.close(self.fd)
        self.closed = True
