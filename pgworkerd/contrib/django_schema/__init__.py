"""An opt-in Django app that sets up pgworkerd's schema where Django sets up its own
tables: add `"pgworkerd.contrib.django_schema"` to INSTALLED_APPS, and `manage.py
migrate` and Django's test runner (which migrates each test database it creates) run
pgworkerd's migrations too, on the database of each `PgworkerdBackend` of TASKS
(docs/django.md, "Testing your project")."""
