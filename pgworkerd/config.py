"""The YAML configuration file: pydantic models, durations, environment overrides.

One model drives everything: types, defaults, bounds and the error lines. Loading
refuses what a careless edit produces (duplicate keys, unknown keys, tags, wrong
types) with one line per problem naming the key path, e.g.
`workers[0].concurrency: must be ≥ 1`.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    SecretStr,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_core import ErrorDetails
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

from pgworkerd.config_periodic import PeriodicEntry, Retention, check_entries
from pgworkerd.errors import PgworkerdError

DEFAULT_CONFIG_PATH = Path("config/pgworkerd.yaml")
CONFIG_PATH_ENV = "PGWORKERD_CONFIG"
DATABASE_URL_ENV = "PGWORKERD_DATABASE_URL"  # the contract's name; wins over the file

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)\s*$")
_UNIT_SECONDS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
_SIZE = re.compile(r"^\s*(\d+)\s*(B|KB|MB|GB|KiB|MiB|GiB)?\s*$")
_UNIT_BYTES = {
    None: 1,
    "B": 1,
    "KB": 10**3,
    "MB": 10**6,
    "GB": 10**9,
    "KiB": 2**10,
    "MiB": 2**20,
    "GiB": 2**30,
}
# package.module:function, package.module:Class.method, or package.module.function
_HANDLER_PATH = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)*[:.][A-Za-z_]\w*(\.[A-Za-z_]\w*)*$")


class ConfigError(PgworkerdError):
    """The configuration is unusable. `problems` holds one line per problem."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("; ".join(problems))
        self.problems = problems


def parse_duration(value: Any) -> Any:
    """Seconds from a number or `500ms`/`30s`/`15m`/`1h`/`1d`; other input is left for
    the field's own validation to refuse."""
    if isinstance(value, bool):
        raise ValueError("must be a duration such as 30, 30s, 15m, 1h")
    if isinstance(value, str):
        match = _DURATION.match(value)
        if match:
            return float(match[1]) * _UNIT_SECONDS[match[2]]
        try:
            return float(value)
        except ValueError:
            raise ValueError(
                f"must be a duration such as 30, 30s, 15m, 1h, not {value!r}"
            ) from None
    return value


def parse_size(value: Any) -> Any:
    """Bytes from a number or `512MiB`, `1GB` and the like."""
    if isinstance(value, bool):
        raise ValueError("must be a size such as 512MiB")
    if isinstance(value, str):
        match = _SIZE.match(value)
        if not match:
            raise ValueError(f"must be a size such as 512MiB or 1GB, not {value!r}")
        return int(match[1]) * _UNIT_BYTES[match[2]]
    return value


def _no_bool(value: Any) -> Any:
    # YAML reads `yes`/`true` as booleans and pydantic would take them as 1.
    if isinstance(value, bool):
        raise ValueError("must be an integer, not a boolean")
    return value


Seconds = Annotated[float, BeforeValidator(parse_duration), Field(gt=0, le=366 * 86400)]
Bytes = Annotated[int, BeforeValidator(parse_size), Field(gt=0)]
Count = Annotated[int, BeforeValidator(_no_bool)]
QueueName = Annotated[str, Field(min_length=1, max_length=255, pattern=r"^[^\x00-\x1f\x7f]+$")]


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


class DatabaseConfig(_Section):
    url: SecretStr | None = Field(
        None, description="libpq URL; absent: the embedded local cluster under .pgworkerd/"
    )
    schema_name: str = Field("pgworkerd", alias="schema", min_length=1, max_length=63)


class QueueConfig(_Section):
    priority: Count = Field(
        0, ge=-(2**31), le=2**31 - 1, description="higher is claimed first within a pool"
    )
    max_runtime: Seconds | None = None
    max_attempts: Count | None = Field(None, ge=1, le=1_000_000)


