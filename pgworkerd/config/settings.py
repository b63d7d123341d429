"""The YAML configuration file: pydantic models, durations, environment overrides.

One model drives everything: types, defaults, bounds and the error lines. Loading
refuses what a careless edit produces (duplicate keys, unknown keys, tags, wrong
types) with one line per problem naming the key path, e.g.
`workers[0].concurrency: must be ≥ 1`.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from typing import TYPE_CHECKING, Annotated, Literal

from pydantic import Field, SecretStr, field_validator, model_validator
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

from pgworkerd.config.limits import LimitConcurrency, PerKeyLimits, Rate
from pgworkerd.config.periodic import PeriodicEntry, check_entries
from pgworkerd.config.retention import Retention
from pgworkerd.config.units import (
    Bytes,
    Count,
    Listen,
    QueueName,
    Seconds,
    Section,
    host_port,
    is_loopback,
)
from pgworkerd.storage.schema_names import schema_name_problem

ENV_PREFIX = "PGWORKERD_"  # PGWORKERD_LEASE_TTL, PGWORKERD_QUEUES__A__RATE: win over the file

if TYPE_CHECKING:  # storage.limits loads psycopg: reading a config does not need it
    from pgworkerd.storage.limits import QueueLimits

_MODULE_NAME = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)*$")
_HANDLER_PATH = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)*[:.][A-Za-z_]\w*(\.[A-Za-z_]\w*)*$")


class DatabaseConfig(Section):
    url: SecretStr | None = Field(
        None, description="libpq URL; absent: the embedded local cluster under .pgworkerd/"
    )
    schema_name: str = Field("pgworkerd", alias="schema", min_length=1)

    @field_validator("schema_name")
    @classmethod
    def _schema_name(cls, schema: str) -> str:
        problem = schema_name_problem(schema)  # the check Producer(schema=) makes too
        if problem is not None:
            raise ValueError(problem)
        return schema


class QueueConfig(Section):
    priority: Count = Field(
        0, ge=-(2**31), le=2**31 - 1, description="higher is claimed first within a pool"
    )
    max_runtime: Seconds | None = None
    max_attempts: Count | None = Field(None, ge=1, le=1_000_000)
    # Flow control (config/limits.py). Not a pool's `concurrency` (worker processes):
    # these count the queue's running jobs on every daemon and host together.
    concurrency: LimitConcurrency | None = Field(
        None, description="running jobs of this queue, every daemon and host together"
    )
    rate: Rate | None = Field(None, description="starts per period, fleet-wide: 100/s, 10/m")
    per_key: PerKeyLimits | None = Field(None, description="the same limits for each job key")
    fair: bool = Field(False, description="keys take turns: least recently started first")

    @property
    def limited(self) -> bool:
        """Whether a claim of this queue must take its limits' lock (storage/limits.py)."""
        per_key = self.per_key is not None and (
            self.per_key.concurrency is not None or self.per_key.rate is not None
        )
        return self.concurrency is not None or self.rate is not None or per_key or self.fair


class PoolConfig(Section):
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


class HttpConfig(Section):
    listen: Listen = Field(description="host:port of /metrics, /healthz, /readyz")


class WebAuthConfig(Section):
    username: str = Field(
        min_length=1,
        max_length=255,
        pattern=r"^[^:\x00-\x1f\x7f]+$",  # basic auth: no colon, no control characters
        description="basic auth user of `pgworkerd web`; the password is $PGWORKERD_WEB_PASSWORD",
    )


class WebConfig(Section):
    listen: Listen = Field("127.0.0.1:9188", description="host:port of `pgworkerd web`")
    read_only: bool = Field(False, description="show the jobs, offer no action")
    auth: WebAuthConfig | None = Field(
        None, description="absent: no auth, and `pgworkerd web` listens on loopback only"
    )

    def unguarded(self, listen: str, setting: str) -> str | None:
        """Why the dashboard may not listen on `listen` (a valid host:port, given as
        `setting`), or None: the dashboard can retry and cancel jobs, so beyond
        loopback it needs auth. The config's own web.listen is checked when the config
        is (Config's validator: `check` refuses it too), `pgworkerd web --listen` by
        the command."""
        if self.auth is not None or is_loopback(host_port(listen)[0]):
            return None
        return (
            f"{setting}: {listen} is beyond loopback and needs web.auth (a username, "
            "and the password in PGWORKERD_WEB_PASSWORD)"
        )


