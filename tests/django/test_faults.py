"""Faults a review found in the Django integration, each against the real Django, a
real PostgreSQL and a real `pgworkerd run` of the example project with
tests/django/faults.py listed beside shop.tasks."""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest
from django.tasks import TaskResultStatus, default_task_backend
from django.tasks.exceptions import TaskResultDoesNotExist

import pgworkerd
from pgworkerd.contrib.django import worker_registry
from pgworkerd.job import Job
from pgworkerd.worker.execution import Executor
from tests.daemon import job, wait_until

TASKS = ["shop.tasks", "tests.django.faults"]


@pytest.fixture
def daemon(django_daemon):
    """A daemon that runs tests/django/faults.py's tasks too."""

    def start(**overrides: Any) -> Any:
        django = {"settings": "mysite.settings", "tasks": TASKS, **overrides.pop("django", {})}
        return django_daemon(django=django, **overrides)

    return start


def settled(pg, job_id: int, timeout_s: float = 30.0) -> dict[str, Any]:
    """The job's row once its first attempt is over: final, or queued for a retry."""

    def read():
        row = job(pg, job_id)
        final = row["state"] in ("succeeded", "dead", "cancelled")
        retrying = row["state"] == "queued" and row["attempt"] >= 1
        return row if final or retrying else None

    return wait_until(read, timeout_s=timeout_s, what=f"job {job_id} settled")


def runs(ref: str) -> int:
    from shop.models import Order

    return Order.objects.filter(ref__startswith=f"{ref}-").count()


def signals(task_id: str) -> list[tuple[str, str]]:
    from shop.models import SignalLog

    return list(SignalLog.objects.filter(task_id=task_id).values_list("signal", "status"))


def ref_of(what: str) -> str:
    return f"{what}-{uuid.uuid4().hex[:8]}"


# -- a return value that is not JSON -----------------------------------------------------


@pytest.mark.parametrize("name", ["returns_a_datetime", "areturns_a_datetime"])
def test_a_return_value_that_is_not_json_fails_the_task_once_without_a_retry(
    django_dsn, pg, daemon, name
):
    from tests.django import faults

    ref = ref_of(name)
    result = getattr(faults, name).enqueue(ref)
    daemon()
    row = settled(pg, int(result.id))
    # It was retried (queued again), its work run again at every attempt.
    assert row["state"] == "dead" and row["attempt"] == 1, (row["state"], row["attempt"])
    assert runs(ref) == 1
    read = default_task_backend.get_result(result.id)
    assert read.status == TaskResultStatus.FAILED
    (error,) = read.errors
    assert error.exception_class_path == "builtins.TypeError"
    assert "not JSON" in error.traceback and "datetime" in error.traceback
    # The async path sent no task_finished (normalize_json was outside its try).
    assert signals(result.id) == [("started", "RUNNING"), ("finished", "FAILED")]


# -- a connection the server dropped ---------------------------------------------------


@pytest.mark.parametrize("health_checks", [True, False], ids=["health-checks", "no-checks"])
def test_an_enqueue_after_the_server_dropped_djangos_connection_recovers(
    django_dsn, pg, health_checks
):
    """Persistent connections, a request cycle's close_old_connections() around each
    "request", and the server dropping Django's connection between two (a restart, a
    failover): as with the ORM, the next enqueue works (with health checks), or only
    the first one fails, with Django's own error (without)."""
    from django.db import DatabaseError, close_old_connections, connection
    from shop.tasks import add

    saved = dict(connection.settings_dict)
    connection.close()
    connection.settings_dict.update(CONN_MAX_AGE=None, CONN_HEALTH_CHECKS=health_checks)
    try:
        close_old_connections()  # request 1
        add.enqueue(1, 1)
        close_old_connections()  # its end: the connection is kept
        pid = connection.connection.info.backend_pid
        pg.execute("SELECT pg_terminate_backend(%s)", (pid,))
        wait_until(
            lambda: (
                not pg.execute("SELECT 1 FROM pg_stat_activity WHERE pid = %s", (pid,)).fetchall()
            ),
            what="Django's backend gone",
        )
        close_old_connections()  # request 2
        if not health_checks:
            with pytest.raises(DatabaseError):  # Django's error (it was psycopg's)
                add.enqueue(2, 2)
            close_old_connections()  # its end: the broken connection is discarded
            close_old_connections()  # request 3
        result = add.enqueue(3, 4)  # it failed on the dropped connection, forever
        assert job(pg, int(result.id))["payload"] == {"args": [3, 4], "kwargs": {}}
        assert default_task_backend.get_result(result.id).status == TaskResultStatus.READY
    finally:
        connection.close()
        connection.settings_dict.clear()
        connection.settings_dict.update(saved)


