"""What systemd and a container runtime see of the daemon, for real: the notify
protocol on a real datagram socket (READY, WATCHDOG while the loop turns, STATUS,
RELOADING, STOPPING), and the supervisor as PID 1 of its own PID namespace (no init):
it reaps orphaned grandchildren and drains on TERM."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest

import pgworkerd
from tests.daemon import BASE_CONFIG, daemon_env, job, job_in_state, wait_until, write_config
from tests.tools import missing

ONE_WORKER = [{"queues": ["default"], "concurrency": 1}]


class NotifyListener:
    """A bound AF_UNIX datagram socket, as systemd's $NOTIFY_SOCKET, read by a thread
    that keeps each message with the monotonic time it arrived."""

    def __init__(self, path: Path) -> None:
        self.path = str(path)
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(self.path)
        self.sock.settimeout(0.1)
        self.messages: list[tuple[float, str]] = []
        self._closed = False
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        while not self._closed:
            try:
                data = self.sock.recv(4096)
            except TimeoutError:
                continue
            except OSError:
                return
            for line in data.decode().splitlines():
                self.messages.append((time.monotonic(), line))

    def lines(self, prefix: str, since: float = 0.0) -> list[tuple[float, str]]:
        return [
            (at, line)
            for at, line in list(self.messages)
            if at >= since and line.startswith(prefix)
        ]

    def close(self) -> None:
        self._closed = True
        self._thread.join(timeout=2)
        self.sock.close()


@pytest.fixture
def listener(tmp_path: Path):
    started = NotifyListener(tmp_path / "notify")
    yield started
    started.close()


def test_the_daemon_speaks_the_notify_protocol_and_pings_only_while_its_loop_turns(
    start_daemon, history_conn, listener
):
    # WATCHDOG_USEC of 1 s: a ping every 0.5 s. WATCHDOG_PID is left out (systemd sets
    # it to the main pid, which a test only knows after the start; see test_systemd.py).
    daemon = start_daemon(
        workers=ONE_WORKER, env={"NOTIFY_SOCKET": listener.path, "WATCHDOG_USEC": "1000000"}
    )
    ready_at = wait_until(lambda: listener.lines("READY=1"), what="READY=1")[0][0]
    wait_until(lambda: len(listener.lines("WATCHDOG=1", ready_at)) >= 3, what="three pings")
    assert listener.lines("MAINPID=") == [
        (listener.lines("MAINPID=")[0][0], f"MAINPID={daemon.pid}")
    ]
    # The environment of the workers, and of the jobs they run, names no socket.
    probe = pgworkerd.enqueue(history_conn, "environment_variable", {"name": "NOTIFY_SOCKET"})
    wait_until(job_in_state(history_conn, probe, "succeeded"), what="the probe job")
    assert job(history_conn, probe)["result"] is None

    # STATUS= follows what the daemon does.
    long_job = pgworkerd.enqueue(history_conn, "sleep", {"seconds": 60})
    daemon.worker_running(long_job)
    wait_until(
        lambda: any(
            line == "STATUS=1 worker, 1 job running" for _, line in listener.lines("STATUS=")
        ),
        what="a STATUS= line with the running job",
    )

    # A stopped supervisor (as a wedged loop) sends no ping; resumed, it pings again.
    daemon.signal(signal.SIGSTOP)
    stopped_at = time.monotonic()
    try:
        time.sleep(1.6)  # what is measured: more than three ping intervals of silence
        # A datagram sent just before the stop may be read a little after it.
        silent = listener.lines("WATCHDOG=1", stopped_at + 0.2)
    finally:
        daemon.signal(signal.SIGCONT)
    assert silent == []
    resumed_at = time.monotonic()
    wait_until(lambda: listener.lines("WATCHDOG=1", resumed_at), what="pings after SIGCONT")

    # HUP: RELOADING=1, then READY=1 again.
    hup_at = time.monotonic()
    daemon.signal(signal.SIGHUP)
    reloading = wait_until(lambda: listener.lines("RELOADING=1", hup_at), what="RELOADING=1")
    wait_until(lambda: listener.lines("READY=1", reloading[0][0]), what="READY=1 after reload")

    # TERM: STOPPING=1; the drain kills the 60 s job at the timeout and exits 0.
    term_at = time.monotonic()
    daemon.signal(signal.SIGTERM)
    wait_until(lambda: listener.lines("STOPPING=1", term_at), what="STOPPING=1")
    assert daemon.wait(timeout_s=20) == 0
    assert job(history_conn, long_job)["state"] == "queued"


def _namespace_pids(pid: int) -> list[int]:
    """A process's pids, outermost namespace first (the NSpid line of its status)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("NSpid:"):
            return [int(field) for field in line.split()[1:]]
    return [pid]


