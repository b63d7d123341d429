"""`pgworkerd keys [--json]`, `keys pause KEY --for DUR`, `keys resume KEY`. Registered
by `cli.main.build_parser`; errors are raised as `UsageError` or `InvalidJob` (exit 2)
and reported by `cli.main.run_cli` like every other command's.

Any key may be paused, one no job holds yet included (a pause ahead of a burst is a
use). Pausing a paused key sets its end anew; resuming one that is not paused changes
nothing and is not an error: both are safe to repeat.
"""

from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING

from pgworkerd.cli import formatting
from pgworkerd.cli.common import (
    EXIT_OK,
    CommandAdder,
    Parser,
    connect,
    duration_argument,
    load_config,
)

if TYPE_CHECKING:
    from pgworkerd.client.key_pauses import KeyPauses
    from pgworkerd.config import Config


def register(command: CommandAdder, common: Parser) -> None:
    keys = command("keys", cmd_list, "list job keys: running, ready, paused until when")
    keys.add_argument("--json", action="store_true", help="a JSON array of keys")
    subs = keys.add_subparsers(dest="keys_command", parser_class=Parser)
    pause = subs.add_parser(
        "pause",
        parents=[common],
        help="start no job of this key before the time is up",
        description="start no job of this key before the time is up; running jobs finish",
    )
    pause.set_defaults(func=cmd_pause)
    pause.add_argument("key", metavar="KEY")
    pause.add_argument(
        "--for", dest="duration", required=True, metavar="DUR", help="e.g. 30s, 15m, 1h"
    )
    resume = subs.add_parser(
        "resume",
        parents=[common],
        help="end a key's pause, at once",
        description="end a key's pause, at once",
    )
    resume.set_defaults(func=cmd_resume)
    resume.add_argument("key", metavar="KEY")


def cmd_list(args: argparse.Namespace) -> int:
    config = load_config(args)
    with connect(config, "keys") as conn:
        listing = _key_pauses(config).keys(conn, limits=config.queue_limits())
    print(
        json.dumps(listing, ensure_ascii=False, indent=2) if args.json else formatting.keys(listing)
    )
    return EXIT_OK


def cmd_pause(args: argparse.Namespace) -> int:
    config = load_config(args)
    seconds = duration_argument("--for", args.duration)
    with connect(config, "keys pause") as conn:
        until = _key_pauses(config).pause(conn, args.key, seconds)
    print(f"paused: {args.key} until {until.isoformat()}")
    return EXIT_OK


def cmd_resume(args: argparse.Namespace) -> int:
    config = load_config(args)
    with connect(config, "keys resume") as conn:
        resumed = _key_pauses(config).resume(conn, args.key)
    print(f"resumed: {args.key}" if resumed else f"not paused: {args.key}")
    return EXIT_OK


def _key_pauses(config: Config) -> KeyPauses:
    from pgworkerd.client.key_pauses import KeyPauses  # the client loads with the database

    return KeyPauses(config.database.schema_name)
