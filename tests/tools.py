"""A tool a test needs (libfaketime, systemd-analyze, unshare as root, a TCP test
server) that is missing fails that test, as Chromium missing fails the browser tier:
a skip would let `make test` pass without running it. scripts/install-test-deps,
which `make test` runs, installs them on Debian as root. Where they cannot be had,
PGWORKERD_TEST_ALLOW_SKIPS=1 turns the failure into a skip that says why."""

from __future__ import annotations

import os
from typing import NoReturn

import pytest

ALLOW_SKIPS = "PGWORKERD_TEST_ALLOW_SKIPS"


def missing(
    what: str, remedy: str = "scripts/install-test-deps installs it on Debian as root"
) -> NoReturn:
    """Fail (or, with PGWORKERD_TEST_ALLOW_SKIPS=1, skip) the test: `what` is missing."""
    if os.environ.get(ALLOW_SKIPS) == "1":
        pytest.skip(what)
    pytest.fail(f"{what} ({remedy}; {ALLOW_SKIPS}=1 skips instead)", pytrace=False)
