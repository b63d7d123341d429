"""Handlers by import path: `package.module:function` (or `package.module.function`),
and the `@pgworkerd.task` functions of the modules the config lists under `task_modules`.

Only paths and modules named in the config file are imported, once, in the supervisor
before any fork; a job's kind only ever selects among them (never an import path of its
own).
"""

from __future__ import annotations

import functools
import importlib
from collections.abc import Callable, Iterable, Mapping
from importlib.util import find_spec
from typing import Any, cast

from pgworkerd.client.tasks import Task
from pgworkerd.config.settings import Config, DjangoConfig
from pgworkerd.contrib import otel_worker
from pgworkerd.errors import PgworkerdError, mask_passwords

Handler = Callable[..., Any]


class HandlerError(PgworkerdError):
    """A configured handler cannot be used. `problems` holds one line per handler."""

    def __init__(self, problems: list[str]) -> None:
        # A line quotes the handler's path: a database URL put there keeps no password
        # (the CLI masks its lines, but a HUP's refusal is logged from these).
        problems = [mask_passwords(problem) for problem in problems]
        super().__init__("; ".join(problems))
        self.problems = problems


def resolve(path: str) -> Handler:
    """Import the callable that `path` names (a `@pgworkerd.task`'s function, not the
    Task); ImportError/AttributeError/TypeError
    (or whatever the module raises on import) propagate to the caller."""
    if ":" in path:
        module_name, _, attribute = path.partition(":")
    else:
        module_name, _, attribute = path.rpartition(".")
    target: Any = importlib.import_module(module_name)
    for part in attribute.split("."):
        target = getattr(target, part)
    if isinstance(target, Task):
        # Its plain function, as task_modules gives: the worker tells a coroutine
        # function from a plain one (and its CONSUMER span wraps one or the other) by
        # inspecting the handler, and a Task object is neither.
        return target.fn
    if not callable(target):
        raise TypeError(f"{type(target).__name__} is not callable")
    return cast(Handler, target)


def load_registry(
    handlers: Mapping[str, str], task_modules: Iterable[str] = ()
) -> dict[str, Handler]:
    """kind -> callable for every configured handler and every task of the listed
    modules, or HandlerError naming each kind, path or module that failed, and why (a
    kind claimed twice is one of those)."""
    registry: dict[str, Handler] = {}
    problems = []
    for kind, path in handlers.items():
        try:
            registry[kind] = resolve(path)
        except BaseException as exc:
            if isinstance(exc, KeyboardInterrupt):
                raise
            problems.append(f"handlers.{kind}: cannot use {path!r}: {_reason(exc)}")
    claimed_by = dict.fromkeys(handlers, "handlers")
    for index, module_name in enumerate(task_modules):
        where = f"task_modules[{index}]"
        try:
            tasks = tasks_of(module_name)
        except BaseException as exc:
            if isinstance(exc, KeyboardInterrupt):
                raise
            problems.append(
                f"{where}: cannot import {module_name!r}: {_reason(exc)}{_before_django(exc)}"
            )
            continue
        if not tasks:
            problems.append(f"{where}: {module_name!r} defines no @pgworkerd.task")
        for task in tasks:
            if registry.get(task.kind) is task.fn:
                continue  # the same task, listed through two modules
            if task.kind in claimed_by:
                problems.append(
                    f"{where}: kind {task.kind!r} of {module_name!r} is already claimed by "
                    f"{claimed_by[task.kind]}"
                )
                continue
            claimed_by[task.kind] = where
            # The plain function, not the Task: the worker tells a coroutine function
            # from a plain one by inspecting what the registry holds.
            registry[task.kind] = task.fn
    if problems:
        raise HandlerError(problems)
    # With the `otel` extra, each handler runs in its CONSUMER span; without it, bare.
    return otel_worker.instrument(registry)


def tasks_of(module_name: str) -> list[Task[Any]]:
    """The distinct tasks a module holds at its top level, in definition order (a task
    imported into it from another module is listed there too: the config named it)."""
    module = importlib.import_module(module_name)
    found: dict[int, Task[Any]] = {}
    for value in vars(module).values():
        if isinstance(value, Task):
            found.setdefault(id(value), value)
    return list(found.values())


