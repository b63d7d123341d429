"""Reading the config file: strict YAML, the environment's DATABASE_URL, and one error
line per problem naming the key path, e.g. `workers[0].concurrency: must be ≥ 1`."""

from __future__ import annotations

import os
import stat
from collections.abc import Hashable
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError
from pydantic_core import ErrorDetails
from pydantic_settings import SettingsError

from pgworkerd.config.location import CONFIG_PATH_ENV, DATABASE_URL_ENV, config_path
from pgworkerd.config.settings import ENV_PREFIX, Config
from pgworkerd.errors import ConfigError as ConfigError  # pgworkerd.config names it here


class _StrictLoader(yaml.SafeLoader):
    """safe_load that refuses a key given twice in one mapping."""

    def construct_object(self, node: yaml.Node, deep: bool = False) -> Any:
        # A tag that changes what the node would be read as (!!str 30, !!binary, !!set,
        # !!python/...) is refused, as docs/configuration.md says: a config is plain
        # values. (SafeLoader refuses only the tags it does not know.)
        plain = isinstance(node, yaml.ScalarNode) and node.style is None
        value = node.value if isinstance(node, yaml.ScalarNode) else None
        if node.tag != self.resolve(type(node), value, (plain, True)):  # type: ignore[no-untyped-call]
            raise yaml.constructor.ConstructorError(
                None, None, f"YAML tags are not allowed: {node.tag}", node.start_mark
            )
        return super().construct_object(node, deep=deep)

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if not isinstance(key, Hashable):  # a list, a mapping, a set
                raise yaml.constructor.ConstructorError(
                    None, None, "a key must be a plain value", key_node.start_mark
                )
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"duplicate key {key!r}", key_node.start_mark
                )
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


def config_source(explicit: str | os.PathLike[str] | None) -> Path | None:
    """The file a command reads its config from: the one -c or $PGWORKERD_CONFIG names,
    else config/pgworkerd.yaml; None when neither names one and that file does not
    exist: then the environment alone configures pgworkerd. Decided once by `run`: a
    HUP reads that same source again (a file gone by then is refused, never replaced
    by the defaults)."""
    path = config_path(explicit)
    if not (explicit or os.environ.get(CONFIG_PATH_ENV)) and not path.exists():
        return None
    return path


def load_source(source: str | os.PathLike[str] | None) -> Config:
    """The config of `source` (config_source): that file, or with None the environment
    alone (an empty file's defaults and the PGWORKERD_* settings)."""
    if source is None:
        return parse("", origin="<environment>")
    return load(source)


def load_named_or_default(explicit: str | os.PathLike[str] | None) -> Config:
    """The config as every command reads it at its start (config_source's rule)."""
    return load_source(config_source(explicit))


def load(path: str | os.PathLike[str] | None = None) -> Config:
    """Read, parse and validate the config file; ConfigError lists every problem."""
    source = config_path(path)
    try:
        text = _read_bounded(source).decode("utf-8")
    except FileNotFoundError:
        raise ConfigError([f"{source}: no such config file"]) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError([f"{source}: cannot read: {exc}"]) from None
    return parse(text, origin=str(source))


# A config is a few kilobytes; this is far more than any needs (a periodic payload may
# have 1 MiB), yet bounded: PyYAML reads ~0.15 MB/s of dense mappings, so the worst file
# is half a minute of parsing, not an endless read. Read at start and at each reload.
MAX_CONFIG_BYTES = 4 * 2**20


def _read_bounded(source: os.PathLike[str]) -> bytes:
    """The file's bytes; ConfigError for a FIFO, a socket or a directory (a FIFO blocked
    the open until a writer came, at start and at each reload, and a pipe read again
    at a reload is empty), or for more than MAX_CONFIG_BYTES (/dev/zero was read without
    end). O_NONBLOCK: a FIFO opens at once, to be refused by its fstat, and a device
    with nothing to read fails the read at once. A character device is read as a file:
    /dev/null is the usual "no file" of a deployment configured by PGWORKERD_* alone."""
    fd = os.open(source, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        mode = os.fstat(fd).st_mode
        if stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode) or stat.S_ISDIR(mode):
            raise ConfigError([f"{source}: a pipe, a FIFO, a socket or a directory, not a file"])
        with os.fdopen(fd, "rb", closefd=False) as file:
            data = file.read(MAX_CONFIG_BYTES + 1)
    finally:
        os.close(fd)
    if data is None:  # a device with nothing to read yet (a terminal): it would block
        raise ConfigError([f"{source}: nothing to read (a terminal?), not a file"])
    if len(data) > MAX_CONFIG_BYTES:
        limit = f"{MAX_CONFIG_BYTES // 2**20} MiB"
        raise ConfigError([f"{source}: over {limit}; a config file may be at most {limit}"])
    return data