# -- a task interrupted in a query -----------------------------------------------------


def test_a_task_timed_out_in_a_query_leaves_no_busy_connection_to_the_next(django_dsn, pg, daemon):
    """A worker process (JobTimeout comes by a signal, inside psycopg's wait for the
    query's result; a job thread would get it only after the query, the supervisor's
    SIGKILL first), persistent connections."""
    from tests.django.faults import counts_orders, sleeps_in_a_query

    slow = sleeps_in_a_query.using(priority=10).enqueue(20)
    following = [counts_orders.enqueue() for _ in range(3)]
    daemon(
        django={"settings": "tests.django.settings_persistent"},
        queues={"default": {"max_attempts": 1, "max_runtime": "1s"}},
        workers=[{"queues": ["default"], "concurrency": 1}],
    )
    row = settled(pg, int(slow.id))
    # The connection was kept mid-command: the task_finished receiver's query failed on
    # it ("another command is already in progress"), its error replacing the JobTimeout
    # and no finished signal recorded; without a receiver, the next task failed on it.
    assert row["state"] == "dead"
    last = row["last_error"].strip().splitlines()[-1]
    assert last.startswith("pgworkerd.job.JobTimeout"), last
    assert signals(slow.id) == [("started", "RUNNING"), ("finished", "FAILED")]
    for result in following:
        row = settled(pg, int(result.id))
        assert row["state"] == "succeeded", row["last_error"]


def test_an_async_task_timed_out_in_a_query_ends_with_jobtimeout_its_worker_alive(
    django_dsn, pg, daemon
):
    """As a plain async handler with the same body: JobTimeout, not the worker killed
    after the grace with the job running beside it."""
    from tests.django.faults import asleeps_in_a_query, sleeps

    slow = asleeps_in_a_query.enqueue(20)
    bystander = sleeps.using(queue_name="fragile").enqueue(5)
    daemon(
        queues={"default": {"max_attempts": 1, "max_runtime": "1s"}, "fragile": {}},
        workers=[{"queues": ["default", "fragile"], "concurrency": 1, "threads": 2}],
    )
    row = settled(pg, int(slow.id))
    assert row["state"] == "dead"
    last = row["last_error"].strip().splitlines()[-1]
    # It was "exceeded its max runtime of 1s: worker killed (SIGKILL)".
    assert last.startswith("pgworkerd.job.JobTimeout"), last
    row = settled(pg, int(bystander.id))
    assert (row["state"], row["attempt"]) == ("succeeded", 1)


# -- the project's LOGGING -------------------------------------------------------------


def test_a_projects_logging_does_not_silence_the_workers_log(django_dsn, pg, daemon):
    from shop.tasks import add

    result = add.enqueue(20, 22)
    running = daemon(django={"settings": "tests.django.settings_logging"})
    settled(pg, int(result.id))
    # The worker logged nothing (0 lines): django.setup() disabled its loggers.
    wait_until(
        lambda: f"job succeeded job={result.id} " in running.log(),
        timeout_s=10,
        what="the worker's log line",
    )


# -- a return value pgworkerd cannot keep ----------------------------------------------


@pytest.mark.parametrize("what", ["nan", "big"])
def test_a_return_value_that_cannot_be_kept_fails_the_task_once(django_dsn, pg, daemon, what):
    from tests.django.faults import returns

    ref = ref_of(what)
    result = returns.enqueue(ref, what)
    daemon()
    row = settled(pg, int(result.id))
    # It was SUCCESSFUL, its return_value {"pgworkerd_result_omitted": "..."}.
    assert (row["state"], row["attempt"], runs(ref)) == ("dead", 1, 1), row["result"]
    read = default_task_backend.get_result(result.id)
    assert read.status == TaskResultStatus.FAILED
    (error,) = read.errors
    assert error.exception_class_path == "pgworkerd.contrib.django.ResultNotKept"
    assert "cannot be kept" in error.traceback
    assert signals(result.id) == [("started", "RUNNING"), ("finished", "FAILED")]


def test_a_nul_in_a_return_value_is_kept_escaped_as_documented(django_dsn, pg, daemon):
    from tests.django.faults import returns

    result = returns.enqueue(ref_of("nul"), "nul")
    daemon()
    settled(pg, int(result.id))
    assert default_task_backend.get_result(result.id).return_value == "a\\u0000b"
    assert pgworkerd.result(pg, int(result.id)) == "a\\u0000b"


