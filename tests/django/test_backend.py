"""pgworkerd.contrib.django.PgworkerdBackend with Django itself, the example project
(examples/django_project) and `pgworkerd run`: enqueue in the caller's atomic block,
tasks run by the daemon (sync, async, with the ORM, failing, with context), results
read back, and a task of a module the config does not list never runs."""

from __future__ import annotations

import asyncio
import uuid
from datetime import timedelta

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.db import transaction
from django.tasks import TaskResultStatus, default_task_backend, task_backends
from django.tasks.exceptions import TaskResultDoesNotExist
from django.utils import timezone

import pgworkerd
from pgworkerd.contrib.django import PgworkerdBackend
from tests.daemon import job, wait_until


def finished(result, timeout_s: float = 30.0):
    """The result once its job is final, read back through the backend."""

    def read():
        result.refresh()
        return result if result.is_finished else None

    return wait_until(read, timeout_s=timeout_s, what=f"task {result.id} finished")


def test_the_backend_is_pgworkerds_with_every_capability(django_dsn):
    backend = task_backends["default"]
    assert isinstance(backend, PgworkerdBackend)
    assert backend.supports_defer and backend.supports_async_task
    assert backend.supports_get_result and backend.supports_priority


def test_the_check_framework_reports_a_database_missing_or_not_postgresql(django_dsn):
    """Found at the first enqueue only, before."""

    def check(database):
        params = {"QUEUES": [], "OPTIONS": {"database": database}}
        return [(m.id, m.msg) for m in PgworkerdBackend("b", params).check()]

    assert check("default") == []
    ((code, message),) = check("nope")
    assert code == "pgworkerd.E001" and "'nope' is not a database of DATABASES" in message
    assert [m.id for m in task_backends["default"].check()] == []


@pytest.mark.parametrize(
    ("options", "expected"),
    [
        ({"shema": "jobs"}, [("pgworkerd.E003", "unknown OPTIONS key 'shema'", "'schema'")]),
        ({"databse": "default"}, [("pgworkerd.E003", "key 'databse'", "'database'")]),
        ({"retries": 3}, [("pgworkerd.E003", "known ones: database, schema", None)]),
        ({"schema": "pg_jobs"}, [("pgworkerd.E004", "OPTIONS['schema'] 'pg_jobs': names", None)]),
        ({"schema": ""}, [("pgworkerd.E004", "'': must not be empty", None)]),
        ({"schema": 5}, [("pgworkerd.E004", "must be a schema name (text), got int", None)]),
    ],
)
def test_the_check_framework_reports_unknown_options_and_a_refused_schema(
    django_dsn, options, expected
):
    """Misspelt keys were ignored (the default schema or database used instead); a
    refused schema raised ValueError as the backend was made, in `manage.py check` too."""
    backend = PgworkerdBackend("b", {"QUEUES": [], "OPTIONS": options})
    found = [(m.id, m.msg, m.hint) for m in backend.check()]
    assert len(found) == len(expected), found
    for (code, message, hint), (want_code, want_text, want_hint) in zip(
        found, expected, strict=True
    ):
        assert code == want_code and want_text in message and message.startswith("TASKS['b']")
        assert (hint is None) if want_hint is None else (want_hint in hint)
    if expected[0][0] == "pgworkerd.E004":
        from shop.tasks import add

        with pytest.raises(ImproperlyConfigured, match=r"TASKS\['b'\]: OPTIONS\['schema'\]"):
            backend.enqueue(add, (1, 2), {})


def test_a_rolled_back_atomic_block_leaves_no_job(django_dsn, pg):
    from shop.tasks import add

    with pytest.raises(RuntimeError), transaction.atomic():
        dropped = add.enqueue(1, 2)
        # Inside the block, on Django's connection, the job is there; outside, not yet.
        assert default_task_backend.get_result(dropped.id).status == TaskResultStatus.READY
        outside = pg.execute(
            "SELECT count(*) FROM pgworkerd.jobs WHERE id = %s", (int(dropped.id),)
        )
        assert outside.fetchone()[0] == 0
        raise RuntimeError("the view failed")
    with pytest.raises(TaskResultDoesNotExist):
        default_task_backend.get_result(dropped.id)
    with transaction.atomic():
        kept = add.enqueue(2, 3)
    row = job(pg, int(kept.id))
    assert row["kind"] == "shop.tasks.add" and row["payload"] == {"args": [2, 3], "kwargs": {}}
    assert default_task_backend.get_result(kept.id).status == TaskResultStatus.READY


def test_priority_queue_and_run_after_become_the_jobs(django_dsn, pg):
    from shop.tasks import add

    later = timezone.now() + timedelta(hours=1)
    result = add.using(priority=42, queue_name="fragile", run_after=later).enqueue(1, 1)
    row = job(pg, int(result.id))
    assert (row["priority"], row["queue"], row["run_at"]) == (42, "fragile", later)


def test_an_unknown_id_does_not_exist(django_dsn, pg):
    not_a_task = pgworkerd.enqueue(pg, "send_email", {})  # a job, but not of a Django task
    for unknown in ("999999999", "not-a-number", str(not_a_task)):
        with pytest.raises(TaskResultDoesNotExist):
            default_task_backend.get_result(unknown)
    with pytest.raises(TaskResultDoesNotExist):
        asyncio.run(default_task_backend.aget_result("999999998"))


