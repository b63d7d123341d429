"""What the one-slot worker promises around its claims, checked on the real daemon with
real signals, whatever the worker does to overlap a claim with its handlers (issue 23,
round 16): a drain leaves each job either succeeded once or queued uncharged; a killed
worker's jobs are settled and rerun only where they had started; a success whose lease
was taken before its job started is never written; a batch of slow jobs never holds
more than a batch while a sibling could run it.

The handler (tests/note_handlers.py) notes its start and end in a file, so that the
jobs are short enough for the worker's no-op path; the notes are copied into `history`
for the invariants of tests/invariants.py."""

from __future__ import annotations

import signal
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import psycopg
import pytest

import pgworkerd
from tests import invariants
from tests.daemon import BASE_CONFIG, Daemon, history, job, states, wait_until
from tests.note_handlers import load, read

Conn = psycopg.Connection[Any]
HANDLERS = {
    "note": "tests.note_handlers:note",
    "sleep": "tests.handlers:sleep",
    "spin": "tests.handlers:spin",
}
BATCH = 20
ONE_SLOT = [{"queues": ["default"], "concurrency": 1}]


def _start(
    start_daemon: Any, tmp_path: Path, batch_size: int = BATCH, **config: Any
) -> tuple[Daemon, Path]:
    """A daemon whose handler is `note`, writing to a notes file of its own."""
    notes = tmp_path / "notes"
    daemon = start_daemon(
        env={"PGWORKERD_TEST_NOTES": str(notes)},
        defaults={**BASE_CONFIG["defaults"], "batch_size": batch_size},
        **{"workers": ONE_SLOT, "handlers": HANDLERS, **config},
    )
    return daemon, notes


def _enqueue(conn: Conn, count: int, ms: int = 0) -> list[int]:
    return pgworkerd.enqueue_many(conn, [{"kind": "note", "payload": {"ms": ms}}] * count)


def _rows(conn: Conn, ids: list[int]) -> dict[int, dict[str, Any]]:
    from psycopg.rows import dict_row

    with conn.cursor(row_factory=dict_row) as cur:
        cur.execute(
            "SELECT id, state, attempt, lease_token, result, errors FROM pgworkerd.jobs"
            " WHERE id = ANY(%s)",
            (ids,),
        )
        return {row["id"]: row for row in cur}


def _first_note(notes: Path) -> None:
    wait_until(lambda: read(notes), what="the first job to start")


# -- TERM while a batch runs and more is queued -------------------------------------------

TERM_JOBS = 5000
SHUTDOWN_S = 5.0


@pytest.mark.parametrize(
    ("ms", "after_s"),
    [(0, 0.0), (0, 0.04), (0, 0.11), (0, 0.27), (1, 0.08)],
    ids=["noop-at-once", "noop-40ms", "noop-110ms", "noop-270ms", "1ms-80ms"],
)
def test_a_drain_mid_stream_leaves_each_job_succeeded_once_or_queued_uncharged(
    start_daemon: Any, recorder: Conn, tmp_path: Path, ms: int, after_s: float
) -> None:
    ids = _enqueue(recorder, TERM_JOBS, ms)
    daemon, notes = _start(start_daemon, tmp_path, shutdown_timeout=f"{SHUTDOWN_S:g}s")
    _first_note(notes)
    time.sleep(after_s)  # when the TERM comes: the parameter; nothing is waited for here
    signalled = time.monotonic()
    daemon.signal(signal.SIGTERM)
    assert daemon.wait(timeout_s=SHUTDOWN_S + 10) == 0
    took_s = time.monotonic() - signalled
    assert took_s < SHUTDOWN_S, f"the drain took {took_s:.1f}s: killed at its deadline?"
    assert daemon.alive_children() == []
    assert "Traceback" not in daemon.log(), daemon.log()[-3000:]

    starts = Counter(n[0] for n in load(recorder, notes) if n[3] == "start")
    rows = _rows(recorder, ids)
    by_state = Counter(row["state"] for row in rows.values())
    assert set(by_state) <= {"succeeded", "queued"}, f"lost jobs: {by_state}"
    assert by_state["queued"], "the TERM came after the last job: nothing to give back"
    for job_id, row in rows.items():
        if row["state"] == "succeeded":
            assert (row["attempt"], starts[job_id]) == (1, 1), (job_id, row, starts[job_id])
        else:  # released: as if never claimed
            assert (row["attempt"], row["lease_token"], starts[job_id]) == (0, None, 0), (
                job_id,
                row,
                starts[job_id],
            )
    invariants.assert_holds(recorder, ids, max_runtime_s=30, lease_ttl_s=3)
    print(f"TERM after {after_s}s ({ms} ms jobs): {dict(by_state)}, drain {took_s:.2f}s")


