"""What the overview's Limits section costs: EXPLAIN (ANALYZE, BUFFERS) of limits_sample
(LimitReads.sample, the statement `pgworkerd status` runs too) with 100,000 queued jobs
in each limited queue, beside 1,000,000 finished ones (by default).

    python -m bench.web_limits_cost [--finished 1000000] [--queued 100000]

Queues: `plain` (concurrency 5, rate 100/s: room left, so no key is looked at), `full`
(concurrency 5 with 5 running: every ready job held back, no key looked at), `keyed`
(per_key concurrency 1 and fair, its jobs over 1,000 keys) and `keyed_wide` (the same
over 100,000 keys: one key a job, the worst case of the per-key probes). Each queue is
measured alone, then all four together. Prints markdown and writes it to
bench/results/<timestamp>-web-limits-cost.md.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import psycopg

from bench.cluster import fresh_database, throwaway_cluster
from bench.web_cost import FILL_FINISHED, RESULTS
from pgworkerd.storage import queries
from pgworkerd.storage.limits import QueueLimits, claim_limit_params
from pgworkerd.storage.migrations import migrate

LIMITS = {
    "plain": QueueLimits(concurrency=5, rate=(100, 1.0)),
    "full": QueueLimits(concurrency=5),
    "keyed": QueueLimits(key_concurrency=1, fair=True),
    "keyed_wide": QueueLimits(key_concurrency=1, fair=True),
}
KEYS = {"plain": None, "full": None, "keyed": 1000, "keyed_wide": None}

FILL_QUEUED = """
INSERT INTO pgworkerd.jobs (queue, kind, payload, state, run_at, key)
SELECT %(queue)s, 'k', '{}', 'queued', now() - (i::float8 / %(n)s) * interval '1 hour',
       CASE WHEN %(queue)s = 'keyed' THEN 'tenant:' || (i %% %(keys)s)
            WHEN %(queue)s = 'keyed_wide' THEN 'tenant:' || i END
FROM generate_series(1, %(n)s) AS i
"""
# 5 running in `full` (its concurrency), and one for each of 5 keys of `keyed` and of
# `keyed_wide` (their per_key concurrency): those keys' ready jobs are held back.
FILL_RUNNING = """
INSERT INTO pgworkerd.jobs (queue, kind, payload, state, run_at, attempt, started_at,
                            lease_token, lease_expires_at, worker, key)
SELECT q.queue, 'k', '{}', 'running', now(), 1, now(), gen_random_uuid(),
       now() + interval '1 hour', 'bench:1', CASE WHEN q.queue <> 'full' THEN 'tenant:' || i END
FROM generate_series(1, 5) AS i, unnest(ARRAY['full', 'keyed', 'keyed_wide']) AS q(queue)
"""
RUNS = 5  # wall-clock runs of the statement alone, without EXPLAIN's per-row timing


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.web_limits_cost")
    parser.add_argument("--finished", type=int, default=1_000_000)
    parser.add_argument("--queued", type=int, default=100_000)
    args = parser.parse_args(argv)
    statement = queries.statements("pgworkerd")["limits_sample"]
    lines = [
        "# The overview's Limits section: limits_sample over a large table",
        "",
        f"`python -m bench.web_limits_cost {' '.join(sys.argv[1:] if argv is None else argv)}`",
        "",
        f"{args.finished:,} finished jobs; {args.queued:,} ready jobs in each limited queue. "
        f"Load average (1 min) at the start: {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs.",
        "",
        "| queues | EXPLAIN ANALYZE execution ms | median ms of the statement alone | held back |",
        "|---|---:|---:|---|",
    ]
    plans = []
    with throwaway_cluster() as cluster:
        dsn = fresh_database(cluster, "bench_web_limits")
        with psycopg.connect(dsn, autocommit=True) as conn:
            migrate(conn, "pgworkerd")
            conn.execute(FILL_FINISHED, {"n": args.finished})
            for queue in LIMITS:
                keys = KEYS[queue] or 1
                conn.execute(FILL_QUEUED, {"queue": queue, "n": args.queued, "keys": keys})
            conn.execute(FILL_RUNNING)
            conn.execute("VACUUM ANALYZE pgworkerd.jobs")
            cases = [[queue] for queue in LIMITS] + [list(LIMITS)]
            for chosen in cases:
                params = claim_limit_params(chosen, LIMITS)
                conn.execute(statement, params, prepare=False)  # warm the cache
                explain = b"EXPLAIN (ANALYZE, BUFFERS, COSTS OFF) " + statement
                plan = [r[0] for r in conn.execute(explain, params, prepare=False).fetchall()]
                walls = []
                for _ in range(RUNS):
                    started = time.perf_counter()
                    rows = conn.execute(statement, params, prepare=False).fetchall()
                    walls.append((time.perf_counter() - started) * 1000)
                took = next(line for line in plan if line.startswith("Execution Time"))
                ms = float(took.split(":")[1].split()[0])
                held = ", ".join(f"{r[0]} {r[4]}" for r in rows)
                wall = statistics.median(walls)
                lines.append(f"| {', '.join(chosen)} | {ms:.1f} | {wall:.1f} | {held} |")
                plans += [f"### {', '.join(chosen)}", "", "```", *plan, "```", ""]
    text = "\n".join([*lines, "", "## Plans", "", *plans])
    path = RESULTS / f"{time.strftime('%Y%m%dT%H%M%S')}-web-limits-cost.md"
    path.write_text(text)
    print(text)
    print(f"written to {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
