"""The operator's commands as a user runs them: `pgworkerd status` and `pgworkerd jobs
list | show | retry | cancel`, real processes against a real database."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

import psycopg
import pytest

import pgworkerd
from pgworkerd.storage.store import JobStore
from tests.process.test_cli import assert_one_line_error
from tests.process.test_cli import pgworkerd as run_cli

TRACEBACK = 'Traceback (most recent call last):\n  File "h.py", line 3\nValueError: bad row 7'

JOB_KEYS = {"id", "queue", "kind", "state", "attempt", "max_attempts", "run_at", "last_error"}
DETAIL_KEYS = JOB_KEYS | {
    "payload",
    "priority",
    "max_runtime_s",
    "unique_key",
    "key",
    "worker",
    "lease_expires_at",
    "created_at",
    "started_at",
    "finished_at",
    "errors",
    "result",
    "progress",
    "progress_stage",
    "progress_at",
    "after_failure",
    "dependencies",
    "dependents",
}
QUEUE_KEYS = {"queue", "counts", "oldest_ready_age_s", "finished_per_minute", "paused", "paused_at"}
DAEMON_KEYS = {
    "id",
    "hostname",
    "pid",
    "started_at",
    "heartbeat_at",
    "heartbeat_age_s",
    "state",
    "workers",
    "jobs_running",
}
STATES = ("waiting", "queued", "running", "succeeded", "dead", "cancelled")


@pytest.fixture
def cli(db_dsn, tmp_path):
    def run(*args: str) -> Any:
        return run_cli(*args, env={"PGWORKERD_DATABASE_URL": db_dsn}, cwd=tmp_path)

    return run


def enqueue(cli: Any, kind: str, *options: str) -> int:
    result = cli("enqueue", kind, *options)
    assert result.returncode == 0, result.stderr
    return int(result.stdout)


def ok_json(result: Any) -> Any:
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def make_dead(conn: psycopg.Connection[Any], queue: str) -> int:
    """Claim the one job of `queue` and fail it for good, with a traceback."""
    store = JobStore()
    [job] = store.claim(conn, queues=[queue], limit=1, lease_ttl_s=30, worker="w#0")
    outcome = store.fail(conn, job.lease, TRACEBACK, discard=True)
    assert outcome is not None and outcome.state == "dead"
    return job.id


def test_enqueue_list_show_retry_cancel_and_status(cli, db_dsn):
    first = enqueue(cli, "send_email", "--payload", '{"to": "a@example.com"}', "--queue", "mail")
    doomed = enqueue(cli, "resize", "--queue", "images", "--max-attempts", "3")
    later = enqueue(cli, "report", "--delay", "1h")

    # jobs list: newest first, filters, the documented keys
    jobs = ok_json(cli("jobs", "list", "--json"))
    assert [j["id"] for j in jobs] == [later, doomed, first]
    assert all(set(j) >= JOB_KEYS for j in jobs)
    assert all(j["state"] == "queued" and j["attempt"] == 0 for j in jobs)
    datetime.fromisoformat(jobs[0]["run_at"])
    assert [j["id"] for j in ok_json(cli("jobs", "list", "--queue", "mail", "--json"))] == [first]
    assert [j["id"] for j in ok_json(cli("jobs", "list", "--kind", "resize", "--json"))] == [doomed]
    assert len(ok_json(cli("jobs", "list", "--limit", "1", "--json"))) == 1
    human = cli("jobs", "list")
    assert human.returncode == 0 and "send_email" in human.stdout
    assert all(len(line) <= 80 for line in human.stdout.splitlines())

    # a dead job: shown with its error history and traceback, then retried by hand
    with psycopg.connect(db_dsn, autocommit=True) as conn:
        assert make_dead(conn, "images") == doomed
    dead = ok_json(cli("jobs", "list", "--state", "dead", "--json"))
    assert [(j["id"], j["state"]) for j in dead] == [(doomed, "dead")]
    assert "ValueError: bad row 7" in dead[0]["last_error"]
    detail = ok_json(cli("jobs", "show", str(doomed), "--json"))
    assert set(detail) >= DETAIL_KEYS
    assert (detail["state"], detail["attempt"], detail["max_attempts"]) == ("dead", 1, 3)
    assert detail["worker"] == "w#0" and detail["lease_expires_at"] is None
    assert [e["attempt"] for e in detail["errors"]] == [1]
    assert "Traceback (most recent call last)" in detail["errors"][0]["error"]
    assert detail["finished_at"] is not None and detail["started_at"] is not None
    shown = cli("jobs", "show", str(doomed))
    assert shown.returncode == 0
    assert "state:" in shown.stdout and "dead" in shown.stdout
    assert "attempt 1" in shown.stdout and "ValueError: bad row 7" in shown.stdout
    assert json.loads(json.dumps(ok_json(cli("jobs", "show", str(first), "--json"))))[
        "payload"
    ] == {"to": "a@example.com"}

    retried = cli("jobs", "retry", str(doomed))
    assert retried.returncode == 0, retried.stderr
    assert f"queued again: {doomed}" in retried.stdout
    again = ok_json(cli("jobs", "show", str(doomed), "--json"))
    assert again["state"] == "queued" and again["finished_at"] is None
    assert again["errors"] == detail["errors"]  # the history stays

    # a queued job cancelled; cancelling it again changes nothing and says so
    cancelled = cli("jobs", "cancel", str(first))
    assert cancelled.returncode == 0 and f"cancelled: {first}" in cancelled.stdout
    assert ok_json(cli("jobs", "show", str(first), "--json"))["state"] == "cancelled"
    twice = cli("jobs", "cancel", str(first))
    assert_one_line_error(twice, 1, f"job {first} is cancelled: not waiting, queued or running")

    # status: the JSON and the human table agree
    status = ok_json(cli("status", "--json"))
    assert set(status) == {
        *("at", "queues", "daemons", "progress", "periodic"),
        *("horizon", "jobs_table", "paused_keys", "paused_keys_more", "limits"),
    }
    assert status["paused_keys"] == [] and status["paused_keys_more"] is False
    assert status["periodic"] == [], "no periodic entries in this config"
    assert status["limits"] == [], "no limited queue in this config"
    by_queue = {q["queue"]: q for q in status["queues"]}
    assert set(by_queue) == {"default", "images", "mail"}
    assert all(set(q) >= QUEUE_KEYS for q in status["queues"])
    assert by_queue["mail"]["counts"] == dict.fromkeys(STATES, 0) | {"cancelled": 1}
    assert by_queue["images"]["counts"]["queued"] == 1
    assert by_queue["images"]["oldest_ready_age_s"] is not None
    assert by_queue["default"]["oldest_ready_age_s"] is None  # scheduled an hour later
    assert by_queue["mail"]["finished_per_minute"] == pytest.approx(0.2)
    assert status["daemons"] == []
    table = cli("status")
    assert table.returncode == 0, table.stderr
    lines = table.stdout.splitlines()
    assert all(len(line) <= 80 for line in lines)
    # no waiting job: no WAITING column
    assert lines[0].split()[:6] == ["QUEUE", "QUEUED", "RUNNING", "SUCCEEDED", "DEAD", "CANCELLED"]
    for line in lines[1:4]:
        cells = line.split()
        counts = by_queue[cells[0]]["counts"]
        assert [int(c) for c in cells[1:6]] == [counts[s] for s in STATES[1:]]
    assert "no live daemons" in table.stdout


def test_retry_dead_of_one_queue_and_status_shows_daemons(cli, db_dsn):
    a = enqueue(cli, "k", "--queue", "a")
    b = enqueue(cli, "k", "--queue", "b")
    with psycopg.connect(db_dsn, autocommit=True) as conn:
        make_dead(conn, "a")
        make_dead(conn, "b")
        JobStore().heartbeat(
            conn, daemon_id="host-1:42:1", hostname="host-1", pid=42, info='{"workers": 2}'
        )
    result = cli("jobs", "retry", "--dead", "--queue", "a")
    assert result.returncode == 0, result.stderr
    assert f"({a})" in result.stdout
    states = {j["id"]: j["state"] for j in ok_json(cli("jobs", "list", "--json"))}
    assert states == {a: "queued", b: "dead"}

    status = ok_json(cli("status", "--json"))
    [daemon] = status["daemons"]
    assert set(daemon) >= DAEMON_KEYS
    assert (daemon["id"], daemon["hostname"], daemon["pid"], daemon["workers"]) == (
        "host-1:42:1",
        "host-1",
        42,
        2,
    )
    datetime.fromisoformat(daemon["heartbeat_at"])
    human = cli("status")
    assert "host-1:42:1" in human.stdout and "42" in human.stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["jobs", "show", "999999"], "job 999999 not found"),
        (["jobs", "cancel", "999999"], "job 999999 not found"),
        (["jobs", "retry", "999998", "999999"], "jobs 999998, 999999 not found"),
        (["jobs", "show", "abc"], "'abc' is not a job id"),
        (["jobs", "show", "99999999999999999999"], "is not a job id"),
        (["jobs", "list", "--state", "sleeping"], "invalid choice"),
        (["jobs", "list", "--limit", "0"], "is not a positive integer"),
        (["jobs", "retry"], "give job ids or --dead"),
        (["jobs", "retry", "1", "--dead"], "give job ids or --dead"),
        (["jobs", "retry", "1", "--queue", "q"], "--queue goes with --dead"),
        (["jobs"], "required"),
    ],
)
def test_unknown_ids_and_bad_arguments_exit_2_with_one_line(cli, args, message):
    assert_one_line_error(cli(*args), 2, message)


def test_retry_dead_of_an_unknown_queue_is_refused_as_queues_pause_refuses_it(cli, db_dsn):
    # It said "queued again: 0 dead job(s)", exit 0, where `queues pause nope` said exit 2:
    # a typo looked like a queue with nothing dead. Known: as for pause, a queue the
    # config names, that a job names (in any state), or that is paused.
    enqueue(cli, "k", "--queue", "a")
    for name in ("nope", ""):
        refused = cli("jobs", "retry", "--dead", "--queue", name)
        assert_one_line_error(
            refused,
            2,
            f"jobs retry: unknown queue {name!r}: not in the config, named by no job, not paused",
        )
        assert refused.stdout == "" and len(refused.stderr.splitlines()) == 1
    for known in ("a", "default"):  # a job's queue; the config's (the default one)
        result = cli("jobs", "retry", "--dead", "--queue", known)
        assert result.returncode == 0, result.stderr
        assert result.stdout == "queued again: 0 dead job(s)\n"
    assert cli("queues", "pause", "paused-only").returncode == 2
    with psycopg.connect(db_dsn, autocommit=True) as conn:
        pgworkerd.pause_queue(conn, "paused-only")
    assert cli("jobs", "retry", "--dead", "--queue", "paused-only").returncode == 0


def test_enqueue_key_is_stored_and_shown_and_checked_like_queue(cli):
    job = enqueue(cli, "k", "--key", "tenant:42")
    assert ok_json(cli("jobs", "show", str(job), "--json"))["key"] == "tenant:42"
    shown = cli("jobs", "show", str(job))
    assert shown.returncode == 0 and "tenant:42" in shown.stdout
    assert ok_json(cli("jobs", "show", str(enqueue(cli, "k")), "--json"))["key"] is None
    assert_one_line_error(cli("enqueue", "k", "--key", "x" * 256), 2, "key is 256 characters")
    assert_one_line_error(cli("enqueue", "k", "--key", "a\tb"), 2, "control characters")


def test_a_missing_id_among_others_changes_nothing(cli):
    job = enqueue(cli, "k")
    assert_one_line_error(cli("jobs", "cancel", str(job), "999999"), 2, "job 999999 not found")
    assert ok_json(cli("jobs", "show", str(job), "--json"))["state"] == "queued"


def test_python_cancel_and_retry(db_dsn):
    with psycopg.connect(db_dsn, autocommit=True) as conn:
        job = pgworkerd.enqueue(conn, "k", {})
        assert pgworkerd.retry(conn, job) is False  # queued: nothing to retry
        assert pgworkerd.cancel(conn, job) is True
        assert pgworkerd.cancel(conn, job) is False
        assert pgworkerd.retry(conn, job) is True
        assert JobStore().get(conn, job)["state"] == "queued"
        assert pgworkerd.cancel(conn, 999999) is False and pgworkerd.retry(conn, 999999) is False


def test_a_cancelled_running_job_ignores_its_holders_outcome(db_dsn):
    store = JobStore()
    with psycopg.connect(db_dsn, autocommit=True) as conn:
        job = pgworkerd.enqueue(conn, "k", {})
        [claimed] = store.claim(conn, queues=["default"], limit=1, lease_ttl_s=30, worker="w#0")
        assert pgworkerd.cancel(conn, job) is True
        assert store.complete(conn, [(claimed.lease, None)]) == set()
        assert store.fail(conn, claimed.lease, "late") is None
        row = store.get(conn, job)
        assert row["state"] == "cancelled" and row["result"] is None and row["errors"] == []


def test_cancelling_a_running_job_from_the_cli_fences_its_holder(cli, db_dsn):
    job = enqueue(cli, "k")
    store = JobStore()
    with psycopg.connect(db_dsn, autocommit=True) as conn:
        [claimed] = store.claim(conn, queues=["default"], limit=1, lease_ttl_s=30, worker="w#0")
        running = ok_json(cli("jobs", "show", str(job), "--json"))
        assert running["state"] == "running" and running["lease_expires_at"] is not None
        assert "w#0 until" in cli("jobs", "show", str(job)).stdout
        result = cli("jobs", "cancel", str(job))
        assert result.returncode == 0 and f"cancelled: {job}" in result.stdout
        assert store.complete(conn, [(claimed.lease, '"late"')]) == set()
        assert store.get(conn, job)["state"] == "cancelled"


def test_config_after_the_subcommand_and_no_password_in_errors(tmp_path):
    config = tmp_path / "p.yaml"
    config.write_text("database: {url: 'postgresql://app:Sup3rS3cret@127.0.0.1:1/app'}\n")
    for args in (["jobs", "list", "-c", str(config)], ["status", "-c", str(config)]):
        result = run_cli(*args, cwd=tmp_path)
        assert_one_line_error(result, 1, "Connection refused")
        assert "Sup3rS3cret" not in result.stdout + result.stderr


def test_status_shows_a_live_daemon_and_the_jobs_it_runs(cli, start_daemon, history_conn):
    from tests.daemon import wait_until

    pgworkerd.enqueue(history_conn, "sleep", {"seconds": 30})
    daemon = start_daemon(workers=[{"queues": ["default"], "concurrency": 1}])

    def daemons_running_one() -> list[dict[str, Any]]:
        listed = ok_json(cli("status", "--json"))["daemons"]
        return [d for d in listed if d["pid"] == daemon.pid and d["jobs_running"] == 1]

    (row,) = wait_until(daemons_running_one, what="status to show the daemon running 1 job")
    assert row["hostname"] and row["heartbeat_at"] and row["state"] == "running"
    table = cli("status").stdout
    assert str(daemon.pid) in table


def test_enqueue_after_show_dependencies_and_dependents_and_count_waiting(cli):
    first = enqueue(cli, "export", "--queue", "exports")
    second = enqueue(cli, "export", "--queue", "exports")
    mail = enqueue(cli, "send_email", "--after", str(first), "--after", str(second))
    callback = enqueue(cli, "cleanup", "--after", str(mail), "--after-failure", "run")
    assert [j["id"] for j in ok_json(cli("jobs", "list", "--state", "waiting", "--json"))] == [
        callback,
        mail,
    ]
    detail = ok_json(cli("jobs", "show", str(mail), "--json"))
    assert detail["state"] == "waiting" and detail["after_failure"] == "cancel"
    assert detail["dependencies"] == [
        {"id": first, "state": "queued", "kind": "export"},
        {"id": second, "state": "queued", "kind": "export"},
    ]
    assert detail["dependents"] == [{"id": callback, "state": "waiting", "kind": "cleanup"}]
    shown = cli("jobs", "show", str(mail))
    assert shown.returncode == 0, shown.stderr
    assert "runs after: 2 job(s) (if one fails: cancel)" in shown.stdout
    assert f"    {callback}  waiting  cleanup" in shown.stdout
    counts = {q["queue"]: q["counts"] for q in ok_json(cli("status", "--json"))["queues"]}
    assert counts["default"]["waiting"] == 2 and counts["exports"]["queued"] == 2
    assert "waiting for the jobs they run after: 2 in default" in cli("status").stdout
    table = cli("queues").stdout.splitlines()
    assert table[0].split()[:5] == ["QUEUE", "PAUSED", "CONFIG", "WAITING", "QUEUED"]
    assert [line.split()[3] for line in table[1:]] == ["2", "0"]  # default, exports
    cancelled = cli("jobs", "cancel", str(first))
    assert cancelled.returncode == 0, cancelled.stderr
    states = {j["id"]: j["state"] for j in ok_json(cli("jobs", "list", "--json"))}
    assert states == {first: "cancelled", second: "queued", mail: "cancelled", callback: "queued"}


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["enqueue", "k", "--after", "999999"], "after names jobs that do not exist: 999999"),
        (["enqueue", "k", "--after", "x"], "'x' is not a job id"),
        (["enqueue", "k", "--after-failure", "run"], "--after-failure goes with --after"),
        (["enqueue", "k", "--after", "1", "--after-failure", "skip"], "invalid choice"),
    ],
)
def test_bad_after_arguments_exit_2_with_one_line(cli, args, message):
    assert_one_line_error(cli(*args), 2, message)


def test_a_queue_the_config_does_not_declare_is_refused(db_dsn, tmp_path):
    # It was enqueued, into a queue no daemon of that config claims: it waited forever.
    (tmp_path / "pgworkerd.yaml").write_text("queues: {mail: {}}\n")
    env = {"PGWORKERD_DATABASE_URL": db_dsn}

    def cli(*args: str) -> Any:
        return run_cli(*args, "-c", str(tmp_path / "pgworkerd.yaml"), env=env, cwd=tmp_path)

    assert_one_line_error(
        cli("enqueue", "k", "--queue", "mial"),
        2,
        "--queue: 'mial' is not declared under queues in the config",
    )
    # A file that names no queue declares `default` alone.
    (tmp_path / "pgworkerd.yaml").write_text("lease_ttl: 30\n")
    assert_one_line_error(cli("enqueue", "k", "--queue", "mail"), 2, "is not declared")
    with psycopg.connect(db_dsn) as conn:
        assert conn.execute("SELECT count(*) FROM pgworkerd.jobs").fetchone()[0] == 0
    assert cli("enqueue", "k").returncode == 0
    # Configured by the environment alone, the command does not know the daemon's queues;
    # PGWORKERD_QUEUES names them.
    bare = tmp_path / "bare"  # no config/pgworkerd.yaml under it
    bare.mkdir()
    alone = run_cli("enqueue", "k", "--queue", "mail", env=env, cwd=bare)
    assert alone.returncode == 0, alone.stderr
    named = run_cli(
        "enqueue",
        "k",
        "--queue",
        "mail",
        env={**env, "PGWORKERD_QUEUES": '{"a": {}}'},
        cwd=bare,
    )
    assert_one_line_error(named, 2, "'mail' is not declared")


def test_a_kind_the_config_has_no_handler_for_is_refused(db_dsn, tmp_path):
    """Review 24, F9: it was enqueued, and a daemon of that config ended it dead (promise
    7); promise 6 names unknown kinds among the bad input refused in one line."""
    config = tmp_path / "pgworkerd.yaml"
    config.write_text("handlers: {send_email: tests.handlers:noop}\n")
    env = {"PGWORKERD_DATABASE_URL": db_dsn}

    def cli(*args: str) -> Any:
        return run_cli(*args, "-c", str(config), env=env, cwd=tmp_path)

    assert_one_line_error(
        cli("enqueue", "send_emial"),
        2,
        "kind: 'send_emial' has no entry under handlers in the config",
    )
    with psycopg.connect(db_dsn) as conn:
        assert conn.execute("SELECT count(*) FROM pgworkerd.jobs").fetchone()[0] == 0
    assert cli("enqueue", "send_email").returncode == 0
    # Kinds a daemon learns by importing (task_modules, Django tasks), and a config naming
    # no handler (a producer's), leave the kind to the daemons.
    config.write_text(
        "handlers: {send_email: tests.handlers:noop}\ntask_modules: [examples.fastapi_app]\n"
    )
    assert cli("enqueue", "reports.build").returncode == 0
    config.write_text("lease_ttl: 30\n")
    assert cli("enqueue", "anything").returncode == 0


# -- payloads nested too deep, run_at offsets (review 24, F2 and F3) --------------------------


@pytest.mark.parametrize("depth", [101, 990])
def test_enqueue_refuses_a_payload_nested_too_deep_in_one_line(cli, depth):
    payload = "[" * depth + "]" * depth
    result = cli("enqueue", "k", "--payload", payload)
    # 101: the producer's bound; 990: deeper than the CLI's own stack decodes.
    assert_one_line_error(result, 2, "nested more than 100 levels deep")


def test_a_stored_payload_too_deep_to_decode_is_shown_not_a_traceback(cli, db_dsn):
    """Written by SQL (enqueue refuses it): `jobs show` exited 1 with RecursionError."""
    deep = "[" * 5000 + "]" * 5000
    with psycopg.connect(db_dsn, autocommit=True) as conn:
        row = conn.execute(
            "INSERT INTO pgworkerd.jobs (queue, kind, payload) VALUES ('default', 'k', %s::jsonb)"
            " RETURNING id",
            (deep,),
        ).fetchone()
    job_id = str(row[0])
    shown = cli("jobs", "show", job_id)
    assert shown.returncode == 0, shown.stderr
    assert '"pgworkerd_undecodable": "nested too deeply to decode' in shown.stdout
    detail = ok_json(cli("jobs", "show", job_id, "--json"))
    assert detail["payload"]["text"] == deep
    assert detail["payload"]["pgworkerd_undecodable"].startswith("nested too deeply")


def test_malformed_errors_entries_are_shown_not_a_traceback(cli, db_dsn):
    """Written by SQL, another tool or an older version: a bare string exited 1 with a
    traceback (review 25, F1), as did an `at` that is not an ISO time."""
    errors = [
        "bare-text",
        {"attempt": 2, "at": "yesterday", "error": "odd-at"},
        {"attempt": 3, "at": 5, "error": {"code": 7}},
        {"error": "no-at"},
    ]
    with psycopg.connect(db_dsn, autocommit=True) as conn:
        row = conn.execute(
            "INSERT INTO pgworkerd.jobs (queue, kind, payload, state, finished_at, errors)"
            " VALUES ('default', 'k', '{}', 'dead', now(), %s) RETURNING id",
            (psycopg.types.json.Jsonb(errors),),
        ).fetchone()
    shown = cli("jobs", "show", str(row[0]))
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    assert "errors: 4 kept" in lines
    assert lines[lines.index("--- attempt - at -") + 1] == "    bare-text"
    assert lines[lines.index("--- attempt 2 at -") + 1] == "    odd-at"
    assert lines[lines.index("--- attempt 3 at -") + 1] == '    {"code": 7}'
    assert lines[-2:] == ["--- attempt - at -", "    no-at"]


@pytest.mark.parametrize(
    ("text", "utc"),
    [
        ("2027-01-01T00:00:00+23:59", "2026-12-31T00:01:00+00:00"),
        ("2027-01-01T00:00:00-16:00", "2027-01-01T16:00:00+00:00"),
        ("2027-01-01T00:00:00+01:00:00.250000", "2026-12-31T22:59:59.750000+00:00"),
    ],
)
def test_enqueue_run_at_of_any_offset_is_stored_as_the_same_instant(cli, db_dsn, text, utc):
    job_id = enqueue(cli, "k", "--run-at", text)
    with psycopg.connect(db_dsn) as conn:
        row = conn.execute("SELECT run_at FROM pgworkerd.jobs WHERE id = %s", (job_id,)).fetchone()
    assert row[0] == datetime.fromisoformat(utc)
