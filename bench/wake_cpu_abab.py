"""The CPU of the wake path's own steps, this checkout against another, alternated.

    python -m bench.wake_cpu_abab OTHER_CHECKOUT [--rounds 6] [--jobs 300]

Wall-clock latency on a shared machine mostly measures the neighbours; the CPU time a
step spends in its own thread does not wait for a CPU, so it tells two checkouts apart
where the latency cannot. In one throwaway cluster, each round runs one process per
checkout (OTHER then this one, then the other way round), and each process, for every
one of `--jobs` jobs: enqueues it (a second connection), waits for its notification on
a Housekeeper's listening socket, reads it (`Housekeeper.notified`, the supervisor's
hop), then claims it as an idle worker would (`JobStore.claim`, batch 100, the worker's
connection options) and completes it. Per process, the median thread CPU time of the
read and of the claim (the first 20 jobs left out: psycopg prepares the claim on its
sixth run); per checkout, the median over the rounds, and the median ratio per round.
"""

from __future__ import annotations

import argparse
import json
import os
import select
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

WARMUP = 20
HERE = Path(__file__).resolve()


def one_process(dsn: str, jobs: int) -> dict[str, float]:
    """Run in a child process, on whichever checkout PYTHONPATH names."""
    import psycopg

    import pgworkerd
    from pgworkerd.config import Config
    from pgworkerd.housekeeping import Housekeeper
    from pgworkerd.storage import connections
    from pgworkerd.storage.store import JobStore

    try:
        from pgworkerd.worker import WORKER_OPTIONS as worker_options
    except ImportError:
        # This runs on the side under test, which may be a checkout from before
        # WORKER_OPTIONS (round 15): its workers set only plan_cache_mode, so stand
        # for them with that, as they were.
        from pgworkerd.worker import WORKER_PLAN_CACHE_MODE

        worker_options = f"-c plan_cache_mode={WORKER_PLAN_CACHE_MODE}"

    producer = psycopg.connect(dsn, autocommit=True)
    conn = connections.connect(dsn, application_name="wake_cpu", options=worker_options)
    store = JobStore()
    keeper = Housekeeper(
        store=JobStore(), database_url=dsn, lease_ttl_s=30, config=Config, daemon_id="wake_cpu"
    )
    fd = keeper.listen_fd()
    assert fd is not None
    keeper.notified()  # listening afresh
    read_s, claim_s = [], []
    for i in range(jobs):
        pgworkerd.enqueue(producer, "noop", {"i": i}, queue="bench")
        select.select([fd], [], [], 5)
        c0 = time.thread_time()
        notified = keeper.notified()
        read_s.append(time.thread_time() - c0)
        assert notified.queues == {"bench"}, notified
        c0 = time.thread_time()
        claimed = store.claim(
            conn, queues=["bench"], limit=100, lease_ttl_s=30.0, worker="wake_cpu", max_attempts=5
        )
        claim_s.append(time.thread_time() - c0)
        assert len(claimed) == 1, claimed
        store.complete(conn, [(claimed[0].lease, None)])
        time.sleep(0.003)
    keeper.close()
    return {
        "read_us": statistics.median(read_s[WARMUP:]) * 1e6,
        "claim_us": statistics.median(claim_s[WARMUP:]) * 1e6,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.wake_cpu_abab", description=__doc__)
    parser.add_argument("other", type=Path, help="the other checkout (side A)")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--jobs", type=int, default=300)
    parser.add_argument("--child", help=argparse.SUPPRESS)  # DSN: run one process's part
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(one_process(args.child, args.jobs)))
        return 0
    from bench.cluster import throwaway_cluster
    from bench.daemon import REPO, migrate, write_config

    results: dict[str, list[dict[str, float]]] = {"A": [], "B": []}
    work = Path(tempfile.mkdtemp(prefix="pgworkerd-wake-cpu-"))
    load = os.getloadavg()[0]
    with throwaway_cluster() as cluster:
        dsn = cluster.dsn()
        migrate(write_config(work / "config.yaml", dsn), work / "migrate.log")
        for n in range(args.rounds):
            for side in ["A", "B"] if n % 2 == 0 else ["B", "A"]:
                code = args.other.resolve() if side == "A" else REPO
                # This file run by path, on the side's pgworkerd: the other checkout
                # need not have it.
                env = {**os.environ, "PYTHONPATH": str(code)}
                out = subprocess.run(
                    [
                        sys.executable,
                        str(HERE),
                        str(code),
                        "--child",
                        dsn,
                        "--jobs",
                        f"{args.jobs}",
                    ],
                    env=env,
                    cwd=work,
                    capture_output=True,
                    text=True,
                    check=True,
                )
                record = json.loads(out.stdout.strip().splitlines()[-1])
                results[side].append(record)
                print(
                    f"  {side} round {n + 1}: "
                    + ", ".join(f"{k} {v:.1f}" for k, v in record.items())
                )
    print(
        f"\n{args.rounds} rounds of {args.jobs} jobs, A = {args.other}, B = this checkout; "
        f"load average (1 min) {load:.2f} before, {os.getloadavg()[0]:.2f} after\n"
    )
    print("| thread CPU, µs (median) | A | B | B/A per round, median |")
    print("|---|---:|---:|---:|")
    for key, label in (
        ("read_us", "supervisor: read a notification"),
        ("claim_us", "worker: idle claim of one job"),
    ):
        a = [r[key] for r in results["A"]]
        b = [r[key] for r in results["B"]]
        ratio = statistics.median(y / x for x, y in zip(a, b, strict=True))
        print(
            f"| {label} | {statistics.median(a):.0f} | {statistics.median(b):.0f} | {ratio:.2f} |"
        )
    return 0


if __name__ == "__main__":
    if sys.path and Path(sys.path[0]).resolve() == HERE.parent:
        sys.path.pop(0)  # run by path: bench/'s modules must not shadow others
    sys.exit(main())
