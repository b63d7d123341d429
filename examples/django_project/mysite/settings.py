"""Settings of the example project: one PostgreSQL database on psycopg 3, and pgworkerd
as the `django.tasks` backend. The database is the one the daemon uses
(PGWORKERD_DATABASE_URL, a libpq URL or key=value string): the jobs table lives beside
the app's tables, so a job commits with the app's transaction."""

import os

from psycopg.conninfo import conninfo_to_dict

_db = conninfo_to_dict(os.environ.get("PGWORKERD_DATABASE_URL", "dbname=mysite"))

SECRET_KEY = "example-only-not-secret"
DEBUG = False
ALLOWED_HOSTS = ["localhost", "127.0.0.1"]
USE_TZ = True
TIME_ZONE = "UTC"
INSTALLED_APPS = ["shop"]
ROOT_URLCONF = "mysite.urls"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": _db.get("dbname", ""),
        "USER": _db.get("user", ""),
        "PASSWORD": _db.get("password", ""),
        "HOST": _db.get("host", ""),
        "PORT": _db.get("port", ""),
    }
}

TASKS = {
    "default": {
        "BACKEND": "pgworkerd.contrib.django.PgworkerdBackend",
        "QUEUES": [],  # empty: any queue
        "OPTIONS": {"schema": "pgworkerd", "database": "default"},
    }
}
