"""Signals to the supervisor: the handlers only record, the loop dispatches.

The handler does nothing; the signal number written to the wakeup fd is the record
(gunicorn's pattern). The loop's selector watches `fd`, and `take()` returns what came.
"""

from __future__ import annotations

import os
import signal
from types import FrameType

HANDLED = (signal.SIGTERM, signal.SIGINT, signal.SIGQUIT, signal.SIGHUP, signal.SIGCHLD)


class SignalInbox:
    def __init__(self) -> None:
        self.fd, self._write_fd = os.pipe()
        os.set_blocking(self.fd, False)
        os.set_blocking(self._write_fd, False)

    def install(self) -> None:
        signal.set_wakeup_fd(self._write_fd)
        for sig in HANDLED:
            signal.signal(sig, _record_only)

    def take(self) -> list[signal.Signals]:
        try:
            received = os.read(self.fd, 1024)
        except BlockingIOError:
            return []
        return [signal.Signals(number) for number in received]


def _record_only(signum: int, frame: FrameType | None) -> None:
    """Signal handler: nothing. The wakeup fd has the signal number for the loop."""
