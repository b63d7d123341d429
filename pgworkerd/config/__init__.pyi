"""The configuration's names: what mypy and editors read. At run time each name is
loaded on first use (pgworkerd/config/__init__.py), from the module this file names."""

from .loading import ConfigError, config_source, load, load_named_or_default, load_source, parse
from .location import CONFIG_PATH_ENV, DATABASE_URL_ENV, DEFAULT_CONFIG_PATH, config_path
from .periodic import PeriodicEntry
from .retention import Retention
from .settings import Config, Defaults, HttpConfig, PoolConfig, QueueConfig
from .units import host_port, parse_duration, parse_size

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
    "config_source",
    "host_port",
    "load",
    "load_named_or_default",
    "load_source",
    "parse",
    "parse_duration",
    "parse_size",
]
