"""Exit statuses of a worker child, read by the supervisor when it reaps one."""

from __future__ import annotations

from enum import IntEnum


class ExitCode(IntEnum):
    RECYCLED = 0  # normal end: drained, or recycled after max jobs / memory
    BOOT_ERROR = 3  # could not even start (bad handler module, ...): the supervisor stops
    ORPHANED = 4  # the supervisor is gone
    CRASHED = 70  # pgworkerd's own code raised in the child: reported, then replaced
