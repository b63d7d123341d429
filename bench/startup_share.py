"""How much of the tuned no-op row is the daemon's start-up: this checkout against
another, alternated.

    python -m bench.startup_share OTHER_CHECKOUT [--pairs 3] [--jobs 20000] [--config JSON]

Each run: a throwaway cluster, JOBS no-op jobs inserted, `pgworkerd run` (two
processes, the tuned row's config unless --config) until every job succeeded. The
process tree's CPU (psutil, reaped workers included) is read when the first job shows
started (the start-up: imports, config, forks, connections) and when the last one
succeeded; the database gives the first start and the last finish. The bench's tuned
row divides the whole (start-up included) by 20,000 jobs.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import psycopg

from bench.cluster import throwaway_cluster
from bench.daemon import Daemon, fill_noop_jobs, migrate, write_config
from bench.measure import TUNED_CONFIG


def one_run(code: Path | None, jobs: int, extra: dict[str, Any]) -> dict[str, float]:
    work = Path(tempfile.mkdtemp(prefix="pgworkerd-startup-share-"))
    try:
        with throwaway_cluster() as cluster:
            dsn = cluster.dsn()
            config = write_config(work / "config.yaml", dsn, extra=extra)
            migrate(config, work / "daemon.log", code=code)
            with psycopg.connect(dsn, autocommit=True) as conn:
                fill_noop_jobs(conn, jobs)
                daemon = Daemon(config, work / "daemon.log", code=code)
                try:
                    started_cpu = None
                    while True:
                        state = conn.execute(
                            "SELECT count(*) FILTER (WHERE state <> 'queued'),"
                            " count(*) FILTER (WHERE state = 'succeeded') FROM pgworkerd.jobs"
                        ).fetchone()
                        assert state is not None
                        if started_cpu is None and state[0] > 0:
                            started_cpu = daemon.usage().cpu_s
                            started_at = time.perf_counter() - daemon.started
                        if state[1] >= jobs:
                            break
                        if daemon.proc.poll() is not None:
                            raise RuntimeError("the daemon exited")
                        time.sleep(0.01)
                    total_cpu = daemon.usage().cpu_s
                    elapsed = time.perf_counter() - daemon.started
                finally:
                    daemon.stop()
                span = conn.execute(
                    "SELECT extract(epoch FROM max(finished_at) - min(started_at))::float8"
                    " FROM pgworkerd.jobs"
                ).fetchone()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    assert started_cpu is not None and span is not None
    return {
        "startup_cpu_s": started_cpu,
        "startup_s": started_at,
        "run_cpu_s": total_cpu - started_cpu,
        "total_cpu_per_10k": total_cpu / jobs * 1e4,
        "jobs_per_s": jobs / elapsed,
        "steady_jobs_per_s": jobs / span[0],
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("other", type=Path, help="the other checkout (A)")
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--config", type=json.loads, default=TUNED_CONFIG)
    args = parser.parse_args()
    keys = ("startup_cpu_s", "run_cpu_s", "total_cpu_per_10k", "jobs_per_s", "startup_s")
    runs: dict[str, dict[str, list[float]]] = {s: {k: [] for k in keys} for s in "AB"}
    for pair in range(1, args.pairs + 1):
        for side, code in (("A", args.other.resolve()), ("B", None)):
            r = one_run(code, args.jobs, args.config)
            for key in keys:
                runs[side][key].append(r[key])
            print(
                f"{side}{pair}: start-up {r['startup_s']:.2f} s, CPU {r['startup_cpu_s']:.2f} s;"
                f" jobs CPU {r['run_cpu_s']:.2f} s; tree CPU per 10k {r['total_cpu_per_10k']:.2f};"
                f" {r['jobs_per_s']:,.0f} jobs/s (steady {r['steady_jobs_per_s']:,.0f})",
                flush=True,
            )
    for side in "AB":
        print(
            f"{side} medians: "
            + ", ".join(f"{k} {statistics.median(runs[side][k]):.2f}" for k in keys)
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
