"""The YAML configuration file: one pydantic model drives types, defaults, bounds and the
error lines (`settings`), the values it is made of (`units`), the periodic entries and
retention, and reading the file with the environment's overrides (`loading`)."""

from pgworkerd.config.loading import (
    CONFIG_PATH_ENV,
    DATABASE_URL_ENV,
    DEFAULT_CONFIG_PATH,
    ConfigError,
    config_path,
    load,
    parse,
)
from pgworkerd.config.periodic import PeriodicEntry
from pgworkerd.config.retention import Retention
from pgworkerd.config.settings import Config, Defaults, HttpConfig, PoolConfig, QueueConfig
from pgworkerd.config.units import host_port, parse_duration, parse_size

__all__ = [
    "CONFIG_PATH_ENV",
    "DATABASE_URL_ENV",
    "DEFAULT_CONFIG_PATH",
    "Config",
    "ConfigError",
    "Defaults",
    "HttpConfig",
    "PeriodicEntry",
    "PoolConfig",
    "QueueConfig",
    "Retention",
    "config_path",
    "host_port",
    "load",
    "parse",
    "parse_duration",
    "parse_size",
]