def _before_django(exc: BaseException) -> str:
    """A hint for a task module that needs Django set up as it is imported (models at its
    top level: AppRegistryNotReady; settings read: ImproperlyConfigured). task_modules
    are imported by the supervisor, which never sets Django up: each worker does, after
    the fork (`django:`), before importing the modules of `django.tasks` only."""
    if type(exc).__module__ != "django.core.exceptions" or type(exc).__name__ not in (
        "AppRegistryNotReady",
        "ImproperlyConfigured",
    ):
        return ""
    return (
        " (task_modules are imported before Django is set up, which each worker does "
        "after the fork: import models inside the handler, or make it a Django @task in "
        "a module of django.tasks)"
    )


def _reason(exc: BaseException) -> str:
    reason = " ".join(str(exc).split()) or type(exc).__name__
    return f"{type(exc).__name__}: {reason}"


def check_periodic_kinds(
    config: Config, registry: Mapping[str, Handler], *, with_django: bool = False
) -> None:
    """HandlerError for each periodic entry whose kind has no handler in `registry`.
    With `django:`, a kind may be a Django task's, known only after the fork: unless
    `registry` holds Django's too (`with_django`, in `check`), the check is left to the
    worker (a job of a kind no worker has ends `dead`, as any)."""
    if config.django is not None and not with_django:
        return
    problems = [
        f"periodic[{index}].kind: {entry.kind!r} is neither under handlers nor a task of "
        "task_modules" + (" or django.tasks" if config.django is not None else "")
        for index, entry in enumerate(config.periodic)
        if entry.kind not in registry
    ]
    if problems:
        raise HandlerError(problems)


# -- handlers a worker child loads after its fork (Django's) --------------------------------

# Called with the worker's id (the jobs' `worker` column), None in `pgworkerd check`.
ChildLoader = Callable[[str | None], dict[str, Handler]]


def check_child_modules(config: Config) -> None:
    """HandlerError unless the top-level packages of the `django:` modules exist. Found
    without importing anything: Django is set up in the workers only, after the fork,
    where an import that fails stops the daemon (the worker's boot error); `pgworkerd
    check` imports them all (`child_loader(config, registry)(None)`)."""
    if config.django is None:
        return
    named = [("django.settings", config.django.settings)]
    named += [(f"django.tasks[{i}]", m) for i, m in enumerate(config.django.tasks)]
    problems = [
        f"{where}: cannot use {module!r}: no module named {module.partition('.')[0]!r}"
        for where, module in named
        if find_spec(module.partition(".")[0]) is None
    ]
    if find_spec("django") is None:
        problems.insert(0, "django: Django is not installed (pip install 'pgworkerd[django]')")
    if problems:
        raise HandlerError(problems)


def child_loader(config: Config, registry: Mapping[str, Handler]) -> ChildLoader | None:
    """What a worker child calls after its fork for more handlers (those of `registry`,
    loaded before the fork, keep their kinds): None without `django:`."""
    if config.django is None:
        return None
    return functools.partial(_load_django, config.django, frozenset(registry))


def _load_django(
    django_config: DjangoConfig, claimed_kinds: frozenset[str], worker_id: str | None
) -> dict[str, Handler]:
    # Imported here, in the worker after the fork (or in `pgworkerd check`): the module
    # imports Django, which only a config with `django:` uses.
    from pgworkerd.contrib import django as django_contrib

    try:
        registry = django_contrib.worker_registry(
            django_config.settings, django_config.tasks, worker_id
        )
    except Exception as exc:
        raise HandlerError([f"django: cannot set up Django tasks: {_reason(exc)}"]) from None
    claimed = sorted(claimed_kinds & set(registry))
    if claimed:
        raise HandlerError(
            [f"django: kind {k!r} is already claimed by handlers or task_modules" for k in claimed]
        )
    return otel_worker.instrument(registry)
