"""`pgworkerd queues [--json]`, `queues pause Q...`, `queues resume Q...`. Registered by
`cli.main.build_parser`; errors are raised as `UsageError` (exit 2) and reported by
`cli.main.run_cli` like every other command's.

Pause and resume take names the operator can see: a queue the config names, a queue
some job names (in any state), or a paused one. Any other name is refused (exit 2,
nothing changed): most likely a typo, and a pause of a typo would look like it worked.
Pausing a paused queue, or resuming one that is not paused, changes nothing and is not
an error: both are safe to repeat.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from pgworkerd.cli import formatting
from pgworkerd.cli.common import EXIT_OK, CommandAdder, Parser, UsageError, connect, load_config

if TYPE_CHECKING:
    from pgworkerd.client.pausing import QueuePauses
    from pgworkerd.config import Config


def register(command: CommandAdder, common: Parser) -> None:
    queues = command("queues", cmd_list, "list queues: paused or not, jobs by state")
    queues.add_argument("--json", action="store_true", help="a JSON array of queues")
    subs = queues.add_subparsers(dest="queues_command", parser_class=Parser)
    for name, func, help_text in (
        ("pause", cmd_pause, "stop claiming from these queues; running jobs finish"),
        ("resume", cmd_resume, "claim from these paused queues again, at once"),
    ):
        sub = subs.add_parser(name, parents=[common], help=help_text, description=help_text)
        sub.set_defaults(func=func)
        sub.add_argument("queues", nargs="+", metavar="Q")


def cmd_list(args: argparse.Namespace) -> int:
    from pgworkerd.client.pausing import QueuePauses  # the client loads with the database

    config = load_config(args)
    with connect(config, "queues") as conn:
        listing = QueuePauses(config.database.schema_name).queues(conn, list(config.queues))
    print(
        json.dumps(listing, ensure_ascii=False, indent=2)
        if args.json
        else formatting.queues(listing)
    )
    return EXIT_OK


def cmd_pause(args: argparse.Namespace) -> int:
    def pause(pauses: QueuePauses, conn: Any, known: dict[str, dict[str, Any]]) -> None:
        done = pauses.pause(conn, args.queues)
        if done:
            running = sum(known[q]["counts"]["running"] for q in done)
            tail = f" ({running} running job(s) will finish)" if running else ""
            print(f"paused: {', '.join(done)}{tail}")
        _say_left("already paused", args.queues, done)

    return _change(args, "queues pause", pause)


def cmd_resume(args: argparse.Namespace) -> int:
    def resume(pauses: QueuePauses, conn: Any, known: dict[str, dict[str, Any]]) -> None:
        done = pauses.resume(conn, args.queues)
        if done:
            print(f"resumed: {', '.join(done)}")
        _say_left("not paused", args.queues, done)

    return _change(args, "queues resume", resume)


def _change(
    args: argparse.Namespace,
    name: str,
    action: Callable[[QueuePauses, Any, dict[str, dict[str, Any]]], None],
) -> int:
    """Runs `action` on the named queues once every name is known; a UsageError (exit 2,
    nothing changed) for the first that is not."""
    from pgworkerd.client.pausing import QueuePauses  # the client loads with the database

    config = load_config(args)
    pauses = QueuePauses(config.database.schema_name)
    with connect(config, name) as conn:
        known = known_queues(conn, config, args.queues, name)
        action(pauses, conn, known)
    return EXIT_OK


def known_queues(
    conn: Any, config: Config, names: list[str], command: str
) -> dict[str, dict[str, Any]]:
    """Every queue an operator can name (see the module's docstring), as `queues --json`
    lists them; a UsageError (exit 2) for the first of `names` that is none of them.
    Also `jobs retry --dead --queue`'s rule, so that a typo is refused alike."""
    from pgworkerd.client.pausing import QueuePauses  # the client loads with the database

    pauses = QueuePauses(config.database.schema_name)
    known = {q["queue"]: q for q in pauses.queues(conn, list(config.queues))}
    unknown = [q for q in dict.fromkeys(names) if q not in known]
    if unknown:
        raise UsageError(
            f"{command}: unknown queue {unknown[0]!r}: not in the config, "
            "named by no job, not paused"
        )
    return known


def _say_left(what: str, asked: list[str], done: list[str]) -> None:
    left = [q for q in dict.fromkeys(asked) if q not in done]
    if left:
        print(f"{what}: {', '.join(left)}")
