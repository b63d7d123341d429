"""What one enqueue per transaction costs, beside the raw loop's insert-and-commit, in one
run on one throwaway durable cluster (the peers' settings, bench/cluster.py).

    python -m bench.enqueue_cost [--a /work/main] [--b .] [--n 2000] [--rounds 4]
                                 [--producers 1,8] [--profile DIR]
                                 [--blocks 60 --block 100 [--block-producers 8]]
                                 [--bulk 1000]

Each round alternates, for every number of concurrent producers (processes, each on its
own autocommit connection, `n` calls each after a warm-up):

  raw          the raw loop's exact statement (bench_rawpsycopg.py, throughput phase):
               `INSERT INTO raw_jobs (payload) VALUES (%s)`, autocommit, on its table
               with its statement-level trigger that calls pg_notify
  raw_quiet    the same insert on the same table without the trigger: what NOTIFY costs
  raw_notify   raw_quiet's insert then `SELECT pg_notify(...)` in one transaction
               (two round trips and an explicit COMMIT)
  A, B (, C)   `pgworkerd.enqueue(conn, "noop", {"i": 0}, queue="bench")`, autocommit
               (as bench/measure.py's 1-by-1 phase), with the code of checkout A
               (`--a`, default the main checkout) and B (`--b`, default this one),
               (and C, `--c`, if given), each on a database of its own migrated by
               its own code

Every table is emptied before each measurement. Prints jobs/s per variant (median of the
rounds), each as a ratio to `raw` of the same round, and the client CPU per job.

`--bulk K`: each call enqueues K jobs in one statement instead: `enqueue_many` of K
records, and raw's insert of the peers' throughput phase, `INSERT INTO raw_jobs (payload)
SELECT unnest(%s::jsonb[])` of K payloads (its trigger notifies once per statement);
raw_notify has no bulk form. The table's "enqueue bulk" column is K = 1,000.

`--profile DIR` then, on a second cluster with pg_stat_statements (track_planning on),
enqueues `n` jobs with each checkout under cProfile and writes DIR/profile-A.txt... (top
functions by self time) and DIR/statements.md (the server's per-statement figures).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psycopg

from bench.cluster import PEER_SETTINGS, throwaway_cluster
from bench.daemon import REPO

RAW_SCHEMA = """
CREATE TABLE raw_jobs (
    id bigserial PRIMARY KEY,
    queue text NOT NULL DEFAULT 'default',
    status smallint NOT NULL DEFAULT 0,
    payload jsonb NOT NULL,
    enqueued_at timestamptz NOT NULL DEFAULT now(),
    picked_at timestamptz
);
CREATE INDEX raw_jobs_queued ON raw_jobs (queue, id) WHERE status = 0;
CREATE FUNCTION raw_jobs_notify() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN PERFORM pg_notify('raw_jobs', NEW.queue); RETURN NULL; END $$;
CREATE TRIGGER raw_jobs_notify AFTER INSERT ON raw_jobs
    FOR EACH STATEMENT EXECUTE FUNCTION raw_jobs_notify();
CREATE TABLE raw_quiet (LIKE raw_jobs INCLUDING ALL);
"""

# What one call of each variant is, in a child process run in the checkout measured.
CALLS = r"""
import json, multiprocessing as mp, os, sys, time
import psycopg

dsn, variant = sys.argv[1], sys.argv[2]
bulk = int(os.environ.get("BENCH_BULK", "0"))  # jobs per call; 0: one, by its own call
if variant == "enqueue":
    import pgworkerd

    def make_call(conn):
        payload = {"i": 0}
        if bulk:
            jobs = [{"kind": "noop", "payload": payload, "queue": "bench"}] * bulk
            return lambda: pgworkerd.enqueue_many(conn, jobs)
        return lambda: pgworkerd.enqueue(conn, "noop", payload, queue="bench")
elif variant in ("raw", "raw_quiet"):
    def make_call(conn):
        table = "raw_quiet" if variant == "raw_quiet" else "raw_jobs"
        payload = json.dumps({"i": 0})
        if bulk:
            query = f"INSERT INTO {table} (payload) SELECT unnest(%s::jsonb[])"
            payloads = [payload] * bulk
            return lambda: conn.execute(query, (payloads,))
        query = f"INSERT INTO {table} (payload) VALUES (%s)"
        return lambda: conn.execute(query, (payload,))
