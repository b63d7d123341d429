"""The `pgworkerd` command: the parser of every command group, and the exit codes.

Exit 0 on success, 2 on bad input or config (one line per problem, no traceback),
1 on other failures (database unreachable, schema not migrated, ...).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from typing import NoReturn

from pgworkerd.cli import daemon, health, jobs, keys, queues, web
from pgworkerd.cli.common import EXIT_BAD_INPUT, EXIT_FAILURE, Parser, UsageError, fail
from pgworkerd.config.location import DEFAULT_CONFIG_PATH
from pgworkerd.errors import ConfigError, DatabaseURLError, InvalidJob, SchemaError
from pgworkerd.storage.embedded import EmbeddedError


def build_parser() -> argparse.ArgumentParser:
    config_help = f"config file (default: $PGWORKERD_CONFIG, else {DEFAULT_CONFIG_PATH})"
    parser = Parser(prog="pgworkerd", description="Background jobs on PostgreSQL.")
    parser.add_argument("-c", "--config", metavar="PATH", help=config_help)
    # Also accepted after the command; SUPPRESS keeps it from resetting one given before.
    common = Parser(add_help=False)
    common.add_argument(
        "-c", "--config", metavar="PATH", help=config_help, default=argparse.SUPPRESS
    )
    commands = parser.add_subparsers(dest="command", required=True, parser_class=Parser)

    def command(
        name: str, func: Callable[[argparse.Namespace], int], help_text: str
    ) -> argparse.ArgumentParser:
        sub = commands.add_parser(name, parents=[common], help=help_text, description=help_text)
        sub.set_defaults(func=func)
        return sub

    daemon.register(command)
    health.register(command)
    jobs.register(command, common)
    queues.register(command, common)
    keys.register(command, common)
    web.register(command)
    return parser


def run_cli(argv: Sequence[str] | None = None) -> int:
    try:
        args = build_parser().parse_args(argv)
        return int(args.func(args))
    except (UsageError, InvalidJob, DatabaseURLError) as exc:
        return fail(EXIT_BAD_INPUT, str(exc))
    except UnicodeEncodeError as exc:  # an argument or a value that is not valid UTF-8
        # Not the text itself: it may be the database URL.
        return fail(EXIT_BAD_INPUT, f"an argument is not valid UTF-8 text ({exc.reason})")
    except (SchemaError, EmbeddedError) as exc:
        return fail(EXIT_FAILURE, str(exc))
    except KeyboardInterrupt:
        return fail(EXIT_FAILURE, "interrupted")
    except ConfigError as exc:
        return fail(EXIT_BAD_INPUT, *exc.problems)
    except Exception as exc:
        code = _failure_of_a_loaded_module(exc)
        if code is None:
            raise
        return code


def _failure_of_a_loaded_module(exc: Exception) -> int | None:
    """The exit code of a handler's or the database's error, after its line; None for
    any other. Each class is looked at only if its module is loaded (one that is not
    raised nothing): a command that needs neither the handlers nor the database loads
    neither (psycopg alone is ~0.3 s of a command's start)."""
    if "pgworkerd.handlers" in sys.modules:
        from pgworkerd.handlers import HandlerError

        if isinstance(exc, HandlerError):
            return fail(EXIT_BAD_INPUT, *exc.problems)
    if "psycopg" in sys.modules:
        import psycopg

        from pgworkerd.storage import connections

        if isinstance(exc, psycopg.errors.UndefinedTable):
            # An operator command (status, enqueue, jobs, queues, keys) run against a
            # database never migrated, or with another schema named: the server's line
            # and its statement excerpt ("LINE 11: FROM ...") did not say what to do,
            # where `run`, `web` and `check` say it.
            missing = exc.diag.message_primary or connections.describe_error(exc)
            return fail(
                EXIT_FAILURE,
                f"database: {missing}: is the schema set up? "
                "`pgworkerd check` says, `pgworkerd migrate` sets it up",
            )
        if isinstance(exc, psycopg.Error):
            return fail(EXIT_FAILURE, f"database: {connections.describe_error(exc)}")
    return None


def main(argv: Sequence[str] | None = None) -> NoReturn:
    sys.exit(run_cli(argv))
