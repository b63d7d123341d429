"""The app's AppConfig: pgworkerd's migrations after Django's, on each database migrated."""

from __future__ import annotations

from typing import Any

from django.apps import AppConfig
from django.db.models.signals import post_migrate


class PgworkerdSchemaConfig(AppConfig):  # type: ignore[misc]  # Django ships no types
    name = "pgworkerd.contrib.django_schema"
    label = "pgworkerd"
    verbose_name = "pgworkerd"

    def ready(self) -> None:
        post_migrate.connect(_migrate, sender=self, dispatch_uid="pgworkerd.migrate")
        # Django registers its backends' checks (PgworkerdBackend.check: a database
        # missing or not PostgreSQL) when django.tasks is first imported: in a project
        # whose apps import no task at start-up, `manage.py check` ran none.
        import django.tasks  # noqa: F401


def _migrate(sender: Any, *, using: str, verbosity: int = 1, **kwargs: Any) -> None:
    # Imported here: the backend's module imports django.tasks, which needs the apps
    # loaded (they are by the time migrate runs).
    from pgworkerd.contrib.django import migrate_schemas

    applied = migrate_schemas(using)
    if verbosity >= 1 and applied:
        print(f"  pgworkerd: {', '.join(applied)} migrated on database {using!r}")
