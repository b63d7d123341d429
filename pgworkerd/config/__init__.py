"""The YAML configuration file: one pydantic model drives types, defaults, bounds and the
error lines (`settings`), the values it is made of (`units`), the periodic entries and
retention, and reading the file with the environment's overrides (`loading`). Where the
file is found (`pgworkerd.config_location`) and ConfigError (`pgworkerd.errors`) are
re-exported from outside, for the CLI's parser, which must not load pydantic."""

from pgworkerd.config.loading import load, parse
from pgworkerd.config.periodic import PeriodicEntry
from pgworkerd.config.retention import Retention
from pgworkerd.config.settings import Config, Defaults, HttpConfig, PoolConfig, QueueConfig
from pgworkerd.config.units import host_port, parse_duration, parse_size
from pgworkerd.config_location import (
    CONFIG_PATH_ENV,
    DATABASE_URL_ENV,
    DEFAULT_CONFIG_PATH,
    config_path,
)
from pgworkerd.errors import ConfigError

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
