"""A real `pgworkerd web` process on a test's database, for the browser tier and the
process tests that speak HTTP to it."""

from __future__ import annotations

import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from pgworkerd.storage.embedded import free_port
from tests.daemon import BASE_CONFIG, REPO, daemon_env, wait_until


class Dashboard:
    """One `pgworkerd web` process; its URL, and its log for a failing test's report."""

    def __init__(
        self,
        dsn: str,
        tmp_path: Path,
        *args: str,
        extra: dict[str, Any] | None = None,
        env: dict[str, str] | None = None,
        **web: Any,
    ) -> None:
        """`extra`: more of the config than its `web` section (`queues`, say)."""
        self.port = free_port()
        web_section = {"listen": f"127.0.0.1:{self.port}", **web}
        config = {**BASE_CONFIG, **(extra or {}), "web": web_section}
        path = tmp_path / f"web-{self.port}.yaml"
        path.write_text(yaml.safe_dump(config))
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = tmp_path / f"web-{self.port}.log"
        with self.log_path.open("wb") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "pgworkerd", "web", "-c", str(path), *args],
                env={**daemon_env(dsn), **(env or {})},
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
                cwd=REPO,
            )
        wait_until(self._answers, 30, f"pgworkerd web on {self.url} (log: {self.log_path})")

    def _answers(self) -> bool:
        assert self.proc.poll() is None, self.log_path.read_text()
        try:
            with urllib.request.urlopen(self.url + "/", timeout=2) as response:
                return bool(response.status == 200)
        except urllib.error.HTTPError:
            return True  # it answers: with 401, say, when the config asks for auth
        except (urllib.error.URLError, ConnectionError):
            return False

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=10)


@pytest.fixture
def dashboards(db_dsn: str, tmp_path: Path) -> Iterator[Any]:
    """dashboards(*cli_args, **web_config) -> a running `pgworkerd web` on the test's
    database; all stopped at the end."""
    started: list[Dashboard] = []

    def start(*args: str, env: dict[str, str] | None = None, **web: Any) -> Dashboard:
        started.append(Dashboard(db_dsn, tmp_path, *args, env=env, **web))
        return started[-1]

    yield start
    for dashboard in started:
        dashboard.stop()
