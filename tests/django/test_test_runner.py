"""A project's own tests under Django's test runner: the test database it creates has
pgworkerd's schema when the app pgworkerd.contrib.django_schema is installed, so that a
TestCase enqueues, and a TransactionTestCase drains (tests/django/runner_cases.py)."""

from __future__ import annotations

import os
import subprocess
import sys

from tests.django.test_daemon_config import ENV_PATH


def test_djangos_test_runner_sets_pgworkerds_schema_up_in_its_test_database(django_dsn):
    env = {
        **os.environ,
        "PGWORKERD_DATABASE_URL": django_dsn,
        "DJANGO_SETTINGS_MODULE": "tests.django.settings_testrunner",
        "PYTHONPATH": ENV_PATH,
    }
    run = subprocess.run(
        [sys.executable, "-m", "django", "test", "tests.django.runner_cases", "--noinput"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    assert "Ran 3 tests" in run.stderr and "\nOK" in run.stderr, run.stderr
