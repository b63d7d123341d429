"""The browser tier: Debian's Chromium driven by Playwright against a real `pgworkerd web`
process (and, where a test needs jobs to run, a real `pgworkerd run`) on the test's own
database.

Chromium missing is a failure, not a skip: this tier is how CI knows the dashboard
works in a browser. `scripts/install-test-deps` installs it (`apt-get install chromium`);
Playwright's own browser download is not used (it needs the internet at test time).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

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
