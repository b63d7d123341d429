"""The commands on jobs: `pgworkerd enqueue`, `status` and `jobs list | show | retry |
cancel`. Registered by `cli.main.build_parser`; errors are raised as `UsageError` (exit 2)
and reported by `cli.main.run_cli` like every other command's."""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from collections.abc import Callable, Iterator
from datetime import datetime
from typing import TYPE_CHECKING, Any

from pgworkerd.cli import formatting
from pgworkerd.cli.common import (
    EXIT_FAILURE,
    EXIT_OK,
    CommandAdder,
    Parser,
    UsageError,
    connect,
    duration_argument,
    json_argument,
    knows_the_queues,
    load_config,
    unknown_kind,
)
from pgworkerd.cli.queues import known_queues
from pgworkerd.storage.states import STATES

if TYPE_CHECKING:
    import psycopg

    from pgworkerd.client.operations import Operations
    from pgworkerd.config import Config


def register(command: CommandAdder, common: Parser) -> None:
    enqueue = command("enqueue", cmd_enqueue, "enqueue one job and print its id")
    enqueue.add_argument("kind")
    enqueue.add_argument("--payload", default="{}", metavar="JSON")
    enqueue.add_argument("--queue", default="default")
    enqueue.add_argument("--priority", type=int, default=0)
    enqueue.add_argument("--delay", metavar="DUR", help="e.g. 30, 30s, 15m, 1h")
    enqueue.add_argument("--run-at", metavar="ISO8601", help="with a timezone offset")
    enqueue.add_argument("--unique-key", metavar="K")
    mode = enqueue.add_mutually_exclusive_group()
    mode.add_argument(
        "--debounce", metavar="DUR", help="with --unique-key: one job, DUR after the last enqueue"
    )
    mode.add_argument(
        "--throttle", metavar="DUR", help="with --unique-key: at most one job per DUR"
    )
    enqueue.add_argument("--key", metavar="KEY", help="the job's key, e.g. tenant:42")
    enqueue.add_argument("--max-attempts", type=int, metavar="N")
    enqueue.add_argument(
        "--after",
        action="append",
        type=_job_id,
        metavar="ID",
        help="run after job ID succeeded (repeatable)",
    )
    enqueue.add_argument(
        "--after-failure",
        choices=("cancel", "run"),
        help="when an --after job ends dead or cancelled (default: cancel)",
    )
    status = command(
        "status", cmd_status, "queues, their jobs by state, live daemons, periodic entries"
    )
    status.add_argument("--json", action="store_true", help="one JSON object")
    jobs = command("jobs", _no_subcommand, "list, show, retry or cancel jobs")
    subs = jobs.add_subparsers(dest="jobs_command", required=True, parser_class=Parser)

    def sub(name: str, func: Callable[[argparse.Namespace], int], help_text: str) -> Any:
        parser = subs.add_parser(name, parents=[common], help=help_text, description=help_text)
        parser.set_defaults(func=func)
        return parser

    listing = sub("list", cmd_list, "jobs newest first (by id)")
    listing.add_argument("--state", choices=STATES)
    listing.add_argument("--queue", metavar="Q")
    listing.add_argument("--kind", metavar="K")
    listing.add_argument("--limit", type=_positive_int, default=50, metavar="N")
    listing.add_argument("--json", action="store_true", help="a JSON array of jobs")
    show = sub("show", cmd_show, "everything known about one job")
    show.add_argument("id", type=_job_id)
    show.add_argument("--json", action="store_true", help="one JSON object")
    retry = sub("retry", cmd_retry, "queue dead or cancelled jobs again, to run now")
    retry.add_argument("ids", nargs="*", type=_job_id, metavar="ID")
    retry.add_argument("--dead", action="store_true", help="every dead job (of --queue)")
    retry.add_argument("--queue", metavar="Q", help="with --dead: only this queue")
    cancel = sub("cancel", cmd_cancel, "cancel waiting, queued or running jobs")
    cancel.add_argument("ids", nargs="+", type=_job_id, metavar="ID")


def cmd_enqueue(args: argparse.Namespace) -> int:
    config = load_config(args)
    if args.queue not in config.queues and knows_the_queues(args, config):
        # A daemon's pools claim only declared queues: a typo's job would wait forever.
        raise UsageError(
            f"--queue: {args.queue!r} is not declared under queues in the config: "
            "no daemon of this config would run the job"
        )
    unknown = unknown_kind(config, args.kind)
    if unknown is not None:
        raise UsageError(f"kind: {unknown}")
    payload = json_argument("--payload", args.payload)
    options: dict[str, Any] = {
        "queue": args.queue,
        "priority": args.priority,
        "unique_key": args.unique_key,
        "key": args.key,
        "max_attempts": args.max_attempts,
    }
    if args.after:
        options["after"] = args.after
        options["after_failure"] = args.after_failure or "cancel"
    elif args.after_failure is not None:
        raise UsageError("--after-failure goes with --after")
    if args.delay is not None:
        options["delay"] = duration_argument("--delay", args.delay)
    for mode in ("debounce", "throttle"):
        text = getattr(args, mode)
        if text is not None:
            options[mode] = duration_argument(f"--{mode}", text)
    if args.run_at is not None:
        try:
            options["run_at"] = datetime.fromisoformat(args.run_at)
        except ValueError:
            raise UsageError(f"--run-at: {args.run_at!r} is not an ISO 8601 time") from None
    from pgworkerd.client.producer import Producer  # the client loads with the database

    producer = Producer(schema=config.database.schema_name)
    with connect(config, "enqueue") as conn:
        job_id = producer.enqueue(conn, args.kind, payload, **options)
    print(job_id)
    return EXIT_OK


