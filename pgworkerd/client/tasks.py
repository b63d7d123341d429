"""Task functions: `@pgworkerd.task` on a handler, and `fn.enqueue(conn, payload)` on it.

The decorator names the handler's kind (default `module.function`) and its default
enqueue options in one place, beside the code that runs the job. It registers nothing
by itself: the daemon runs a task only when its module is listed under the config's
`task_modules` (promise 7: a job's kind never chooses an import path).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from datetime import timedelta
from typing import Any, Generic, TypeVar, Unpack, overload

from pgworkerd.client.producer import (
    AsyncConnectable,
    Connectable,
    EnqueueOptions,
    check_options,
    default_producer,
)
from pgworkerd.errors import InvalidJob

R = TypeVar("R")


class Task(Generic[R]):
    """A handler with its kind and default enqueue options; called, it is the handler.

    `enqueue` and `enqueue_async` take `pgworkerd.enqueue`'s options; those given at
    the call win over the decorator's.
    """

    def __init__(self, fn: Callable[..., R], kind: str, defaults: EnqueueOptions) -> None:
        self.fn = fn
        self.kind = kind
        self.defaults = defaults
        functools.update_wrapper(self, fn)

    def __call__(self, job: Any) -> R:
        return self.fn(job)

    def __repr__(self) -> str:
        return f"<pgworkerd task {self.kind}>"

    def enqueue(self, conn: Connectable, payload: Any, **options: Unpack[EnqueueOptions]) -> int:
        """Enqueue a job of this task in `conn`'s transaction; returns its id."""
        return default_producer().enqueue(conn, self.kind, payload, **self._options(options))

    async def enqueue_async(
        self, aconn: AsyncConnectable, payload: Any, **options: Unpack[EnqueueOptions]
    ) -> int:
        """`enqueue` in `aconn`'s transaction."""
        merged = self._options(options)
        return await default_producer().enqueue_async(aconn, self.kind, payload, **merged)

    def _options(self, options: EnqueueOptions) -> EnqueueOptions:
        return {**self.defaults, **options} if self.defaults else options


@overload
def task(fn: Callable[..., R], /) -> Task[R]: ...


@overload
def task(
    *,
    kind: str | None = None,
    queue: str | None = None,
    priority: int | None = None,
    max_attempts: int | None = None,
    max_runtime: float | timedelta | None = None,
) -> Callable[[Callable[..., R]], Task[R]]: ...


def task(
    fn: Callable[..., R] | None = None,
    /,
    *,
    kind: str | None = None,
    queue: str | None = None,
    priority: int | None = None,
    max_attempts: int | None = None,
    max_runtime: float | timedelta | None = None,
    **unknown: Any,
) -> Task[R] | Callable[[Callable[..., R]], Task[R]]:
    """`@task` or `@task(kind=..., queue=..., priority=..., max_attempts=...,
    max_runtime=...)` on a function taking a `Job` (plain or `async def`)."""
    if unknown:
        # InvalidJob, as for a bad value of a known option, so one line says both.
        raise InvalidJob(
            f"@pgworkerd.task: unknown option(s): {', '.join(sorted(unknown))} (it takes "
            "kind, queue, priority, max_attempts and max_runtime)"
        )
    defaults: EnqueueOptions = {}
    if queue is not None:
        defaults["queue"] = queue
    if priority is not None:
        defaults["priority"] = priority
    if max_attempts is not None:
        defaults["max_attempts"] = max_attempts
    if max_runtime is not None:
        defaults["max_runtime"] = max_runtime

    def decorate(function: Callable[..., R]) -> Task[R]:
        if not callable(function):
            raise TypeError(f"@pgworkerd.task needs a function, got {type(function).__name__}")
        where = f"{function.__module__}.{function.__qualname__}"
        name = kind if kind is not None else where
        # Checked here, as enqueue checks them: options no enqueue accepts would make
        # every enqueue of the task fail, and `pgworkerd check` (which imports the task
        # modules) could not tell. The message names the function: a module may hold many.
        try:
            check_options(name, defaults)
        except InvalidJob as exc:
            raise InvalidJob(f"@pgworkerd.task {where}: {exc}") from None
        if kind is None and ("<locals>" in where or "<lambda>" in where):
            # Its default kind would be `mod.make.<locals>.inner` or `mod.<lambda>`: a
            # name of no module attribute (a new task at each call of the function that
            # makes it; every lambda of a module the same kind), which a worker registers
            # only if the task happens to be bound at a task module's top level. Refused
            # here, after the options (their errors first), as Django refuses such a
            # task, rather than enqueued for no handler. A kind given by hand (a task
            # factory) is kept: the registry finds a task by scanning its module's top
            # level, under the kind it has.
            raise InvalidJob(
                f"@pgworkerd.task {where}: a task's function must be defined at a module "
                "level (its default kind is module.function); for a nested function or "
                "a lambda give kind=... and bind the task at the top level of a module "
                "listed in task_modules"
            )
        return Task(function, name, defaults)

    return decorate(fn) if fn is not None else decorate