# -- SIGKILL of the one-slot worker in a stream of short jobs -------------------------------

KILL_JOBS = 3000  # no-op jobs: the stream lasts about a second


@pytest.mark.parametrize(
    ("ms", "after_s"),
    [(0, 0.0), (0, 0.07), (0, 0.19), (1, 0.05), (1, 0.17)],
    ids=["noop-at-once", "noop-70ms", "noop-190ms", "1ms-50ms", "1ms-170ms"],
)
def test_a_worker_killed_mid_stream_has_its_jobs_settled_and_each_rerun_only_if_started(
    start_daemon: Any, recorder: Conn, tmp_path: Path, ms: int, after_s: float
) -> None:
    """No-op jobs: the kill mostly finds the worker waiting for a claim (its jobs are
    left to the rescue); 1 ms jobs: it is killed in a handler (its title names a job),
    and the supervisor settles what it held."""
    ids = _enqueue(recorder, KILL_JOBS, ms)
    daemon, notes = _start(start_daemon, tmp_path, lease_ttl="3s")
    victims: list[int] = []
    for _ in range(2):  # the second kill is of the worker started in the first's place
        (worker,) = daemon.wait_for_workers(1)
        before = len(read(notes))
        wait_until(lambda before=before: len(read(notes)) > before, what="a job started")
        time.sleep(after_s)  # when the kill comes: the parameter; nothing is waited for
        if ms:
            wait_until(
                lambda worker=worker: " job " in " ".join(worker.cmdline()),
                what="the worker in a handler",
                interval_s=0.001,
            )
        worker.kill()
        victims.append(worker.pid)
        worker.wait(timeout=10)  # reaped: the next look finds the child started after it
    wait_until(
        lambda: states(recorder) == {"succeeded": KILL_JOBS},
        timeout_s=60,
        what="every job to succeed after the kills",
    )
    daemon.signal(signal.SIGTERM)
    assert daemon.wait(timeout_s=30) == 0

    runs: dict[int, list[tuple[int, int]]] = defaultdict(list)  # job -> (attempt, pid)
    for job_id, attempt, pid, event, _ in load(recorder, notes):
        if event == "start":
            runs[job_id].append((attempt, pid))
    rows = _rows(recorder, ids)
    charged, unannounced, unnoted = [], [], []
    for job_id, row in rows.items():
        if row["attempt"] == 1:
            assert len(runs[job_id]) == 1, ("run more than once", job_id, runs[job_id])
            continue
        assert row["attempt"] == 2, (job_id, row)
        error = row["errors"][0]["error"]
        if "killed by SIGKILL" in error:
            # Started by a killed worker (running, or returned with its success not
            # written yet): the supervisor charged it; it ran again once, elsewhere.
            charged.append(job_id)
            first, *again = runs[job_id]
            if first[0] == 2:  # posted started, killed before the handler's first note
                unnoted.append(job_id)
                first, again = (1, victims[0]), [first]
            assert first[0] == 1 and first[1] in victims, (job_id, runs[job_id])
            assert [attempt for attempt, _ in again] == [2], (job_id, runs[job_id])
        elif "lease expired" in error:
            # Claimed by a statement whose answer the killed worker never read: never
            # announced, so left to the rescue; it never started before.
            unannounced.append(job_id)
            assert runs[job_id] == [(2, runs[job_id][0][1])], (job_id, runs[job_id])
        else:
            raise AssertionError(f"job {job_id} charged for {error!r}")
    if ms:
        assert charged, "killed in a handler, yet the supervisor charged no job"
    # What a claim under way can leave to the rescue: one claim's jobs per kill; and a
    # kill between a start's post and the handler's note, once per kill.
    assert len(unannounced) <= BATCH * len(victims), (len(unannounced), unannounced[:10])
    assert len(unnoted) <= len(victims), unnoted
    verdict = invariants.assert_holds(
        recorder,
        ids,
        max_runtime_s=30,
        lease_ttl_s=3,
        unrecorded_starts=len(unannounced) + len(unnoted),
    )
    print(
        f"kills after {after_s}s: {len(charged)} charged by the supervisor"
        f" ({len(unnoted)} before the handler's note),"
        f" {len(unannounced)} rescued unannounced, {verdict.counts}"
    )


# -- a lease lost before its job started ------------------------------------------------------