def parse(text: str, *, origin: str = "<config>") -> Config:
    try:
        data = yaml.load(text, Loader=_StrictLoader)
    except yaml.YAMLError as exc:
        raise ConfigError([f"{origin}: invalid YAML: {_yaml_problem(exc)}"]) from None
    except RecursionError:
        raise ConfigError([f"{origin}: invalid YAML: nested too deep"]) from None
    except ValueError as exc:  # an integer of more than 4,300 digits
        raise ConfigError([f"{origin}: invalid YAML: {' '.join(str(exc).split())}"]) from None
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError([f"{origin}: the top level must be a mapping of settings"])
    for name in data:
        if not isinstance(name, str):  # `on: 1` is {True: 1} in YAML
            raise ConfigError(
                [f"{origin}: a setting's name must be text, got {name!r} (quote on, off, yes, no)"]
            )
    database_url = os.environ.get(DATABASE_URL_ENV)
    if database_url:
        database = data.get("database")
        data = {
            **data,
            "database": {**(database if isinstance(database, dict) else {}), "url": database_url},
        }
    try:
        return Config(**data)
    except ValidationError as exc:
        raise ConfigError(_problems(exc, origin)) from None
    except SettingsError as exc:  # a PGWORKERD_* variable whose value is not JSON
        raise ConfigError([f"environment: {' '.join(str(exc).split())}"]) from None
    except RecursionError:  # a PGWORKERD_* variable's JSON nested too deep for json.loads
        raise ConfigError(_too_deep_in_the_environment()) from None


def _too_deep_in_the_environment() -> list[str]:
    """The problem line of a RecursionError out of pydantic-settings, which decodes a
    PGWORKERD_* variable's JSON with json.loads and catches only its ValueError: the
    variable nested deepest is named (counted without recursing: json.loads fails
    near 1,000 levels, fewer the deeper the stack it is called from)."""
    depths = {
        name: _nesting(value)
        for name, value in sorted(os.environ.items())
        if name.upper().startswith(ENV_PREFIX)
    }
    deepest = max(depths.values(), default=0)
    if deepest == 0:
        return ["environment: a value is nested too deep"]
    return [
        f"environment ({name}): JSON nested too deep ({depth:,} levels)"
        for name, depth in depths.items()
        if depth == deepest
    ]


def _nesting(text: str) -> int:
    """How deep the arrays and objects of a JSON text nest (brackets in strings aside)."""
    depth = deepest = 0
    in_string = escaped = False
    for char in text:
        if in_string:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string = True
        elif char in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif char in "]}":
            depth -= 1
    return deepest


def _yaml_problem(exc: yaml.YAMLError) -> str:
    mark = getattr(exc, "problem_mark", None)
    problem = getattr(exc, "problem", None) or str(exc)
    where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark else ""
    return " ".join(f"{problem}{where}".split())


def _problems(exc: ValidationError, origin: str) -> list[str]:
    lines = []
    for error in exc.errors(include_url=False):
        path = _key_path(error["loc"])
        source = _variable_of(error["loc"]) or origin
        lines.append(
            f"{source}: {path}: {_message(error)}" if path else f"{source}: {_message(error)}"
        )
    return lines


def _variable_of(loc: tuple[int | str, ...]) -> str | None:
    """The environment variable that set this key or a section holding it (the
    environment wins over the file), named so the operator looks there and not in a
    file that may not even set it; None when the file's value is the one read."""
    names = {name.upper(): name for name in os.environ if name.upper().startswith(ENV_PREFIX)}
    if loc[:2] == ("database", "url") and os.environ.get(DATABASE_URL_ENV):
        return f"environment ({DATABASE_URL_ENV})"
    parts: list[str] = []
    for part in loc:
        if not isinstance(part, str):
            break
        parts.append(part.upper())
        name = names.get(ENV_PREFIX + "__".join(parts))
        if name is not None:
            return f"environment ({name})"
    return None


def _key_path(loc: tuple[int | str, ...]) -> str:
    path = ""
    for part in loc:
        if isinstance(part, int):
            path += f"[{part}]"
        elif part in ("[key]",) or "[" in str(part) or "function-" in str(part):
            continue  # pydantic's validator names, not keys of the file
        else:
            path += f".{part}" if path else str(part)
    return path


def _message(error: ErrorDetails) -> str:
    kind, ctx = error["type"], error.get("ctx", {})
    if kind == "extra_forbidden":
        return "unknown key"
    if kind == "missing":
        return "is required"
    if kind in ("greater_than_equal", "greater_than", "less_than_equal", "less_than"):
        sign = {
            "greater_than_equal": "≥",
            "greater_than": ">",
            "less_than_equal": "≤",
            "less_than": "<",
        }[kind]
        bound = next(iter(ctx.values()))
        return f"must be {sign} {bound}"
    if kind in ("int_parsing", "int_type", "int_from_float"):
        return f"must be an integer, not {error['input']!r}"
    if kind == "value_error":
        return str(ctx.get("error", error["msg"]))
    return error["msg"][:1].lower() + error["msg"][1:]
