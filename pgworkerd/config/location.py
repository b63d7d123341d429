"""Where the config comes from: the file's default path and the environment variables
that name the file and the database. A module without pydantic (the package loads its
names on first use, pgworkerd/config/__init__.pyi), so that what reads only these,
`pgworkerd --help` and a bad argument among them, does not load it (~0.3 s of a
command's start)."""

from __future__ import annotations

import os
from pathlib import Path

DEFAULT_CONFIG_PATH = Path("config/pgworkerd.yaml")
CONFIG_PATH_ENV = "PGWORKERD_CONFIG"
DATABASE_URL_ENV = "PGWORKERD_DATABASE_URL"  # the contract's name; wins over the file


def config_path(explicit: str | os.PathLike[str] | None) -> Path:
    """-c/--config, else $PGWORKERD_CONFIG, else config/pgworkerd.yaml."""
    return Path(explicit or os.environ.get(CONFIG_PATH_ENV) or DEFAULT_CONFIG_PATH)
