"""Workflows under the real daemon: dependents start only after their dependencies
succeeded (handler timestamps); a dead dependency cancels in cascade; a batch's callback
runs once whatever its jobs' outcomes; a kill storm with two daemons releases every
dependent exactly once and loses nothing (I1-I6, tests/invariants.py)."""

from __future__ import annotations

import itertools
import random
import signal
import time
from typing import Any

import psycopg
import pytest

import pgworkerd
from tests import invariants
from tests.daemon import history, states, wait_until
from tests.process.test_kill_storm import _busy

Conn = psycopg.Connection[Any]
WORKERS = [{"queues": ["default"], "concurrency": 3}]


def job_states(conn: Conn, ids: list[int]) -> list[str]:
    found = dict(conn.execute("SELECT id, state FROM pgworkerd.jobs WHERE id = ANY(%s)", [ids]))
    return [found[i] for i in ids]


def first_event(conn: Conn, job_id: int, event: str) -> Any:
    times = [at for _, _, e, _, at in history(conn, job_id) if e == event]
    return times[0] if times else None


def test_dependents_start_only_after_their_dependencies_succeeded(start_daemon, recorder):
    conn = recorder
    exports = pgworkerd.enqueue_many(
        conn, [{"kind": "sleep", "payload": {"seconds": 0.3 + i / 10}} for i in range(3)]
    )
    email = pgworkerd.enqueue(conn, "record", {}, after=exports)
    links = pgworkerd.chain(conn, [{"kind": "sleep", "payload": {"seconds": 0.1}}] * 4)
    assert job_states(conn, [email, *links[1:]]) == ["waiting"] * 4
    daemon = start_daemon(workers=WORKERS)
    wait_until(
        lambda: job_states(conn, [email, *links]) == ["succeeded"] * 5,
        timeout_s=30,
        what="the email and the chain to succeed",
    )
    daemon.signal(signal.SIGTERM)
    assert daemon.wait(timeout_s=30) == 0
    email_start = first_event(conn, email, "start")
    assert all(first_event(conn, e, "end") < email_start for e in exports)
    for before, after in itertools.pairwise(links):
        assert first_event(conn, before, "end") < first_event(conn, after, "start")
    invariants.assert_holds(conn, [*exports, email, *links], max_runtime_s=60, lease_ttl_s=30)


def test_a_dead_dependency_cancels_in_cascade_and_a_batch_callback_runs_once(
    start_daemon, recorder
):
    conn = recorder
    doomed = pgworkerd.enqueue(conn, "discard", {})
    middle = pgworkerd.enqueue(conn, "record", {}, after=[doomed])
    leaf = pgworkerd.enqueue(conn, "record", {}, after=[middle])
    batch, then = pgworkerd.batch(
        conn,
        [{"kind": "fail", "payload": {}, "max_attempts": 1}, {"kind": "record", "payload": {}}],
        then={"kind": "record", "payload": {"callback": True}},
    )
    daemon = start_daemon(workers=WORKERS)
    wait_until(
        lambda: (
            job_states(conn, [doomed, middle, leaf, *batch, then])
            == ["dead", "cancelled", "cancelled", "dead", "succeeded", "succeeded"]
        ),
        timeout_s=30,
        what="the cascade and the callback",
    )
    daemon.signal(signal.SIGTERM)
    assert daemon.wait(timeout_s=30) == 0
    assert history(conn, middle) == [] and history(conn, leaf) == []
    assert [e for _, _, e, _, _ in history(conn, then)] == ["start"], "the callback ran once"
    invariants.assert_holds(
        conn, [doomed, middle, leaf, *batch, then], max_runtime_s=60, lease_ttl_s=30
    )


PARENTS = 200
KILL_EVERY_S = 0.3
STORM_S = 15.0


@pytest.mark.slow  # ~30 s
def test_kill_storm_with_two_daemons_releases_every_dependent_exactly_once(daemons, own_cluster):
    """Two daemons, a worker SIGKILLed every 0.3 s, the supervisor of one daemon
    SIGKILLed once, PostgreSQL restarted in the middle. Each parent has two dependents
    (one with "run", one the head of a chain of two) and a batch callback waits for
    every parent: 200 + 600 + 1 jobs, long enough (0.2-0.3 s) for the storm to find
    them running."""
    dsn = own_cluster.dsn()
    with psycopg.connect(dsn, autocommit=True) as conn:
        invariants.install(conn)
        parents, callback = pgworkerd.batch(
            conn,
            [{"kind": "work", "payload": {"ms": 300}} for _ in range(PARENTS)],
            then={"kind": "work", "payload": {"ms": 1}},
        )
        dependents = []
        for parent in parents:
            dependents.append(
                pgworkerd.enqueue(conn, "work", {"ms": 200}, after=[parent], after_failure="run")
            )
            first = pgworkerd.enqueue(conn, "work", {"ms": 200}, after=[parent])
            dependents += [first, pgworkerd.enqueue(conn, "work", {"ms": 200}, after=[first])]
    ids = [*parents, *dependents, callback]
    config: dict[str, Any] = {
        "workers": [{"queues": ["default"], "concurrency": 2, "threads": 4}],
        "defaults": {
            "max_attempts": 25,
            "max_runtime": "30s",
            "batch_size": 10,
            "backoff_base": "100ms",
            "backoff_max": "500ms",
        },
    }
    fleet = [daemons(dsn, "a", **config), daemons(dsn, "b", **config)]
    for daemon in fleet:
        daemon.wait_for_workers(2)
    rng = random.Random(22)
    kills, restarted, supervisor_killed = 0, False, False
    started = time.monotonic()
    while (elapsed := time.monotonic() - started) < STORM_S:
        if not restarted and elapsed > STORM_S / 2:
            own_cluster.stop("fast")
            own_cluster.start()
            restarted = True
        if not supervisor_killed and elapsed > STORM_S / 4:
            fleet[1].signal(signal.SIGKILL)  # the supervisor: its workers follow it
            fleet[1].wait(timeout_s=30)
            fleet[1] = daemons(dsn, "b2", **config)
            supervisor_killed = True
        busy = [p for d in fleet for p in d.workers() if _busy(" ".join(p.cmdline()))]
        if busy:
            rng.choice(busy).kill()
            kills += 1
        time.sleep(KILL_EVERY_S)

    def done() -> bool:
        with psycopg.connect(dsn) as conn:
            return states(conn).get("succeeded", 0) == len(ids)

    wait_until(done, timeout_s=120, what="every job to succeed after the storm")
    for daemon in fleet:
        daemon.signal(signal.SIGTERM)
        assert daemon.wait(timeout_s=30) == 0
    with psycopg.connect(dsn) as conn:
        verdict = invariants.assert_holds(
            conn,
            ids,
            max_runtime_s=30,
            lease_ttl_s=3,
            unrecorded_starts=(kills + 2 * 3 * 10) * 4 + 100,
        )
        assert verdict.counts["released"] == len(dependents) + 1, verdict.counts
        left = conn.execute("SELECT count(*) FROM pgworkerd.job_dependencies").fetchone()
        assert left == (0,)
    print(f"workflow kill storm: {kills} kills, {verdict.counts}")
    assert kills >= STORM_S / KILL_EVERY_S / 3
