"""The latency mode's producer, a separate process as in the peers' harnesses: enqueue
`--n` jobs one at a time (one transaction each) at `--rate` per second on one
connection, each carrying time.time() taken just before its enqueue call.

    python -m bench.producer DSN [--n 200] [--rate 50] [--queue bench] [--import-first]

Prints one JSON line: {"enqueue_call_s": [...]}, the duration of every enqueue call.
The schedule is common.trickle_loop's: call i is due at t0 + i / rate.

`import pgworkerd` loads the client on a name's first use (~0.2 s,
pgworkerd/__init__.py), so job 0's latency includes that import and the calls due
meanwhile go in a burst: the table's measurement. `--import-first`: `pgworkerd.enqueue`
looked up before the schedule starts, as the peers' harnesses import their libraries
before their clocks (job 0 ~20 ms instead of ~0.2 s; the p99 of 200 jobs not measurably
lower: bench/results/idle-tail-round10-20261128.md).
"""

from __future__ import annotations

import argparse
import json
import time

import psycopg

import pgworkerd


def trickle(
    dsn: str, n: int, rate: float, queue: str, *, import_first: bool = False
) -> list[float]:
    interval = 1.0 / rate
    durations = []
    enqueue = pgworkerd.enqueue if import_first else None
    # autocommit: every enqueue is its own transaction, committed before it returns.
    with psycopg.connect(dsn, autocommit=True) as conn:
        t0 = time.perf_counter()
        for i in range(n):
            delay = t0 + i * interval - time.perf_counter()
            if delay > 0:
                time.sleep(delay)
            t_enqueue = time.time()
            c0 = time.perf_counter()
            (enqueue or pgworkerd.enqueue)(conn, "stamp", {"i": i, "t": t_enqueue}, queue=queue)
            durations.append(time.perf_counter() - c0)
    return durations


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dsn")
    parser.add_argument("--n", type=int, default=200)
    parser.add_argument("--rate", type=float, default=50.0)
    parser.add_argument("--queue", default="bench")
    parser.add_argument("--import-first", action="store_true", help="look up enqueue first")
    args = parser.parse_args()
    durations = trickle(args.dsn, args.n, args.rate, args.queue, import_first=args.import_first)
    print(json.dumps({"enqueue_call_s": durations}), flush=True)


if __name__ == "__main__":
    main()
