"""What every command shares: the parser that fails in one line, the exit codes, the
config of `-c/--config`, and the argument checks that raise UsageError (exit 2)."""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NoReturn

from pgworkerd.config.location import CONFIG_PATH_ENV, config_path
from pgworkerd.errors import mask_passwords

# pydantic (the config's models, ~0.3 s) loads when a command reads the config or a
# duration, not to parse the command line: `--help` and a bad argument stop before.
if TYPE_CHECKING:
    import psycopg

    from pgworkerd.config import Config

EXIT_OK, EXIT_FAILURE, EXIT_BAD_INPUT = 0, 1, 2


class UsageError(Exception):
    """A command line that cannot be acted on (exit 2)."""


class Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        # argparse's default prints the whole usage; one line is what scripts can log.
        raise UsageError(f"{message} (see `{self.prog} --help`)")


# Adds a subcommand running a function; see main.build_parser.
CommandAdder = Callable[[str, Callable[[argparse.Namespace], int], str], argparse.ArgumentParser]


def load_config(args: argparse.Namespace) -> Config:
    from pgworkerd import config as config_module

    return config_module.load_named_or_default(args.config)


def knows_the_queues(args: argparse.Namespace, config: Config) -> bool:
    """Whether `config.queues` are the daemon's: read from a file (which, naming none,
    declares only `default`) or named by PGWORKERD_QUEUES. Configured by the
    environment alone, the command does not know which queues a daemon claims."""
    explicit = args.config or os.environ.get(CONFIG_PATH_ENV)
    return (
        bool(explicit) or config_path(args.config).exists() or "queues" in config.model_fields_set
    )


def unknown_kind(config: Config, kind: str) -> str | None:
    """Why no daemon of `config` would run a job of `kind` (promise 7: it would end
    `dead`), or None. Said only when the config names its handlers and nothing else can
    add a kind: the kinds of `task_modules` and Django tasks are known only once their
    modules are imported, which a producer's command does not do (as the config's own
    periodic entries, config.periodic.check_entries), and a config naming no handler
    at all is a producer's, which cannot know the daemons' (DESIGN: unknown job kinds
    are bad input)."""
    if not config.handlers or config.task_modules or config.django is not None:
        return None
    if kind in config.handlers:
        return None
    return (
        f"{kind!r} has no entry under handlers in the config: "
        "a daemon of this config would end the job dead"
    )


def connect(config: Config, command: str) -> psycopg.Connection[Any]:
    """An autocommit connection to the config's database, named for `command`. psycopg
    loads here, at a command's first need of the database, not at every start (~0.3 s
    of each `pgworkerd` call, `--help` and a bad argument included)."""
    from pgworkerd.storage import connections

    url = connections.database_url(config)
    return connections.connect(url, application_name=f"pgworkerd {command}")


def json_argument(name: str, text: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise UsageError(f"{name}: not valid JSON: {exc}") from None
    except RecursionError:  # deeper than this stack decodes: far over what enqueue takes
        from pgworkerd.encoding import MAX_PAYLOAD_DEPTH

        raise UsageError(f"{name}: nested more than {MAX_PAYLOAD_DEPTH} levels deep") from None
    except ValueError as exc:  # an int of 4,300+ digits
        raise UsageError(f"{name}: not usable JSON: {' '.join(str(exc).split())}") from None


def duration_argument(name: str, text: str) -> float:
    from pgworkerd.config import parse_duration

    try:
        return float(parse_duration(text))
    except ValueError as exc:
        raise UsageError(f"{name}: {exc}") from None


def fail(code: int, *lines: str) -> int:
    # Masked: a line may quote a value given on the command line or in the environment
    # (a schema name, a config path), which may be a database URL with its password.
    for line in lines:
        print(f"pgworkerd: error: {mask_passwords(line)}", file=sys.stderr)
    return code