elif bulk:
    raise SystemExit(f"{variant} has no bulk form")
else:  # raw_notify
    def make_call(conn):
        payload = json.dumps({"i": 0})

        def call():
            with conn.transaction():
                conn.execute("INSERT INTO raw_quiet (payload) VALUES (%s)", (payload,))
                conn.execute("SELECT pg_notify('raw_jobs', 'default')")
        return call


"""

# The child of a round: imports, forks `producers` processes that each connect, warm up
# (psycopg prepares a statement on its 5th execution) and wait at a barrier; then each
# makes `n` calls. jobs/s = all calls / (last end - first start), CLOCK_MONOTONIC being
# one clock for every process; CPU = the producers' own CPU time (not the server's).
CHILD = (
    CALLS
    + r"""
n, producers = int(sys.argv[3]), int(sys.argv[4])


def producer(barrier, out):
    with psycopg.connect(dsn, autocommit=True) as conn:
        call = make_call(conn)
        for _ in range(20):
            call()
        barrier.wait()
        c0, t0 = time.process_time(), time.perf_counter()
        for _ in range(n):
            call()
        out.put((t0, time.perf_counter(), time.process_time() - c0))


ctx = mp.get_context("fork")
barrier, out = ctx.Barrier(producers), ctx.Queue()
procs = [ctx.Process(target=producer, args=(barrier, out)) for _ in range(producers)]
for p in procs:
    p.start()
got = [out.get(timeout=600) for _ in procs]
for p in procs:
    p.join()
span = max(g[1] for g in got) - min(g[0] for g in got)
jobs = n * producers * max(bulk, 1)
print(json.dumps({"jps": jobs / span, "cpu_us": sum(g[2] for g in got) / jobs * 1e6}))
"""
)

# The child of --blocks: one producer that makes `k` calls each time it reads `k` on
# stdin and answers with their wall and CPU seconds; the parent interleaves the variants
# block by block, so that a slow moment of the shared machine (another fsync-heavy
# process) falls on every variant alike.
SERVE = (
    CALLS
    + r"""
with psycopg.connect(dsn, autocommit=True) as conn:
    call = make_call(conn)
    for _ in range(20):
        call()
    print("ready", flush=True)
    for line in sys.stdin:
        k = int(line)
        c0, t0 = time.process_time(), time.perf_counter()
        for _ in range(k):
            call()
        print(time.perf_counter() - t0, time.process_time() - c0, flush=True)
"""
)

# The profile child: n enqueues under cProfile, then the top functions by self time.
PROFILE_CHILD = r"""
import cProfile, io, pstats, sys
import psycopg
import pgworkerd

dsn, n = sys.argv[1], int(sys.argv[2])
with psycopg.connect(dsn, autocommit=True) as conn:
    payload = {"i": 0}
    for _ in range(20):
        pgworkerd.enqueue(conn, "noop", payload, queue="bench")
    profile = cProfile.Profile()
    profile.enable()
    for _ in range(n):
        pgworkerd.enqueue(conn, "noop", payload, queue="bench")
    profile.disable()
text = io.StringIO()
stats = pstats.Stats(profile, stream=text)
stats.sort_stats("tottime").print_stats(25)
print(text.getvalue())
"""

MIGRATE = r"""
import sys
import psycopg
from pgworkerd.storage.migrations import migrate
with psycopg.connect(sys.argv[1], autocommit=True) as conn:
    migrate(conn, "pgworkerd")
"""

STATEMENTS = """
SELECT calls, plans, round((total_plan_time / greatest(plans, 1) * 1000)::numeric, 1),
       round((mean_exec_time * 1000)::numeric, 1), round(wal_bytes / calls, 0),
       left(regexp_replace(query, '\\s+', ' ', 'g'), 90)
