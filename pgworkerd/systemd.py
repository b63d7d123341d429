"""The systemd notify protocol (sd_notify(3)): READY=1 once the workers are started,
RELOADING=1 on HUP, STOPPING=1 when draining. A no-op without $NOTIFY_SOCKET, as in
gunicorn: the same daemon runs under `Type=notify`, `Type=simple` or no systemd at all.
"""

from __future__ import annotations

import os
import socket


class Notifier:
    """Sends state lines to the service manager's socket, if there is one."""

    def __init__(self, address: str | None) -> None:
        self.address = address

    @classmethod
    def from_environment(cls) -> Notifier:
        # Taken out of the environment: worker children, and the handlers they run,
        # must never speak to the service manager in the daemon's name.
        return cls(os.environ.pop("NOTIFY_SOCKET", None))

    def notify(self, *lines: str) -> None:
        if not self.address:
            return
        # A leading "@" names a socket in the abstract namespace.
        target = "\0" + self.address[1:] if self.address.startswith("@") else self.address
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as sock:
                sock.connect(target)
                sock.sendall("\n".join(lines).encode())
        except OSError:
            pass  # no one listens any more: nothing to tell
