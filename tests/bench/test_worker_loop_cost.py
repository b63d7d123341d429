"""bench/worker_loop_cost.py: its measuring process runs a real worker loop over every
job it is given (each start posted on the start board), and reports a CPU time."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from bench import worker_loop_cost

REPO = Path(__file__).resolve().parents[2]


def test_the_measuring_process_runs_every_job_of_every_pass() -> None:
    # In a process of its own: the worker installs signal handlers and a wakeup fd.
    out = subprocess.run(
        [sys.executable, "-m", "bench.worker_loop_cost", "--one", "--batches", "3", str(REPO)],
        cwd=REPO,
        check=True,
        capture_output=True,
        text=True,
        timeout=120,
    ).stdout
    result = json.loads(out.strip().splitlines()[-1])
    jobs = 3 * worker_loop_cost.BATCH * worker_loop_cost.PASSES
    assert result["jobs"] == jobs
    assert result["starts_posted"] == jobs
    assert 0 < result["cpu_us_per_job"] < 10_000
