"""Jepsen-style checking: record a history, then check the invariants I1-I5
(docs/faults.md, "Invariants").

Two records are kept in the test's own database:
  * `history`: one row per handler event (start, end), written by tests/handlers.py;
  * `transitions`: one row per change of a job's state or lease token, written by a
    trigger on pgworkerd.jobs that only the tests install.

I1 no job lost; I2 attempt equals the number of starts; I3 at most one accepted
outcome per lease, nothing changes a finished job; I4 no two handlers of a job at
once, except where the earlier one's lease had expired; I5 nothing held past its max
runtime plus one lease period; I6 (workflows) a job that runs `after` others leaves
`waiting` at most once, never starts before each of its dependencies succeeded (or,
with after_failure "run", ended), and stays `waiting` only while one of them is not
final.
"""

from __future__ import annotations

import itertools
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import psycopg

from tests.daemon import HISTORY_TABLE

FINAL = ("succeeded", "dead", "cancelled")
# Errors that mean an attempt's lease ran out while its handler may still have run.
LEASE_EXPIRY_MARKERS = ("lease expired", "could not renew")

TRANSITIONS = """
CREATE TABLE IF NOT EXISTS transitions (
    id          bigserial PRIMARY KEY,
    job_id      bigint NOT NULL,
    old_state   text NOT NULL,
    new_state   text NOT NULL,
    old_token   uuid,
    new_token   uuid,
    old_attempt int NOT NULL,
    new_attempt int NOT NULL,
    error       text,
    at          timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE OR REPLACE FUNCTION record_transition() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.state IS DISTINCT FROM OLD.state
       OR NEW.lease_token IS DISTINCT FROM OLD.lease_token THEN
        INSERT INTO transitions (job_id, old_state, new_state, old_token, new_token,
                                 old_attempt, new_attempt, error)
        VALUES (NEW.id, OLD.state, NEW.state, OLD.lease_token, NEW.lease_token,
                OLD.attempt, NEW.attempt, NEW.last_error);
    END IF;
    RETURN NEW;
END $$;
DROP TRIGGER IF EXISTS record_transition ON pgworkerd.jobs;
CREATE TRIGGER record_transition AFTER UPDATE ON pgworkerd.jobs
    FOR EACH ROW EXECUTE FUNCTION record_transition();
"""


def install(conn: psycopg.Connection[Any]) -> None:
    conn.execute(HISTORY_TABLE)
    conn.execute(TRANSITIONS)


@dataclass
class Verdict:
    violations: list[str] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=dict)

    def report(self) -> str:
        lines = [f"{len(self.violations)} violation(s); counts {self.counts}"]
        lines += self.violations[:40]
        return "\n".join(lines)


def check(
    conn: psycopg.Connection[Any],
    job_ids: Iterable[int],
    *,
    max_runtime_s: float,
    lease_ttl_s: float,
    unrecorded_starts: int = 0,
    slack_s: float = 6.0,
) -> Verdict:
    """Check I1-I5 for `job_ids` once the system is quiet (no daemon running jobs).

    `unrecorded_starts` is how many starts may have left no history row in all (a
    worker SIGKILLed after its claim but before the handler's first write)."""
    ids = list(job_ids)
    verdict = Verdict()
    jobs = {
        row[0]: row
        for row in conn.execute(
            "SELECT id, state, attempt, last_error FROM pgworkerd.jobs WHERE id = ANY(%s)", (ids,)
        )
    }
    starts: dict[int, list[tuple[int, Any, Any]]] = defaultdict(list)  # job -> (attempt, at, pid)
    ends: dict[tuple[int, int], Any] = {}
    for job_id, attempt, event, pid, at in conn.execute(
        "SELECT job_id, attempt, event, pid, at FROM history WHERE job_id = ANY(%s) ORDER BY id",
        (ids,),
    ):
        if event == "start":
            starts[job_id].append((attempt, at, pid))
        elif event == "end":
            ends[(job_id, attempt)] = at
    transitions: dict[int, list[tuple[Any, ...]]] = defaultdict(list)
    for row in conn.execute(
        "SELECT job_id, old_state, new_state, old_token, new_token, old_attempt,"
        " new_attempt, error, at FROM transitions WHERE job_id = ANY(%s) ORDER BY id",
        (ids,),
    ):
        transitions[row[0]].append(row[1:])

    _i1_nothing_lost(verdict, ids, jobs)
    unrecorded = _i2_attempts_are_starts(verdict, jobs, starts, transitions)
    if unrecorded > unrecorded_starts:
        verdict.violations.append(
            f"I2: {unrecorded} starts left no history, more than the {unrecorded_starts} "
            "the faults can explain"
        )
    _i3_one_outcome_per_lease(verdict, transitions)
    _i4_one_handler_at_a_time(verdict, starts, ends, transitions)
    _i5_bounded_holding(verdict, transitions, max_runtime_s + lease_ttl_s + slack_s)
    released = _i6_released_once_after_dependencies(conn, verdict, ids)
    states: dict[str, int] = defaultdict(int)
    for row in jobs.values():
        states[row[1]] += 1
    verdict.counts = {
        **states,
        "starts": sum(len(s) for s in starts.values()),
        "reruns": sum(max(0, row[2] - 1) for row in jobs.values()),
        "unrecorded_starts": unrecorded,
        "released": released,
    }
    return verdict


def assert_holds(conn: psycopg.Connection[Any], job_ids: Iterable[int], **kwargs: Any) -> Verdict:
    verdict = check(conn, job_ids, **kwargs)
    assert not verdict.violations, verdict.report()
    return verdict


