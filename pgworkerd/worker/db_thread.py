"""The database calls of a worker child that runs several jobs at once (concurrent.py),
made one at a time in a thread of their own.

A claim, or a write of successes, is a round trip and a commit: a millisecond or a
few on a busy server. Made by the main thread, it held up everything else the main
thread does: a slot whose job ended meanwhile stayed idle, and no claimed job could
start, until the answer came (with 1 ms jobs, the slots sat idle most of the time).
Handed to this thread, the round trip runs while the main thread goes on collecting
and starting jobs; the answer wakes the main thread by a byte on `wake_fd`, the pipe
the slots write to when a job ends.

Only the call itself runs here. What to send, and everything done with the answer
(status messages, claim numbers, a lost connection), stays on the main thread, which
also makes no other use of the connection while a call is under way (it takes the
answer first: `answer()` waits for it). So the connection is never used by two
threads at once, and the order of the messages to the supervisor is the main thread's.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any


class DatabaseThread:
    """Only the child's main thread calls these methods. Its thread starts on the first
    call (in the child, after the fork)."""

    def __init__(self, wake_fd: int) -> None:
        self._wake_fd = wake_fd
        self._thread: ThreadPoolExecutor | None = None
        self._under_way: Future[Any] | None = None

    @property
    def busy(self) -> bool:
        """A call was sent whose answer was not taken yet."""
        return self._under_way is not None

    def answered(self) -> bool:
        """The call under way has returned or raised: `answer()` will not wait."""
        return self._under_way is not None and self._under_way.done()

    def send(self, call: Callable[[], Any]) -> None:
        """Make `call` in the thread (the caller checked `busy` is False)."""
        if self._thread is None:
            self._thread = ThreadPoolExecutor(1, thread_name_prefix="pgworkerd-db")
        under_way = self._thread.submit(call)
        under_way.add_done_callback(self._wake)
        self._under_way = under_way

    def answer(self) -> Any:
        """What the call returned (waiting for it if need be), or raise what it raised."""
        under_way, self._under_way = self._under_way, None
        assert under_way is not None, "no call under way"
        return under_way.result()

    def close(self) -> None:
        """Stop the thread once it is idle (the caller took the last answer)."""
        if self._thread is not None:
            self._thread.shutdown(wait=False)
            self._thread = None

    def _wake(self, _: Future[Any]) -> None:
        with contextlib.suppress(BlockingIOError, OSError):
            os.write(self._wake_fd, b"d")  # a full pipe already wakes the main thread