@pytest.mark.parametrize(
    ("lease_ttl", "blocker_ms"),
    [("60s", 1000), ("3s", 2500)],
    ids=["runs-then-fenced", "renewal-skips"],
)
def test_a_success_whose_lease_was_taken_before_its_job_started_is_not_written(
    start_daemon: Any, recorder: Conn, tmp_path: Path, lease_ttl: str, blocker_ms: int
) -> None:
    """The batch's first job blocks; meanwhile its other jobs, claimed and not started,
    get new tokens (as a rescue and another claim would give them). With a long lease
    no renewal comes before they start: they run, and their successes must be refused;
    with a short one the renewal finds them gone and the child skips them. Either way
    their rows keep what the new holder wrote."""
    (blocker,) = _enqueue(recorder, 1, blocker_ms)
    taken_batch = _enqueue(recorder, 9)
    after = _enqueue(recorder, 10)
    daemon, notes = _start(start_daemon, tmp_path, batch_size=10, lease_ttl=lease_ttl)
    wait_until(lambda: any(n[0] == blocker for n in read(notes)), what="the blocker to start")
    wait_until(
        lambda: (
            recorder.execute(
                "SELECT count(*) FROM pgworkerd.jobs WHERE state = 'running' AND id = ANY(%s)",
                (taken_batch,),
            ).fetchone()[0]
            == 9
        ),
        what="the blocker's batch to be claimed",
    )
    taken = recorder.execute(
        "UPDATE pgworkerd.jobs SET lease_token = gen_random_uuid(),"
        " lease_expires_at = now() + interval '1 hour'"
        " WHERE id = ANY(%s) AND state = 'running' RETURNING id",
        (taken_batch,),
    ).fetchall()
    assert len(taken) == 9
    assert read(notes)[-1][:1] == (blocker,), "a job after the blocker started already"
    before = _rows(recorder, taken_batch)
    wait_until(
        lambda: all(job(recorder, i)["state"] == "succeeded" for i in [blocker, *after]),
        what="the blocker and the next batch to succeed",
    )
    # The next batch's successes were written after the claim that carried the taken
    # jobs' successes (if they ran): whatever that claim wrote is in by now.
    assert _rows(recorder, taken_batch) == before, "a success under a taken lease was written"
    ran = {n[0] for n in read(notes) if n[3] == "start"} & set(taken_batch)
    if lease_ttl == "60s":
        assert ran == set(taken_batch), "they were skipped: the fence was not exercised"
    else:
        assert ran == set(), "the renewal did not find them gone before they started"
    daemon.signal(signal.SIGTERM)
    assert daemon.wait(timeout_s=20) == 0


# -- slow jobs and an idle sibling --------------------------------------------------------------


@pytest.mark.parametrize("mixed", [False, True], ids=["all-slow", "quick-and-slow"])
def test_a_worker_of_slow_jobs_holds_no_more_than_a_batch_while_its_sibling_can_run_them(
    start_daemon: Any, recorder: Conn, tmp_path: Path, mixed: bool
) -> None:
    """Two one-slot children; 30 jobs of 0.3 s (or, `mixed`, no-op and 0.3 s jobs
    in turn: 15 s of work all the same), a batch of 5: each child holds at most a
    batch (running, or claimed and waiting for its turn) at any moment, so the work is
    shared between the two, not held by one behind a slow job."""
    batch = 5
    daemon, notes = _start(
        start_daemon,
        tmp_path,
        batch_size=batch,
        workers=[{"queues": ["default"], "concurrency": 2}],
    )
    daemon.wait_for_workers(2)
    count = 60 if mixed else 30
    ids = pgworkerd.enqueue_many(
        recorder,
        [{"kind": "note", "payload": {"ms": 0 if mixed and i % 2 else 300}} for i in range(count)],
    )
    held: Counter[str] = Counter()  # worker -> the most jobs it held at one moment
    deadline = time.monotonic() + 30
    while states(recorder) != {"succeeded": count}:
        assert time.monotonic() < deadline, f"not done in 30s: {states(recorder)}"
        for worker, running in recorder.execute(
            "SELECT worker, count(*) FROM pgworkerd.jobs WHERE state = 'running' GROUP BY 1"
        ):
            held[worker] = max(held[worker], running)
        time.sleep(0.02)  # the sampling's pace; the loop's condition is what is waited for
    daemon.signal(signal.SIGTERM)
    assert daemon.wait(timeout_s=20) == 0
    assert held and max(held.values()) <= batch, f"held at once, by worker: {dict(held)}"
    ran = Counter(n[2] for n in load(recorder, notes) if n[3] == "start")
    assert len(ran) == 2 and min(ran.values()) >= 10, f"starts by process: {dict(ran)}"
    invariants.assert_holds(recorder, ids, max_runtime_s=30, lease_ttl_s=3)
    print(f"held at once: {dict(held)}; starts by process: {dict(ran)}")


