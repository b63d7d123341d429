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


def test_status_shows_the_paused_keys_and_the_ready_jobs_they_hold_back(cli):
    for key in ("tenant:1", "tenant:1", "tenant:2"):
        assert cli("enqueue", "k", "--key", key).returncode == 0
    assert cli("enqueue", "k", "--key", "tenant:1", "--delay", "1h").returncode == 0  # not ready
    assert cli("keys", "pause", "tenant:1", "--for", "10m").returncode == 0
    status = cli("status", "--json")
    assert status.returncode == 0, status.stderr
    report = json.loads(status.stdout)
    [paused] = report["paused_keys"]
    assert (paused["key"], paused["held_back"]) == ("tenant:1", 2)
    assert 500 < paused["paused_for_s"] <= 600 and paused["until"]
    assert report["paused_keys_more"] is False
    human = cli("status")
    assert human.returncode == 0, human.stderr
    [line] = [line for line in human.stdout.splitlines() if line.startswith("tenant:1")]
    assert line.split()[-1] == "2" and "left" in line
    assert "PAUSED KEY" in human.stdout and "tenant:2" not in human.stdout

    cli("keys", "resume", "tenant:1")
    assert json.loads(cli("status", "--json").stdout)["paused_keys"] == []
    assert "PAUSED KEY" not in cli("status").stdout
