"""A package's public names loaded on first use (PEP 562), for the package __init__s
whose modules are heavy: `import pgworkerd` alone would load psycopg, pydantic and
the whole client (~0.6 s), and every `pgworkerd` command starts a new Python, so a
command, `--help` included, paid it before doing anything."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping
from typing import Any


def exports(
    package: str, where: Mapping[str, str]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The package's `__getattr__` and `__dir__`: `where` maps each public name to the
    module that defines it. A name is imported on its first access and then kept in the
    package, so later accesses are plain attribute reads."""

    def __getattr__(name: str) -> Any:
        module = where.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        setattr(sys.modules[package], name, value)
        return value

    def __dir__() -> list[str]:
        return sorted({*vars(sys.modules[package]), *where})

    return __getattr__, __dir__
