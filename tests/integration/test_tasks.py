"""`@pgworkerd.task` functions: their kind and options, `fn.enqueue` and
`fn.enqueue_async` in the caller's transaction on a real server, and `task_modules` (only
the listed modules are imported; a kind claimed twice is refused in one line, exit 2)."""

from __future__ import annotations

import asyncio
import importlib.util
import inspect
import json
import sys

import psycopg
import pytest

from pgworkerd import InvalidJob, Job, Task, enqueue, task
from pgworkerd.config import parse
from pgworkerd.handlers import HandlerError, load_registry
from pgworkerd.storage.store import JobStore
from pgworkerd.testing import drain
from tests.daemon import REPO
from tests.process.test_cli import assert_one_line_error, pgworkerd
from tests.tasks import shop


def test_the_kind_defaults_to_module_dot_function_and_the_task_still_runs_as_a_handler():
    assert isinstance(shop.send_receipt, Task)
    assert shop.send_receipt.kind == "tests.tasks.shop.send_receipt"
    assert shop.send_receipt.__name__ == "send_receipt"
    job = Job(
        id=1,
        kind=shop.send_receipt.kind,
        queue="default",
        payload={"to": "a"},
        attempt=1,
        max_attempts=5,
    )
    assert shop.send_receipt(job) == {"sent_to": "a", "attempt": 1}


def test_enqueue_uses_the_decorators_options_and_the_calls_win(db_dsn, conn):
    with psycopg.connect(db_dsn) as producer:
        first = shop.refund.enqueue(producer, {"amount": 3})
        second = shop.refund.enqueue(producer, {"amount": 4}, queue="default", priority=1)
        producer.rollback()  # the caller's transaction decides: nothing is left
    assert conn.execute("SELECT count(*) FROM pgworkerd.jobs").fetchone()[0] == 0
    with psycopg.connect(db_dsn) as producer:
        first = shop.refund.enqueue(producer, {"amount": 3})
        second = shop.refund.enqueue(producer, {"amount": 4}, queue="default", priority=1)
    store = JobStore()
    one, two = store.get(conn, first), store.get(conn, second)
    assert (one["kind"], one["queue"], one["priority"], one["max_attempts"]) == (
        "shop.refund",
        "payments",
        7,
        2,
    )
    assert one["payload"] == {"amount": 3}
    assert (two["queue"], two["priority"], two["max_attempts"]) == ("default", 1, 2)


def test_enqueue_async_joins_the_async_transaction(db_dsn, conn):
    async def produce(commit: bool) -> int:
        async with await psycopg.AsyncConnection.connect(db_dsn) as aconn:
            job_id = await shop.send_receipt.enqueue_async(aconn, {"to": "b"}, priority=3)
            if not commit:
                await aconn.rollback()
            return job_id

    asyncio.run(produce(commit=False))
    assert conn.execute("SELECT count(*) FROM pgworkerd.jobs").fetchone()[0] == 0
    job_id = asyncio.run(produce(commit=True))
    row = JobStore().get(conn, job_id)
    assert (row["kind"], row["priority"]) == ("tests.tasks.shop.send_receipt", 3)


def test_a_nested_function_or_a_lambda_without_a_kind_is_refused_at_decoration():
    """Its default kind (`...<locals>.inner`, `...<lambda>`) names no module attribute:
    accepted, its jobs waited for a handler that no daemon had."""

    def make() -> None:
        @task
        def inner(job):
            return 1

    with pytest.raises(InvalidJob) as caught:
        make()
    where = f"{__name__}.test_a_nested_function_or_a_lambda_without_a_kind_is_refused"
    assert str(caught.value).startswith(
        f"@pgworkerd.task {where}_at_decoration.<locals>.make.<locals>.inner: a task's "
        "function must be defined at a module level"
    )
    assert "give kind=..." in str(caught.value) and "\n" not in str(caught.value)
    with pytest.raises(InvalidJob, match=r"\.<lambda>: a task's function must be defined"):
        task(lambda job: 1)
    with pytest.raises(InvalidJob, match="must be defined at a module level"):
        task(queue="mail")(lambda job: 1)


def test_a_nested_function_or_a_lambda_given_a_kind_is_a_task_and_runs(conn):
    """A task factory: the registry finds a task at its module's top level, whatever
    its function's name."""
    from tests.tasks import made

    assert set(load_registry({}, ["tests.tasks.made"])) == {"made.ping", "made.pong"}
    made.ping.enqueue(conn, {"n": 1})
    made.pong.enqueue(conn, {})
    config = parse(json.dumps({"task_modules": ["tests.tasks.made"], "queues": {"default": {}}}))
    ran = {d.kind: (d.state, d.result) for d in drain(conn, config)}
    assert ran == {
        "made.ping": ("succeeded", ["made.ping", {"n": 1}]),
        "made.pong": ("succeeded", "pong"),
    }


