"""Running the real `pgworkerd run` in tests: a process tree, real signals, and
polling for facts in the database with deadlines (never bare sleeps)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import psutil
import psycopg
import yaml

REPO = Path(__file__).resolve().parent.parent
T = TypeVar("T")

HISTORY_TABLE = """
CREATE TABLE IF NOT EXISTS history (
    id          bigserial PRIMARY KEY,
    job_id      bigint NOT NULL,
    attempt     int NOT NULL,
    lease_token uuid,
    pid         int NOT NULL,
    event       text NOT NULL,
    at          timestamptz NOT NULL DEFAULT clock_timestamp()
)"""

BASE_CONFIG: dict[str, Any] = {
    "handlers": {
        "noop": "tests.handlers:noop",
        "environment_variable": "tests.handlers:environment_variable",
        "public_names_not_loaded": "tests.handlers:public_names_not_loaded",
        "modules_loaded": "tests.handlers:modules_loaded",
        "collector_generations": "tests.handlers:collector_generations",
        "c_sleep": "tests.handlers:c_sleep",
        "record": "tests.handlers:record",
        "follow_up": "tests.handlers:follow_up",
        "record_async": "tests.handlers:record_async",
        "fail": "tests.handlers:fail",
        "fail_then_succeed": "tests.handlers:fail_then_succeed",
        "discard": "tests.handlers:discard",
        "sleep": "tests.handlers:sleep",
        "until_file": "tests.handlers:until_file",
        "tick": "tests.handlers:tick",
        "block_in_c": "tests.handlers:block_in_c",
        "catch_timeout": "tests.handlers:catch_timeout",
        "crash": "tests.handlers:crash",
        "sleep_first_attempt": "tests.handlers:sleep_first_attempt",
        "segfault": "tests.handlers:segfault",
        "hog": "tests.handlers:hog",
        "work": "tests.handlers:work",
        "spawn_then_die": "tests.handlers:spawn_then_die",
        "sleep_async": "tests.handlers:sleep_async",
        "spin": "tests.handlers:spin",
        "until_cancelled": "tests.handlers:until_cancelled",
        "until_cancelled_async": "tests.handlers:until_cancelled_async",
        "ticks_past_cancel": "tests.handlers:ticks_past_cancel",
        "progress_steps": "tests.handlers:progress_steps",
        "pause_key_once": "tests.handlers:pause_key_once",
    },
    "queues": {"default": {}},
    "workers": [{"queues": ["default"], "concurrency": 2}],
    "defaults": {
        "max_attempts": 5,
        "max_runtime": "30s",
        "batch_size": 10,
        "backoff_base": "100ms",
        "backoff_max": "500ms",
    },
    "lease_ttl": "3s",
    "shutdown_timeout": "5s",
    "poll_interval": "200ms",
}


def wait_until(
    check: Callable[[], T],
    timeout_s: float = 20.0,
    what: str = "condition",
    interval_s: float = 0.05,
) -> T:
    """Poll `check` until it returns something truthy; fail with `what` at the deadline."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s}s waiting for {what}")
        time.sleep(interval_s)


def write_config(path: Path, **overrides: Any) -> Path:
    config = {**BASE_CONFIG, **overrides}
    path.write_text(yaml.safe_dump(config))
    return path


