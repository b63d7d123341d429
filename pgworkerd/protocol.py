"""What a worker child tells its supervisor, over the child's status pipe.

One JSON object a line, child to supervisor only. The supervisor learns from it which
jobs each child holds (to renew their leases, and to settle them if the child dies)
and which one is running since when (to enforce max runtime):

    {"t": "ready"}                                   connected, about to claim
    {"t": "claimed", "first": n, "at": t, "full": bool,
     "jobs": [[id, token, kind, queue, max_runtime_s], ...]}
                                                     leased (the claim was sent at
                                                     monotonic time t), numbered n, n+1,
                                                     ... in the order they will run;
                                                     full: as many as asked for
    {"t": "finishing", "ids": [id, ...]}             returned; their outcomes are next
    {"t": "done", "ids": [id, ...]}                  outcomes written (or leases lost)

Job starts are not messages: the child posts the number of each job it starts in a
slot of shared memory (child_slot.py), and a job started means every job numbered
before it has returned. Successes are written in batches (outcomes.py): until `done`,
a job whose handler returned may wait, unwritten, in the child's buffer.
    {"t": "released", "ids": [id, ...]}              given back unstarted, uncharged
    {"t": "stopping"}                                no job will start after this line
    {"t": "boot_error", "reason": "..."}             the child cannot work at all
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import signal
from collections.abc import Iterator
from typing import Any

# Signals whose Python handlers also write to the pipe: they are held off while a
# message is half-written, so lines never interleave.
_HELD_SIGNALS = {signal.SIGTERM, signal.SIGUSR1}


class StatusWriter:
    """The child's end: blocking writes, whole lines."""

    def __init__(self, fd: int) -> None:
        self.fd = fd

    def send(self, kind: str, **fields: Any) -> None:
        data = (json.dumps({"t": kind, **fields}, separators=(",", ":")) + "\n").encode()
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

    def read(self) -> Iterator[dict[str, Any]]:
        """Every complete message available now; sets `closed` at end of file."""
        while True:
            try:
                chunk = os.read(self.fd, 65536)
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
        *lines, self._buffer = self._buffer.split(b"\n")
        for line in lines:
            if line.strip():
                try:
                    yield json.loads(line)
                except json.JSONDecodeError:
                    continue  # a child killed mid-line leaves a fragment; nothing to act on

    def close(self) -> None:
        with contextlib.suppress(OSError):
            os.close(self.fd)
        self.closed = True
