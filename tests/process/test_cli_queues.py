"""`pgworkerd queues [--json]`, `queues pause Q...`, `queues resume Q...` as a user runs
them: real processes against a real database."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

import psycopg
import pytest

import pgworkerd
from tests.process.test_cli import assert_one_line_error
from tests.process.test_cli import pgworkerd as run_cli
from tests.process.test_cli_jobs import STATES, ok_json

QUEUE_KEYS = {"queue", "paused", "paused_at", "configured", "counts"}


@pytest.fixture
def cli(db_dsn, tmp_path):
    """The CLI with a config file at its default place, naming two queues."""
    (tmp_path / "config").mkdir()
    (tmp_path / "config" / "pgworkerd.yaml").write_text(
        "queues: {default: {}, reports: {priority: 5}}\n"
    )

    def run(*args: str) -> Any:
        return run_cli(*args, env={"PGWORKERD_DATABASE_URL": db_dsn}, cwd=tmp_path)

    return run


def test_list_pause_resume_and_the_table_agreeing_with_the_json(cli, db_dsn):
    # A queue only jobs name: the application's code enqueued them (the command refuses
    # a queue its config does not declare).
    with psycopg.connect(db_dsn, autocommit=True) as conn:
        pgworkerd.enqueue_many(conn, [{"kind": "send_email", "payload": {}, "queue": "mail"}] * 2)
    listing = ok_json(cli("queues", "--json"))
    assert [q["queue"] for q in listing] == ["default", "mail", "reports"]
    assert all(set(q) == QUEUE_KEYS and set(q["counts"]) == set(STATES) for q in listing)
    assert not any(q["paused"] for q in listing)
    by_name = {q["queue"]: q for q in listing}
    assert by_name["mail"]["counts"]["queued"] == 2 and not by_name["mail"]["configured"]
    assert by_name["reports"]["configured"] and by_name["reports"]["counts"]["queued"] == 0

    # a configured queue with no jobs yet, and a queue only jobs name
    paused = cli("queues", "pause", "reports", "mail")
    assert paused.returncode == 0, paused.stderr
    assert paused.stdout.strip() == "paused: mail, reports"
    again = cli("queues", "pause", "mail")
    assert again.returncode == 0 and again.stdout.strip() == "already paused: mail"
    listing = ok_json(cli("queues", "--json"))
    by_name = {q["queue"]: q for q in listing}
    assert [q["queue"] for q in listing if q["paused"]] == ["mail", "reports"]
    datetime.fromisoformat(by_name["mail"]["paused_at"])
    assert by_name["default"]["paused_at"] is None

    human = cli("queues")
    assert human.returncode == 0, human.stderr
    lines = human.stdout.splitlines()
    assert all(len(line) <= 80 for line in lines)
    assert lines[0].split() == [
        *("QUEUE", "PAUSED", "CONFIG", "QUEUED", "RUNNING", "SUCCEEDED", "DEAD", "CANCELLED")
    ]
    rows = [line.split() for line in lines[1:]]
    assert rows == [
        [
            q["queue"],
            "yes" if q["paused"] else "no",
            "yes" if q["configured"] else "no",
            *(str(q["counts"][s]) for s in STATES[1:]),  # no waiting job: no column
        ]
        for q in listing
    ]

    # status: the pause per queue, in the JSON and in the table
    status = ok_json(cli("status", "--json"))
    assert {q["queue"]: q["paused"] for q in status["queues"]} == {"mail": True, "reports": True}
    table = cli("status").stdout.splitlines()
    assert table[0].split()[-1] == "PAUSED"
    assert [line.split()[-1] for line in table[1:3]] == ["yes", "yes"]

    resumed = cli("queues", "resume", "mail", "default")
    assert resumed.returncode == 0, resumed.stderr
    assert resumed.stdout.splitlines() == ["resumed: mail", "not paused: default"]
    assert [q["queue"] for q in ok_json(cli("queues", "--json")) if q["paused"]] == ["reports"]


def test_an_unknown_queue_is_refused_and_nothing_is_paused(cli):
    result = cli("queues", "pause", "reports", "reprots")
    assert_one_line_error(result, 2, "unknown queue 'reprots'")
    assert result.stdout == ""
    assert not any(q["paused"] for q in ok_json(cli("queues", "--json")))
    assert_one_line_error(cli("queues", "resume", "nope"), 2, "unknown queue 'nope'")


@pytest.mark.parametrize(
    ("args", "text"),
    [
        (("queues", "pause"), "the following arguments are required: Q"),
        (("queues", "resume"), "the following arguments are required: Q"),
        (("queues", "stop", "default"), "invalid choice: 'stop'"),
        (("queues", "--yaml"), "unrecognized arguments: --yaml"),
    ],
)
def test_bad_command_lines_exit_2_with_one_line(cli, args, text):
    assert_one_line_error(cli(*args), 2, text)


def test_an_empty_database_lists_the_configured_queues(cli):
    assert json.loads(cli("queues", "--json").stdout) == [
        {
            "queue": name,
            "paused": False,
            "paused_at": None,
            "configured": True,
            "counts": dict.fromkeys(STATES, 0),
        }
        for name in ("default", "reports")
    ]
