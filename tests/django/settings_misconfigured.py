"""The example project's settings with misconfigured backends beside its own: one whose
OPTIONS name no database of DATABASES, one on a database that is not PostgreSQL, one
with misspelt OPTIONS keys, one with a schema name pgworkerd refuses
(tests/django/test_test_runner.py, `manage.py check`). The schema app is installed: it
has Django register the backends' checks."""

from mysite import settings as _example

globals().update({name: value for name, value in vars(_example).items() if name.isupper()})
INSTALLED_APPS = [*_example.INSTALLED_APPS, "pgworkerd.contrib.django_schema"]
DATABASES = {
    **_example.DATABASES,
    "lite": {"ENGINE": "django.db.backends.sqlite3", "NAME": ":memory:"},
}
_BACKEND = "pgworkerd.contrib.django.PgworkerdBackend"
TASKS = {
    **_example.TASKS,
    "nowhere": {"BACKEND": _BACKEND, "QUEUES": [], "OPTIONS": {"database": "nope"}},
    "on_sqlite": {"BACKEND": _BACKEND, "QUEUES": [], "OPTIONS": {"database": "lite"}},
    "typos": {"BACKEND": _BACKEND, "QUEUES": [], "OPTIONS": {"shema": "x", "databse": "nope"}},
    "reserved": {"BACKEND": _BACKEND, "QUEUES": [], "OPTIONS": {"schema": "pg_jobs"}},
}