FROM pg_stat_statements
WHERE calls >= %s AND dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
ORDER BY total_exec_time DESC LIMIT 6
"""


def _child_env(checkout: Path, bulk: int = 0) -> dict[str, str]:
    """A child's environment: `checkout`'s code, the default schema, `bulk` jobs a call."""
    env = {**os.environ, "PYTHONPATH": str(checkout), "BENCH_BULK": str(bulk)}
    env.pop("PGWORKERD_DATABASE__SCHEMA", None)
    return env


def _python(checkout: Path, code: str, *args: str, bulk: int = 0) -> str:
    # cwd too: `python -c` puts the working directory first on sys.path.
    done = subprocess.run(
        [sys.executable, "-c", code, *args],
        env=_child_env(checkout, bulk),
        cwd=checkout,
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout


def _empty(dsn: str, tables: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"TRUNCATE {tables} CASCADE")


def _setup(cluster_dsn: Any, checkouts: dict[str, Path]) -> dict[str, str]:
    """One database per variant family: `raw` (both raw tables), one per checkout."""
    dsns = {}
    with psycopg.connect(cluster_dsn(), autocommit=True) as admin:
        for name in ("raw", *checkouts):
            admin.execute(f"CREATE DATABASE bench_{name.lower()}")
            dsns[name] = cluster_dsn(f"bench_{name.lower()}")
    with psycopg.connect(dsns["raw"], autocommit=True) as conn:
        conn.execute(RAW_SCHEMA)
    for name, checkout in checkouts.items():
        migrate_with(checkout, dsns[name])
    return dsns


def migrate_with(checkout: Path, dsn: str) -> None:
    """pgworkerd's schema in `dsn`, by the migrations of `checkout`."""
    _python(checkout, MIGRATE, dsn)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--a", type=Path, default=REPO.parent / "main", help="checkout A")
    parser.add_argument("--b", type=Path, default=REPO, help="checkout B (default: this one)")
    parser.add_argument("--c", type=Path, help="a third checkout C (a step between A and B)")
    parser.add_argument("--n", type=int, default=2000, help="calls per producer")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--producers", default="1,8", help="comma-separated counts")
    parser.add_argument("--variants", default="raw,raw_quiet,raw_notify,A,B")
    parser.add_argument("--profile", type=Path, help="also profile A and B into this folder")
    parser.add_argument(
        "--blocks", type=int, default=0, help="first, one producer per variant, interleaved"
    )
    parser.add_argument("--block", type=int, default=100, help="calls per block")
    parser.add_argument(
        "--block-producers",
        type=int,
        default=1,
        help="producers per variant in --blocks (each makes `block` calls per block)",
    )
    parser.add_argument(
        "--server-loops",
        type=int,
        default=0,
        help="first, this many rounds of a server-side loop of 3,000 INSERTs into each"
        " checkout's jobs table (one DO block, no commit, no client): the executor's cost",
    )
    parser.add_argument(
        "--bulk",
        type=int,
        default=0,
        help="jobs per call, in one statement (enqueue_many; raw's unnest insert)",
    )
    parser.add_argument(
        "--async-commit",
        action="store_true",
        help="synchronous_commit off: the commit's flush out of the measure, to see the "
        "CPU path (round trip, server, client) that differs between the variants",
    )
    args = parser.parse_args()
    checkouts = {"A": args.a.resolve(), "B": args.b.resolve()}
    if args.c:
        checkouts["C"] = args.c.resolve()
    variants = args.variants.split(",")
    counts = [int(c) for c in args.producers.split(",")]
    got: dict[tuple[str, int], list[dict[str, float]]] = {}
    settings = {**PEER_SETTINGS, "synchronous_commit": "off"} if args.async_commit else None
    with throwaway_cluster(settings=settings) as cluster:
        print(f"cluster settings: {settings or PEER_SETTINGS}\n")
        dsns = _setup(cluster.dsn, checkouts)
        if args.server_loops:
            server_loops({k: dsns[k] for k in checkouts if k in variants}, args.server_loops)
        if args.blocks:
            interleaved(
                checkouts, variants, dsns, args.blocks, args.block, args.block_producers, args.bulk
            )
        for round_no in range(args.rounds):
            for count in counts:
                # the order rotates each round, so no variant always follows the same one
                shift = round_no % len(variants)
                for variant in variants[shift:] + variants[:shift]:
                    if variant in checkouts:
                        _empty(dsns[variant], "pgworkerd.jobs")
                        out = _python(
                            checkouts[variant],
                            CHILD,
                            dsns[variant],
                            "enqueue",
                            str(args.n),
                            str(count),
                            bulk=args.bulk,
                        )
                    else:
                        _empty(dsns["raw"], "raw_jobs, raw_quiet")
                        out = _python(
                            REPO,
                            CHILD,
                            dsns["raw"],
                            variant,
                            str(args.n),
                            str(count),
                            bulk=args.bulk,
                        )
                    got.setdefault((variant, count), []).append(json.loads(out))
            print(f"round {round_no + 1} of {args.rounds} done", file=sys.stderr)
    if not args.rounds:
        return
    named = ", ".join(f"{name} = {path}" for name, path in checkouts.items())
    per_call = f"{args.bulk:,} jobs" if args.bulk else "one job"
    print(
        f"{named}; {args.n} calls per producer ({per_call} a call), "
        f"median of {args.rounds} rounds; ratio = jobs/s / raw's in the same round\n"
    )
    print("| producers | variant | jobs/s | ÷ raw (median of rounds) | client CPU µs/job |")
    print("|---:|---|---:|---:|---:|")
    for count in counts:
        for variant in variants:
            runs = got[(variant, count)]
            raw_runs = got.get(("raw", count))
            ratio = (
                statistics.median(r["jps"] / b["jps"] for r, b in zip(runs, raw_runs, strict=True))
                if raw_runs
                else float("nan")
            )
            jps = statistics.median(r["jps"] for r in runs)
            cpu = statistics.median(r["cpu_us"] for r in runs)
            print(f"| {count} | {variant} | {jps:,.0f} | {ratio:.2f}x | {cpu:.0f} |")
    if args.profile:
        profile({k: v for k, v in checkouts.items() if k in variants}, args.profile, args.n)