def test_task_modules_make_every_task_a_handler_and_drain_runs_them(conn):
    config = parse(
        json.dumps(
            {"task_modules": ["tests.tasks.shop"], "queues": {"default": {}, "payments": {}}}
        )
    )
    shop.send_receipt.enqueue(conn, {"to": "c"})
    shop.refund.enqueue(conn, {"amount": 5})
    ran = {d.kind: (d.state, d.result) for d in drain(conn, config)}
    assert ran == {
        "tests.tasks.shop.send_receipt": ("succeeded", {"sent_to": "c", "attempt": 1}),
        "shop.refund": ("succeeded", "refunded 5"),
    }


def test_only_the_listed_modules_are_imported():
    sys.modules.pop("tests.tasks.unlisted", None)
    registry = load_registry({"noop": "tests.handlers:noop"}, ["tests.tasks.shop"])
    assert set(registry) == {"noop", "tests.tasks.shop.send_receipt", "shop.refund"}
    assert "tests.tasks.unlisted" not in sys.modules


def test_a_task_named_under_handlers_is_its_function_as_through_task_modules():
    """The Task object itself was the handler: a coroutine function to no inspection, so
    an async task ran as a plain one (in a thread, via asyncio.run, its span empty)."""
    registry = load_registry(
        {"refund": "tests.tasks.shop:refund", "receipt": "tests.tasks.shop.send_receipt"}
    )
    assert inspect.iscoroutinefunction(registry["refund"])
    assert inspect.unwrap(registry["refund"]) is shop.refund.fn
    assert not inspect.iscoroutinefunction(registry["receipt"])
    assert inspect.unwrap(registry["receipt"]) is shop.send_receipt.fn
    # Under its own kind and listed through its module too, it is one handler, not a clash.
    registry = load_registry({"shop.refund": "tests.tasks.shop:refund"}, ["tests.tasks.shop"])
    assert inspect.unwrap(registry["shop.refund"]) is shop.refund.fn


@pytest.mark.parametrize(
    ("handlers", "modules", "expected"),
    [
        (
            {"noop": "tests.handlers:noop"},
            ["tests.tasks.clash"],
            "task_modules[0]: kind 'noop' of 'tests.tasks.clash' is already claimed by handlers",
        ),
        (
            {},
            ["tests.tasks.no_such_module"],
            "task_modules[0]: cannot import 'tests.tasks.no_such_module': ModuleNotFoundError",
        ),
        ({}, ["tests.tasks.empty"], "task_modules[0]: 'tests.tasks.empty' defines no"),
    ],
)
def test_bad_task_modules_are_refused_one_line_each(handlers, modules, expected):
    with pytest.raises(HandlerError) as caught:
        load_registry(handlers, modules)
    assert len(caught.value.problems) == 1
    assert caught.value.problems[0].startswith(expected)


def test_a_kind_claimed_twice_stops_check_with_exit_2(db_dsn, tmp_path):
    config = tmp_path / "pgworkerd.yaml"
    config.write_text(
        json.dumps(
            {"handlers": {"noop": "tests.handlers:noop"}, "task_modules": ["tests.tasks.clash"]}
        )
    )
    env = {"PGWORKERD_DATABASE_URL": db_dsn, "PYTHONPATH": str(REPO)}
    for command in ("check", "run"):
        result = pgworkerd(command, "-c", str(config), env=env, cwd=tmp_path)
        assert_one_line_error(result, 2, "kind 'noop' of 'tests.tasks.clash' is already claimed")


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"priority": "high"}, "priority must be an integer, got str"),
        ({"priority": 2**40}, "priority must fit in 32 bits, got 1099511627776"),
        ({"queue": ""}, "queue must not be empty"),
        ({"queue": 5}, "queue must be a string, got int"),
        ({"max_attempts": 0}, "max_attempts must be an integer from 1 to 1000000, got 0"),
        ({"max_runtime": -1}, "max_runtime must be a finite number of seconds > 0, got -1"),
        ({"kind": "x\x00"}, "kind must not contain control characters (NUL included)"),
        ({"kind": "a" * 300}, "kind is 300 characters, over the limit of 255"),
        ({"kind": " "}, "kind must not be empty"),
    ],
)
def test_the_decorators_options_are_checked_as_enqueue_checks_them(conn, options, message):
    """They were checked first at enqueue: the decorator took them, every enqueue of the
    task failed, and `pgworkerd check` passed its module."""
    with pytest.raises(InvalidJob) as refused:
        kind = options.get("kind", "k")
        enqueue(conn, kind, {}, **{k: v for k, v in options.items() if k != "kind"})
    assert str(refused.value) == message  # enqueue's own words
    with pytest.raises(InvalidJob) as caught:

        @task(**options)
        def handler(job: Job) -> None:
            return None

    where = f"{__name__}.{test_the_decorators_options_are_checked_as_enqueue_checks_them.__name__}"
    assert str(caught.value) == f"@pgworkerd.task {where}.<locals>.handler: {message}"


