"""Put on a daemon's PYTHONPATH by a test, Python imports this at start-up: SIGUSR2
then makes the process write one line to its stderr (the daemon's log), its
collector's frozen and walked counts, as tests/handlers.py:collector_generations
tells a worker's. Read so from outside, the supervisor's counts need no debugging
surface in pgworkerd itself; its signal inbox records the signal and does nothing.

os.write, not print: a signal handler that writes to sys.stderr while the loop is
writing its log raises a reentrant-call error."""

from __future__ import annotations

import gc
import os
import signal
from types import FrameType


def _report(signum: int, frame: FrameType | None) -> None:
    walked = len(gc.get_objects())
    line = f"gc-probe pid={os.getpid()} frozen={gc.get_freeze_count()} walked={walked}\n"
    os.write(2, line.encode())


signal.signal(signal.SIGUSR2, _report)
