"""A one-thread worker told to skip a job of its batch while another job's handler runs
says `skipping` for it before that handler ends (loop.py `_say_skipping`): on the USR1
that follows the skip, in the handler's own thread, or, for a skip read by the decision
step of a job before it, before that job's handler begins. The USR1 raises nothing in
the handler, the skipped job never starts, and the worker still skips it (and releases
it) when it comes to it. In a process of its own: a Worker installs signal handlers
and a wakeup fd."""

from __future__ import annotations

import textwrap

from tests.fresh_python import json_printed_last_by_new_python

CHILD = textwrap.dedent(
    """
    import json, os, signal, sys, time, uuid
    from pgworkerd.ipc import (
        ControlReader, ControlWriter, Skip, StartBoard, StatusReader, StatusWriter,
    )
    from pgworkerd.job import Job
    from pgworkerd.worker.loop import Worker
    from tests.offline_worker import offline_spec

    how = sys.argv[1]  # "signal": the skip comes with USR1; "line": the line alone;
                       # "cancel": job 2 cancelled just after its start is posted
    ran, seen, outcomes, released = [], {}, [], []
    status_r, status_w = os.pipe()
    status = StatusReader(status_r)

    def said() -> list[str]:
        return [f"{type(m).__name__} {list(getattr(m, 'ids', ()))}" for m in status.read()]

    def handler(job):
        ran.append(job.id)
        if job.id == 1:
            control.skip(Skip(4, str(batch[3].lease_token)))  # as the supervisor does
            if how == "signal":
                os.kill(os.getpid(), signal.SIGUSR1)
            time.sleep(0.2)  # the signal's handler runs in here
        seen[job.id] = said()

    spec = offline_spec({"k": handler})
    board = StartBoard(1)
    control_r, control_w = os.pipe()
    control = ControlWriter(control_w, board)
    worker = Worker(spec, StatusWriter(status_w), ControlReader(control_r, board), board)
    worker.outcomes.record = lambda job, outcome, ran_s: outcomes.append(outcome.kind)

    def release_skipped():
        released.extend(lease.job_id for lease in worker.skipped)
        worker.skipped = []

    worker._release_skipped = release_skipped
    batch = [
        Job(id=n, kind="k", queue="q", payload={}, attempt=1, max_attempts=5,
            lease_token=uuid.uuid4())
        for n in (1, 2, 3, 4)
    ]
    worker._claim_number = {job.id: job.id for job in batch}
    if how == "cancel":
        # The supervisor's cancel of job 2 as soon as it sees job 2's start posted, its
        # USR1 before job 2's handler has begun (the window of a skip/start race).
        post_start = board.post_start

        def post_then_cancel(number, slot=0):
            post_start(number, slot)
            if number == 2:
                control.cancel(2)
                os.kill(os.getpid(), signal.SIGUSR1)

        board.post_start = post_then_cancel
    worker._run_batch(batch)
    print(json.dumps({"ran": ran, "seen": seen, "outcomes": outcomes,
                      "released": released, "after": said()}))
    """
)


def run_batch(how: str) -> dict[str, object]:
    result: dict[str, object] = json_printed_last_by_new_python(CHILD, how)
    return result


def test_a_skip_with_usr1_is_said_while_the_running_handler_runs_and_raises_nothing() -> None:
    result = run_batch("signal")
    assert result["seen"] == {"1": ["Skipping [4]"], "2": [], "3": []}
    assert result["ran"] == [1, 2, 3]
    assert result["outcomes"] == ["succeeded"] * 3, "the USR1 raised nothing in the handler"
    assert result["released"] == [4], "still skipped, and released, when it comes to it"
    # Said again as it is skipped (for a job whose lease lapsed, the word the supervisor
    # waits for); the supervisor, which forgot it, finds nothing left to release.
    assert result["after"] == ["Skipping [4]"]


def test_a_skip_read_by_the_next_decision_is_said_before_the_next_handler() -> None:
    """No USR1 (as if it came while no job ran): job 2's decision reads the line, and
    job 2's handler begins only after `skipping`."""
    result = run_batch("line")
    assert result["seen"] == {"1": [], "2": ["Skipping [4]"], "3": []}
    assert result["ran"] == [1, 2, 3]
    assert result["released"] == [4]


def test_a_cancel_that_comes_before_the_handler_begins_stops_it_as_it_begins() -> None:
    """The supervisor cancels a job once it sees its start posted; the USR1 may come
    before the handler has begun, when there is nothing to raise in. Executor.run asks
    as the handler begins: the job ends cancelled, its handler never called. Before, the
    handler ran to its end (or until the kill 3 s after the cancel)."""
    result = run_batch("cancel")
    assert result["ran"] == [1, 3], "job 2's handler was not called; job 4 was skipped"
    assert result["outcomes"] == ["succeeded", "cancelled", "succeeded"]