# The statement's executor alone: INSERTs in a PL/pgSQL loop (each one a new executor
# run, as each enqueue is: CHECK constraints and index predicates are prepared per
# statement), timed by the server's clock, in one transaction that is rolled back.
SERVER_LOOP = """
DO $$
DECLARE t0 timestamptz := clock_timestamp();
BEGIN
    FOR i IN 1..3000 LOOP
        INSERT INTO pgworkerd.jobs (queue, kind, payload) VALUES ('bench', 'noop', '{"i": 0}');
    END LOOP;
    RAISE NOTICE '%', extract(epoch FROM clock_timestamp() - t0) * 1e6 / 3000;
END $$
"""


def server_loops(dsns: dict[str, str], rounds: int) -> None:
    """µs per INSERT of SERVER_LOOP in each checkout's database, alternated."""
    got: dict[str, list[float]] = {name: [] for name in dsns}
    notes: list[float] = []
    for _ in range(rounds):
        for name, dsn in dsns.items():
            with psycopg.connect(dsn) as conn:
                conn.add_notice_handler(lambda d: notes.append(float(d.message_primary or 0)))
                conn.execute(SERVER_LOOP)
                conn.rollback()
                got[name].append(notes[-1])
    print(f"server-side loop, µs per INSERT into pgworkerd.jobs ({rounds} rounds, alternated)\n")
    print("| checkout | median µs | rounds |")
    print("|---|---:|---|")
    for name, values in got.items():
        runs = ", ".join(f"{v:.1f}" for v in values)
        print(f"| {name} | {statistics.median(values):.1f} | {runs} |")
    print()


