"""The cost of one `enqueue` call (its own transaction, autocommit) by kind of job: plain,
with a `key`, with a plain `unique_key`, and with the uniqueness modes (a throttled key
within its window, a debounce that folds, a debounce of a new key). With `--b PATH`,
the same calls are made alternately (ABAB) by another checkout, on a database of its
own migrated by its own code, so that the plain rows compare two versions.

    python -m bench.enqueue_modes [--n 2000] [--rounds 4] [--b /path/to/other/checkout]

Prints a Markdown table: microseconds per call, median of the rounds.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

import psycopg

from bench.cluster import throwaway_cluster
from bench.daemon import REPO

# Run in a child process whose PYTHONPATH is the checkout measured: migrate its
# database once, then time `n` enqueues of each kind (a kind the checkout does not
# know is reported as null).
CHILD = r"""
import json, sys, time
import psycopg
import pgworkerd
from pgworkerd.storage.migrations import migrate

dsn, n, kinds = sys.argv[1], int(sys.argv[2]), sys.argv[3].split(",")
with psycopg.connect(dsn, autocommit=True) as conn:
    migrate(conn, "pgworkerd")
    options = {
        "plain": lambda i: {},
        "key": lambda i: {"key": f"tenant:{i % 100}"},
        "unique_key": lambda i: {"unique_key": f"u:{i}"},
        "throttle_hit": lambda i: {"unique_key": "t", "throttle": 3600},
        "debounce_fold": lambda i: {"unique_key": "d", "debounce": 3600},
        "debounce_new": lambda i: {"unique_key": f"d:{i}:{time.time()}", "debounce": 3600},
    }
    out = {}
    for kind in kinds:
        make = options[kind]
        try:
            pgworkerd.enqueue(conn, "k", {}, **make(-1))
        except TypeError:
            out[kind] = None
            continue
        t0 = time.perf_counter()
        for i in range(n):
            pgworkerd.enqueue(conn, "k", {"i": i}, **make(i))
        out[kind] = (time.perf_counter() - t0) / n * 1e6
        conn.execute("DELETE FROM pgworkerd.jobs")
print(json.dumps(out))
"""
KINDS = ("plain", "key", "unique_key", "throttle_hit", "debounce_fold", "debounce_new")


def measure(checkout: Path, dsn: str, n: int) -> dict[str, float | None]:
    env = {**os.environ, "PYTHONPATH": str(checkout)}
    env.pop("PGWORKERD_DATABASE__SCHEMA", None)
    argv = [sys.executable, "-c", CHILD, dsn, str(n), ",".join(KINDS)]
    # cwd too: `python -c` puts the working directory first on sys.path.
    done = subprocess.run(argv, env=env, cwd=checkout, capture_output=True, text=True, check=True)
    result: dict[str, float | None] = json.loads(done.stdout)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=2000, help="calls of each kind per round")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--b", type=Path, help="another checkout, measured alternately")
    args = parser.parse_args()
    checkouts = {"A (this)": REPO, **({"B": args.b} if args.b else {})}
    rows: dict[str, dict[str, list[float]]] = {name: {k: [] for k in KINDS} for name in checkouts}
    with throwaway_cluster() as cluster:
        with psycopg.connect(cluster.dsn(), autocommit=True) as admin:
            for index in range(len(checkouts)):
                admin.execute(f"CREATE DATABASE bench_{index}")
        for _ in range(args.rounds):
            for index, (name, checkout) in enumerate(checkouts.items()):
                got = measure(checkout, cluster.dsn(f"bench_{index}"), args.n)
                for kind, us in got.items():
                    if us is not None:
                        rows[name][kind].append(us)
    print("| kind | " + " | ".join(f"{name} us/call" for name in checkouts) + " |")
    print("|---|" + "---|" * len(checkouts))
    for kind in KINDS:
        cells = [
            f"{statistics.median(rows[name][kind]):.0f}" if rows[name][kind] else "-"
            for name in checkouts
        ]
        print(f"| {kind} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
