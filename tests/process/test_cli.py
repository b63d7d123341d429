"""The `pgworkerd` command as a user runs it: a real process, exit codes, one-line errors."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from urllib.parse import quote

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict

from pgworkerd.storage import migrations
from pgworkerd.storage.store import JobStore


def pgworkerd(
    *args: str, env: dict[str, str] | None = None, cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("PGWORKERD_")}
    full_env.update(env or {})
    return subprocess.run(
        [sys.executable, "-m", "pgworkerd", *args],
        env=full_env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def assert_one_line_error(result: subprocess.CompletedProcess[str], code: int, text: str) -> None:
    assert result.returncode == code, (result.returncode, result.stdout, result.stderr)
    lines = result.stderr.splitlines()
    assert lines and all(line.startswith("pgworkerd: error: ") for line in lines), lines
    assert "Traceback" not in result.stderr
    assert any(text in line for line in lines), lines


def test_migrate_then_enqueue_prints_the_job_id(empty_db_dsn, tmp_path):
    env = {"PGWORKERD_DATABASE_URL": empty_db_dsn}
    first = pgworkerd("migrate", env=env, cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    assert f"migrated to version {migrations.latest_version()}" in first.stdout
    again = pgworkerd("migrate", env=env, cwd=tmp_path)
    assert again.returncode == 0 and "up to date" in again.stdout

    result = pgworkerd(
        "enqueue",
        "send_email",
        "--payload",
        '{"to": "a@example.com"}',
        "--queue",
        "mail",
        "--priority",
        "3",
        "--delay",
        "10m",
        "--unique-key",
        "mail-1",
        "--max-attempts",
        "4",
        env=env,
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr
    job_id = int(result.stdout.strip())
    with psycopg.connect(empty_db_dsn) as conn:
        row = JobStore().get(conn, job_id)
    assert (row["kind"], row["queue"], row["priority"], row["max_attempts"]) == (
        "send_email",
        "mail",
        3,
        4,
    )
    assert row["payload"] == {"to": "a@example.com"} and row["unique_key"] == "mail-1"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["enqueue", "k", "--payload", "{not json"], "--payload: not valid JSON"),
        (["enqueue", "k", "--payload", '"a\\u0000b"'], "NUL character"),
        (["enqueue", "k", "--run-at", "2030-01-01T00:00:00"], "timezone-aware"),
        (["enqueue", "k", "--run-at", "soon"], "not an ISO 8601 time"),
        (["enqueue", "k", "--delay", "5 fortnights"], "--delay: must be a duration"),
        (["enqueue", "k", "--priority", "high"], "invalid int value"),
        (["enqueue", ""], "kind must not be empty"),
        (["frobnicate"], "invalid choice"),
        ([], "required"),
    ],
)
def test_bad_command_lines_exit_2_with_one_line(db_dsn, tmp_path, args, message):
    result = pgworkerd(*args, env={"PGWORKERD_DATABASE_URL": db_dsn}, cwd=tmp_path)
    assert_one_line_error(result, 2, message)
    with psycopg.connect(db_dsn) as conn:
        assert conn.execute("SELECT count(*) FROM pgworkerd.jobs").fetchone()[0] == 0


# Runs the command in a Python of its own, as `python -m pgworkerd` would, and prints
# which of the database's and the daemon's modules it loaded.
LOADED = """
import sys
from pgworkerd.cli.main import main
try:
    main(sys.argv[1:])
finally:
    heavy = (
        "psycopg", "pgworkerd.client.producer", "pgworkerd.supervisor.core", "pydantic",
        "urllib.request",
    )
    print("loaded:", *[m for m in heavy if m in sys.modules])
