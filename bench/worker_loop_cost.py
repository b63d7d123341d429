"""A worker's Python on the tuned no-op path outside the database, in one process: this
checkout against another, alternated.

    python -m bench.worker_loop_cost OTHER_CHECKOUT [--pairs 8] [--batches 200]

bench.claim_cpu measures the store call (psycopg and the rows made into jobs); this
measures the rest of a worker's CPU per job, which is about as large: a real
`pgworkerd.worker.loop.Worker` (its spec at the tuned row: batch 100, warning logs, one
no-op handler as the config loader instruments it) is given batches of 100 claimed
rows, as `complete_and_claim` would return them, and for each batch does what its loop
does around that call: the successes announced (`finishing`) and their completion's
parameters written, the claim answered (`done` and `claimed`), each job made from its
row and run (start decision, start board, title, handler, outcome, success buffer).
The status pipe is /dev/null: the writes are made, nobody reads them. Thread CPU time
per job, the lowest of 9 passes over `--batches` batches, each side in a fresh process
that imports its own checkout (`--one` is that process).

It is as noisy as the machine: on the shared 2-core VM the same code read ~9 or ~16 µs
a job, a process keeping one speed throughout whichever CPU it is pinned to, so judge a
change by the pairs in which it is lower, the ratios of pairs that ran at one speed and
the lowest of each side (printed last), not by one median
(bench/results/issue23-round18-20261129.md).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
BATCH = 100
PASSES = 9


def one(batches: int) -> dict[str, float]:
    """One measurement in this process, from the checkout on its path."""
    import datetime
    import uuid
    from collections import namedtuple

    from pgworkerd.contrib.otel_worker import instrument
    from pgworkerd.ipc import ControlReader, StartBoard, StatusWriter
    from pgworkerd.storage.store import Backoff, _complete_params, _job_from_row
    from pgworkerd.worker.base import ClaimRequest
    from pgworkerd.worker.loop import Worker
    from pgworkerd.worker.spec import WorkerSpec

    def noop(job: Any) -> None:
        return None

    spec = WorkerSpec(
        pool="default",
        index=1,
        queues=("bench",),
        queue_max_attempts=(5,),
        batch_size=BATCH,
        lease_ttl_s=60.0,
        poll_interval_s=1.0,
        database_url="postgresql://bench@127.0.0.1:1/none",  # never connected to
        schema="pgworkerd",
        backoff=Backoff(),
        registry=instrument({"noop": noop}),
        max_jobs=None,
        max_memory_bytes=None,
        log_format="text",
        log_level="warning",
        supervisor_pid=os.getppid(),
        worker_id="bench:1/default#1",
    )
    board = StartBoard(1)
    control_r, _control_w = os.pipe()
    status = StatusWriter(os.open(os.devnull, os.O_WRONLY))
    worker = Worker(spec, status, ControlReader(control_r, board), board)
    # A claim's row as claim_update's RETURNING names its columns (a named tuple, as
    # storage.rows.c_namedtuple_row makes them).
    row = namedtuple(
        "row",
        "id queue kind payload_json priority attempt max_attempts max_runtime_s run_at"
        " created_at lease_token queue_ord key trace_context after_ids",
    )
    now = datetime.datetime.now(datetime.UTC)
    claims = [
        [
            row(
                k * BATCH + i + 1,
                "bench",
                "noop",
                '{"i": 0}',
                0,
                1,
                5,
                None,
                now,
                now,
                uuid.uuid4(),
                1,
                None,
                None,
                None,
            )
            for i in range(BATCH)
        ]
        for k in range(batches)
    ]
    outcomes = worker.outcomes

    def one_pass() -> int:
        ran = 0
        for rows in claims:
            successes = outcomes.successes.take()
            if successes:
                _complete_params(outcomes.announce(successes))
            batch = [_job_from_row(r) for r in rows]
            claim = ClaimRequest(successes, BATCH, time.monotonic(), lambda: (set(), [], True))
            worker._claim_answered(claim, {s.job.id for s in successes}, batch, True)
            worker._run_batch(batch)
            ran += len(batch)
        return ran

    one_pass()  # caches, the success buffer's kinds, the board
    started_before = board.starts_posted()
    best = float("inf")
    jobs = 0
    for _ in range(PASSES):
        cpu = time.thread_time()
        ran = one_pass()
        best = min(best, (time.thread_time() - cpu) / ran * 1e6)
        jobs += ran
    return {
        "cpu_us_per_job": best,
        "jobs": jobs,
        # Every job's start posted on the board: the loop ran each job, none skipped.
        "starts_posted": board.starts_posted() - started_before,
    }


def _side(code: Path, batches: int) -> dict[str, float]:
    """One measurement in a fresh process that imports `code`'s package."""
    # Imported here, not at the top: the `--one` process imports this file with the
    # other checkout's `bench` package first on its path, which may not have it.
    from bench.fresh_side import measure_in_checkout

    return measure_in_checkout(__file__, code, ["--batches", str(batches), str(code)])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.worker_loop_cost")
    parser.add_argument("other", type=Path, help="the other checkout (A)")
    parser.add_argument("--pairs", type=int, default=8)
    parser.add_argument("--batches", type=int, default=200)
    parser.add_argument("--one", action="store_true", help="measure once, print JSON")
    args = parser.parse_args(argv)
    if args.one:
        print(json.dumps(one(args.batches)))
        return 0
    ratios: list[float] = []
    lowest = {"A": float("inf"), "B": float("inf")}
    for pair in range(1, args.pairs + 1):
        # A first in odd pairs, B first in even ones: the second of two runs may differ.
        order = [("A", args.other.resolve()), ("B", REPO)]
        if pair % 2 == 0:
            order.reverse()
        got = {tag: _side(code, args.batches)["cpu_us_per_job"] for tag, code in order}
        ratios.append(got["B"] / got["A"])
        lowest = {tag: min(lowest[tag], got[tag]) for tag in lowest}
        print(
            f"pair {pair}: A {got['A']:.2f}, B {got['B']:.2f} µs/job (B/A {ratios[-1]:.3f});"
            f" load {os.getloadavg()[0]:.1f}",
            flush=True,
        )
    lower = sum(r < 1 for r in ratios)
    print(
        f"B/A per pair, median {statistics.median(ratios):.3f}; B lower in {lower} of {len(ratios)}"
    )
    # A process runs at one of two speeds throughout (see above): the lowest of each
    # side is its run at the fast one, if it had any.
    print(
        f"lowest of each side: A {lowest['A']:.2f}, B {lowest['B']:.2f} µs/job"
        f" (B/A {lowest['B'] / lowest['A']:.3f})"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