class DjangoConfig(Section):
    """Django tasks (`pgworkerd[django]`): each worker sets Django up after the fork and
    runs the `@task` functions of the listed modules."""

    settings: str = Field(description="the settings module, as DJANGO_SETTINGS_MODULE")
    tasks: list[str] = Field(min_length=1, description="modules whose Django tasks run")

    @field_validator("settings")
    @classmethod
    def _settings_module(cls, module: str) -> str:
        return _module_names([module])[0]

    @field_validator("tasks")
    @classmethod
    def _task_modules(cls, modules: list[str]) -> list[str]:
        return _module_names(modules)


def _module_names(modules: list[str]) -> list[str]:
    for module in modules:
        if not _MODULE_NAME.match(module):
            raise ValueError(f"{module!r} is not a module name like package.module")
    return modules


class Defaults(Section):
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
        env_prefix=ENV_PREFIX,
        env_nested_delimiter="__",
        extra="forbid",
        frozen=True,
        populate_by_name=True,
    )

    database: DatabaseConfig = DatabaseConfig()
    handlers: dict[Annotated[str, Field(min_length=1, max_length=255)], str] = {}
    task_modules: list[str] = Field(
        [], description="modules whose @pgworkerd.task functions are handlers"
    )
    django: DjangoConfig | None = Field(None, description="absent: no Django tasks run")
    queues: dict[QueueName, QueueConfig] = Field(
        default_factory=lambda: {"default": QueueConfig()}, min_length=1
    )
    workers: list[PoolConfig] | None = Field(
        None, description="absent: one pool over all queues, one process per CPU"
    )
    defaults: Defaults = Defaults()
    lease_ttl: Seconds = Field(30.0, ge=1)
    shutdown_timeout: Seconds = 30.0
    reload_timeout: Seconds = Field(
        60.0,
        description="a HUP whose config and handler imports take longer is refused "
        "(an import that hangs would otherwise hold back the respawns)",
    )
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

    @field_validator("workers")
    @classmethod
    def _some_pool(cls, pools: list[PoolConfig] | None) -> list[PoolConfig] | None:
        if pools == []:  # a daemon that would run no job, and say it is fine
            raise ValueError(
                "an empty list runs no job: leave it out for one pool over every queue"
            )
        return pools

    @field_validator("task_modules")
    @classmethod
    def _task_module_names(cls, modules: list[str]) -> list[str]:
        return _module_names(modules)

    @model_validator(mode="after")
    def _pools_name_declared_queues(self) -> Config:
        for index, pool in enumerate(self.workers or []):
            for name in pool.queues:
                if name not in self.queues:
                    raise ValueError(
                        f"workers[{index}].queues: {name!r} is not declared under queues"
                    )
        unguarded = self.web.unguarded(self.web.listen, "web.listen")
        if unguarded is not None:
            raise ValueError(unguarded)
        tasks_too = bool(self.task_modules) or self.django is not None
        check_entries(self.periodic, self.queues, self.handlers, tasks_too=tasks_too)
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

    def queue_limits(self, queues: Iterable[str] | None = None) -> dict[str, QueueLimits]:
        """The limited queues among `queues` (default: all) and their limits, as the
        claim takes them (storage/limits.py)."""
        from pgworkerd.storage.limits import QueueLimits

        limits = {}
        for queue in self.queues if queues is None else queues:
            settings = self.queues[queue]
            if settings.limited:
                per_key = settings.per_key
                limits[queue] = QueueLimits(
                    concurrency=settings.concurrency,
                    rate=settings.rate,
                    key_concurrency=per_key.concurrency if per_key else None,
                    key_rate=per_key.rate if per_key else None,
                    fair=settings.fair,
                )
        return limits

    def batch_size_for(self, pool: PoolConfig) -> int:
        return pool.batch_size or self.defaults.batch_size
