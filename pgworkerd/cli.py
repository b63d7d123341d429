"""The `pgworkerd` command: argument parsing, one function a command, exit codes.

Exit 0 on success, 2 on bad input or config (one line per problem, no traceback),
1 on other failures (database unreachable, schema not migrated, ...).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any, NoReturn

import psycopg

from pgworkerd import config as config_module
from pgworkerd import db, handlers, health, logs, migrations, periodic, queries
from pgworkerd.config import Config, ConfigError, parse_duration
from pgworkerd.embedded import EmbeddedError
from pgworkerd.errors import InvalidJob, SchemaError
from pgworkerd.handlers import HandlerError
from pgworkerd.producer import Producer

EXIT_OK, EXIT_FAILURE, EXIT_BAD_INPUT = 0, 1, 2
WEB_EXTRA = ("starlette", "jinja2", "uvicorn")  # what `pip install pgworkerd[web]` brings
CHECK_SLOTS = 3  # `check` prints this many next run times of each periodic entry


class UsageError(Exception):
    """A command line that cannot be acted on (exit 2)."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        # argparse's default prints the whole usage; one line is what scripts can log.
        raise UsageError(f"{message} (see `{self.prog} --help`)")


# -- commands -------------------------------------------------------------------------------


def cmd_migrate(args: argparse.Namespace) -> int:
    config = _load_config(args)
    url = db.database_url(config)
    with db.connect(url, application_name="pgworkerd migrate") as conn:
        applied = migrations.migrate(conn, config.database.schema_name)
        version = migrations.current_version(conn, config.database.schema_name)
    schema = config.database.schema_name
    if applied:
        names = ", ".join(f"{m.version:04d}_{m.name}" for m in applied)
        print(f"schema {schema!r} migrated to version {version} (applied {names})")
    else:
        print(f"schema {schema!r} is up to date at version {version}")
    return EXIT_OK


def cmd_enqueue(args: argparse.Namespace) -> int:
    config = _load_config(args)
    payload = _json_argument("--payload", args.payload)
    options: dict[str, Any] = {
        "queue": args.queue,
        "priority": args.priority,
        "unique_key": args.unique_key,
        "max_attempts": args.max_attempts,
    }
    if args.delay is not None:
        options["delay"] = _duration_argument("--delay", args.delay)
    if args.run_at is not None:
        try:
            options["run_at"] = datetime.fromisoformat(args.run_at)
        except ValueError:
            raise UsageError(f"--run-at: {args.run_at!r} is not an ISO 8601 time") from None
    producer = Producer(schema=config.database.schema_name)
    with db.connect(db.database_url(config), application_name="pgworkerd enqueue") as conn:
        job_id = producer.enqueue(conn, args.kind, payload, **options)
    print(job_id)
    return EXIT_OK


def cmd_run(args: argparse.Namespace) -> int:
    from pgworkerd.supervisor import Supervisor  # the daemon's modules load only for `run`

    config = _load_config(args)
    log_format = args.log_format or config.log_format  # the flag wins over the file
    logs.setup(log_format, role="supervisor", level=config.log_level)
    registry = handlers.load_registry(config.handlers)  # before any fork: bad paths exit 2
    url = db.database_url(config)
    with db.connect(url, application_name="pgworkerd run") as conn:
        migrations.check_version(conn, config.database.schema_name)
    path = args.config or os.environ.get(config_module.CONFIG_PATH_ENV)
    supervisor = Supervisor(
        config=config,
        config_path=path,
        registry=registry,
        database_url=url,
        log_format=log_format,
    )
    return supervisor.run()


def cmd_check(args: argparse.Namespace) -> int:
    config = _load_config(args)
    handlers.load_registry(config.handlers)
    url = db.database_url(config)
    with db.connect(url, application_name="pgworkerd check") as conn:
        version = migrations.check_version(conn, config.database.schema_name)
        clock = queries.statements(config.database.schema_name)["clock_read"]
        now = conn.execute(clock).fetchone()[0]  # type: ignore[index]
    print(
        f"ok: {len(config.handlers)} handler(s) import, {len(config.pools())} pool(s), "
        f"database reachable at {db.redact(url)}, schema version {version}"
    )
    for entry in config.periodic:
        schedule = entry.schedule()
        slots = ", ".join(s.isoformat() for s in periodic.upcoming(schedule, now, CHECK_SLOTS))
        print(f"periodic {entry.kind} ({schedule.describe()}): next at {slots}")
    return EXIT_OK