class PoolConfig(_Section):
    queues: list[QueueName] = Field(min_length=1)
    concurrency: Count = Field(1, ge=1, le=512, description="worker processes in this pool")
    threads: Count = Field(
        1, ge=1, le=1000, description="jobs each process runs at once (threads, or coroutines)"
    )
    batch_size: Count | None = Field(None, ge=1, le=1000)

    @field_validator("queues")
    @classmethod
    def _distinct(cls, queues: list[str]) -> list[str]:
        repeated = sorted({q for q in queues if queues.count(q) > 1})
        if repeated:
            raise ValueError(f"names a queue twice: {', '.join(repeated)}")
        return queues


class HttpConfig(_Section):
    listen: str = Field(description="host:port of /metrics, /healthz, /readyz")

    @field_validator("listen")
    @classmethod
    def _host_port(cls, listen: str) -> str:
        host_port(listen)
        return listen


class WebAuthConfig(_Section):
    username: str = Field(
        min_length=1,
        max_length=255,
        pattern=r"^[^:\x00-\x1f\x7f]+$",  # basic auth: no colon, no control characters
        description="basic auth user of `pgworkerd web`; the password is $PGWORKERD_WEB_PASSWORD",
    )


class WebConfig(_Section):
    listen: str = Field("127.0.0.1:9188", description="host:port of `pgworkerd web`")
    read_only: bool = Field(False, description="show the jobs, offer no action")
    auth: WebAuthConfig | None = Field(
        None, description="absent: no auth, and `pgworkerd web` listens on loopback only"
    )

    @field_validator("listen")
    @classmethod
    def _host_port(cls, listen: str) -> str:
        host_port(listen)
        return listen


def host_port(listen: str) -> tuple[str, int]:
    """("127.0.0.1", 9187) from "127.0.0.1:9187" ("[::1]:9187" for IPv6)."""
    host, sep, port = listen.rpartition(":")
    host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"must be host:port such as 127.0.0.1:9187, not {listen!r}")
    return host, int(port)


class Defaults(_Section):
    max_attempts: Count = Field(5, ge=1, le=1_000_000)
    max_runtime: Seconds = 900.0
    batch_size: Count = Field(10, ge=1, le=1000)
    backoff_base: Seconds = Field(30.0, description="first retry waits up to this long")
    backoff_max: Seconds = Field(3600.0, description="no retry waits longer")
    retention: Seconds | None = Field(
        None, description="the older form: for each state that `retention:` leaves out"
    )


