"""Django (extra `django`): a `django.tasks` backend that enqueues pgworkerd jobs, and
what the daemon runs them with (config `django: {settings: ..., tasks: [...]}`).

```python
TASKS = {"default": {"BACKEND": "pgworkerd.contrib.django.PgworkerdBackend",
                     "QUEUES": [],  # empty: any queue
                     "OPTIONS": {"schema": "pgworkerd", "database": "default"}}}
```

A task's job: kind = the task's `module_path`, queue = its `queue_name`, priority = its
`priority` (Django's -100..100 is within pgworkerd's range: higher first in both),
`run_at` = its `run_after`, payload `{"args": [...], "kwargs": {...}}`. The job is
written on Django's own connection of the configured database, so it commits or rolls
back with the caller's `transaction.atomic()` (in autocommit, at once).

Statuses, from the job's state (docs/django.md): queued and waiting -> READY (a job
waiting for its next attempt too: `errors` holds the failed ones); running -> RUNNING;
succeeded -> SUCCESSFUL; dead -> FAILED; cancelled -> FAILED, with a last error of class
`pgworkerd.job.JobCancelled` (Django has no cancelled status).

This module imports Django: pgworkerd imports it only where Django is used, in the
application (TASKS names it) and in the daemon's workers after the fork
(pgworkerd/handlers.py, `child_loader`).
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import difflib
import functools
import importlib
import inspect
import json
import logging
import os
import re
import socket
import sys
import traceback
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import django
import psycopg
from asgiref.sync import sync_to_async
from django.conf import settings
from django.core import checks
from django.core.exceptions import ImproperlyConfigured
from django.db import DEFAULT_DB_ALIAS, close_old_connections, connections
from django.tasks.backends.base import BaseTaskBackend
from django.tasks.base import Task, TaskContext, TaskError, TaskResult, TaskResultStatus
from django.tasks.exceptions import TaskResultDoesNotExist
from django.tasks.signals import task_enqueued, task_finished, task_started
from django.utils import timezone
from django.utils.json import normalize_json

from pgworkerd.client.producer import BIGINT_MAX, Producer
from pgworkerd.encoding import (
    MAX_PAYLOAD_DEPTH,
    RESULT_OMITTED,
    UNDECODABLE,
    EncodedResult,
    Undecodable,
    encode_result,
)
from pgworkerd.errors import InvalidJob
from pgworkerd.job import Discard, Job, JobCancelled, JobTimeout, PauseKey, Retry, Snooze
from pgworkerd.storage import migrations
from pgworkerd.storage.connections import json_loads
from pgworkerd.storage.schema_names import schema_name_problem
from pgworkerd.storage.store import DEFAULT_SCHEMA, JobStore
from pgworkerd.worker.execution import ERROR_TEXT

STATUSES = {
    "queued": TaskResultStatus.READY,
    "waiting": TaskResultStatus.READY,
    "running": TaskResultStatus.RUNNING,
    "succeeded": TaskResultStatus.SUCCESSFUL,
    "dead": TaskResultStatus.FAILED,
    "cancelled": TaskResultStatus.FAILED,
}
CANCELLED_CLASS = "pgworkerd.job.JobCancelled"
# The keys of a backend's OPTIONS (docs/django.md); any other is reported by check().
OPTIONS = ("database", "schema")


class PgworkerdBackend(BaseTaskBackend):  # type: ignore[misc]  # Django ships no types
    """`django.tasks` on pgworkerd: retries, runtime kills, cancel, limits, cron."""

    supports_defer = True
    supports_async_task = True
    supports_get_result = True
    supports_priority = True

    def __init__(self, alias: str, params: dict[str, Any]) -> None:
        super().__init__(alias, params)
        self.schema: str = self.options.get("schema", DEFAULT_SCHEMA)
        self.database: str = self.options.get("database", DEFAULT_DB_ALIAS)

    # Made at first use, not in __init__: a schema name pgworkerd refuses raised
    # ValueError there, so that `manage.py check` (which builds every backend to call
    # its check) ended on a traceback instead of reporting it (pgworkerd.E004).
    @functools.cached_property
    def producer(self) -> Producer:
        return Producer(schema=self._checked_schema())

    @functools.cached_property
    def store(self) -> JobStore:
        return JobStore(self._checked_schema())

    def _checked_schema(self) -> str:
        problem = _schema_problem(self.schema)
        if problem is not None:
            raise ImproperlyConfigured(f"TASKS[{self.alias!r}]: {problem}")
        return self.schema

    def check(self, **kwargs: Any) -> list[checks.CheckMessage]:
        """`manage.py check` (Django's check framework calls each backend's): a
        database that is not in DATABASES, or not PostgreSQL on psycopg 3, was found at
        the first enqueue only; an unknown OPTIONS key (a typo, `shema`) or a schema
        name pgworkerd refuses, never or by a traceback. Nothing connects."""
        where = f"TASKS[{self.alias!r}]"
        return self._option_errors(where) + self._database_errors(where)

    def _option_errors(self, where: str) -> list[checks.CheckMessage]:
        errors = []
        for key in sorted(set(self.options) - set(OPTIONS), key=str):
            close = difflib.get_close_matches(str(key), OPTIONS, n=1)
            errors.append(
                checks.Error(
                    f"{where}: unknown OPTIONS key {key!r} (the known ones: {', '.join(OPTIONS)})",
                    hint=f"did you mean {close[0]!r}?" if close else None,
                    id="pgworkerd.E003",
                )
            )
        problem = _schema_problem(self.schema)
        if problem is not None:
            errors.append(checks.Error(f"{where}: {problem}", id="pgworkerd.E004"))
        return errors

    def _database_errors(self, where: str) -> list[checks.CheckMessage]:
        if self.database not in connections.settings:
            return [
                checks.Error(
                    f"{where}: OPTIONS['database'] {self.database!r} is not a database of "
                    "DATABASES",
                    id="pgworkerd.E001",
                )
            ]
        engine = connections.settings[self.database].get("ENGINE", "")
        if connections[self.database].vendor != "postgresql" or not _psycopg3():
            return [
                checks.Error(
                    f"{where}: database {self.database!r} must use "
                    "django.db.backends.postgresql with psycopg 3 (pgworkerd joins its "
                    f"transactions), not {engine}"
                    + ("" if engine != "django.db.backends.postgresql" else " on psycopg2"),
                    id="pgworkerd.E002",
                )
            ]
        return []

    def enqueue(self, task: Task, args: Sequence[Any], kwargs: dict[str, Any]) -> TaskResult:
        self.validate_task(task)  # Django's own checks first
        options: dict[str, Any] = {"queue": task.queue_name, "priority": task.priority}
        if task.run_after is not None:
            run_at = task.run_after
            if timezone.is_naive(run_at):  # USE_TZ = False: the project's time zone
                run_at = timezone.make_aware(run_at)
            options["run_at"] = run_at
        try:
            payload = {"args": normalize_json(list(args)), "kwargs": normalize_json(kwargs)}
        except RecursionError:  # normalize_json recurses: far over the producer's bound
            raise InvalidJob(
                f"the task's arguments are nested more than {MAX_PAYLOAD_DEPTH} levels deep"
            ) from None
        with self._psycopg() as connection:
            job_id = self.producer.enqueue(connection, task.module_path, payload, **options)
        result = TaskResult(
            task=task,
            id=str(job_id),
            status=TaskResultStatus.READY,
            enqueued_at=timezone.now(),
            started_at=None,
            last_attempted_at=None,
            finished_at=None,
            args=payload["args"],
            kwargs=payload["kwargs"],
            backend=self.alias,
            errors=[],
            worker_ids=[],
        )
        task_enqueued.send(type(self), task_result=result)
        return result

    def get_result(self, result_id: str) -> TaskResult:
        try:
            job_id = int(result_id)
        except (TypeError, ValueError):
            raise TaskResultDoesNotExist(result_id) from None
        if not -BIGINT_MAX - 1 <= job_id <= BIGINT_MAX:
            # Past bigint no job can have it; queried, it raised DataError (numeric out
            # of range) and aborted the caller's transaction.
            raise TaskResultDoesNotExist(result_id)
        with self._psycopg() as connection:
            row = self.store.get(connection, job_id)
        if row is None:
            raise TaskResultDoesNotExist(result_id)
        return self._result_of(row)

    # aget_result and aenqueue: BaseTaskBackend's, which run these in Django's
    # thread-sensitive executor, on the thread whose connection holds the transaction.

    @contextlib.contextmanager
    def _psycopg(self) -> Iterator[psycopg.Connection[Any]]:
        """Django's psycopg connection of the configured database, in its transaction,
        used as Django's own cursors use it: a connection that fails its health check is
        replaced first, and an error of the statements run in the block is Django's
        (`django.db.DatabaseError`) and marks the connection (`errors_occurred`), so that
        `close_old_connections()` discards a broken one. Without these, a connection the
        server dropped was kept, and every later enqueue of the process failed on it."""
        wrapper = connections[self.database]
        wrapper.close_if_health_check_failed()
        wrapper.ensure_connection()
        raw = wrapper.connection
        if not isinstance(raw, psycopg.Connection):
            raise ImproperlyConfigured(
                f"TASKS[{self.alias!r}]: database {self.database!r} must use "
                "django.db.backends.postgresql with psycopg 3 (pgworkerd joins its "
                f"transactions), not {type(raw).__module__}"
            )
        with wrapper.wrap_database_errors:
            yield raw

    def _result_of(self, row: dict[str, Any]) -> TaskResult:
        task = _imported_task(row["kind"])
        if task is None:
            raise TaskResultDoesNotExist(
                f"{row['id']} is not a job of a Django task this process has imported"
            )
        payload = _json(row["payload"])
        if isinstance(payload, Undecodable):
            raise TaskResultDoesNotExist(
                f"{row['id']}: its payload could not be decoded: {payload[UNDECODABLE]}"
            )
        arguments = _arguments(payload)
        if arguments is None:
            raise TaskResultDoesNotExist(
                f"{row['id']} is not a job of a Django task: its payload is not {PAYLOAD_SHAPE}"
            )
        args, kwargs = arguments
        errors = [_task_error(entry["error"]) for entry in _json(row["errors"]) or []]
        if row["state"] == "cancelled":
            errors.append(TaskError(exception_class_path=CANCELLED_CLASS, traceback="cancelled"))
        # pgworkerd keeps the worker of the latest attempt only; it stands for each
        # attempt, so that `attempts` is the job's count of starts.
        worker_ids = [row["worker"]] * row["attempt"] if row["worker"] else []
        result = TaskResult(
            task=task,
            id=str(row["id"]),
            status=STATUSES[row["state"]],
            enqueued_at=_as_djangos(row["created_at"]),
            started_at=_as_djangos(row["started_at"]),
            last_attempted_at=_as_djangos(row["started_at"]),
            finished_at=_as_djangos(row["finished_at"]),
            args=args,
            kwargs=kwargs,
            backend=self.alias,
            errors=errors,
            worker_ids=worker_ids,
        )
        value = _json(row["result"]) if row["state"] == "succeeded" else None
        if isinstance(value, Undecodable):  # too deep to decode: not the task's value
            object.__setattr__(result, "status", TaskResultStatus.FAILED)
            why = f"the task's return value could not be decoded: {value[UNDECODABLE]}"
            errors.append(TaskError(exception_class_path=_class_path(ResultNotKept), traceback=why))
        elif isinstance(value, dict) and set(value) == {RESULT_OMITTED}:
            # The worker kept a marker in place of the return value (a job run before
            # ResultNotKept, or enqueued by other code): not the task's value.
            object.__setattr__(result, "status", TaskResultStatus.FAILED)
            why = f"the task's return value was not kept: {value[RESULT_OMITTED]}"
            errors.append(TaskError(exception_class_path=_class_path(ResultNotKept), traceback=why))
        elif row["state"] == "succeeded":
            object.__setattr__(result, "_return_value", value)
        return result


def _schema_problem(schema: Any) -> str | None:
    """Why OPTIONS['schema'] cannot be pgworkerd's schema (the check every way of naming
    it goes through, storage/schema_names.py), or None."""
    if not isinstance(schema, str):
        return f"OPTIONS['schema'] must be a schema name (text), got {type(schema).__name__}"
    problem = schema_name_problem(schema)
    return None if problem is None else f"OPTIONS['schema'] {schema!r}: {problem}"


def _imported_task(kind: str) -> Task | None:
    """The task a job's kind names, among the modules this process has imported; None
    for any other kind. Nothing is imported: a job's kind (written by anyone who can
    enqueue) never chooses an import path (docs/design.md, promise 7). It was
    import_string(kind), which imported whatever module the kind named."""
    module_name, _, name = kind.rpartition(".")
    module = sys.modules.get(module_name) if module_name else None
    if module is None:
        return None
    task = getattr(module, name, None)
    if isinstance(task, Task) and task.module_path == kind:
        return task
    # A task bound under another name than its function's (`send_email_task =
    # task(send_email)`): its kind is the function's path, and the worker's registry,
    # which looks at every task of the module, runs it; found the same way here, else
    # its result could never be read.
    return _module_tasks(module).get(kind)


def _module_tasks(module: Any) -> dict[str, Task]:
    """The module's own tasks by kind (`module_path`): a task it imports from another
    module (whose kind names that module) is not its own (docs/django.md)."""
    return {
        value.module_path: value
        for value in vars(module).values()
        if isinstance(value, Task) and value.func.__module__ == module.__name__
    }


PAYLOAD_SHAPE = '{"args": [...], "kwargs": {...}}'


def _arguments(payload: Any) -> tuple[list[Any], dict[str, Any]] | None:
    """A Django task's job payload as its args and kwargs; None for any other shape.
    A key may be left out (a periodic entry's `{args: [1, 2]}`); another key (a typo,
    `kwarg`) is refused, not ignored."""
    if not isinstance(payload, dict) or not set(payload) <= {"args", "kwargs"}:
        return None
    args, kwargs = payload.get("args", []), payload.get("kwargs", {})
    if not isinstance(args, list) or not isinstance(kwargs, dict):
        return None
    return args, kwargs


def _short(value: Any) -> str:
    text = json.dumps(value)
    return text if len(text) <= 200 else f"{text[:200]}..."


def _json(value: Any) -> Any:
    # Django's psycopg connection loads jsonb as text (its JSONField decodes it):
    # decoded as pgworkerd's own connections decode it (a marker for a value too deep).
    return json_loads(value) if isinstance(value, str) else value


_CLASS_PATH = re.compile(r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+")
_INTERRUPTIONS = {"JobTimeout": JobTimeout, "JobCancelled": JobCancelled}


def _task_error(text: str) -> TaskError:
    """A kept error as Django's TaskError. The worker writes a task's exception with its
    class's import path first, `module.Qualname: message` (see _name_the_class); a
    runtime kill or a cancel begins with `JobTimeout` or `JobCancelled`. Any other text
    (an error kept before, a handler's Discard) is read from its last line, as Python
    ends a traceback: `module.Class: message` (`Class: message` for a builtin)."""
    lines = text.strip().splitlines()
    first = lines[0] if lines else ""
    for name, kind in _INTERRUPTIONS.items():
        if first == name or first.startswith(f"{name}:"):
            return TaskError(exception_class_path=_class_path(kind), traceback=text)
    head = first.partition(":")[0]
    if _CLASS_PATH.fullmatch(head):
        return TaskError(exception_class_path=head, traceback=text)
    head = lines[-1].partition(":")[0].strip() if lines else ""
    if not head or " " in head:
        head = "Exception"
    path = head if "." in head else f"builtins.{head}"
    return TaskError(exception_class_path=path, traceback=text)


def _psycopg3() -> bool:
    from django.db.backends.postgresql.psycopg_any import is_psycopg3

    return bool(is_psycopg3)


def migrate_schemas(using: str = DEFAULT_DB_ALIAS) -> list[str]:
    """Create pgworkerd's schema, or bring it up to date, for each `PgworkerdBackend` of
    TASKS whose database is `using`, on Django's connection of that database; returns
    the schemas that had migrations applied. What the app
    `pgworkerd.contrib.django_schema` runs after each `migrate` (Django's test runner's
    too); call it yourself where that app is not installed."""
    from django.tasks import task_backends

    on_using = [
        backend
        for backend in task_backends.all()
        if isinstance(backend, PgworkerdBackend) and backend.database == using
    ]
    applied: list[str] = []
    for schema in sorted({backend.schema for backend in on_using}):
        backend = next(b for b in on_using if b.schema == schema)
        with backend._psycopg() as connection:
            if migrations.migrate(connection, schema):
                applied.append(schema)
    return applied


def _name_the_class(exc: BaseException) -> None:
    """Have the worker record a task's exception as `module.Qualname: its message's
    first line`, then its traceback. Read from the traceback's last line, the class was
    wrong for a message of several lines, a note (add_note), an ExceptionGroup, and a
    traceback past the 4000 characters each kept error is cut to. The control-flow
    exceptions (Retry, Snooze, PauseKey, Discard) and JobTimeout, JobCancelled keep the
    worker's own texts."""
    if not isinstance(exc, Exception) or isinstance(exc, Retry | Snooze | PauseKey | Discard):
        return
    try:
        message = str(exc).strip().partition("\n")[0]
    except Exception:
        message = ""
    first = f"{_class_path(type(exc))}: {message}" if message else _class_path(type(exc))
    with contextlib.suppress(AttributeError):  # an exception that takes no attribute
        setattr(exc, ERROR_TEXT, f"{first}\n" + "".join(traceback.format_exception(exc)))


# -- the daemon's side: the workers run the listed modules' tasks ----------------------------

Handler = Callable[[Job], Any]

# How long an async task stopped by max_runtime or a cancel waits for its task_finished
# receivers: well within the 3 s grace before the worker is killed
# (pgworkerd/supervisor/ledger.py, SOFT_TIMEOUT_GRACE_S and CANCEL_GRACE_S).
INTERRUPTED_SIGNAL_S = 1.0


def worker_registry(
    settings_module: str, modules: Sequence[str], worker_id: str | None = None
) -> dict[str, Handler]:
    """In a worker child, after the fork: set Django up with `settings_module`, import
    `modules` and return kind (`module_path`) -> handler for each of their tasks.
    `worker_id` is the id the worker writes into the jobs' `worker` column, which
    get_result reads: the tasks' TaskContext and signals see the same (they saw
    host:pid of the child, another id for the same attempt).

    In a process where Django is set up already (a test suite calling
    pgworkerd.testing.drain), that set-up is kept: its settings, and its logging, which
    a second django.setup() would configure again under the test runner's."""
    if not _django_is_set_up():
        os.environ["DJANGO_SETTINGS_MODULE"] = settings_module  # the config's, whatever was set
        logger = logging.getLogger("pgworkerd")
        kept = (list(logger.handlers), logger.level, logger.propagate)
        django.setup()
        _keep_pgworkerd_logging(logger, *kept)
    if worker_id is None:  # pgworkerd check: no worker
        worker_id = f"{socket.gethostname()}:{os.getpid()}"
    registry: dict[str, Handler] = {}
    for module_name in modules:
        module = importlib.import_module(module_name)
        for kind, task in _module_tasks(module).items():
            registry[kind] = _handler(task, worker_id)
    return registry


def _django_is_set_up() -> bool:
    from django.apps import apps

    return bool(apps.ready)


def _keep_pgworkerd_logging(
    logger: logging.Logger, handlers: list[logging.Handler], level: int, propagate: bool
) -> None:
    """Undo what the project's LOGGING did to pgworkerd's own loggers in django.setup().

    dictConfig's `disable_existing_loggers` (True unless LOGGING says False) disabled
    every logger not named in LOGGING, pgworkerd's among them: the worker logged no line
    at all (no job started, failed, no error). pgworkerd's loggers are enabled again,
    and the handler `pgworkerd run` set (pgworkerd/logs.py, setup) put back, unless
    LOGGING configures a pgworkerd logger itself (then it is the project's choice)."""
    for name, each in logging.root.manager.loggerDict.items():
        if (name == "pgworkerd" or name.startswith("pgworkerd.")) and isinstance(
            each, logging.Logger
        ):
            each.disabled = False
    configured = getattr(settings, "LOGGING", None) or {}
    named = configured.get("loggers", {}) if isinstance(configured, dict) else {}
    if any(name == "pgworkerd" or name.startswith("pgworkerd.") for name in named):
        return
    logger.handlers[:] = handlers
    logger.setLevel(level)
    logger.propagate = propagate


def _handler(task: Task, worker_id: str) -> Handler:
    """The job's handler: Django's connections closed around it as a request cycle does,
    the signals sent, the task called with the job's arguments, its value returned
    encoded (an EncodedResult, which the worker stores as it is); a coroutine function
    stays one (the worker runs it on its event loop)."""
    if inspect.iscoroutinefunction(task.func):

        @functools.wraps(task.func)
        async def run_async(job: Job) -> Any:
            result = _running(task, job, worker_id)
            await sync_to_async(close_old_connections)()
            await task_started.asend(PgworkerdBackend, task_result=result)
            interrupted = False
            try:
                # normalize_json inside the try: a value that is not JSON is a failure
                # like any, with its task_finished signal.
                value, encoded = _kept(await task.acall(*_call_args(task, result), **result.kwargs))
            except (asyncio.CancelledError, JobTimeout, JobCancelled) as exc:
                # Stopped (max_runtime, a cancel) while its sync work (an ORM call via
                # sync_to_async) may still run in asgiref's thread-sensitive executor: a
                # signal's sync receivers and close_old_connections() would queue behind
                # it, outlast the grace and get the whole worker SIGKILLed. The signal is
                # given INTERRUPTED_SIGNAL_S; the connections are left to the next task's
                # close_old_connections(), which runs in that thread after the work.
                interrupted = True
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(
                        task_finished.asend(PgworkerdBackend, task_result=_failed(result, exc)),
                        INTERRUPTED_SIGNAL_S,
                    )
                raise
            except BaseException as exc:
                # In the sync thread, where its connections are: one left not idle.
                await sync_to_async(_close_interrupted_connections)(exc)
                await task_finished.asend(PgworkerdBackend, task_result=_failed(result, exc))
                _name_the_class(exc)
                raise
            finally:
                if not interrupted:
                    await sync_to_async(close_old_connections)()
            await task_finished.asend(PgworkerdBackend, task_result=_succeeded(result, value))
            return encoded

        return run_async

    @functools.wraps(task.func)
    def run(job: Job) -> Any:
        result = _running(task, job, worker_id)
        close_old_connections()
        task_started.send(PgworkerdBackend, task_result=result)
        try:
            value, encoded = _kept(task.call(*_call_args(task, result), **result.kwargs))
        except BaseException as exc:
            _close_interrupted_connections(exc)
            task_finished.send(PgworkerdBackend, task_result=_failed(result, exc))
            _name_the_class(exc)
            raise
        finally:
            close_old_connections()
        task_finished.send(PgworkerdBackend, task_result=_succeeded(result, value))
        return encoded

    return run


class ResultNotJSON(Discard):
    """The task returned a value that is not JSON (Django's `normalize_json` refused it).

    A Discard: the job ends `dead` (FAILED) at once. A failure retried would run the
    task's work again for a value that would be refused again, the work's side effects
    with it. The reason's last line is the refusal, `TypeError: ...`, so that the kept
    error reads as that class."""

    def __init__(self, error: Exception) -> None:
        super().__init__(
            "the task ran, but its return value is not JSON: the job ends failed, not "
            "retried (a retry would run the task's work again)\n"
            + "".join(traceback.format_exception_only(error)).strip()
        )
        self.error = error


class ResultNotKept(Discard):
    """The task returned JSON that pgworkerd cannot keep as it is (a NaN or an infinity,
    over MAX_RESULT_BYTES of JSON): the worker would store a marker,
    `{"pgworkerd_result_omitted": "..."}`, in its place, and the task read as SUCCESSFUL
    with that marker as its return value. A Discard, as ResultNotJSON: FAILED at once,
    not retried."""

    def __init__(self, why: str) -> None:
        super().__init__(
            "the task ran, but its return value cannot be kept: the job ends failed, not "
            f"retried (a retry would run the task's work again)\n{_class_path(ResultNotKept)}: "
            + why
        )


# How a result that dump_result could not keep begins (encoding._omitted).
_OMITTED_PREFIX = json.dumps({RESULT_OMITTED: ""})[:-2]


def _kept(returned: Any) -> tuple[Any, EncodedResult]:
    """What a task returned, as Django normalises it (the value task_finished reports)
    and as the worker stores it: encoded here, once, and handed to the worker, which
    writes that text as it is. ResultNotJSON for a value normalize_json refuses,
    ResultNotKept for one the encoding replaced by pgworkerd's marker (a task's own
    dict of that one key would read as the marker too: refused alike)."""
    try:
        value = normalize_json(returned)
    except (TypeError, ValueError, RecursionError) as exc:
        raise ResultNotJSON(exc) from exc
    encoded = encode_result(value)
    stored = encoded.text
    if stored is not None and stored.startswith(_OMITTED_PREFIX):
        kept = json.loads(stored)
        if set(kept) == {RESULT_OMITTED}:
            raise ResultNotKept(str(kept[RESULT_OMITTED]))
    return value, encoded


def _class_path(kind: type) -> str:
    return f"{kind.__module__}.{kind.__qualname__}"


def _close_interrupted_connections(exc: BaseException) -> None:
    """Close this thread's Django connections that the task's end left unusable.

    JobTimeout and JobCancelled are raised at the task's next Python instruction, which
    may be inside psycopg between sending a query and reading its result: the
    connection is then mid-command, and close_old_connections() keeps it (nothing marked
    it broken), so the next task of the thread failed with "another command is already
    in progress". Any other exception that left a connection not idle (a command or a
    transaction still open) is handled alike."""
    interrupted = isinstance(exc, JobTimeout | JobCancelled)
    for wrapper in connections.all(initialized_only=True):
        raw = wrapper.connection
        if raw is None:
            continue
        if interrupted or not _idle(raw):
            wrapper.close()


def _idle(raw: Any) -> bool:
    # A psycopg connection tells its state; another backend's cannot: kept as Django's
    # own close_old_connections() would keep it.
    if not isinstance(raw, psycopg.Connection):
        return True
    return bool(raw.info.transaction_status == psycopg.pq.TransactionStatus.IDLE)


def _call_args(task: Task, result: TaskResult) -> list[Any]:
    """The positional arguments: the TaskContext first for a task that takes it."""
    context = [TaskContext(task_result=result)] if task.takes_context else []
    return [*context, *result.args]


def _running(task: Task, job: Job, worker_id: str) -> TaskResult:
    arguments = _arguments(job.payload)
    if arguments is None:
        # A payload enqueued by other code (pgworkerd.enqueue, a periodic entry) that
        # Django could not have written: the task was called with no or wrong arguments
        # (or not at all, and get_result failed on it). It never will be: dead at once.
        raise Discard(
            f"the payload of Django task {task.module_path} must be {PAYLOAD_SHAPE}, "
            f"not {_short(job.payload)}"
        )
    args, kwargs = arguments
    now = timezone.now()
    result = TaskResult(
        task=task,
        id=str(job.id),
        status=TaskResultStatus.RUNNING,
        enqueued_at=_as_djangos(job.created_at),
        started_at=now,
        last_attempted_at=now,
        finished_at=None,
        args=args,
        kwargs=kwargs,
        backend=task.backend,
        errors=[],
        worker_ids=[worker_id] * job.attempt,  # so that TaskContext.attempt is the attempt
    )
    return result


def _as_djangos(moment: datetime.datetime | None) -> datetime.datetime | None:
    """A time as Django's own are: aware with USE_TZ, else naive in the project's time
    zone. A job's times read on pgworkerd's connection (the worker's) are aware: beside
    timezone.now()'s naive ones, `started_at - enqueued_at` raised TypeError."""
    if moment is None or settings.USE_TZ or timezone.is_naive(moment):
        return moment
    naive: datetime.datetime = timezone.make_naive(moment)
    return naive


def _failed(result: TaskResult, exc: BaseException) -> TaskResult:
    object.__setattr__(result, "status", TaskResultStatus.FAILED)
    object.__setattr__(result, "finished_at", timezone.now())
    if isinstance(exc, ResultNotJSON):
        exc = exc.error  # the signal names the refusal (as Django's ImmediateBackend does)
    kind = type(exc)
    result.errors.append(
        TaskError(
            exception_class_path=f"{kind.__module__}.{kind.__qualname__}",
            traceback="".join(traceback.format_exception(exc)),
        )
    )
    return result


def _succeeded(result: TaskResult, value: Any) -> TaskResult:
    object.__setattr__(result, "status", TaskResultStatus.SUCCESSFUL)
    object.__setattr__(result, "finished_at", timezone.now())
    object.__setattr__(result, "_return_value", value)
    return result