@pytest.mark.parametrize("name", ["echoes", "aechoes"])
def test_a_tasks_result_is_encoded_once_and_stored_as_encoded(django_dsn, pg, monkeypatch, name):
    """The worker's path, in this process: the registry's handler run by an Executor, as
    in a worker child. The value was encoded twice (the handler's check that the worker
    can keep it, then the worker's outcome_of_value), the text written the second one."""
    from tests.django import faults

    value = {"ref": ref_of(name), "items": [1, "two", None, {"n": 2.5}], "text": "é ☃"}
    # A queue no daemon serves: the job is run here only.
    result = getattr(faults, name).using(queue_name="nowhere").enqueue(value)
    row = job(pg, int(result.id))
    handler = worker_registry("mysite.settings", TASKS, worker_id="here")[row["kind"]]
    # A result is encoded by json.dumps (encoding.dump_result): each of this value counted.
    encodes: list[str] = []
    dumps = json.dumps

    def counted(obj: Any, *args: Any, **kwargs: Any) -> str:
        text = dumps(obj, *args, **kwargs)
        if obj == value:
            encodes.append(text)
        return text

    monkeypatch.setattr(json, "dumps", counted)
    claimed = Job(
        id=row["id"],
        kind=row["kind"],
        queue=row["queue"],
        payload=row["payload"],
        attempt=1,
        max_attempts=1,
        created_at=row["created_at"],
    )
    executor = Executor()
    try:
        outcome = executor.run(handler, claimed)
    finally:
        executor.close()
    monkeypatch.undo()  # the reads below are not the worker's
    assert outcome.kind == "succeeded", outcome.error
    assert encodes == [outcome.result_json]
    assert json.loads(outcome.result_json) == value
    assert signals(result.id) == [("started", "RUNNING"), ("finished", "SUCCESSFUL")]


def test_a_result_kept_as_pgworkerds_marker_reads_failed(django_dsn, pg):
    """A job that ended with the marker in place of its result (run before the worker
    refused such values, or completed by other code) is not SUCCESSFUL."""
    from shop.tasks import add

    result = add.enqueue(1, 2)
    pg.execute(
        "UPDATE pgworkerd.jobs SET state = 'succeeded', attempt = 1, started_at = now(),"
        " finished_at = now(), result = %s WHERE id = %s",
        ('{"pgworkerd_result_omitted": "not JSON-serialisable: NaN"}', int(result.id)),
    )
    read = default_task_backend.get_result(result.id)
    assert read.status == TaskResultStatus.FAILED
    assert [e.exception_class_path for e in read.errors] == [
        "pgworkerd.contrib.django.ResultNotKept"
    ]
    assert "NaN" in read.errors[0].traceback


# -- what runs, what is imported -------------------------------------------------------


def test_a_task_imported_into_a_listed_module_does_not_run(django_dsn, pg, daemon):
    """tests/django/faults.py imports shop.unlisted_tasks.never: listing faults lists
    its own tasks, not never's module."""
    from shop.models import Order
    from shop.unlisted_tasks import never

    ref = ref_of("imported")
    result = never.enqueue(ref)
    daemon()
    row = settled(pg, int(result.id))
    # It ran: registered under its own kind from the listed module's namespace.
    assert row["state"] == "dead" and "no handler" in row["last_error"]
    assert not Order.objects.filter(ref=ref).exists()


def test_reading_a_result_imports_nothing_the_jobs_kind_names(django_dsn, pg):
    import sys

    import pgworkerd

    module = "tests.django.imported_by_kind"
    job_id = pgworkerd.enqueue(pg, f"{module}.task", {"args": [], "kwargs": {}})
    with pytest.raises(TaskResultDoesNotExist):
        default_task_backend.get_result(str(job_id))
    # It was imported (import_string(kind)), whatever the kind named.
    assert module not in sys.modules


def test_a_task_bound_under_another_name_runs_and_its_result_reads_back(django_dsn, pg, daemon):
    """`doubles_task = task(doubles)`: the worker ran it (its registry looks at every
    task of the module), but get_result looked up the function's name, found the plain
    function, and raised TaskResultDoesNotExist for each of its jobs."""
    from tests.django.faults import doubles_task

    result = doubles_task.enqueue(21)
    assert doubles_task.get_result(result.id).status == TaskResultStatus.READY
    daemon()
    assert settled(pg, int(result.id))["state"] == "succeeded"
    done = doubles_task.get_result(result.id)
    assert (done.status, done.return_value) == (TaskResultStatus.SUCCESSFUL, 42)


