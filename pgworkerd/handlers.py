"""Handlers by import path: `package.module:function` (or `package.module.function`).

Only paths named in the config file are imported, once, in the supervisor before any
fork; a job's kind only ever selects among them (never an import path of its own).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any, cast

from pgworkerd.errors import PgworkerdError

Handler = Callable[..., Any]


class HandlerError(PgworkerdError):
    """A configured handler cannot be used. `problems` holds one line per handler."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("; ".join(problems))
        self.problems = problems


def resolve(path: str) -> Handler:
    """Import the callable that `path` names; ImportError/AttributeError/TypeError
    (or whatever the module raises on import) propagate to the caller."""
    if ":" in path:
        module_name, _, attribute = path.partition(":")
    else:
        module_name, _, attribute = path.rpartition(".")
    target: Any = importlib.import_module(module_name)
    for part in attribute.split("."):
        target = getattr(target, part)
    if not callable(target):
        raise TypeError(f"{type(target).__name__} is not callable")
    return cast(Handler, target)


def load_registry(handlers: Mapping[str, str]) -> dict[str, Handler]:
    """kind -> callable for every configured handler, or HandlerError naming each kind
    and path that failed, and why."""
    registry: dict[str, Handler] = {}
    problems = []
    for kind, path in handlers.items():
        try:
            registry[kind] = resolve(path)
        except BaseException as exc:
            if isinstance(exc, KeyboardInterrupt):
                raise
            reason = " ".join(str(exc).split()) or type(exc).__name__
            problems.append(f"handlers.{kind}: cannot use {path!r}: {type(exc).__name__}: {reason}")
    if problems:
        raise HandlerError(problems)
    return registry
