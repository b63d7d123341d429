"""The example project's settings with persistent connections (CONN_MAX_AGE=60): a
worker keeps its Django connection from one task to the next, as a production
deployment does (tests/django/test_faults.py)."""

from mysite import settings as _example

globals().update({name: value for name, value in vars(_example).items() if name.isupper()})
DATABASES = {"default": {**_example.DATABASES["default"], "CONN_MAX_AGE": 60}}