def daemon_env(dsn: str, history_dsn: str | None = None) -> dict[str, str]:
    """The daemon's environment. Handlers write history to `history_dsn` (default: the
    daemon's own database URL), which a network fault test keeps off the faulty path."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PGWORKERD_")}
    env.update(
        PGWORKERD_DATABASE_URL=dsn,
        PGWORKERD_TEST_HISTORY_DSN=history_dsn or dsn,
        PYTHONPATH=str(REPO),
        PYTHONUNBUFFERED="1",
    )
    return env


class Daemon:
    """One `pgworkerd run` process tree. Always stopped (and checked for leftover
    children) by the fixture that made it."""

    def __init__(
        self,
        config_path: Path,
        dsn: str,
        log_path: Path,
        log_format: str | None = "text",  # None: the config's log_format
        history_dsn: str | None = None,
        env: dict[str, str] | None = None,
    ) -> None:
        self.log_path = log_path
        self._log = log_path.open("ab")
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "pgworkerd",
                "run",
                "-c",
                str(config_path),
                *(["--log-format", log_format] if log_format else []),
            ],
            env={**daemon_env(dsn, history_dsn), **(env or {})},
            stdout=self._log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        self.pid = self.proc.pid
        self._known_children: set[int] = set()

    # -- the process tree -------------------------------------------------------------------

    def workers(self) -> list[psutil.Process]:
        try:
            children = psutil.Process(self.pid).children()
        except psutil.NoSuchProcess:
            return []
        self._known_children.update(p.pid for p in children)
        return children

    def titles(self) -> list[str]:
        titles = []
        for proc in self.workers():
            with contextlib.suppress(psutil.Error):
                titles.append(" ".join(proc.cmdline()).strip())
        return sorted(titles)

    def wait_for_workers(self, count: int, timeout_s: float = 20) -> list[psutil.Process]:
        def ready() -> list[psutil.Process] | None:
            workers = [p for p in self.workers() if _ready(_title(p))]
            return workers if len(workers) == count else None

        return wait_until(ready, timeout_s, f"{count} workers")

    def worker_running(
        self,
        job_id: int,
        timeout_s: float = 20,
        *,
        started_in: psycopg.Connection[Any] | None = None,
    ) -> psutil.Process:
        """The worker whose title shows `job_id`. With `started_in` (the history
        table's connection), also wait for the handler's own "start" row: a title is
        set just before the handler runs, and a test that kills the worker at once
        would otherwise leave a start the history never saw."""

        def find() -> psutil.Process | None:
            return next((p for p in self.workers() if f" job {job_id} " in _title(p) + " "), None)

        worker = wait_until(find, timeout_s, f"a worker running job {job_id}")
        if started_in is not None:
            wait_until(
                lambda: any(row[2] == "start" for row in history(started_in, job_id)),
                timeout_s,
                f"job {job_id}'s handler to record its start",
            )
        return worker

    def signal(self, sig: int) -> None:
        os.kill(self.pid, sig)

    def wait(self, timeout_s: float = 30) -> int:
        return self.proc.wait(timeout=timeout_s)

    def log(self) -> str:
        self._log.flush()
        return self.log_path.read_text(errors="replace")

    def alive_children(self) -> list[int]:
        alive = []
        for pid in self._known_children:
            with contextlib.suppress(psutil.NoSuchProcess):
                if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                    alive.append(pid)
        return alive

    def kill_everything(self) -> None:
        self.workers()
        for pid in [self.pid, *self._known_children]:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=10)
        self._log.close()


def _ready(title: str) -> bool:
    """A worker's title once it has booted: idle, running a job, or some slots busy."""
    return title.endswith((" idle", " busy")) or " job " in title


def _title(proc: psutil.Process) -> str:
    try:
        return " ".join(proc.cmdline()).strip()
    except psutil.Error:
        return ""


# -- the database side ------------------------------------------------------------------------


def job(conn: psycopg.Connection[Any], job_id: int) -> dict[str, Any]:
    from psycopg.rows import dict_row

    with conn.cursor(row_factory=dict_row) as cur:
        row = cur.execute("SELECT * FROM pgworkerd.jobs WHERE id = %s", (job_id,)).fetchone()
    assert row is not None
    return row


def states(conn: psycopg.Connection[Any]) -> dict[str, int]:
    return dict(conn.execute("SELECT state, count(*) FROM pgworkerd.jobs GROUP BY state"))


def history(conn: psycopg.Connection[Any], job_id: int | None = None) -> list[tuple[Any, ...]]:
    query = "SELECT job_id, attempt, event, pid, at FROM history"
    if job_id is not None:
        return conn.execute(query + " WHERE job_id = %s ORDER BY id", (job_id,)).fetchall()
    return conn.execute(query + " ORDER BY id").fetchall()


def job_in_state(conn: psycopg.Connection[Any], job_id: int, *wanted: str) -> Callable[[], bool]:
    return lambda: job(conn, job_id)["state"] in wanted
