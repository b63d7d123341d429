"""The notify protocol's watchdog and status lines, on a fake clock, sent to a real
datagram socket."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from pgworkerd.supervisor.systemd import STATUS_EVERY_S, Notifier, watchdog_interval_s


@pytest.fixture
def manager(tmp_path: Path) -> Iterator[tuple[str, socket.socket]]:
    """A bound datagram socket standing for systemd's notify socket."""
    path = str(tmp_path / "notify")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(path)
    sock.setblocking(False)
    yield path, sock
    sock.close()


def received(sock: socket.socket) -> list[str]:
    messages = []
    while True:
        try:
            messages.append(sock.recv(4096).decode())
        except BlockingIOError:
            return messages


def test_the_interval_is_half_the_watchdog_usec_and_only_for_the_named_pid() -> None:
    assert watchdog_interval_s("1000000", None, 42) == 0.5
    assert watchdog_interval_s("30000000", "42", 42) == 15.0
    assert watchdog_interval_s("1000000", "43", 42) is None  # another process pings
    assert watchdog_interval_s(None, None, 42) is None
    for bad in ("", "0", "-5", "soon"):
        assert watchdog_interval_s(bad, None, 42) is None
    assert watchdog_interval_s("1000000", "pid", 42) is None


def test_the_environment_is_emptied_so_children_inherit_nothing() -> None:
    environ = {"NOTIFY_SOCKET": "/run/x", "WATCHDOG_USEC": "2000000", "WATCHDOG_PID": "7"}
    notifier = Notifier.from_environment(environ, pid=7)
    assert environ == {}
    assert (notifier.address, notifier.watchdog_s) == ("/run/x", 1.0)


def test_no_socket_means_no_watchdog_and_no_wakeups() -> None:
    notifier = Notifier.from_environment({"WATCHDOG_USEC": "1000000"}, pid=1)
    assert notifier.watchdog_s is None
    assert notifier.next_due_at() is None
    notifier.turned(0.0, lambda: pytest.fail("no one to tell: no summary computed"))


def test_pings_at_the_interval_only_when_the_loop_turns(
    manager: tuple[str, socket.socket],
) -> None:
    path, sock = manager
    notifier = Notifier(path, watchdog_s=0.5)
    notifier.turned(100.0, lambda: "s")
    assert received(sock) == ["WATCHDOG=1\nSTATUS=s"]
    assert notifier.next_due_at() == 100.5
    notifier.turned(100.2, lambda: "s")
    assert received(sock) == []  # not due yet
    notifier.turned(100.5, lambda: "s")
    assert received(sock) == ["WATCHDOG=1"]
    # A loop that does not turn for 3 s sends nothing meanwhile; the next turn pings once.
    notifier.turned(103.5, lambda: "s")
    assert received(sock) == ["WATCHDOG=1"]
    assert notifier.next_due_at() == 104.0


def test_status_is_sent_when_it_changes_at_most_every_few_seconds(
    manager: tuple[str, socket.socket],
) -> None:
    path, sock = manager
    notifier = Notifier(path)  # no watchdog: status only
    calls: list[float] = []

    def summary(text: str, at: float) -> str:
        calls.append(at)
        return text

    notifier.turned(10.0, lambda: summary("2 workers, 0 jobs running", 10.0))
    assert received(sock) == ["STATUS=2 workers, 0 jobs running"]
    notifier.turned(10.1, lambda: summary("2 workers, 1 job running", 10.1))
    assert received(sock) == []  # not recomputed before STATUS_EVERY_S
    assert calls == [10.0]
    later = 10.0 + STATUS_EVERY_S
    notifier.turned(later, lambda: summary("2 workers, 0 jobs running", later))
    assert received(sock) == []  # recomputed, unchanged: not sent
    notifier.notify("STOPPING=1", "STATUS=draining")
    assert received(sock) == ["STOPPING=1\nSTATUS=draining"]
    again = later + STATUS_EVERY_S
    notifier.turned(again, lambda: summary("0 workers, 0 jobs running, draining", again))
    assert received(sock) == ["STATUS=0 workers, 0 jobs running, draining"]
    assert notifier.next_due_at() is None


def test_a_socket_no_one_listens_on_is_not_an_error(tmp_path: Path) -> None:
    notifier = Notifier(str(tmp_path / "gone"), watchdog_s=0.5)
    notifier.turned(0.0, lambda: "s")
    notifier.notify("READY=1")