"""


@pytest.mark.parametrize(
    ("args", "message", "config_read"),
    [
        (["--help"], None, False),
        (["jobs", "list", "--limit", "0"], "--limit: '0' is not a positive integer", False),
        (["check", "-c", "bad.yaml"], "colour: unknown key", True),
        (["run"], "colour: unknown key", True),  # the config of $PGWORKERD_CONFIG
    ],
)
def test_a_command_that_stops_before_the_database_does_not_load_it(
    tmp_path, args, message, config_read
):
    """Every call is a new Python: psycopg and the client (~0.4 s of imports) load at a
    command's first need of the database, not for --help, a bad argument or config;
    pydantic (~0.3 s) loads with the config, not for --help or a bad argument; urllib's
    HTTP client (~50 ms) only for `pgworkerd health`."""
    (tmp_path / "bad.yaml").write_text("colour: red\n")
    env = {"PGWORKERD_CONFIG": str(tmp_path / "bad.yaml"), "PGWORKERD_DATABASE_URL": "x"}
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("PGWORKERD_")}
    result = subprocess.run(
        [sys.executable, "-c", LOADED, *args],
        env=full_env | env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    expected = "loaded: pydantic" if config_read else "loaded:"
    assert result.stdout.splitlines()[-1] == expected, (result.stdout, result.stderr)
    if message is None:
        assert result.returncode == 0 and "usage: pgworkerd" in result.stdout
    else:
        assert_one_line_error(result, 2, message)


def test_a_missing_config_file_named_explicitly_is_an_error(tmp_path):
    for args in (
        ["-c", str(tmp_path / "nope.yaml"), "migrate"],
        ["migrate", "-c", str(tmp_path / "nope.yaml")],
    ):
        assert_one_line_error(pgworkerd(*args, cwd=tmp_path), 2, "no such config file")
    result = pgworkerd(
        "migrate", env={"PGWORKERD_CONFIG": str(tmp_path / "gone.yaml")}, cwd=tmp_path
    )
    assert_one_line_error(result, 2, "gone.yaml: no such config file")


def test_a_config_path_that_is_no_regular_file_or_too_large_is_one_line(tmp_path):
    # -c /dev/zero read without end (and without bound in memory); a FIFO with no writer
    # blocked in open(): `check` hung, as would a daemon's reload.
    fifo = tmp_path / "fifo.yaml"
    os.mkfifo(fifo)
    large = tmp_path / "large.yaml"
    large.write_bytes(b"#" * (4 * 2**20) + b"\n")  # 4 MiB of comment and a newline
    not_a_file = "a pipe, a FIFO, a socket or a directory, not a file"
    cases = {
        "/dev/zero": "/dev/zero: over 4 MiB; a config file may be at most 4 MiB",
        str(fifo): f"{fifo}: {not_a_file}",
        str(tmp_path): f"{tmp_path}: {not_a_file}",
        str(large): f"{large}: over 4 MiB; a config file may be at most 4 MiB",
    }
    for path, message in cases.items():
        result = subprocess.run(
            [sys.executable, "-m", "pgworkerd", "-c", path, "check"],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
        assert result.returncode == 2, (path, result.returncode, result.stderr[-300:])
        assert result.stderr == f"pgworkerd: error: {message}\n", path
        assert result.stdout == ""


def test_a_terminal_as_the_config_is_one_line(tmp_path):
    # A character device with nothing to read (a pty, or /dev/stdin at a prompt): the
    # non-blocking read found nothing and the check raised a TypeError traceback.
    import pty

    leader, follower = pty.openpty()
    try:
        result = subprocess.run(
            [sys.executable, "-m", "pgworkerd", "-c", os.ttyname(follower), "check"],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
    finally:
        os.close(follower)
        os.close(leader)
    assert result.returncode == 2, result.stderr
    assert result.stderr.endswith("nothing to read (a terminal?), not a file\n"), result.stderr
    assert "Traceback" not in result.stderr


def test_dev_null_as_the_config_is_an_empty_file(tmp_path):
    # The "no file" of a deployment configured by PGWORKERD_* alone: the defaults, as an
    # empty file gives, and the environment's settings (a bad one is still refused).
    env = {k: v for k, v in os.environ.items() if not k.startswith("PGWORKERD_")}
    result = subprocess.run(
        [sys.executable, "-m", "pgworkerd", "-c", "/dev/null", "check"],
        cwd=tmp_path,
        env={**env, "PGWORKERD_LEASE_TTL": "soon"},
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert result.returncode == 2, result.stderr
    assert result.stderr.startswith("pgworkerd: error: ") and "lease_ttl" in result.stderr
    assert "a pipe, a FIFO" not in result.stderr


def test_unreachable_database_exits_1_without_the_password(tmp_path, pg_admin_dsn):
    port = conninfo_to_dict(pg_admin_dsn).get("port", "5432")
    cases = {
        "postgresql://app:Sup3rS3cret@127.0.0.1:1/app": "Connection refused",
        f"postgresql://nobody:Sup3rS3cret@127.0.0.1:{port}/postgres": 'role "nobody"',
    }
    for url, reason in cases.items():
        result = pgworkerd("migrate", env={"PGWORKERD_DATABASE_URL": url}, cwd=tmp_path)
        assert_one_line_error(result, 1, reason)
        assert "Sup3rS3cret" not in result.stderr + result.stdout


def test_check_reports_ok_or_what_is_missing(empty_db_dsn, tmp_path):
    config = tmp_path / "pgworkerd.yaml"
    config.write_text("handlers:\n  json_dump: json:dumps\nqueues: {default: {}}\n")
    env = {"PGWORKERD_DATABASE_URL": empty_db_dsn}
    assert_one_line_error(
        pgworkerd("check", "-c", str(config), env=env, cwd=tmp_path), 1, "run `pgworkerd migrate`"
    )
    assert pgworkerd("migrate", "-c", str(config), env=env, cwd=tmp_path).returncode == 0
    ok = pgworkerd("check", "-c", str(config), env=env, cwd=tmp_path)
    assert ok.returncode == 0, ok.stderr
    assert "1 handler(s)" in ok.stdout
    assert f"schema version {migrations.latest_version()}" in ok.stdout


@pytest.mark.parametrize(
    "args",
    [
        ["status"],
        ["enqueue", "json_dump"],
        ["jobs", "list"],
        ["jobs", "show", "1"],
        ["jobs", "retry", "1"],
        ["queues"],
        ["queues", "pause", "default"],
        ["keys"],
    ],
)
def test_operator_commands_on_a_database_never_migrated_say_what_to_do(
    empty_db_dsn, tmp_path, args
):
    config = tmp_path / "pgworkerd.yaml"
    config.write_text("handlers:\n  json_dump: json:dumps\nqueues: {default: {}}\n")
    result = pgworkerd(*args, "-c", str(config), env={"PGWORKERD_DATABASE_URL": empty_db_dsn})
    assert_one_line_error(result, 1, "`pgworkerd migrate` sets it up")
    assert 'relation "pgworkerd.jobs" does not exist' in result.stderr
    assert "LINE" not in result.stderr  # the statement's excerpt is not an operator's business


@pytest.mark.parametrize(
    ("handlers", "message"),
    [
        (
            "no_such_module_xyz:run",
            "handlers.k: cannot use 'no_such_module_xyz:run': ModuleNotFoundError",
        ),
        ("json:no_such_function", "AttributeError"),
        ("json.decoder:JSONDecodeError.__doc__", "not callable"),
        ("tests.handlers_that_break:run", "RuntimeError: this module refuses to import"),
    ],
)
def test_check_refuses_handlers_that_do_not_import(db_dsn, tmp_path, handlers, message):
    config = tmp_path / "pgworkerd.yaml"
    config.write_text(json.dumps({"handlers": {"k": handlers}}))
    repo = Path(__file__).resolve().parents[2]
    result = pgworkerd(
        "check",
        "-c",
        str(config),
        env={"PGWORKERD_DATABASE_URL": db_dsn, "PYTHONPATH": str(repo)},
        cwd=tmp_path,
    )
    assert_one_line_error(result, 2, message)


def test_check_lists_every_config_problem(tmp_path):
    config = tmp_path / "pgworkerd.yaml"
    config.write_text("workers: [{queues: [default], concurrency: 0}]\nlease_ttl: soon\n")
    result = pgworkerd("check", "-c", str(config), cwd=tmp_path)
    assert_one_line_error(result, 2, "workers[0].concurrency: must be ≥ 1")
    assert len(result.stderr.splitlines()) == 2


@pytest.mark.parametrize(
    "url",
    [
        "postgres//u:s3cretpw@h/db",  # no ":" after the scheme: not a URL, not a conninfo
        "postgresql:/u:s3cretpw@h/db",
        "postgresql://u:s3cret%zzpw@127.0.0.1:1/db",  # a % not percent-encoded
    ],
)
def test_a_malformed_database_url_exits_2_without_the_password(tmp_path, url):
    # libpq quotes the text it cannot parse: the password was printed whole, exit 1.
    for command in (["migrate"], ["jobs", "list"], ["status"]):
        result = pgworkerd(*command, env={"PGWORKERD_DATABASE_URL": url}, cwd=tmp_path)
        assert_one_line_error(result, 2, "database.url is not a PostgreSQL URL")
        assert "s3cret" not in result.stderr + result.stdout


def test_an_unencoded_at_in_the_password_is_not_shown_as_a_host(tmp_path):
    # libpq read 'u:s3cr' as the user and password and 'etpw@127.0.0.1' as the host.
    url = "postgresql://u:s3cr@etpw@127.0.0.1:1/db"
    result = pgworkerd("migrate", env={"PGWORKERD_DATABASE_URL": url}, cwd=tmp_path)
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert "s3cr" not in result.stderr and "etpw" not in result.stderr, result.stderr


# Spellings of the test database's URL libpq reads a password from (the server trusts, so
# each connects whatever the password); `check` showed the first five whole. {user},
# {at} (the database, host and port after the "@") and {conninfo} are the test's.
URLS_WITH_A_PASSWORD = {
    "question mark": "postgresql://{user}:Hunter2?secret{at}",
    "hash": "postgresql://{user}:Hunter2#secret{at}",
    "encoded key": "postgresql://{user}{at}&%70assword=Hunter2secret",
    "encoded key end": "postgresql://{user}{at}&passwor%64=Hunter2secret",
    "escaped space": "{conninfo} password=abc\\ Hunter2secret",
    "plain url": "postgresql://{user}:Hunter2secret{at}",
    "quoted": "{conninfo} password='Hunter2 secret'",
}


@pytest.mark.parametrize("spelling", URLS_WITH_A_PASSWORD)
def test_check_shows_the_database_url_without_its_password(db_dsn, tmp_path, spelling):
    parts = conninfo_to_dict(db_dsn)
    host = quote(str(parts.get("host", "127.0.0.1")), safe="")
    url = URLS_WITH_A_PASSWORD[spelling].format(
        user=parts.get("user", "postgres"),
        at=f"@/{parts['dbname']}?host={host}&port={parts.get('port', '5432')}",
        conninfo=db_dsn,
    )
    assert "Hunter2" in str(conninfo_to_dict(url).get("password")), url
    result = pgworkerd("check", env={"PGWORKERD_DATABASE_URL": url}, cwd=tmp_path)
    assert result.returncode == 0, (url, result.stderr)
    assert "Hunter2" not in result.stdout + result.stderr, result.stdout
    assert "secret" not in result.stdout + result.stderr, result.stdout
    (line,) = [x for x in result.stdout.splitlines() if "database reachable at" in x]
    shown = line.split("database reachable at ", 1)[1].rsplit(", schema version", 1)[0]
    # What libpq read, the password as ***.
    assert conninfo_to_dict(shown) == {**conninfo_to_dict(url), "password": "***"}, line


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"PGWORKERD_DEFAULTS": "[" * 10_000}, "(PGWORKERD_DEFAULTS): JSON nested too deep"),
        ({"PGWORKERD_QUEUES": "[" * 60_000}, "(PGWORKERD_QUEUES): JSON nested too deep"),
        (
            {"PGWORKERD_HANDLERS": '{"a": ' * 3000 + "1" + "}" * 3000},
            "(PGWORKERD_HANDLERS): JSON nested too deep (3,000 levels)",
        ),
    ],
)
def test_check_refuses_json_nested_too_deep_in_the_environment(db_dsn, tmp_path, env, message):
    # It printed json.loads's RecursionError, a traceback, exit 1.
    result = pgworkerd("check", env={"PGWORKERD_DATABASE_URL": db_dsn, **env}, cwd=tmp_path)
    assert_one_line_error(result, 2, message)


@pytest.mark.parametrize(
    "text",
    [
        "queues: " + "[" * 100_000 + "\n",
        "queues: " + "{a: " * 100_000 + "\n",
        "queues: " + "{a: " * 5000 + "1" + "}" * 5000 + "\n",
    ],
)
def test_check_refuses_a_config_file_nested_too_deep(db_dsn, tmp_path, text):
    (tmp_path / "deep.yaml").write_text(text)
    result = pgworkerd(
        "check", "-c", "deep.yaml", env={"PGWORKERD_DATABASE_URL": db_dsn}, cwd=tmp_path
    )
    assert_one_line_error(result, 2, "deep.yaml: invalid YAML: nested too deep")


URL_IN_THE_WRONG_PLACE = "postgresql://u:Hunter2secret@127.0.0.1:1/db"


@pytest.mark.parametrize(
    ("config", "env", "code", "message"),
    [
        (f'lease_ttl: "{URL_IN_THE_WRONG_PLACE}"\n', {}, 2, "lease_ttl: must be a duration"),
        (f'http: {{listen: "{URL_IN_THE_WRONG_PLACE}"}}\n', {}, 2, "http.listen: must be"),
        ("", {"PGWORKERD_LEASE_TTL": URL_IN_THE_WRONG_PLACE}, 2, "(PGWORKERD_LEASE_TTL)"),
        ("", {"PGWORKERD_CONFIG": URL_IN_THE_WRONG_PLACE}, 2, "no such config file"),
        # The schema name reaches the database, and its error line quotes it.
        ("", {"PGWORKERD_DATABASE__SCHEMA": URL_IN_THE_WRONG_PLACE}, 1, "is not set up"),
    ],
)
def test_a_url_put_in_another_setting_is_not_echoed_with_its_password(
    db_dsn, tmp_path, config, env, code, message
):
    args = ["check"]
    if config:
        (tmp_path / "c.yaml").write_text(config)
        args = ["-c", "c.yaml", "check"]
    result = pgworkerd(*args, env={"PGWORKERD_DATABASE_URL": db_dsn, **env}, cwd=tmp_path)
    assert_one_line_error(result, code, message)
    assert "Hunter2" not in result.stderr + result.stdout, result.stderr
    assert "postgresql:/" in result.stderr and "u:***@127.0.0.1:1/db" in result.stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        # Stored, then unreadable: `jobs list` failed, and each worker's claim crashed.
        (["enqueue", "k", "--run-at", "0001-01-01T00:00:00+14:00"], "between 0001-01-02 and"),
        (["enqueue", "k", "--run-at", "9999-12-31T23:59:59-14:00"], "and 9999-12-30 (UTC)"),
        # Year 10000 in a session at +01:00 (the dashboard's rows failed to load).
        (["enqueue", "k", "--run-at", "9999-12-31T23:30:00+00:00"], "and 9999-12-30 (UTC)"),
        (["keys", "pause", "tenant:42", "--for", "3000000d"], "at most 100 years"),
        (["keys", "pause", "tenant:42", "--for", "1e300"], "at most 100 years"),
        # Tracebacks: JSON that json.loads refuses with other errors than a syntax error.
        (["enqueue", "k", "--payload", "[" * 100_000], "--payload: nested more than 100"),
        (["enqueue", "k", "--payload", "1" * 5000], "--payload: not usable JSON"),
        (["enqueue", "k", "--payload", '{"a": "\\ud800"}'], "payload is not valid Unicode"),
        (["jobs", "list", "--limit", "9223372036854775808"], "is over 2**63 - 1"),
    ],
)
def test_values_the_database_cannot_take_back_exit_2_and_write_nothing(
    db_dsn, tmp_path, args, message
):
    result = pgworkerd(*args, env={"PGWORKERD_DATABASE_URL": db_dsn}, cwd=tmp_path)
    assert_one_line_error(result, 2, message)
    with psycopg.connect(db_dsn) as conn:
        assert conn.execute("SELECT count(*) FROM pgworkerd.jobs").fetchone() == (0,)
        assert conn.execute("SELECT count(*) FROM pgworkerd.paused_keys").fetchone() == (0,)


def test_an_argument_that_is_not_utf8_exits_2(db_dsn, tmp_path):
    # "\udcff" reaches the command as the byte 0xff (os.fsencode's surrogateescape), and
    # Python gives it back as "\udcff": a text psycopg cannot encode (a traceback).
    env = {"PGWORKERD_DATABASE_URL": db_dsn}
    for args in (["enqueue", "k\udcff"], ["jobs", "list", "--queue", "q\udcff"]):
        assert_one_line_error(pgworkerd(*args, env=env, cwd=tmp_path), 2, "not valid")