def _i1_nothing_lost(verdict: Verdict, ids: list[int], jobs: dict[int, Any]) -> None:
    for job_id in ids:
        row = jobs.get(job_id)
        if row is None:
            verdict.violations.append(f"I1: job {job_id} is gone from the table")
        elif row[1] not in (*FINAL, "queued", "waiting"):  # waiting: checked by I6
            verdict.violations.append(f"I1: job {job_id} is stuck {row[1]!r}")


def _i2_attempts_are_starts(
    verdict: Verdict,
    jobs: dict[int, Any],
    starts: dict[int, list[Any]],
    transitions: dict[int, list[Any]],
) -> int:
    unrecorded_total = 0
    for job_id, row in jobs.items():
        attempt = row[2]
        claims = sum(1 for t in transitions[job_id] if t[1] == "running")
        releases = sum(
            1
            for t in transitions[job_id]
            if t[0] == "running" and t[1] == "queued" and t[5] == t[4] - 1
        )
        if attempt != claims - releases:
            verdict.violations.append(
                f"I2: job {job_id} attempt={attempt} but {claims} claims - {releases} "
                "uncharged releases"
            )
        recorded = [a for a, _, _ in starts[job_id]]
        if len(recorded) != len(set(recorded)):
            verdict.violations.append(f"I2: job {job_id} ran attempt numbers {recorded} twice")
        if recorded and max(recorded) > attempt:
            verdict.violations.append(f"I2: job {job_id} ran attempt {max(recorded)} > {attempt}")
        unrecorded_total += max(0, attempt - len(recorded))
    return unrecorded_total


def _i3_one_outcome_per_lease(verdict: Verdict, transitions: dict[int, list[Any]]) -> None:
    for job_id, rows in transitions.items():
        ended: dict[Any, int] = defaultdict(int)
        for old_state, new_state, old_token, *_ in rows:
            if old_state in FINAL:
                verdict.violations.append(
                    f"I3: job {job_id} changed after it finished: {old_state} -> {new_state}"
                )
            if old_state == "running":
                ended[old_token] += 1
        for token, count in ended.items():
            if count > 1:
                verdict.violations.append(f"I3: job {job_id} lease {token} ended {count} times")


def _i4_one_handler_at_a_time(
    verdict: Verdict,
    starts: dict[int, list[Any]],
    ends: dict[tuple[int, int], Any],
    transitions: dict[int, list[Any]],
) -> None:
    for job_id, runs in starts.items():
        expired = {
            t[4]
            for t in transitions[job_id]  # attempts whose lease ran out
            if t[0] == "running" and any(m in (t[6] or "") for m in LEASE_EXPIRY_MARKERS)
        }
        ordered = sorted(runs, key=lambda r: r[1])
        for (attempt, _, _), (later, later_at, _) in itertools.pairwise(ordered):
            end = ends.get((job_id, attempt))
            if end is not None and end > later_at and attempt not in expired:
                verdict.violations.append(
                    f"I4: job {job_id} attempt {later} started before attempt {attempt} ended"
                )


def _i5_bounded_holding(
    verdict: Verdict, transitions: dict[int, list[Any]], limit_s: float
) -> None:
    for job_id, rows in transitions.items():
        claimed_at = {t[3]: t[7] for t in rows if t[1] == "running"}
        for old_state, _, old_token, *_, at in rows:
            if old_state == "running" and old_token in claimed_at:
                held = (at - claimed_at[old_token]).total_seconds()
                if held > limit_s:
                    verdict.violations.append(
                        f"I5: job {job_id} held {held:.1f}s by one lease (limit {limit_s:.1f}s)"
                    )


def _i6_released_once_after_dependencies(
    conn: psycopg.Connection[Any], verdict: Verdict, ids: list[int]
) -> int:
    """I6 for the jobs of `ids` enqueued with `after`; returns how many left `waiting`.
    Order is read from the transitions' ids: the release's rows are written before its
    transaction commits, a start's only after it (a claim sees only committed rows)."""
    dependents = conn.execute(
        "SELECT id, state, after_ids, after_failure FROM pgworkerd.jobs"
        " WHERE id = ANY(%s) AND after_ids IS NOT NULL",
        (ids,),
    ).fetchall()
    if not dependents:
        return 0
    related = sorted(
        {i for _, _, after, _ in dependents for i in after} | {d[0] for d in dependents}
    )
    states = dict(
        conn.execute("SELECT id, state FROM pgworkerd.jobs WHERE id = ANY(%s)", (related,))
    )
    moves: dict[int, list[tuple[int, str, str]]] = defaultdict(list)
    for tid, job_id, old, new in conn.execute(
        "SELECT id, job_id, old_state, new_state FROM transitions WHERE job_id = ANY(%s)"
        " ORDER BY id",
        (related,),
    ):
        moves[job_id].append((tid, old, new))
    released = 0
    for job_id, state, after, after_failure in dependents:
        out = [m for m in moves[job_id] if m[1] == "waiting"]
        released += len(out)
        if len(out) > 1:
            verdict.violations.append(f"I6: job {job_id} left waiting {len(out)} times")
        if state == "waiting" and all(states.get(d) in FINAL for d in after):
            verdict.violations.append(f"I6: job {job_id} waits, but all of {after} are final")
        first_start = next((m[0] for m in moves[job_id] if m[2] == "running"), None)
        if first_start is None:
            continue
        wanted = ("succeeded",) if after_failure == "cancel" else FINAL
        for dep in after:
            ended = next((m[0] for m in moves[dep] if m[2] in wanted), None)
            if ended is None or ended > first_start:
                verdict.violations.append(
                    f"I6: job {job_id} started before its dependency {dep} ended {wanted}"
                )
    return released
