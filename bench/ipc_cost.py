"""CPU cost of telling the supervisor about each job start: the start board vs a pipe message.

    python -m bench.ipc_cost [-n 200000] [--rounds 5] [--paced-n 20000] [--job-us 55]

Forks a real child that simulates N job starts, and measures each process's own CPU time
(time.process_time: user + system; the child's reported back over a pipe) over them:

  board  the child calls `StartBoard.post_start(number)`; the supervisor loops on a
         selector (0.1 s timeout, the status pipe registered, as the real loop when busy)
         and each turn calls `starts_posted()`, and `records()` when it moved.
  pipe   the child sends one status-pipe message per start through `StatusWriter.send`
         (stand-in: `Finishing((number,))`, the size of a `started` carrying the number
         only; a real one would also carry the start time); the supervisor wakes on the
         selector and decodes every message with `StatusReader.read()`.

Modes: `tight` posts the starts back to back (the pipe reader then gets several messages
per wake-up and read: its figure is a lower bound); `paced` spaces them --job-us apart by
spinning, as at full throughput (about one wake-up per message: the realistic case); the
child's figure then times each post alone, less what timing it costs.

Variants alternate within each round; the table gives the median over rounds and the
range [min-max], so noise shows; starts/turn is per supervisor loop turn. The last lines
give pipe total - board total per start as a share of --job-us, the total CPU of one no-op
job at ~18,000 jobs/s on 2 cores: what a message per start would add to each job. Not
counted, on either side: the ledger's bookkeeping of a start, and the rest of a real
supervisor loop turn (deadlines, other children), which the pipe pays per wake-up: both
make the pipe's real cost higher. Fixed costs (the fork's copy-on-write faults) are spread
over N.
"""

from __future__ import annotations

import argparse
import os
import selectors
import statistics
import time

from pgworkerd.ipc import Finishing, StartBoard, StatusReader, StatusWriter


def _child(variant: str, n: int, gap_s: float, board: StartBoard, status_w: int) -> float:
    """CPU seconds the child spent posting n starts (paced: the spin between them excluded)."""
    writer = StatusWriter(status_w)

    def post(number: int) -> None:
        if variant == "board":
            board.post_start(number)
        else:
            writer.send(Finishing((number,)))

    clock = time.process_time  # this process's CPU time, user + system
    if not gap_s:
        start = clock()
        for number in range(1, n + 1):
            post(number)
        return clock() - start
    bracket = 0.0  # what timing a post costs by itself
    for _ in range(n):
        start = clock()
        bracket += clock() - start
    spent, next_at = 0.0, time.monotonic()
    for number in range(1, n + 1):
        next_at += gap_s
        while time.monotonic() < next_at:
            pass
        start = clock()
        post(number)
        spent += clock() - start
    return spent - bracket


def run(variant: str, n: int, gap_s: float) -> tuple[float, float, int]:
    """(child CPU s, supervisor CPU s, supervisor loop turns) for n starts."""
    board = StartBoard()
    status_r, status_w = os.pipe()
    result_r, result_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(status_r)
        os.close(result_r)
        spent = _child(variant, n, gap_s, board, status_w)
        os.write(result_w, repr(spent).encode())
        os._exit(0)
    os.close(status_w)
    os.close(result_w)
    reader = StatusReader(status_r)
    selector = selectors.DefaultSelector()
    selector.register(status_r, selectors.EVENT_READ)
    start, seen, messages, turns = time.process_time(), 0, 0, 0
    while not reader.closed:
        turns += 1
        if selector.select(0.1):
            for _ in reader.read():
                messages += 1
        posted = board.starts_posted()  # each turn, as ChildProcess.sync_starts
        if posted != seen:
            board.records()
            seen = posted
    supervisor = time.process_time() - start
    child = float(os.read(result_r, 100))
    os.waitpid(pid, 0)
    selector.close()
    reader.close()
    os.close(result_r)
    board.close()
    expected = (0, n) if variant == "board" else (n, 0)
    assert (messages, seen) == expected, (variant, messages, seen)
    return child, supervisor, turns


def _cell(values: list[float]) -> str:
    return f"{statistics.median(values):6.2f} [{min(values):.2f}-{max(values):.2f}]"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", type=int, default=200_000, help="starts per tight run")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--paced-n", type=int, default=20_000, help="starts per paced run")
    parser.add_argument("--job-us", type=float, default=55.0, help="total CPU µs of one job")
    args = parser.parse_args()
    modes = {"tight": (args.n, 0.0), "paced": (args.paced_n, args.job_us / 1e6)}
    rows: dict[tuple[str, str], list[tuple[float, float, float, float]]] = {}
    for rnd in range(args.rounds):
        for mode, (n, gap_s) in modes.items():
            variants = ["board", "pipe"] if rnd % 2 == 0 else ["pipe", "board"]
            for variant in variants:
                child, sup, turns = run(variant, n, gap_s)
                us = (child * 1e6 / n, sup * 1e6 / n, (child + sup) * 1e6 / n, n / turns)
                rows.setdefault((mode, variant), []).append(us)
    print(f"µs of CPU per start, median [min-max] of {args.rounds} rounds (variants alternated)")
    print(f"{'mode':6} {'variant':7} {'child':>20} {'supervisor':>20} {'total':>20} starts/turn")
    total: dict[tuple[str, str], float] = {}
    for (mode, variant), runs in rows.items():
        *columns, per_turn = (list(column) for column in zip(*runs, strict=True))
        line = " ".join(f"{_cell(column):>20}" for column in columns)
        print(f"{mode:6} {variant:7} {line} {statistics.median(per_turn):11.0f}")
        total[mode, variant] = statistics.median(columns[2])
    for mode in modes:
        extra = total[mode, "pipe"] - total[mode, "board"]
        print(
            f"{mode}: pipe/board {total[mode, 'pipe'] / total[mode, 'board']:.0f}x, "
            f"pipe adds {extra:.1f} µs per start = {extra / args.job_us:.0%} "
            f"of a {args.job_us:.0f} µs job"
        )


if __name__ == "__main__":
    main()
