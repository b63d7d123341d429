"""pgworkerd as users run it: a YAML config, `pgworkerd migrate`, then `pgworkerd run -c`
as a subprocess in its own session, stopped with SIGTERM (a graceful drain).

Also the process-tree accounting the report needs: CPU seconds of the supervisor and
every worker (reaped ones included) and the workers' RSS.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil
import psycopg
import yaml

REPO = Path(__file__).resolve().parent.parent
QUEUE = "bench"
HANDLERS = {
    "noop": "bench.handlers:noop",
    "stamp": "bench.handlers:stamp",
    "wait": "bench.handlers:wait",
    "wait_async": "bench.handlers:wait_async",
}


def write_config(
    path: Path, dsn: str, *, concurrency: int = 2, extra: dict[str, Any] | None = None
) -> Path:
    """The bench's config file: one pool of `concurrency` processes on queue `bench`,
    everything else at pgworkerd's defaults (batch size included): what a user gets."""
    config: dict[str, Any] = {
        "database": {"url": dsn},
        "handlers": dict(HANDLERS),
        "queues": {QUEUE: {}},
        "workers": [{"queues": [QUEUE], "concurrency": concurrency}],
        **(extra or {}),
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def pgworkerd_command() -> list[str]:
    """The installed `pgworkerd` script of this interpreter's environment (what users
    type), else `python -m pgworkerd`."""
    script = Path(sys.executable).parent / "pgworkerd"
    if script.exists():
        return [str(script)]
    found = shutil.which("pgworkerd")
    return [found] if found else [sys.executable, "-m", "pgworkerd"]


def daemon_env(code: Path | None = None) -> dict[str, str]:
    """The bench's environment minus PGWORKERD_* overrides (the config file must be what
    runs), plus PYTHONPATH so `bench.handlers` imports. `code`: another checkout whose
    `pgworkerd` (and `bench.handlers`) to run instead of this one's (first on the path,
    it wins over the installed one)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PGWORKERD_")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(code or REPO), env.get("PYTHONPATH")]))
    return env


def command(code: Path | None = None, python: Path | None = None) -> list[str]:
    """How to start `pgworkerd`: the installed script, or for another checkout's code,
    this interpreter on it (the script would import the installed one); `python`: that
    interpreter instead (another venv: other extras installed), on this checkout's code."""
    if python is not None:
        return [str(python), "-m", "pgworkerd"]
    return pgworkerd_command() if code is None else [sys.executable, "-m", "pgworkerd"]


def migrate(
    config: Path, log_path: Path, *, code: Path | None = None, python: Path | None = None
) -> None:
    with log_path.open("ab") as log:
        subprocess.run(
            [*command(code, python), "migrate", "-c", str(config)],
            env=daemon_env(code),
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            check=True,
            cwd=code or REPO,  # `python -m` puts the cwd first on the path
        )


def fill_noop_jobs(conn: psycopg.Connection[Any], jobs: int) -> None:
    """`jobs` no-op jobs on queue `bench`, inserted in one statement and analysed (on an
    autocommit connection): a backlog for a daemon to work through, without a
    producer's cost in the measured window."""
    conn.execute(
        "INSERT INTO pgworkerd.jobs (queue, kind, payload)"
        " SELECT 'bench', 'noop', '{\"i\": 0}'::jsonb FROM generate_series(1, %s)",
        (jobs,),
    )
    conn.execute("VACUUM ANALYZE pgworkerd.jobs")


@dataclass
class TreeUsage:
    cpu_s: float  # user + system of supervisor and workers, reaped workers included
    supervisor_cpu_s: float  # the supervisor's own share of cpu_s
    supervisor_rss_mb: float
    worker_rss_mb: list[float]
    worker_uss_mb: list[float]


class Daemon:
    """One `pgworkerd run -c CONFIG` process tree."""

    def __init__(
        self,
        config: Path,
        log_path: Path,
        *,
        code: Path | None = None,
        python: Path | None = None,
    ) -> None:
        log_path.parent.mkdir(parents=True, exist_ok=True)
        self.log_path = log_path
        self._log = log_path.open("ab")
        # The daemon says READY=1 here once its workers are forked (the systemd notify
        # protocol): the moment the peers' harnesses start their clocks, after imports.
        self.ready: float | None = None  # perf_counter() at READY=1
        self._notify_dir = tempfile.mkdtemp(prefix="pgworkerd-bench-notify-")
        self._notify = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self._notify.bind(os.path.join(self._notify_dir, "notify"))
        threading.Thread(target=self._await_ready, daemon=True).start()
        self.started = time.perf_counter()
        self.started_wall = time.time()  # to compare with the database's timestamps
        self.proc = subprocess.Popen(
            [*command(code, python), "run", "-c", str(config)],
            env={**daemon_env(code), "NOTIFY_SOCKET": self._notify.getsockname()},
            stdout=self._log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            cwd=code or REPO,
        )
        self.ps = psutil.Process(self.proc.pid)

    def usage(self) -> TreeUsage:
        """CPU and memory of the tree now. A reaped worker's CPU is in the supervisor's
        children_* times; a live one's is read from it directly."""
        times = self.ps.cpu_times()
        own = times.user + times.system
        cpu = own + times.children_user + times.children_system
        rss, uss = [], []
        for child in self.ps.children(recursive=True):
            with contextlib.suppress(psutil.Error):
                t = child.cpu_times()
                cpu += t.user + t.system
                info = child.memory_full_info()
                rss.append(info.rss / 2**20)
                uss.append(info.uss / 2**20)
        return TreeUsage(cpu, own, self.ps.memory_info().rss / 2**20, rss, uss)

    def workers_connected(self, dsn: str, count: int, timeout_s: float = 60) -> float:
        """Wait until `count` worker connections show in pg_stat_activity (a database
        fact, not a log line); seconds since the daemon was started."""
        deadline = time.monotonic() + timeout_s
        with psycopg.connect(dsn, autocommit=True) as conn:
            while True:
                n = conn.execute(
                    "SELECT count(*) FROM pg_stat_activity"
                    " WHERE application_name LIKE 'pgworkerd worker %%'"
                    " AND datname = current_database()"
                ).fetchone()[0]
                if n >= count:
                    return time.perf_counter() - self.started
                if self.proc.poll() is not None:
                    raise RuntimeError(
                        f"pgworkerd run exited {self.proc.returncode}; see {self.log_path}"
                    )
                if time.monotonic() > deadline:
                    raise RuntimeError(
                        f"{count} workers not connected after {timeout_s}s; see {self.log_path}"
                    )
                time.sleep(0.02)

    def _await_ready(self) -> None:
        # Reads on after READY=1 until the socket is closed, as systemd does: the daemon
        # sends STATUS= lines all along, and a receiver that stops reading fills the
        # socket's queue until the supervisor's next send blocks (it did, in a 3-minute
        # run of bench.held: the supervisor stuck in sendto, every worker behind it).
        with contextlib.suppress(OSError):
            while True:
                if b"READY=1" in self._notify.recv(4096).split(b"\n") and self.ready is None:
                    self.ready = time.perf_counter()

    def stop(self, timeout_s: float = 60) -> int | None:
        """SIGTERM (drain) and wait; SIGKILL the daemon's own process group if it will
        not go. Returns its exit status (None if it had to be killed)."""
        try:
            if self.proc.poll() is None:
                self.proc.send_signal(signal.SIGTERM)
            return self.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)  # its session: nothing else is in it
            self.proc.wait(timeout=10)
            return None
        finally:
            self._log.close()
            with contextlib.suppress(OSError):
                self._notify.shutdown(socket.SHUT_RDWR)  # wakes the reading thread
            self._notify.close()
            shutil.rmtree(self._notify_dir, ignore_errors=True)
