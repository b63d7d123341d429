"""Main's daemon measured with the latency producer both ways, alternated in one
cluster: "cold" (pgworkerd.enqueue looked up in job 0's timed call, the table's
measurement) and "warm" (looked up before the clock: bench/producer.py --import-first).
Run as it was at 3824dfe, where the before-the-clock lookup was the default and
`Protocol.cold_import` the option; here written for `Protocol.import_first`.

    PYTHONPATH=<checkout with bench/producer.py --import-first> \
        python producer_ab.py CODE --pairs 6 --out DIR
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import json
import os
import sys
from pathlib import Path

from bench import measure, stats
from bench.cluster import in_fresh_database, throwaway_cluster


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("code", type=Path)
    parser.add_argument("--pairs", type=int, default=6)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    logs = args.out / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    load = os.getloadavg()[0]
    rows = []
    with throwaway_cluster(keep_log=logs / "postgresql.log") as cluster:
        for pair in range(1, args.pairs + 1):
            modes = ["cold", "warm"] if pair % 2 else ["warm", "cold"]
            for mode in modes:
                proto = dataclasses.replace(measure.Protocol(), import_first=mode == "warm")
                tag = f"{mode}_{pair}"
                samples: list[tuple[int, float, float, float]] = []
                run = functools.partial(
                    measure.latency,
                    work=logs,
                    tag=tag,
                    proto=proto,
                    config_extra=measure.TUNED_CONFIG,
                    code=args.code,
                    samples=samples,
                )
                rec = in_fresh_database(cluster, "producer_ab", logs, tag, lambda d, r=run: r(d))
                lat = [round((s[3] - s[1]) * 1000, 3) for s in sorted(samples)]
                rows.append({"mode": mode, "pair": pair, "record": rec, "latencies_ms": lat})
                print(tag, rec and rec["lat_p50_ms"], rec and rec["lat_p99_ms"], flush=True)
    lines = [
        f"Main ({args.code}) both ways, {args.pairs} pairs; load {load:.2f} before, "
        f"{os.getloadavg()[0]:.2f} after.",
        "",
        "| pair | cold p50 | warm p50 | cold p99 | warm p99 | cold job 0 | warm job 0 |",
        "|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for pair in range(1, args.pairs + 1):
        got = {r["mode"]: r for r in rows if r["pair"] == pair and r["record"]}
        if len(got) < 2:
            continue
        c, w = got["cold"], got["warm"]
        lines.append(
            f"| {pair} | {c['record']['lat_p50_ms']} | {w['record']['lat_p50_ms']} | "
            f"{c['record']['lat_p99_ms']} | {w['record']['lat_p99_ms']} | "
            f"{c['latencies_ms'][0]:.1f} | {w['latencies_ms'][0]:.1f} |"
        )
    for mode in ("cold", "warm"):
        p99 = stats.median(r["record"]["lat_p99_ms"] for r in rows if r["mode"] == mode)
        lines.append(f"\nmedian p99 {mode}: {p99}")
    report = "\n".join(lines) + "\n"
    print(report)
    (args.out / "summary.md").write_text(report)
    (args.out / "runs.json").write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