def test_an_unknown_option_is_refused_by_its_name(conn):
    """It was Python's TypeError naming `_job_record`, a private function."""
    with pytest.raises(InvalidJob, match=r"^unknown option\(s\): prio, unknown_option$"):
        shop.send_receipt.enqueue(conn, {}, unknown_option=1, prio=2)  # type: ignore[call-arg]
    with pytest.raises(InvalidJob, match=r"^unknown option\(s\): prio$"):
        enqueue(conn, "k", {}, prio=2)  # type: ignore[call-arg]
    with pytest.raises(InvalidJob, match=r"^@pgworkerd.task: unknown option\(s\): prio \("):
        task(prio=2)  # type: ignore[call-overload]
    assert conn.execute("SELECT count(*) FROM pgworkerd.jobs").fetchone()[0] == 0


def test_a_task_with_an_option_no_enqueue_accepts_stops_check_with_exit_2(db_dsn, tmp_path):
    config = tmp_path / "pgworkerd.yaml"
    config.write_text(json.dumps({"task_modules": ["tests.tasks.bad_options"]}))
    env = {"PGWORKERD_DATABASE_URL": db_dsn, "PYTHONPATH": str(REPO)}
    for command in ("check", "run"):
        result = pgworkerd(command, "-c", str(config), env=env, cwd=tmp_path)
        assert_one_line_error(
            result,
            2,
            "task_modules[0]: cannot import 'tests.tasks.bad_options': InvalidJob: "
            "@pgworkerd.task tests.tasks.bad_options.never_attempted: max_attempts must be an "
            "integer from 1 to 1000000, got 0",
        )


def test_a_task_module_name_that_is_not_a_module_name_is_a_config_error(tmp_path):
    config = tmp_path / "pgworkerd.yaml"
    config.write_text(json.dumps({"task_modules": ["tests/tasks/shop.py"]}))
    result = pgworkerd("check", "-c", str(config), cwd=tmp_path)
    assert_one_line_error(result, 2, "task_modules: 'tests/tasks/shop.py' is not a module name")


def test_a_django_config_without_django_installed_is_refused_before_any_fork(db_dsn, tmp_path):
    """This venv (Python 3.11, the dev extra) has no Django: what a team on 3.11 gets."""
    assert importlib.util.find_spec("django") is None, "this test needs a venv without Django"
    config = tmp_path / "pgworkerd.yaml"
    config.write_text(json.dumps({"django": {"settings": "json.tool", "tasks": ["json"]}}))
    env = {"PGWORKERD_DATABASE_URL": db_dsn}
    for command in ("check", "run"):
        result = pgworkerd(command, "-c", str(config), env=env, cwd=tmp_path)
        assert_one_line_error(result, 2, "django: Django is not installed")


def test_a_periodic_entry_may_name_a_tasks_kind_and_check_says_when_none_has_it(db_dsn, tmp_path):
    config = tmp_path / "pgworkerd.yaml"
    env = {"PGWORKERD_DATABASE_URL": db_dsn, "PYTHONPATH": str(REPO)}
    entry = {"kind": "tests.tasks.shop.send_receipt", "every": "1h", "payload": {"to": "a"}}
    config.write_text(json.dumps({"task_modules": ["tests.tasks.shop"], "periodic": [entry]}))
    result = pgworkerd("check", "-c", str(config), env=env, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "periodic tests.tasks.shop.send_receipt" in result.stdout
    config.write_text(
        json.dumps({"task_modules": ["tests.tasks.shop"], "periodic": [{**entry, "kind": "nope"}]})
    )
    for command in ("check", "run"):
        result = pgworkerd(command, "-c", str(config), env=env, cwd=tmp_path)
        assert_one_line_error(
            result, 2, "periodic[0].kind: 'nope' is neither under handlers nor a task"
        )
