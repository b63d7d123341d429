"""What `pgworkerd.enqueue` reads from the environment, in a module of its own: pydantic
and pydantic_settings take ~0.25 s to import, which a web app would pay in its first
request. `default_producer` (producer.py) loads this module only when the environment
holds one of the names it reads (`SETTINGS_NAMES`)."""

from __future__ import annotations

from pydantic_settings import BaseSettings, SettingsConfigDict

from pgworkerd.encoding import DEFAULT_MAX_PAYLOAD_BYTES
from pgworkerd.storage.inserts import DEFAULT_SCHEMA


class ProducerSettings(BaseSettings):
    """What the producer reads from the environment (the same names the daemon's
    config file takes as overrides)."""

    model_config = SettingsConfigDict(
        env_prefix="PGWORKERD_", env_nested_delimiter="__", extra="ignore"
    )

    database__schema: str = DEFAULT_SCHEMA
    max_payload_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES
