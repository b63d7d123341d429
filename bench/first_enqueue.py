"""What a producer's first `pgworkerd.enqueue` costs in a fresh process that has already
imported psycopg and connected (as a web app that passes its psycopg connection), for
checkout A against checkout B, alternated (ABBA...) in one throwaway cluster.

    python -m bench.first_enqueue A_CHECKOUT B_CHECKOUT [--pairs 20]

Each sample is a new Python (`python -c`, PYTHONPATH and cwd the checkout): import
psycopg, connect (autocommit), then timed: `import pgworkerd`, the name's look-up
(`pgworkerd.enqueue`: the lazy import of the client), the first call, and a second
call. Prints per side the median and range of each, and B/A of the medians.

Each checkout is imported as it is: compile them first (`python -m compileall -q DIR`,
as pip does on install) to measure what an installed package costs; without .pyc files
(and with PYTHONDONTWRITEBYTECODE set) every sample compiles pgworkerd's modules.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
from pathlib import Path

import psycopg

from bench.cluster import throwaway_cluster
from bench.enqueue_cost import _python, migrate_with

SAMPLE = r"""
import json, sys, time
import psycopg
with psycopg.connect(sys.argv[1], autocommit=True) as conn:
    ti = time.perf_counter()
    import pgworkerd
    t0 = time.perf_counter()
    enqueue = pgworkerd.enqueue
    t1 = time.perf_counter()
    enqueue(conn, "noop", {"i": 0}, queue="bench")
    t2 = time.perf_counter()
    enqueue(conn, "noop", {"i": 1}, queue="bench")
    t3 = time.perf_counter()
ms = lambda a, b: round((b - a) * 1000, 2)
print(json.dumps({"import": ms(ti, t0), "lookup": ms(t0, t1), "first": ms(t1, t2),
                  "both": ms(t0, t2), "all": ms(ti, t2), "second": ms(t2, t3),
                  "modules": len(sys.modules)}))
"""
FIGURES = ("all", "import", "both", "lookup", "first", "second", "modules")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("a", type=Path)
    parser.add_argument("b", type=Path)
    parser.add_argument("--pairs", type=int, default=20)
    args = parser.parse_args()
    checkouts = {"A": args.a.resolve(), "B": args.b.resolve()}
    samples: dict[str, list[dict[str, float]]] = {"A": [], "B": []}
    load_before = os.getloadavg()
    with throwaway_cluster() as cluster:
        dsns = {}
        with psycopg.connect(cluster.dsn(), autocommit=True) as admin:
            for side, checkout in checkouts.items():
                admin.execute(f"CREATE DATABASE first_{side.lower()}")
                dsns[side] = cluster.dsn(f"first_{side.lower()}")
                migrate_with(checkout, dsns[side])
        for pair in range(1, args.pairs + 1):
            for side in ("A", "B") if pair % 2 else ("B", "A"):
                out = _python(checkouts[side], SAMPLE, dsns[side])
                samples[side].append(json.loads(out.strip().splitlines()[-1]))
    print(f"load {load_before[0]:.2f} -> {os.getloadavg()[0]:.2f}; {args.pairs} pairs")
    print(f"A = {checkouts['A']}, B = {checkouts['B']}")
    print("| figure (ms) | A median (min-max) | B median (min-max) | B/A |")
    print("|---|---:|---:|---:|")
    for figure in FIGURES:
        medians = {}
        cells = []
        for side in ("A", "B"):
            xs = [s[figure] for s in samples[side]]
            medians[side] = statistics.median(xs)
            cells.append(f"{medians[side]:g} ({min(xs):g}-{max(xs):g})")
        ratio = medians["B"] / medians["A"] if medians["A"] else float("nan")
        print(f"| {figure} | {cells[0]} | {cells[1]} | {ratio:.2f} |")
    for figure in ("all", "first"):
        ratios = [b[figure] / a[figure] for a, b in zip(samples["A"], samples["B"], strict=True)]
        lower = sum(r < 1 for r in ratios)
        print(
            f"{figure}: B/A per pair median {statistics.median(ratios):.2f}, "
            f"B lower in {lower} of {len(ratios)}"
        )


if __name__ == "__main__":
    main()