# -- a payload not of Django's shape ---------------------------------------------------

NOT_DJANGOS = [[1, 2], {"args": {"a": 1}}, {"args": [1, 2], "kwarg": {"b": 3}}, "1, 2"]


@pytest.mark.parametrize("payload", NOT_DJANGOS, ids=["list", "args-dict", "typo", "text"])
def test_a_payload_not_of_djangos_shape_reads_as_no_result(django_dsn, pg, payload):
    from shop.tasks import add

    import pgworkerd

    job_id = pgworkerd.enqueue(pg, add.module_path, payload)
    # It was AttributeError (a list), or a result with a dict for args.
    with pytest.raises(TaskResultDoesNotExist, match="its payload is not"):
        default_task_backend.get_result(str(job_id))


def test_a_payload_not_of_djangos_shape_ends_dead_without_running(django_dsn, pg, daemon):
    import pgworkerd

    ids = [pgworkerd.enqueue(pg, "tests.django.faults.returns", p) for p in NOT_DJANGOS]
    daemon()
    for job_id in ids:
        row = settled(pg, job_id)
        # The task was called with no or wrong arguments (TypeError), and retried.
        assert (row["state"], row["attempt"]) == ("dead", 1), row["last_error"]
        assert '{"args": [...], "kwargs": {...}}' in row["last_error"]
    assert signals(str(ids[0])) == []  # never started


# -- the class of a task's exception ---------------------------------------------------


@pytest.mark.parametrize(
    ("how", "path"),
    [
        ("lines", "builtins.ValueError"),  # it was builtins.second
        ("note", "builtins.KeyError"),  # it was builtins.Exception
        ("group", "builtins.ExceptionGroup"),
        ("long", "tests.django.faults.Refused"),  # it was builtins.KeyError
    ],
)
def test_an_errors_class_is_the_raised_class(django_dsn, pg, daemon, how, path):
    from tests.django.faults import raises

    result = raises.enqueue(how)
    daemon()
    settled(pg, int(result.id))
    read = default_task_backend.get_result(result.id)
    assert read.status == TaskResultStatus.FAILED
    (error,) = read.errors
    assert error.exception_class_path == path
    assert "Traceback (most recent call last):" in error.traceback


def test_a_task_sees_the_worker_id_its_result_reads(django_dsn, pg, daemon):
    from tests.django.faults import worker_ids_seen

    result = worker_ids_seen.enqueue()
    daemon()
    settled(pg, int(result.id))
    read = default_task_backend.get_result(result.id)
    # It was host:<child pid> inside, host:<supervisor pid>/default#1 read back.
    assert read.return_value == read.worker_ids == [job(pg, int(result.id))["worker"]]


@pytest.mark.parametrize("prefix", ["", "a"], ids=["sync", "async"])
def test_a_task_that_fails_inside_a_transaction_leaves_it_to_no_other(
    django_dsn, pg, daemon, prefix
):
    from tests.django import faults

    ref = ref_of(f"{prefix}after-a-transaction")
    failing = getattr(faults, f"{prefix}begins_and_fails").using(priority=10).enqueue(ref)
    following = getattr(faults, f"{prefix}records").enqueue(ref)
    daemon(
        django={"settings": "tests.django.settings_persistent"},
        queues={"default": {"max_attempts": 1}},
        workers=[{"queues": ["default"], "concurrency": 1}],
    )
    assert settled(pg, int(failing.id))["state"] == "dead"
    assert settled(pg, int(following.id))["state"] == "succeeded"
    # The next task ran in the transaction left open, its row never committed.
    wait_until(lambda: runs(ref) == 1, timeout_s=5, what="the next task's row committed")


# -- USE_TZ = False -------------------------------------------------------------------


@pytest.mark.parametrize("name", ["times", "atimes"])
def test_a_running_tasks_times_are_naive_local_times_without_use_tz(django_dsn, pg, daemon, name):
    """Its enqueued_at was the job's aware created_at beside naive local started_at and
    last_attempted_at: `started_at - enqueued_at` raised TypeError."""
    from tests.django import faults

    result = getattr(faults, name).enqueue()
    daemon(django={"settings": "tests.django.settings_notz"})
    row = settled(pg, int(result.id))
    assert row["state"] == "succeeded", row["last_error"]
    times = default_task_backend.get_result(result.id).return_value
    assert times["naive"] == [True, True, True]
    # Both in the project's time zone: not hours apart.
    assert 0 <= times["waited_s"] < 60, times