def interleaved_times(
    checkouts: dict[str, Path],
    variants: list[str],
    dsns: dict[str, str],
    blocks: int,
    block: int,
    producers: int = 1,
    bulk: int = 0,
) -> dict[str, list[tuple[float, float]]]:
    """`producers` producers per variant (processes), all connected at once; `blocks`
    rounds in which each variant's producers make `block` calls each, together, in turn
    (the order rotating). Each variant's (wall, client CPU) seconds per round; a block's
    wall time runs from the parent's go to the last producer's answer."""
    children: dict[str, list[subprocess.Popen[str]]] = {}
    for variant in variants:
        checkout = checkouts.get(variant, REPO)
        env = _child_env(checkout, bulk)
        what = "enqueue" if variant in checkouts else variant
        dsn = dsns[variant if variant in checkouts else "raw"]
        children[variant] = [
            subprocess.Popen(
                [sys.executable, "-c", SERVE, dsn, what],
                env=env,
                cwd=checkout,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
            )
            for _ in range(producers)
        ]
    times: dict[str, list[tuple[float, float]]] = {v: [] for v in variants}
    try:
        for group in children.values():
            for child in group:
                assert child.stdout is not None and child.stdout.readline().strip() == "ready"
        for round_no in range(blocks):
            shift = round_no % len(variants)
            for variant in variants[shift:] + variants[:shift]:
                group = children[variant]
                started = time.perf_counter()
                for child in group:
                    assert child.stdin is not None
                    child.stdin.write(f"{block}\n")
                    child.stdin.flush()
                cpu = 0.0
                for child in group:
                    assert child.stdout is not None
                    cpu += float(child.stdout.readline().split()[1])
                times[variant].append((time.perf_counter() - started, cpu))
    finally:
        for group in children.values():
            for child in group:
                if child.stdin is not None:
                    child.stdin.close()
                child.wait()
    return times


def ratio_to_raw(
    times: list[tuple[float, float]], raw: list[tuple[float, float]]
) -> tuple[float, float]:
    """jobs/s ÷ raw's: the median of the rounds' ratios (raw's wall time over the
    variant's in the same round), and the ratio over all rounds."""
    walls = [w for w, _ in times]
    raw_walls = [w for w, _ in raw]
    median = statistics.median(r / w for r, w in zip(raw_walls, walls, strict=True))
    return median, sum(raw_walls) / sum(walls)


def interleaved(
    checkouts: dict[str, Path],
    variants: list[str],
    dsns: dict[str, str],
    blocks: int,
    block: int,
    producers: int = 1,
    bulk: int = 0,
) -> None:
    """interleaved_times, printed as a table. Ratio: raw's time over the variant's in the
    same round (jobs/s ÷ raw's), median of the rounds."""
    times = interleaved_times(checkouts, variants, dsns, blocks, block, producers, bulk)
    jobs = block * blocks * producers * max(bulk, 1)
    named = ", ".join(f"{name} = {path}" for name, path in checkouts.items())
    per_call = f"{bulk:,} jobs" if bulk else "one job"
    print(
        f"{named}; {producers} producer(s) each, {blocks} rounds of {block} calls each"
        f" ({per_call} a call), interleaved\n"
    )
    print(
        "| variant | jobs/s (all rounds) | ÷ raw (median of rounds) | ÷ raw (all rounds) |"
        " client CPU µs/job |"
    )
    print("|---|---:|---:|---:|---:|")
    raw = times.get("raw")
    for variant in variants:
        walls = [w for w, _ in times[variant]]
        jps = jobs / sum(walls)
        median, overall = ratio_to_raw(times[variant], raw) if raw else (math.nan, math.nan)
        cpu = sum(c for _, c in times[variant]) / jobs * 1e6
        print(f"| {variant} | {jps:,.0f} | {median:.3f}x | {overall:.3f}x | {cpu:.0f} |")
    print()


def profile(checkouts: dict[str, Path], folder: Path, n: int) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    settings = {
        **PEER_SETTINGS,
        "shared_preload_libraries": "pg_stat_statements",
        "pg_stat_statements.track_planning": "on",
    }
    lines = ["| db | calls | plans | plan µs | exec µs | WAL bytes/call | statement |"]
    lines.append("|---|---:|---:|---:|---:|---:|---|")
    with throwaway_cluster(settings=settings) as cluster:
        dsns = _setup(cluster.dsn, checkouts)
        for name, dsn in dsns.items():
            with psycopg.connect(dsn, autocommit=True) as conn:
                conn.execute("CREATE EXTENSION pg_stat_statements")
                conn.execute("SELECT pg_stat_statements_reset()")
            if name == "raw":
                _python(REPO, CHILD, dsn, "raw", str(n), "1")
            else:
                text = _python(checkouts[name], PROFILE_CHILD, dsn, str(n))
                (folder / f"profile-{name}.txt").write_text(text)
            with psycopg.connect(dsn, autocommit=True) as conn:
                for row in conn.execute(STATEMENTS, (n,)):
                    lines.append(f"| {name} | " + " | ".join(map(str, row)) + " |")
    (folder / "statements.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
