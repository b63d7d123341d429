"""Bad config and bad handlers (docs/faults.md, "Bad configuration" and "Handlers that
do not import") stop `check` and `run` with exit 2,
one line per problem, no traceback; `run` forks nothing and writes nothing."""

from __future__ import annotations

import json

import psycopg
import pytest

from tests.process.test_cli import assert_one_line_error, pgworkerd
from tests.unit.test_config import BAD_CONFIGS

BAD_HANDLERS = [
    ({"k": "no_such_module_xyz:run"}, "ModuleNotFoundError"),
    ({"k": "json:no_such_function"}, "AttributeError"),
    ({"k": "json:__name__"}, "not callable"),
    ({"k": "tests.handlers_that_break:run"}, "RuntimeError: this module refuses to import"),
]


def _assert_nothing_written(dsn: str) -> None:
    with psycopg.connect(dsn) as conn:
        assert conn.execute("SELECT count(*) FROM pgworkerd.daemons").fetchone()[0] == 0
        assert conn.execute("SELECT count(*) FROM pgworkerd.jobs").fetchone()[0] == 0


@pytest.mark.parametrize("command", ["check", "run"])
@pytest.mark.parametrize(("text", "expected"), BAD_CONFIGS)
def test_bad_config_exits_2_naming_the_key(db_dsn, tmp_path, command, text, expected):
    config = tmp_path / "pgworkerd.yaml"
    config.write_text(text)
    result = pgworkerd(
        command, "-c", str(config), env={"PGWORKERD_DATABASE_URL": db_dsn}, cwd=tmp_path
    )
    assert_one_line_error(result, 2, expected)
    assert result.stdout == ""
    _assert_nothing_written(db_dsn)


@pytest.mark.parametrize("command", ["check", "run"])
@pytest.mark.parametrize(("handlers", "expected"), BAD_HANDLERS)
def test_handlers_that_do_not_import_are_refused_before_anything_forks(
    db_dsn, tmp_path, command, handlers, expected
):
    from tests.daemon import REPO

    config = tmp_path / "pgworkerd.yaml"
    config.write_text(json.dumps({"handlers": handlers}))
    result = pgworkerd(
        command,
        "-c",
        str(config),
        env={"PGWORKERD_DATABASE_URL": db_dsn, "PYTHONPATH": str(REPO)},
        cwd=tmp_path,
    )
    assert_one_line_error(result, 2, f"handlers.k: cannot use {handlers['k']!r}")
    assert any(expected in line for line in result.stderr.splitlines())
    _assert_nothing_written(db_dsn)


def test_run_refuses_an_unmigrated_database(empty_db_dsn, tmp_path):
    config = tmp_path / "pgworkerd.yaml"
    config.write_text("queues: {default: {}}\n")
    result = pgworkerd(
        "run", "-c", str(config), env={"PGWORKERD_DATABASE_URL": empty_db_dsn}, cwd=tmp_path
    )
    assert_one_line_error(result, 1, "run `pgworkerd migrate`")
