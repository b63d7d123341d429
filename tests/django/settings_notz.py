"""The example project's settings with USE_TZ = False in a time zone other than UTC:
Django's datetimes are naive local times (tests/django/test_faults.py)."""

from mysite import settings as _example

globals().update({name: value for name, value in vars(_example).items() if name.isupper()})
USE_TZ = False
TIME_ZONE = "America/New_York"