def test_an_id_beyond_bigint_does_not_exist_and_leaves_the_transaction_usable(django_dsn, pg):
    """Queried, it raised DataError (numeric out of range), which aborted the caller's
    atomic block: its next statement failed."""
    from shop.tasks import add

    beyond = ("99999999999999999999", "-99999999999999999999", str(2**63), str(-(2**63) - 1))
    with transaction.atomic():
        for unknown in beyond:
            with pytest.raises(TaskResultDoesNotExist):
                default_task_backend.get_result(unknown)
        kept = add.enqueue(4, 5)  # the block is still usable
    assert job(pg, int(kept.id))["payload"] == {"args": [4, 5], "kwargs": {}}
    with pytest.raises(TaskResultDoesNotExist):
        asyncio.run(default_task_backend.aget_result(beyond[0]))


def test_committed_tasks_run_in_pgworkerd_run(django_dsn, pg, django_daemon):
    from shop.models import Order, SignalLog
    from shop.tasks import add, explode, greet, send_receipt, which_attempt

    ref = f"order-{uuid.uuid4().hex[:8]}"
    with transaction.atomic():
        Order.objects.create(ref=ref)
        orm = send_receipt.enqueue(ref)
    plain = add.enqueue(2, 40)
    coroutine = asyncio.run(greet.aenqueue("ada", punctuation="?"))
    failing = explode.enqueue("boom")
    context = which_attempt.enqueue()
    django_daemon()

    assert finished(plain).return_value == 42
    assert finished(coroutine).return_value == "hello ada?"
    # pgworkerd's own result API reads the same values.
    assert pgworkerd.result(pg, int(plain.id)) == 42
    assert pgworkerd.result(pg, int(coroutine.id)) == "hello ada?"
    done = finished(orm)
    assert done.return_value == Order.objects.get(ref=ref).pk
    assert Order.objects.get(ref=ref).receipt_sent
    assert finished(context).return_value == 1

    failed = finished(failing)
    assert failed.status == TaskResultStatus.FAILED
    (error,) = failed.errors
    assert error.exception_class is ValueError
    assert "Traceback" in error.traceback and "ValueError: boom" in error.traceback
    with pytest.raises(ValueError, match="Task failed"):
        failed.return_value  # noqa: B018 - Django raises on a failed task's return value

    for result in (done, failed):
        assert result.worker_ids and result.attempts == 1
        assert result.started_at is not None and result.finished_at >= result.started_at
        assert result.enqueued_at <= result.started_at
        logged = list(SignalLog.objects.filter(task_id=result.id).values_list("signal", "status"))
        assert logged == [("started", "RUNNING"), ("finished", result.status.value)]
    assert asyncio.run(default_task_backend.aget_result(plain.id)).return_value == 42


def test_a_task_of_a_module_the_config_does_not_list_ends_dead_without_running(
    django_dsn, pg, django_daemon
):
    from shop.models import Order
    from shop.unlisted_tasks import never

    ref = f"never-{uuid.uuid4().hex[:8]}"
    result = never.enqueue(ref)
    django_daemon()
    wait_until(lambda: job(pg, int(result.id))["state"] == "dead", what="the job dead")
    assert "no handler" in job(pg, int(result.id))["last_error"]
    assert not Order.objects.filter(ref=ref).exists()
    assert default_task_backend.get_result(result.id).status == TaskResultStatus.FAILED


def test_a_cancelled_job_reads_as_failed_with_a_cancel_error(django_dsn, pg):
    from shop.tasks import add

    result = add.using(run_after=timezone.now() + timedelta(hours=1)).enqueue(1, 1)
    pgworkerd.cancel(pg, int(result.id))
    read = default_task_backend.get_result(result.id)
    assert read.status == TaskResultStatus.FAILED
    assert [e.exception_class_path for e in read.errors] == ["pgworkerd.job.JobCancelled"]


def test_arguments_nested_too_deep_are_refused_and_a_stored_one_reads_clearly(django_dsn, pg):
    """Review 24, F2: enqueue's depth bound holds for a task's arguments (normalize_json
    recursed into RecursionError past Python's limit), and a job of a task whose payload
    is too deep to decode (written by SQL) is not read as a RecursionError."""
    from shop.tasks import add

    for depth in (150, 100_000):
        deep: list[object] = []
        for _ in range(depth):
            deep = [deep]
        with pytest.raises(pgworkerd.InvalidJob, match="nested more than 100 levels deep"):
            add.enqueue(deep, 1)
    job_id = pg.execute(
        "INSERT INTO pgworkerd.jobs (queue, kind, payload) VALUES ('default', %s, %s::jsonb)"
        " RETURNING id",
        (add.module_path, '{"args": ' + "[" * 5000 + "]" * 5000 + "}"),
    ).fetchone()[0]
    with pytest.raises(TaskResultDoesNotExist, match="could not be decoded: nested too deeply"):
        default_task_backend.get_result(str(job_id))
