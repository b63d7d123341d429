"""A sync worker that is to recycle gives back the rest of its batch before the next job
starts, saying why once (loop.py `_run_batch`'s give_up). Its memory check answers once
a second, so asking it twice for one decision reads "no" the second time and runs the
job. In a process of its own: a Worker installs signal handlers and a wakeup fd."""

from __future__ import annotations

import json
import textwrap

from tests.fresh_python import json_printed_last_by_new_python

CHILD = textwrap.dedent(
    """
    import json, logging, os, sys
    from pgworkerd.ipc import ControlReader, StartBoard, StatusWriter
    from pgworkerd.job import Job
    from pgworkerd.worker.loop import Worker
    from tests.offline_worker import offline_spec

    ran, released, lines = [], [], []

    def handler(job):
        ran.append(job.id)

    limit = json.loads(sys.argv[1])
    spec = offline_spec(
        {"k": handler},
        log_level="info",
        max_jobs=limit.get("max_jobs"),
        max_memory_bytes=limit.get("max_memory_bytes"),
    )
    board = StartBoard(1)
    control_r, _ = os.pipe()
    worker = Worker(
        spec, StatusWriter(os.open(os.devnull, os.O_WRONLY)), ControlReader(control_r, board),
        board,
    )
    worker._release = lambda jobs: released.extend(job.id for job in jobs)

    class Lines(logging.Handler):
        def emit(self, record):
            lines.append(record.getMessage())

    logging.getLogger("pgworkerd.worker").addHandler(Lines())
    batch = [
        Job(id=n, kind="k", queue="q", payload={}, attempt=1, max_attempts=5)
        for n in (1, 2, 3)
    ]
    worker._claim_number = {job.id: job.id for job in batch}
    worker.jobs_done = limit.get("done_before", 0)
    worker._run_batch(batch)
    print(json.dumps({"ran": ran, "released": released,
                      "recycling": sum("recycling worker" in line for line in lines)}))
    """
)


def run_batch_of_three(limit: dict[str, int]) -> dict[str, object]:
    result: dict[str, object] = json_printed_last_by_new_python(CHILD, json.dumps(limit))
    return result


def test_over_its_memory_limit_it_runs_none_and_gives_back_all_saying_so_once() -> None:
    result = run_batch_of_three({"max_memory_bytes": 1})
    assert result == {"ran": [], "released": [1, 2, 3], "recycling": 1}


def test_at_its_job_limit_it_gives_back_the_rest_saying_so_once() -> None:
    result = run_batch_of_three({"max_jobs": 2, "done_before": 1})
    assert result == {"ran": [1], "released": [2, 3], "recycling": 1}