# -- the successes' deadline ------------------------------------------------------------------


def test_the_successes_of_quick_jobs_are_written_before_a_job_of_an_unknown_kind_starts(
    start_daemon: Any, recorder: Conn, tmp_path: Path
) -> None:
    """success_buffer.py: a job not known to be quick may run for minutes; what
    finished before it is written before it starts, not held behind it."""
    quick = _enqueue(recorder, 30)
    slow = pgworkerd.enqueue(recorder, "sleep", {"seconds": 2})
    daemon, _ = _start(start_daemon, tmp_path)
    daemon.worker_running(slow, started_in=recorder)
    assert {job(recorder, i)["state"] for i in quick} == {"succeeded"}, states(recorder)
    daemon.signal(signal.SIGTERM)
    assert daemon.wait(timeout_s=20) == 0
    assert job(recorder, slow)["state"] == "succeeded"


# -- a soft timeout (USR1) amid a stream of short jobs ------------------------------------


@pytest.mark.parametrize("position", [0, 1, 11, 20, 21])
def test_a_soft_timeout_amid_short_jobs_reaches_its_own_handler_and_no_other_job(
    start_daemon: Any, recorder: Conn, tmp_path: Path, position: int
) -> None:
    """USR1 raises JobTimeout in the handler, which runs in the worker's main thread,
    whatever else the worker is doing then (a claim under way included). `position`:
    where the job stands among the short ones (the first claim of a woken worker
    takes one job, the later ones a batch)."""
    before = _enqueue(recorder, position)
    (late,) = pgworkerd.enqueue_many(
        recorder,
        [{"kind": "spin", "payload": {}, "max_runtime": 1, "max_attempts": 1}],
    )
    after = _enqueue(recorder, 60)
    daemon, notes = _start(start_daemon, tmp_path)
    wait_until(lambda: job(recorder, late)["state"] == "dead", what="the late job to time out")
    quick = [*before, *after]
    wait_until(
        lambda: {job(recorder, i)["state"] for i in quick} == {"succeeded"},
        what="the short jobs to succeed",
    )
    daemon.signal(signal.SIGTERM)
    assert daemon.wait(timeout_s=20) == 0
    row = job(recorder, late)
    assert "passed its max runtime" in row["errors"][0]["error"], row["errors"]
    events = [event for _, _, event, _, _ in history(recorder, late)]
    assert events == ["start", "soft_timeout"], events
    assert "killing worker" not in daemon.log(), "JobTimeout did not end the handler"
    load(recorder, notes)
    for job_id in quick:
        assert job(recorder, job_id)["attempt"] == 1
    invariants.assert_holds(recorder, [*quick, late], max_runtime_s=1, lease_ttl_s=3)


# -- no success left unwritten while the child idles ------------------------------------------


def test_no_success_waits_unwritten_while_the_child_idles(
    start_daemon: Any, recorder: Conn, tmp_path: Path
) -> None:
    """A child that runs out of work writes what its jobs did before it sleeps: a job
    whose handler returned is `succeeded` (and `pgworkerd.wait` hears of it) within
    the successes' deadline, not at the next poll (30 s here) or the next wake-up.
    Rounds of a woken claim (one job) then full batches, the last claim finding the
    queue just drained, or not."""
    daemon, notes = _start(start_daemon, tmp_path, poll_interval="30s")
    daemon.wait_for_workers(1)
    ended = 0
    for count in (1 + 2 * BATCH, 1 + 3 * BATCH, 2 * BATCH, 1 + 5 * BATCH, 5 * BATCH + 7):
        ids = _enqueue(recorder, count)
        ended += count
        wait_until(
            lambda ended=ended: sum(1 for n in read(notes) if n[3] == "end") == ended,
            what=f"the {count} jobs' handlers to return",
        )
        wait_until(
            lambda ids=ids: (
                {row["state"] for row in _rows(recorder, ids).values()} == {"succeeded"}
            ),
            timeout_s=2.0,
            what=f"the successes of a round of {count} written though the child idles"
            f" ({states(recorder)})",
        )
    daemon.signal(signal.SIGTERM)
    assert daemon.wait(timeout_s=20) == 0
