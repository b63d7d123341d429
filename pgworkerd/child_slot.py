"""Memory a worker child shares with its supervisor, for what happens once per job and
would cost a system call each way through a pipe:

  * which of its claimed jobs the child started last, and when (child -> supervisor);
  * how many lines the supervisor wrote to the child's control pipe (supervisor ->
    child), so the child reads that pipe only when there is something in it.

A status-pipe message per job start would cost the child a write and the supervisor a
wake-up for every job, which at thousands of jobs a second is most of a core. The
supervisor reads the slot on its own schedule (each loop turn, and before it acts on
anything the child said).

The start record is (the job's number among the child's claims, its start time, a
check). The time is CLOCK_MONOTONIC, one clock for every process of the host, so it
serves the supervisor's deadlines as it is. A read that catches a write half done
finds a check that does not match, and reads again. Each field has one writer.
"""

from __future__ import annotations

import mmap
import struct
import time

_START = struct.Struct("<qdq")  # claim number, monotonic start time, check
_CONTROL = struct.Struct("<q")  # lines written to the control pipe, after the start record
_CHECK_SEED = 0x5A17_0F_C0FFEE


class ChildSlot:
    """Created by the supervisor before the fork, so both processes map the same page."""

    def __init__(self) -> None:
        # Anonymous and shared (mmap's default on Unix): the forked child writes the
        # very page the supervisor reads, and the other way round.
        self._memory = mmap.mmap(-1, _START.size + _CONTROL.size)
        self._write_start(0, 0.0)
        self._control_lines = 0  # the supervisor's own count

    # -- the child's side -----------------------------------------------------------------

    def post_start(self, claim_number: int) -> None:
        """The child is about to run the handler of its `claim_number`-th claimed job."""
        self._write_start(claim_number, time.monotonic())

    def control_lines(self) -> int:
        """How many lines the supervisor has written to the control pipe so far."""
        return _CONTROL.unpack_from(self._memory, _START.size)[0]

    # -- the supervisor's side ------------------------------------------------------------

    def last_start(self) -> tuple[int, float] | None:
        """(claim number, monotonic start time) of the last job started, or None."""
        while True:
            number, started_at, check = _START.unpack_from(self._memory, 0)
            if check == _check(number, started_at):
                return (number, started_at) if number else None

    def wrote_control_line(self) -> None:
        """Count a line written to the control pipe (after writing it)."""
        self._control_lines += 1
        _CONTROL.pack_into(self._memory, _START.size, self._control_lines)

    def close(self) -> None:
        self._memory.close()

    def _write_start(self, number: int, started_at: float) -> None:
        _START.pack_into(self._memory, 0, number, started_at, _check(number, started_at))


def _check(number: int, started_at: float) -> int:
    bits = struct.unpack("<q", struct.pack("<d", started_at))[0]
    return number ^ bits ^ _CHECK_SEED
