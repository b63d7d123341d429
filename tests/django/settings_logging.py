"""The example project's settings with a LOGGING of the most common kind: handlers for
the project's own loggers, `disable_existing_loggers` left at its default (True), as
Django's documentation shows it (tests/django/test_faults.py)."""

from mysite import settings as _example

globals().update({name: value for name, value in vars(_example).items() if name.isupper()})
LOGGING = {
    "version": 1,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "loggers": {"shop": {"handlers": ["console"], "level": "INFO"}},
}
