"""`pgworkerd keys [--json]`, `keys pause KEY --for DUR`, `keys resume KEY`: real
processes against a real database."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.process.test_cli import assert_one_line_error
from tests.process.test_cli import pgworkerd as run_cli


@pytest.fixture
def cli(db_dsn, tmp_path):
    def run(*args: str) -> Any:
        return run_cli(*args, env={"PGWORKERD_DATABASE_URL": db_dsn}, cwd=tmp_path)

    return run


def listing(cli: Any) -> dict[str, dict[str, Any]]:
    result = cli("keys", "--json")
    assert result.returncode == 0, result.stderr
    return {k["key"]: k for k in json.loads(result.stdout)}


def test_pause_list_and_resume_a_key(cli):
    enqueued = cli("enqueue", "k", "--key", "tenant:42")
    assert enqueued.returncode == 0, enqueued.stderr
    assert listing(cli)["tenant:42"]["paused"] is False

    paused = cli("keys", "pause", "tenant:42", "--for", "15m")
    assert paused.returncode == 0 and "paused: tenant:42 until" in paused.stdout
    key = listing(cli)["tenant:42"]
    assert (key["paused"], key["ready"], key["running"]) == (True, 1, 0)
    assert 800 < key["paused_for_s"] <= 900
    human = cli("keys")
    assert human.returncode == 0 and "tenant:42" in human.stdout and "left" in human.stdout

    assert cli("keys", "resume", "tenant:42").stdout.strip() == "resumed: tenant:42"
    assert cli("keys", "resume", "tenant:42").stdout.strip() == "not paused: tenant:42"
    assert listing(cli)["tenant:42"]["paused"] is False


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["keys", "pause", "a"], "--for"),
        (["keys", "pause", "a", "--for", "soon"], "--for"),
        (["keys", "pause", "a\tb", "--for", "1m"], "control characters"),
    ],
)
def test_bad_arguments_exit_2_with_one_line(cli, args, message):
    assert_one_line_error(cli(*args), 2, message)
