"""Reaping children and saying how each one ended. Reaping is authoritative: a child's
jobs are settled from its wait status and the reason we killed it, if we did."""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from dataclasses import dataclass

from pgworkerd.ipc import ExitCode
from pgworkerd.supervisor import osutil
from pgworkerd.supervisor.ledger import KillReason


def reaped(*, block: bool = False) -> Iterator[tuple[int, int]]:
    """(pid, wait status) of each child that ended; with `block`, waits for one."""
    while True:
        try:
            pid, status = os.waitpid(-1, 0 if block else os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        yield pid, status
        if block:
            return


@dataclass(frozen=True, slots=True)
class ExitReport:
    how: str  # the wait status in words: "exited with status 3", "killed by SIGKILL"
    reason: str  # why: the kill reason, "drained", "recycled" or "crashed"
    clean: bool  # exited with status 0
    our_doing: bool  # we killed or drained it
    level: int  # for the log line
    boot_error: bool  # it could not even start: the supervisor stops


def report_exit(status: int, kill_reason: KillReason | None, *, retiring: bool) -> ExitReport:
    # Our own SIGKILL is no sign of memory trouble; one we did not send may be.
    how = osutil.describe_exit(status, oom_hint=kill_reason is None)
    clean = os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0
    expected = retiring or kill_reason is KillReason.SHUTDOWN
    if kill_reason is not None:
        reason = kill_reason.value
    elif clean:
        reason = "drained" if retiring else "recycled"
    else:
        reason = "crashed"
    return ExitReport(
        how=how,
        reason=reason,
        clean=clean,
        our_doing=kill_reason is not None or retiring,
        level=logging.INFO if (clean or expected) else logging.ERROR,
        boot_error=os.WIFEXITED(status) and os.WEXITSTATUS(status) == ExitCode.BOOT_ERROR,
    )