def _can_unshare() -> bool:
    if not shutil.which("unshare") or os.geteuid() != 0:
        return False
    probe = ["unshare", "--pid", "--fork", "--mount-proc", "--kill-child", "true"]
    return subprocess.run(probe, capture_output=True, timeout=10).returncode == 0


def test_as_pid_1_the_supervisor_reaps_orphaned_grandchildren_and_drains_on_term(
    db_dsn, history_conn, tmp_path
):
    if not _can_unshare():
        missing("a PID namespace needs root and unshare(1) (Debian: util-linux)")
    config = write_config(
        tmp_path / "pid1.yaml",
        handlers={**BASE_CONFIG["handlers"], "orphan": "tests.handlers:orphan"},
        workers=ONE_WORKER,
    )
    command = ["unshare", "--pid", "--fork", "--mount-proc", "--kill-child"]
    command += [sys.executable, "-m", "pgworkerd", "run", "-c", str(config)]
    with (tmp_path / "pid1.log").open("ab") as log:
        runner = subprocess.Popen(
            command,
            env=daemon_env(db_dsn),
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
    try:
        supervisor = wait_until(
            lambda: psutil.Process(runner.pid).children(), what="the supervisor"
        )[0]
        assert _namespace_pids(supervisor.pid)[-1] == 1  # PID 1 of its namespace

        marker = tmp_path / "orphan"
        orphan_job = pgworkerd.enqueue(history_conn, "orphan", {"path": str(marker)})
        wait_until(job_in_state(history_conn, orphan_job, "succeeded"), what="the orphan job")
        text = wait_until(lambda: marker.exists() and marker.read_text(), what="the orphan")
        inner_pid, inner_parent = map(int, text.split())
        assert inner_parent == 1  # re-parented to the supervisor: no init in between
        orphans = [p for p in supervisor.children() if _namespace_pids(p.pid)[-1] == inner_pid]
        assert len(orphans) == 1
        orphan = orphans[0]
        (tmp_path / "orphan.exit").touch()  # it exits now: only a reap removes its zombie
        wait_until(lambda: not psutil.pid_exists(orphan.pid), what="the orphan reaped")
        zombies = [p.pid for p in supervisor.children() if p.status() == psutil.STATUS_ZOMBIE]
        assert zombies == []

        # TERM drains: the running job finishes, the supervisor exits 0.
        sleeper = pgworkerd.enqueue(history_conn, "sleep", {"seconds": 1})
        # Its handler started (its own record), not only its row claimed: a claimed job
        # whose handler has not started yet is given back at the drain (queued), as it
        # was once when the machine was busy.
        wait_until(lambda: _started(history_conn, sleeper), what="the job's handler")
        os.kill(supervisor.pid, signal.SIGTERM)
        assert runner.wait(timeout=20) == 0
        assert job(history_conn, sleeper)["state"] == "succeeded"
        assert "draining" in (tmp_path / "pid1.log").read_text()
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(runner.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            runner.wait(timeout=10)


def _started(conn, job_id: int) -> bool:
    return conn.execute(
        "SELECT EXISTS (SELECT FROM history WHERE job_id = %s AND event = 'start')", [job_id]
    ).fetchone()[0]
