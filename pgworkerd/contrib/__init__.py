"""Integrations with other frameworks: Django (`django`), SQLAlchemy (`sqlalchemy`) and
OpenTelemetry (`otel`), each the extra of the same name. A module here imports its
framework only when the framework is used: pgworkerd without the extras loads none."""