def cmd_status(args: argparse.Namespace) -> int:
    config = load_config(args)  # what it schedules, and when; its lease_ttl
    with _connect(args, "status") as (conn, ops):
        report = ops.status(
            conn, config.periodic, lease_ttl_s=config.lease_ttl, limits=config.queue_limits()
        )
    print(_json(report) if args.json else formatting.status(report))
    return EXIT_OK


def cmd_list(args: argparse.Namespace) -> int:
    with _connect(args, "jobs list") as (conn, ops):
        jobs = ops.list_jobs(
            conn, state=args.state, queue=args.queue, kind=args.kind, limit=args.limit
        )
    print(_json(jobs) if args.json else formatting.job_list(jobs))
    return EXIT_OK


def cmd_show(args: argparse.Namespace) -> int:
    with _connect(args, "jobs show") as (conn, ops):
        detail = ops.show(conn, args.id)
    if detail is None:
        raise UsageError(f"job {args.id} not found")
    print(_json(detail) if args.json else formatting.job(detail))
    return EXIT_OK


def cmd_retry(args: argparse.Namespace) -> int:
    if args.dead == bool(args.ids):
        raise UsageError("jobs retry: give job ids or --dead, not both")
    if args.queue is not None and not args.dead:
        raise UsageError("jobs retry: --queue goes with --dead")
    config = load_config(args)
    with _connect(args, "jobs retry", config) as (conn, ops):
        if args.dead:
            done = ops.retry(conn, queue=args.queue)
            if not done and args.queue is not None and args.queue not in config.queues:
                # A typo, refused as `queues pause` refuses it, retried nothing: only
                # then is the name looked for among the jobs (a pass over the table).
                known_queues(conn, config, [args.queue], "jobs retry")
            print(f"queued again: {len(done)} dead job(s)" + (f" ({_ids(done)})" if done else ""))
            return EXIT_OK
        states = _existing(ops, conn, args.ids)
        done = ops.retry(conn, ids=args.ids)
    return _report(
        "queued again",
        args.ids,
        done,
        states,
        "not dead or cancelled, its unique key is live, or its cancelled handler still runs",
    )


def cmd_cancel(args: argparse.Namespace) -> int:
    with _connect(args, "jobs cancel") as (conn, ops):
        states = _existing(ops, conn, args.ids)
        done = ops.cancel(conn, args.ids)
    return _report("cancelled", args.ids, done, states, "not waiting, queued or running")


# -- helpers ----------------------------------------------------------------------------------


@contextlib.contextmanager
def _connect(
    args: argparse.Namespace, name: str, config: Config | None = None
) -> Iterator[tuple[psycopg.Connection[Any], Operations]]:
    """An autocommit connection and the operations of the configured schema (`config`,
    or the one `args` names)."""
    from pgworkerd.client.operations import Operations  # the client loads with the database

    config = config or load_config(args)
    with connect(config, name) as conn:
        yield conn, Operations(config.database.schema_name)


def _existing(ops: Operations, conn: psycopg.Connection[Any], ids: list[int]) -> dict[int, str]:
    """The states of `ids`; a UsageError (exit 2, nothing changed) if one is missing."""
    states = ops.states(conn, ids)
    missing = [i for i in ids if i not in states]
    if missing:
        noun = "job" if len(missing) == 1 else "jobs"
        raise UsageError(f"{noun} {_ids(missing)} not found")
    return states


def _report(
    verb: str, ids: list[int], done: list[int], states: dict[int, str], why_not: str
) -> int:
    """Prints what was done; one error line per job left as it was (exit 1)."""
    if done:
        print(f"{verb}: {_ids(done)}")
    left = [i for i in dict.fromkeys(ids) if i not in done]
    for i in left:
        print(f"pgworkerd: error: job {i} is {states[i]}: {why_not}", file=sys.stderr)
    return EXIT_FAILURE if left else EXIT_OK


def _ids(ids: list[int]) -> str:
    return ", ".join(str(i) for i in ids)


def _json(value: Any) -> str:
    try:
        return json.dumps(value, ensure_ascii=False, indent=2)
    except RecursionError:
        # A payload or result decoded, but too deep to indent (Python's encoder, a
        # frame or more a level; a row written by SQL): the C encoder's compact text,
        # which reaches as deep as the decoding did, a level per step.
        return json.dumps(value, ensure_ascii=False)


def _job_id(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a job id") from None
    if not 1 <= value < 2**63:
        raise argparse.ArgumentTypeError(f"{text!r} is not a job id")
    return value


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive integer") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive integer")
    if value > 2**63 - 1:  # the database takes a bigint
        raise argparse.ArgumentTypeError(f"{text!r} is over 2**63 - 1")
    return value


def _no_subcommand(args: argparse.Namespace) -> int:  # pragma: no cover - argparse requires one
    raise UsageError("jobs: a subcommand is required")
