"""A project's own tests under Django's test runner: the test database it creates has
pgworkerd's schema when the app pgworkerd.contrib.django_schema is installed, so that a
TestCase enqueues, and a TransactionTestCase drains (tests/django/runner_cases.py); and
`manage.py check` on the backends' configuration."""

from __future__ import annotations

import os
import subprocess
import sys

from tests.django.test_daemon_config import ENV_PATH


def django_admin(dsn: str, settings: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "PGWORKERD_DATABASE_URL": dsn,
        "DJANGO_SETTINGS_MODULE": settings,
        "PYTHONPATH": ENV_PATH,
    }
    return subprocess.run(
        [sys.executable, "-m", "django", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_djangos_test_runner_sets_pgworkerds_schema_up_in_its_test_database(django_dsn):
    run = django_admin(
        django_dsn,
        "tests.django.settings_testrunner",
        "test",
        "tests.django.runner_cases",
        "--noinput",
    )
    assert run.returncode == 0, run.stdout + run.stderr
    assert "Ran 3 tests" in run.stderr and "\nOK" in run.stderr, run.stderr


def test_manage_py_check_reports_a_backend_misconfigured(django_dsn):
    """Found at the first enqueue only, before."""
    run = django_admin(django_dsn, "tests.django.settings_misconfigured", "check")
    assert run.returncode == 1, run.stdout + run.stderr
    assert "pgworkerd.E001" in run.stderr and "'nope'" in run.stderr, run.stderr
    assert "pgworkerd.E002" in run.stderr and "'lite'" in run.stderr, run.stderr
    # Misspelt OPTIONS keys were ignored (the default schema and database used), and a
    # refused schema name ended the check on a ValueError traceback.
    assert "TASKS['typos']: unknown OPTIONS key 'shema'" in run.stderr, run.stderr
    assert "HINT: did you mean 'schema'?" in run.stderr, run.stderr
    assert "TASKS['typos']: unknown OPTIONS key 'databse'" in run.stderr, run.stderr
    assert "HINT: did you mean 'database'?" in run.stderr, run.stderr
    assert "TASKS['reserved']: OPTIONS['schema'] 'pg_jobs': names starting" in run.stderr
    assert "Traceback" not in run.stderr, run.stderr
    assert run.stderr.count("pgworkerd.E003") == 2 and "pgworkerd.E004" in run.stderr
    assert "5 issues" in run.stderr, run.stderr
    run = django_admin(django_dsn, "mysite.settings", "check")
    assert run.returncode == 0, run.stdout + run.stderr
