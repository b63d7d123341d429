"""The commands around the daemon: `run` it, `check` a config before a deploy, `migrate`
the schema."""

from __future__ import annotations

import argparse
import logging
import sys

import pgworkerd
from pgworkerd import logs
from pgworkerd.cli.common import EXIT_OK, CommandAdder, connect, load_config
from pgworkerd.errors import mask_passwords

# Each command imports the handlers, psycopg and the daemon when it runs, not when the
# command line is parsed: every `pgworkerd` call is a new Python, and a bad config or
# argument is refused before any of them loads.

CHECK_SLOTS = 3  # `check` prints this many next run times of each periodic entry


def register(command: CommandAdder) -> None:
    command("migrate", cmd_migrate, "create or upgrade the schema (idempotent)")
    run = command("run", cmd_run, "run the daemon in the foreground")
    run.add_argument(
        "--log-format",
        choices=logs.LOG_FORMATS,
        default=None,
        help="one line per event: text for people, json for machines "
        "(default: the config's log_format, else text)",
    )
    command(
        "check",
        cmd_check,
        "validate the config, import every handler, reach the database, check the schema; "
        "print the next run times of each periodic entry",
    )


def cmd_migrate(args: argparse.Namespace) -> int:
    from pgworkerd.storage import migrations

    config = load_config(args)
    with connect(config, "migrate") as conn:
        applied = migrations.migrate(conn, config.database.schema_name)
        version = migrations.current_version(conn, config.database.schema_name)
    schema = config.database.schema_name
    if applied:
        names = ", ".join(f"{m.version:04d}_{m.name}" for m in applied)
        print(f"schema {schema!r} migrated to version {version} (applied {names})")
    else:
        print(f"schema {schema!r} is up to date at version {version}")
    return EXIT_OK


def cmd_run(args: argparse.Namespace) -> int:
    from pgworkerd import config as config_module

    # Where the config comes from, decided once: each HUP reads this same source.
    source = config_module.config_source(args.config)
    config = config_module.load_source(source)
    log_format = args.log_format or config.log_format  # the flag wins over the file
    logs.setup(log_format, role="supervisor", level=config.log_level)
    # After the config (a bad one is refused without them), before any fork.
    from pgworkerd import handlers
    from pgworkerd.storage import connections, migrations
    from pgworkerd.supervisor.core import Supervisor

    # Before any fork: bad paths and modules exit 2.
    registry = handlers.load_registry(config.handlers, config.task_modules)
    handlers.check_periodic_kinds(config, registry)
    handlers.check_child_modules(config)
    _say_otel_problem_once()
    # `import pgworkerd` loads each public name on first use: load them all here, once,
    # so a handler calling pgworkerd.result or cancel does not import their modules in
    # every worker after the fork (nor a HUP's new workers).
    for name in pgworkerd.__all__:
        getattr(pgworkerd, name)
    url = connections.database_url(config)
    with connections.connect(url, application_name="pgworkerd run") as conn:
        migrations.check_version(conn, config.database.schema_name)
    supervisor = Supervisor(
        config=config,
        config_path=None if source is None else str(source),
        registry=registry,
        database_url=url,
        log_format=log_format,
    )
    return supervisor.run()


def cmd_check(args: argparse.Namespace) -> int:
    config = load_config(args)
    from pgworkerd import handlers  # after the config: a bad one is refused without them
    from pgworkerd.config import schedules
    from pgworkerd.storage import connections, migrations
    from pgworkerd.storage.reads import Reads

    registry = handlers.load_registry(config.handlers, config.task_modules)
    handlers.check_child_modules(config)
    loader = handlers.child_loader(config, registry)
    if loader is not None:  # check never forks: Django is set up here, as a worker would
        registry.update(loader(None))
    handlers.check_periodic_kinds(config, registry, with_django=True)
    from pgworkerd.contrib import otel

    # Not a refusal: `run` runs with it (and traces nothing); said so before a deploy.
    otel_problem = otel.env_provider_problem(load=True)
    if otel_problem is not None:
        print(f"pgworkerd: warning: {mask_passwords(otel_problem)}", file=sys.stderr)
    url = connections.database_url(config)
    with connections.connect(url, application_name="pgworkerd check") as conn:
        version = migrations.check_version(conn, config.database.schema_name)
        now = Reads(config.database.schema_name).clock(conn)
    print(
        f"ok: {len(registry)} handler(s) import, {len(config.pools())} pool(s), "
        f"database reachable at {connections.shown_url(url)}, schema version {version}"
    )
    for entry in config.periodic:
        schedule = entry.schedule()
        slots = ", ".join(s.isoformat() for s in schedules.upcoming(schedule, now, CHECK_SLOTS))
        print(f"periodic {entry.kind} ({schedule.describe()}): next at {slots}")
    return EXIT_OK


def _say_otel_problem_once() -> None:
    """A TracerProvider that OTEL_PYTHON_TRACER_PROVIDER names and no package provides:
    said here, once, before the forks (after the handlers' modules, which may set a
    provider in code instead); the workers inherit the answer and trace nothing
    without saying it again, each of them, at its first job."""
    from pgworkerd.contrib import otel

    problem = otel.env_provider_problem()
    if problem is not None:
        logs.event(logging.getLogger("pgworkerd.supervisor"), logging.WARNING, problem)
