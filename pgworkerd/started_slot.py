"""Which of its claimed jobs a worker child started last, and when: written by the
child into memory it shares with its supervisor, read by the supervisor when it looks.

A status-pipe message per job start would cost the child a write and the supervisor a
wake-up for every job, which at thousands of jobs a second is most of a core. The
slot costs the child a memory write; the supervisor reads it on its own schedule (each
loop turn, and before it acts on anything the child said).

The record is (the job's number among the child's claims, its start time, a check).
The time is CLOCK_MONOTONIC, one clock for every process of the host, so it serves
the supervisor's deadlines as it is. A read that catches a write half done finds a
check that does not match, and reads again.
"""

from __future__ import annotations

import mmap
import struct
import time

_RECORD = struct.Struct("<qdq")  # claim number, monotonic start time, check
_CHECK_SEED = 0x5A17_0F_C0FFEE


class StartedSlot:
    """Created by the supervisor before the fork; the child posts, the supervisor
    reads."""

    def __init__(self) -> None:
        # Anonymous and shared (mmap's default on Unix): the forked child writes the
        # very pages the supervisor reads.
        self._memory = mmap.mmap(-1, _RECORD.size)
        self._write(0, 0.0)

    def post(self, claim_number: int) -> None:
        """The child is about to run the handler of its `claim_number`-th claimed job."""
        self._write(claim_number, time.monotonic())

    def read(self) -> tuple[int, float] | None:
        """(claim number, monotonic start time) of the last job started, or None."""
        while True:
            number, started_at, check = _RECORD.unpack_from(self._memory, 0)
            if check == _check(number, started_at):
                return (number, started_at) if number else None

    def close(self) -> None:
        self._memory.close()

    def _write(self, number: int, started_at: float) -> None:
        _RECORD.pack_into(self._memory, 0, number, started_at, _check(number, started_at))


def _check(number: int, started_at: float) -> int:
    bits = struct.unpack("<q", struct.pack("<d", started_at))[0]
    return number ^ bits ^ _CHECK_SEED
