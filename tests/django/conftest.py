"""One database for the Django tier, made from the suite's migrated template, with the
example project's tables (Django's migrate) beside pgworkerd's: Django reads its
settings once per process, so its tests share it (each looks at its own rows only)."""

from __future__ import annotations

import os
import sys
import uuid
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import make_conninfo

from tests.daemon import REPO

PROJECT = REPO / "examples" / "django_project"


@pytest.fixture(scope="session")
def django_dsn(pg_admin_dsn: str, template_db: str) -> Iterator[str]:
    name = f"pgworkerd_django_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(pg_admin_dsn, autocommit=True) as admin:
        admin.execute(
            sql.SQL("CREATE DATABASE {} TEMPLATE {}").format(
                sql.Identifier(name), sql.Identifier(template_db)
            )
        )
    dsn = make_conninfo(pg_admin_dsn, dbname=name)
    os.environ["PGWORKERD_DATABASE_URL"] = dsn  # read by mysite.settings
    os.environ["DJANGO_SETTINGS_MODULE"] = "mysite.settings"
    sys.path.insert(0, str(PROJECT))
    import django
    from django.core.management import call_command

    django.setup()
    call_command("migrate", verbosity=0)
    yield dsn
    from django.db import connections

    connections.close_all()
    with psycopg.connect(pg_admin_dsn, autocommit=True) as admin:
        admin.execute(
            sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
        )


@pytest.fixture
def pg(django_dsn: str) -> Iterator[psycopg.Connection[Any]]:
    """A connection of the test's own (autocommit), to look at what Django did."""
    with psycopg.connect(django_dsn, autocommit=True) as connection:
        yield connection


@pytest.fixture
def django_daemon(django_dsn: str, daemons: Any):
    """A `pgworkerd run` of the example project's pgworkerd.yaml, on the tier's database."""

    def start(**overrides: Any) -> Any:
        config = {
            "handlers": {},
            "django": {"settings": "mysite.settings", "tasks": ["shop.tasks"]},
            "queues": {"default": {}, "fragile": {"max_attempts": 1}},
            "workers": [{"queues": ["default", "fragile"], "concurrency": 2}],
            **overrides,
        }
        pythonpath = os.pathsep.join([str(REPO), str(PROJECT)])
        return daemons(django_dsn, env={"PYTHONPATH": pythonpath}, **config)

    return start
