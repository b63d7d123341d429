"""The example project's settings with pgworkerd's schema app installed, for a run of
Django's own test runner (tests/django/test_test_runner.py)."""

from mysite import settings as _example

globals().update({name: value for name, value in vars(_example).items() if name.isupper()})
INSTALLED_APPS = [*_example.INSTALLED_APPS, "pgworkerd.contrib.django_schema"]
