"""The supervisor's bookkeeping of a busy child alone: the ledger's CPU per 100-job
batch and the housekeeper's idle turn, this checkout against another, alternated.

    python -m bench.ledger_cost OTHER_CHECKOUT [--pairs 3] [--batches 400]

A one-slot child at batch 100 as the tuned no-op row drives it: a `claimed`, five
looks at the start board a batch (each start passing the jobs whose starts were
overwritten unseen), the batch's `finishing` and `done`, and `moments()` after every
change (the loop asks once per change). Each part's `perf_counter` total, the minimum
over 9 repetitions, per batch. Then the housekeeper's `next_due_at` and a `run_due`
with nothing due, as every turn of the loop calls them. Each side in a fresh process
that imports its own checkout (`--one` is that process); no database, no daemon
(bench.worker_abab measures those: bench/results/supervisor-round14-20261128.md).
"""

from __future__ import annotations

import argparse
import json
import os
import time
import timeit
import uuid
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
PARTS = ("claimed", "starts", "finishing", "done", "moments")
LOOKS = (7, 30, 55, 80, 99)  # the board read five times a batch, at these jobs


def _ledger(batches: int) -> dict[str, float]:
    from pgworkerd.ipc import Claimed, StartRecord
    from pgworkerd.supervisor.ledger import ChildLedger

    def runtime_for(queue: str, max_runtime_s: float | None) -> float:
        return 900.0 if max_runtime_s is None else max_runtime_s

    claims = []
    for b in range(batches):
        first = 1 + b * 100
        rows = tuple((first + i, uuid.uuid4().hex, "noop", "bench", None) for i in range(100))
        starts = [[StartRecord(0, first + k, 2.0)] for k in LOOKS]
        claims.append((Claimed(first, 1.0, True, rows), [row[0] for row in rows], starts))
    clock = time.perf_counter

    def timed(ledger: Any, spent: dict[str, float], part: str, call: Any, *args: Any) -> None:
        t0 = clock()
        call(*args)
        t1 = clock()
        ledger.moments()
        spent[part] += t1 - t0
        spent["moments"] += clock() - t1

    best: dict[str, float] = {}
    for _ in range(9):
        spent = dict.fromkeys(PARTS, 0.0)
        ledger, previous = ChildLedger(), None
        for message, ids, starts in claims:
            if previous is not None:
                timed(ledger, spent, "finishing", ledger.finishing, previous)
                timed(ledger, spent, "done", ledger.done, previous)
            timed(ledger, spent, "claimed", ledger.claimed, message, runtime_for)
            for records in starts:
                timed(ledger, spent, "starts", ledger.observe_starts, records)
                # As ChildProcess._count_starts does with nothing counting.
                taken = getattr(ledger, "take_started", None)
                taken() if taken is not None else ledger.fresh_starts.clear()
            previous = ids
        best = {p: min(best.get(p, spent[p]), spent[p]) for p in PARTS}
    return {p: best[p] / batches * 1e6 for p in PARTS}


def _housekeeper() -> dict[str, float]:
    from pgworkerd.config import Config
    from pgworkerd.housekeeping import Housekeeper
    from pgworkerd.storage.store import JobStore

    config = Config()
    keeper = Housekeeper(
        store=JobStore(),
        database_url="postgresql://unused",
        lease_ttl_s=30.0,
        config=lambda: config,
        daemon_id="bench",
        listen=False,
    )
    now = time.monotonic()
    for duty in keeper.duties:  # every duty just ran: none due
        schedule = getattr(duty, "schedule", None)
        if schedule is not None:
            schedule.done(now)
    keeper.run_due(now, list, dict)  # follows the config once
    n = 20_000
    due = min(timeit.repeat(keeper.next_due_at, number=n, repeat=7)) / n
    turn = min(timeit.repeat(lambda: keeper.run_due(now, list, dict), number=n, repeat=7)) / n
    return {"next_due_at": due * 1e6, "run_due": turn * 1e6}


def _side(code: Path, batches: int) -> dict[str, float]:
    """One measurement in a fresh process that imports `code`'s package."""
    # Imported here, not at the top: the `--one` process imports this file with the
    # other checkout's `bench` package first on its path, which may not have it.
    from bench.fresh_side import measure_in_checkout

    return measure_in_checkout(__file__, code, ["--batches", str(batches), "-"])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.ledger_cost")
    parser.add_argument("other", type=Path, help="the other checkout (A)")
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--batches", type=int, default=400)
    parser.add_argument("--one", action="store_true", help="measure once, print JSON")
    args = parser.parse_args(argv)
    if args.one:
        print(json.dumps({**_ledger(args.batches), **_housekeeper()}))
        return 0
    for pair in range(1, args.pairs + 1):
        for tag, code in (("A", args.other.resolve()), ("B", REPO)):
            r = _side(code, args.batches)
            ledger = " ".join(f"{p} {r[p]:.1f}" for p in PARTS)
            print(
                f"{tag}{pair}: ledger µs per 100-job batch: {ledger}, total"
                f" {sum(r[p] for p in PARTS):.1f}; housekeeper µs a turn: next_due_at"
                f" {r['next_due_at']:.2f}, run_due {r['run_due']:.2f}; load"
                f" {os.getloadavg()[0]:.1f}",
                flush=True,
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