def cmd_web(args: argparse.Namespace) -> int:
    try:
        from pgworkerd.web import serve  # the extra's packages load only for `web`
    except ImportError as exc:
        if (exc.name or "").partition(".")[0] not in WEB_EXTRA:
            raise
        install = "pip install 'pgworkerd[web]'"
        raise UsageError(f"web: the dashboard needs the web extra: {install}") from None
    return serve(_load_config(args), listen=args.listen, read_only=args.read_only)


# -- parsing and dispatch ---------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    config_help = (
        f"config file (default: $PGWORKERD_CONFIG, else {config_module.DEFAULT_CONFIG_PATH})"
    )
    parser = _Parser(prog="pgworkerd", description="Background jobs on PostgreSQL.")
    parser.add_argument("-c", "--config", metavar="PATH", help=config_help)
    # Also accepted after the command; SUPPRESS keeps it from resetting one given before.
    common = _Parser(add_help=False)
    common.add_argument(
        "-c", "--config", metavar="PATH", help=config_help, default=argparse.SUPPRESS
    )
    commands = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    def command(
        name: str, func: Callable[[argparse.Namespace], int], help_text: str
    ) -> argparse.ArgumentParser:
        sub = commands.add_parser(name, parents=[common], help=help_text, description=help_text)
        sub.set_defaults(func=func)
        return sub

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
    command("health", lambda a: health.cmd_health(a, _load_config), health.HELP)
    enqueue = command("enqueue", cmd_enqueue, "enqueue one job and print its id")
    enqueue.add_argument("kind")
    enqueue.add_argument("--payload", default="{}", metavar="JSON")
    enqueue.add_argument("--queue", default="default")
    enqueue.add_argument("--priority", type=int, default=0)
    enqueue.add_argument("--delay", metavar="DUR", help="e.g. 30, 30s, 15m, 1h")
    enqueue.add_argument("--run-at", metavar="ISO8601", help="with a timezone offset")
    enqueue.add_argument("--unique-key", metavar="K")
    enqueue.add_argument("--max-attempts", type=int, metavar="N")
    web = command("web", cmd_web, "serve the dashboard (needs pip install 'pgworkerd[web]')")
    web.add_argument("--listen", metavar="HOST:PORT", help="default: the config's web.listen")
    web.add_argument("--read-only", action="store_true", help="show the jobs, offer no action")
    # These import this module: registered once it is loaded.
    from pgworkerd import cli_jobs, cli_queues

    cli_jobs.register(command, common)
    cli_queues.register(command, common)
    return parser


def run_cli(argv: Sequence[str] | None = None) -> int:
    try:
        args = build_parser().parse_args(argv)
        return int(args.func(args))
    except (UsageError, InvalidJob) as exc:
        return _fail(EXIT_BAD_INPUT, str(exc))
    except (ConfigError, HandlerError) as exc:
        return _fail(EXIT_BAD_INPUT, *exc.problems)
    except (SchemaError, EmbeddedError) as exc:
        return _fail(EXIT_FAILURE, str(exc))
    except psycopg.Error as exc:
        return _fail(EXIT_FAILURE, f"database: {db.describe_error(exc)}")
    except KeyboardInterrupt:
        return _fail(EXIT_FAILURE, "interrupted")


def main(argv: Sequence[str] | None = None) -> NoReturn:
    sys.exit(run_cli(argv))


# -- helpers ----------------------------------------------------------------------------------


def _load_config(args: argparse.Namespace) -> Config:
    explicit = args.config or os.environ.get(config_module.CONFIG_PATH_ENV)
    path = config_module.config_path(args.config)
    if not explicit and not path.exists():
        # No file at the default place: the environment alone configures us.
        return config_module.parse("", origin="<environment>")
    return config_module.load(path)


def _json_argument(name: str, text: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise UsageError(f"{name}: not valid JSON: {exc}") from None


def _duration_argument(name: str, text: str) -> float:
    try:
        return float(parse_duration(text))
    except ValueError as exc:
        raise UsageError(f"{name}: {exc}") from None


def _fail(code: int, *lines: str) -> int:
    for line in lines:
        print(f"pgworkerd: error: {line}", file=sys.stderr)
    return code