class Config(BaseSettings):
    """The whole file. Environment variables (PGWORKERD_..., `__` for nesting) win."""

    model_config = SettingsConfigDict(
        env_prefix="PGWORKERD_",
        env_nested_delimiter="__",
        extra="forbid",
        frozen=True,
        populate_by_name=True,
    )

    database: DatabaseConfig = DatabaseConfig()
    handlers: dict[Annotated[str, Field(min_length=1, max_length=255)], str] = {}
    queues: dict[QueueName, QueueConfig] = Field(
        default_factory=lambda: {"default": QueueConfig()}, min_length=1
    )
    workers: list[PoolConfig] | None = Field(
        None, description="absent: one pool over all queues, one process per CPU"
    )
    defaults: Defaults = Defaults()
    lease_ttl: Seconds = Field(30.0, ge=1)
    shutdown_timeout: Seconds = 30.0
    poll_interval: Seconds = Field(
        1.0, description="an idle worker looks for work this often when no NOTIFY comes"
    )
    notifications: bool = Field(
        True,
        description="wake idle workers by LISTEN/NOTIFY (one connection per daemon); "
        "false behind PgBouncer in transaction mode: workers poll",
    )
    log_level: Literal["debug", "info", "warning", "error"] = Field(
        "info", description="info logs a line per job start and end; warning only trouble"
    )
    log_format: Literal["text", "json"] = Field(
        "text", description="`pgworkerd run --log-format` wins over this"
    )
    http: HttpConfig | None = Field(None, description="absent: no HTTP listener")
    web: WebConfig = Field(WebConfig(), description="the dashboard, `pgworkerd web`")
    max_jobs_per_child: Count | None = Field(None, ge=1)
    max_memory_per_child: Bytes | None = None
    periodic: list[PeriodicEntry] = Field([], description="jobs enqueued on a schedule")
    retention: Retention = Retention()

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        # The file comes in as init arguments; the environment must win over it.
        return (env_settings, init_settings)

    @field_validator("handlers")
    @classmethod
    def _handler_paths(cls, handlers: dict[str, str]) -> dict[str, str]:
        for kind, path in handlers.items():
            if not isinstance(path, str) or not _HANDLER_PATH.match(path):
                raise ValueError(
                    f"{kind}: {path!r} is not an import path like package.module:function"
                )
        return handlers

    @model_validator(mode="after")
    def _pools_name_declared_queues(self) -> Config:
        for index, pool in enumerate(self.workers or []):
            for name in pool.queues:
                if name not in self.queues:
                    raise ValueError(
                        f"workers[{index}].queues: {name!r} is not declared under queues"
                    )
        check_entries(self.periodic, self.queues, self.handlers)
        return self

    # -- derived settings ---------------------------------------------------------------

    def pools(self) -> list[PoolConfig]:
        """The worker pools, with the default of one pool over every queue."""
        if self.workers is not None:
            return list(self.workers)
        return [PoolConfig(queues=list(self.queues), concurrency=os.cpu_count() or 1)]

    def claim_order(self, pool: PoolConfig) -> list[str]:
        """A pool's queues by queue priority (higher first), then as listed."""
        position = {name: i for i, name in enumerate(pool.queues)}
        return sorted(pool.queues, key=lambda q: (-self.queues[q].priority, position[q]))

    def max_attempts_for(self, queue: str) -> int:
        configured = self.queues.get(queue)
        if configured is not None and configured.max_attempts is not None:
            return configured.max_attempts
        return self.defaults.max_attempts

    def max_runtime_for(self, queue: str, job_max_runtime_s: float | None) -> float:
        if job_max_runtime_s is not None:
            return job_max_runtime_s
        configured = self.queues.get(queue)
        if configured is not None and configured.max_runtime is not None:
            return configured.max_runtime
        return self.defaults.max_runtime

    def batch_size_for(self, pool: PoolConfig) -> int:
        return pool.batch_size or self.defaults.batch_size


# -- loading ------------------------------------------------------------------------------


class _StrictLoader(yaml.SafeLoader):
    """safe_load that refuses a key given twice in one mapping."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if isinstance(key, list | dict):
                raise yaml.constructor.ConstructorError(
                    None, None, "a key must be a plain value", key_node.start_mark
                )
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"duplicate key {key!r}", key_node.start_mark
                )
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


def config_path(explicit: str | os.PathLike[str] | None) -> Path:
    """-c/--config, else $PGWORKERD_CONFIG, else config/pgworkerd.yaml."""
    return Path(explicit or os.environ.get(CONFIG_PATH_ENV) or DEFAULT_CONFIG_PATH)


def load(path: str | os.PathLike[str] | None = None) -> Config:
    """Read, parse and validate the config file; ConfigError lists every problem."""
    source = config_path(path)
    try:
        text = source.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError([f"{source}: no such config file"]) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError([f"{source}: cannot read: {exc}"]) from None
    return parse(text, origin=str(source))


def parse(text: str, *, origin: str = "<config>") -> Config:
    try:
        data = yaml.load(text, Loader=_StrictLoader)
    except yaml.YAMLError as exc:
        raise ConfigError([f"{origin}: invalid YAML: {_yaml_problem(exc)}"]) from None
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError([f"{origin}: the top level must be a mapping of settings"])
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
        raise ConfigError([f"{origin}: {line}" for line in _problems(exc)]) from None


def _yaml_problem(exc: yaml.YAMLError) -> str:
    mark = getattr(exc, "problem_mark", None)
    problem = getattr(exc, "problem", None) or str(exc)
    where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark else ""
    return " ".join(f"{problem}{where}".split())


def _problems(exc: ValidationError) -> list[str]:
    lines = []
    for error in exc.errors(include_url=False):
        path = _key_path(error["loc"])
        lines.append(f"{path}: {_message(error)}" if path else _message(error))
    return lines


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
