"""The browser tier: Debian's Chromium driven by Playwright against a real `pgworkerd web`
process (and, where a test needs jobs to run, a real `pgworkerd run`) on the test's own
database.

Chromium missing is a failure, not a skip: this tier is how CI knows the dashboard
works in a browser. `scripts/install-test-deps` installs it (`apt-get install chromium`);
Playwright's own browser download is not used (it needs the internet at test time).
"""

from __future__ import annotations

import os
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

CHROMIUM = os.environ.get("PGWORKERD_TEST_CHROMIUM", "/usr/bin/chromium")


@pytest.fixture(scope="module")  # closed before other tiers: its loop runs in this thread
def browser() -> Iterator[Any]:
    if not Path(CHROMIUM).exists():
        pytest.fail(
            f"{CHROMIUM} not found: the browser tier needs Chromium "
            "(run scripts/install-test-deps as root, or apt-get install chromium)",
            pytrace=False,
        )
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=CHROMIUM)
        yield launched
        launched.close()


class Dashboard:
    """One `pgworkerd web` process; its URL, and its log for a failing test's report."""

    def __init__(
        self, dsn: str, tmp_path: Path, *args: str, extra: dict[str, Any] | None = None, **web: Any
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
                env=daemon_env(dsn),
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

    def start(*args: str, **web: Any) -> Dashboard:
        started.append(Dashboard(db_dsn, tmp_path, *args, **web))
        return started[-1]

    yield start
    for dashboard in started:
        dashboard.stop()


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    """A fresh browser context and page; every confirmation dialog is accepted, and
    console errors (a CSP violation, a script error) are collected for the test to
    check in `page.console_errors`."""
    context = browser.new_context()
    context.set_default_timeout(15_000)
    opened = context.new_page()
    errors: list[str] = []
    opened.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    opened.on("pageerror", lambda exc: errors.append(str(exc)))
    opened.on("dialog", lambda dialog: dialog.accept())
    opened.console_errors = errors
    yield opened
    context.close()
