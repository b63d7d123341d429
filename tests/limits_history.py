"""The history checker of flow-control limits (issue 19): from what handlers recorded
(tests/handlers.py writes `history`: start and end of each handler) and what a trigger
recorded of every claim (`claims`: each queued -> running change with the start's
time, jobs.started_at, the time the rate ledger is kept by), find the most handlers of
a queue (or of a key) that ever ran at once, and the most starts in any window of a
period. A handler that never recorded its end (its worker was SIGKILLed) is counted
as running until its lease was settled (the next change of its job away from that lease
token, from tests/invariants.py's `transitions`): up to then it held its place."""

from __future__ import annotations

from collections import defaultdict
from datetime import datetime
from typing import Any

import psycopg

from tests import invariants
from tests.limits_windows import most_at_once, most_in_window

CLAIMS = """
CREATE TABLE IF NOT EXISTS claims (
    id          bigserial PRIMARY KEY,
    job_id      bigint NOT NULL,
    queue       text NOT NULL,
    key         text,
    started_at  timestamptz NOT NULL
);
CREATE OR REPLACE FUNCTION record_claim() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.state = 'running' AND OLD.state = 'queued' THEN
        INSERT INTO claims (job_id, queue, key, started_at)
        VALUES (NEW.id, NEW.queue, NEW.key, NEW.started_at);
    END IF;
    RETURN NEW;
END $$;
DROP TRIGGER IF EXISTS record_claim ON pgworkerd.jobs;
CREATE TRIGGER record_claim AFTER UPDATE ON pgworkerd.jobs
    FOR EACH ROW EXECUTE FUNCTION record_claim();
"""

# Handler runs: (queue, key, start, end), the end from `history`, else the settlement.
RUNS = """
SELECT j.queue, j.key, s.at AS started,
       coalesce(
           (SELECT min(e.at) FROM history AS e
            WHERE e.job_id = s.job_id AND e.lease_token = s.lease_token AND e.event = 'end'),
           (SELECT min(t.at) FROM transitions AS t
            WHERE t.job_id = s.job_id AND t.old_token = s.lease_token
              AND t.new_token IS DISTINCT FROM s.lease_token),
           'infinity') AS ended
FROM history AS s
JOIN pgworkerd.jobs AS j ON j.id = s.job_id
WHERE s.event = 'start'
"""


def install(conn: psycopg.Connection[Any]) -> None:
    invariants.install(conn)
    conn.execute(CLAIMS)


def runs(conn: psycopg.Connection[Any]) -> list[tuple[str, str | None, datetime, datetime]]:
    return [tuple(row) for row in conn.execute(RUNS).fetchall()]


def most_running(conn: psycopg.Connection[Any], *, by_key: bool = False) -> dict[Any, int]:
    """Queue (or (queue, key)) -> the most of its handlers that ever ran at once."""
    groups: dict[Any, list[tuple[datetime, datetime]]] = defaultdict(list)
    for queue, key, started, ended in runs(conn):
        if by_key and key is None:
            continue
        groups[(queue, key) if by_key else queue].append((started, ended))
    return {group: most_at_once(spans) for group, spans in groups.items()}


def most_starts(
    conn: psycopg.Connection[Any], period_s: float, *, by_key: bool = False
) -> dict[Any, int]:
    """Queue (or (queue, key)) -> the most claims it had in any window of `period_s`."""
    groups: dict[Any, list[datetime]] = defaultdict(list)
    for queue, key, started_at in conn.execute("SELECT queue, key, started_at FROM claims"):
        if by_key and key is None:
            continue
        groups[(queue, key) if by_key else queue].append(started_at)
    return {group: most_in_window(times, period_s) for group, times in groups.items()}
