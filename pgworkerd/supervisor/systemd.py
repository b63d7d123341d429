"""The systemd notify protocol (sd_notify(3)): READY=1 once the workers are started,
RELOADING=1 on HUP, STOPPING=1 when draining, WATCHDOG=1 while the loop turns and
STATUS= a one-line summary. A no-op without $NOTIFY_SOCKET, as in gunicorn: the same
daemon runs under `Type=notify`, `Type=simple` or no systemd at all.

The watchdog pings come from the supervisor's own loop (`Notifier.turned`, called once
a turn), never from a thread: a loop that is wedged, or a supervisor that is stopped,
sends none, and systemd restarts it after `WatchdogSec`. The loop's wait is bounded by
`next_due_at()`, so an idle loop still wakes for the next ping.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Callable, MutableMapping

# STATUS= is recomputed at most this often (the summary sums the children's ledgers)
# and sent only when it changed: `systemctl status` shows it, nothing needs it sooner.
STATUS_EVERY_S = 2.0


def watchdog_interval_s(usec: str | None, for_pid: str | None, own_pid: int) -> float | None:
    """Seconds between pings: half of $WATCHDOG_USEC, as sd_watchdog_enabled(3)
    advises. None when there is no watchdog, or it is set for another process
    ($WATCHDOG_PID names the one that must ping: systemd sets it to the main pid)."""
    if not usec:
        return None
    try:
        micros = int(usec)
    except ValueError:
        return None
    if micros <= 0:
        return None
    if for_pid:
        try:
            if int(for_pid) != own_pid:
                return None
        except ValueError:
            return None
    return micros / 2_000_000


class Notifier:
    """Sends state lines to the service manager's socket, if there is one."""

    def __init__(self, address: str | None, watchdog_s: float | None = None) -> None:
        self.address = address
        # Without a socket there is no one to ping: the watchdog is off.
        self.watchdog_s = watchdog_s if address else None
        self._ping_at = 0.0  # monotonic: the first turn pings at once
        self._status_at = 0.0  # monotonic: the summary is due again
        self._status = ""  # the last STATUS= sent

    @classmethod
    def from_environment(
        cls, environ: MutableMapping[str, str] = os.environ, pid: int | None = None
    ) -> Notifier:
        # Taken out of the environment: worker children, and the handlers they run,
        # must never speak to the service manager in the daemon's name, nor believe
        # they are the process the watchdog watches.
        address = environ.pop("NOTIFY_SOCKET", None)
        usec = environ.pop("WATCHDOG_USEC", None)
        for_pid = environ.pop("WATCHDOG_PID", None)
        own_pid = os.getpid() if pid is None else pid
        return cls(address, watchdog_interval_s(usec, for_pid, own_pid))

    def notify(self, *lines: str) -> None:
        if not self.address:
            return
        status = next((line[7:] for line in lines if line.startswith("STATUS=")), None)
        if status is not None:
            self._status = status
        # A leading "@" names a socket in the abstract namespace.
        target = "\0" + self.address[1:] if self.address.startswith("@") else self.address
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as sock:
                sock.connect(target)
                sock.sendall("\n".join(lines).encode())
        except OSError:
            pass  # no one listens any more: nothing to tell

    def turned(self, now: float, summary: Callable[[], str]) -> None:
        """The loop made one turn at `now` (monotonic): ping the watchdog when due, and
        say the summary when it changed (checked at most every STATUS_EVERY_S)."""
        if not self.address:
            return
        lines = []
        if self.watchdog_s is not None and now >= self._ping_at:
            lines.append("WATCHDOG=1")
            self._ping_at = now + self.watchdog_s
        if now >= self._status_at:
            self._status_at = now + STATUS_EVERY_S
            status = summary()
            if status != self._status:
                lines.append(f"STATUS={status}")
        if lines:
            self.notify(*lines)

    def next_due_at(self) -> float | None:
        """When the loop must turn again for the next ping (monotonic); None: never."""
        return self._ping_at if self.watchdog_s is not None else None
