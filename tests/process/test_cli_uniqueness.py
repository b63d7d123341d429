"""`pgworkerd enqueue --debounce DUR | --throttle DUR` as a user runs it, real processes
against a real database: the modes need --unique-key, refuse each other and a
non-positive duration with one line and exit 2, and a CLI producer racing a Python
producer's open transaction for one key ends with one job."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from typing import Any

import psycopg
import pytest

import pgworkerd
from tests.process.test_cli import assert_one_line_error
from tests.process.test_cli import pgworkerd as run_cli


@pytest.fixture
def cli(db_dsn, tmp_path):
    def run(*args: str) -> Any:
        return run_cli(*args, env={"PGWORKERD_DATABASE_URL": db_dsn}, cwd=tmp_path)

    return run


def enqueue(cli: Any, *args: str) -> int:
    result = cli("enqueue", "k", *args)
    assert result.returncode == 0, result.stderr
    return int(result.stdout)


def rows(db_dsn: str) -> list[tuple[int, Any]]:
    with psycopg.connect(db_dsn) as conn:
        return conn.execute("SELECT id, payload FROM pgworkerd.jobs ORDER BY id").fetchall()


def test_debounce_folds_enqueues_into_one_job_with_the_last_payload(cli, db_dsn):
    first = enqueue(cli, "--unique-key", "doc", "--debounce", "1m", "--payload", '{"n": 1}')
    second = enqueue(cli, "--unique-key", "doc", "--debounce", "1m", "--payload", '{"n": 2}')
    assert first == second
    assert rows(db_dsn) == [(first, {"n": 2})]


def test_throttle_returns_the_windows_job(cli, db_dsn):
    first = enqueue(cli, "--unique-key", "t", "--throttle", "30s", "--payload", '{"n": 1}')
    assert enqueue(cli, "--unique-key", "t", "--throttle", "30", "--payload", '{"n": 2}') == first
    assert rows(db_dsn) == [(first, {"n": 1})]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--debounce", "5s"], "debounce needs a unique_key"),
        (["--throttle", "5s"], "throttle needs a unique_key"),
        (["--unique-key", "u", "--debounce", "5s", "--throttle", "5s"], "not allowed with"),
        (["--unique-key", "u", "--debounce", "0"], "debounce must be a finite number"),
        (["--unique-key", "u", "--throttle", "-3"], "throttle must be a finite number"),
        (["--unique-key", "u", "--throttle", "soon"], "--throttle"),
        (["--unique-key", "u", "--debounce", "5s", "--delay", "1"], "give no delay or run_at"),
    ],
)
def test_bad_modes_are_one_line_and_exit_2(cli, db_dsn, args, message):
    assert_one_line_error(cli("enqueue", "k", *args), 2, message)
    assert rows(db_dsn) == []


@pytest.mark.parametrize("mode", ["debounce", "throttle"])
def test_a_cli_producer_racing_an_open_transaction_joins_its_job(db_dsn, tmp_path, mode):
    """The CLI's enqueue waits on the Python producer's uncommitted slot and, once that
    commits, prints the same job id: two producers, one job."""
    with psycopg.connect(db_dsn) as holder:
        held = pgworkerd.enqueue(holder, "k", {"by": "python"}, unique_key="r", **{mode: 60})
        env = {k: v for k, v in os.environ.items() if not k.startswith("PGWORKERD_")}
        env["PGWORKERD_DATABASE_URL"] = db_dsn
        with subprocess.Popen(
            [sys.executable, "-m", "pgworkerd", "enqueue", "k", "--unique-key", "r",
             f"--{mode}", "60", "--payload", '{"by": "cli"}'],
            env=env, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        ) as racer:  # fmt: skip
            try:
                _wait_for_lock_waiter(db_dsn)
                assert racer.poll() is None, "the CLI must wait for the open transaction"
                holder.commit()
                out, err = racer.communicate(timeout=60)
            finally:
                if racer.poll() is None:
                    racer.kill()
    assert racer.returncode == 0, err
    assert int(out) == held
    expected = {"debounce": {"by": "cli"}, "throttle": {"by": "python"}}[mode]
    assert rows(db_dsn) == [(held, expected)]


def _wait_for_lock_waiter(dsn: str, timeout_s: float = 30) -> None:
    deadline = time.monotonic() + timeout_s
    with psycopg.connect(dsn, autocommit=True) as observer:
        while time.monotonic() < deadline:
            waiting = observer.execute(
                "SELECT count(*) FROM pg_stat_activity"
                " WHERE datname = current_database() AND wait_event_type = 'Lock'"
            ).fetchone()[0]
            if waiting:
                return
            time.sleep(0.02)
    raise AssertionError("no producer waited on the open transaction's slot")
