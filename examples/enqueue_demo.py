"""Enqueues the demo's jobs into the database of config/pgworkerd.yaml."""

from __future__ import annotations

import sys

import pgworkerd
from pgworkerd import config
from pgworkerd.storage import connections


def main() -> None:
    settings = config.load(sys.argv[1] if len(sys.argv) > 1 else None)
    producer = pgworkerd.Producer(schema=settings.database.schema_name)
    with connections.connect(
        connections.database_url(settings), application_name="pgworkerd demo", autocommit=False
    ) as conn:
        ids = producer.enqueue_many(
            conn,
            [
                {"kind": "hello", "payload": {"name": "pgworkerd"}},
                {"kind": "flaky", "payload": {"succeed_at": 3}},
                {"kind": "poison", "payload": {"order": 42}},
                {"kind": "hang", "payload": {}, "queue": "slow", "max_attempts": 2},
            ],
        )
        conn.commit()
    print(
        f"enqueued demo jobs {ids}: hello succeeds, flaky retries then succeeds, "
        "poison is dead-lettered, hang is killed at its max runtime. Ctrl-C drains and stops."
    )


if __name__ == "__main__":
    main()
