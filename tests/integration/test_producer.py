"""The producer API on a real server: the caller's transaction, unique keys, bulk
inserts, notifications, and input refused before any SQL. Every case runs both ways:
`enqueue`/`enqueue_many` on a Connection and `enqueue_async`/`enqueue_many_async` on
an AsyncConnection (tests/integration/producer_ways.py)."""

from __future__ import annotations

import ast
import math
import os
import subprocess
import sys
import threading
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest

from pgworkerd import InvalidJob, Producer
from pgworkerd.client.producer import default_producer
from pgworkerd.storage.channels import notify_channel
from pgworkerd.storage.queries import statements
from pgworkerd.storage.store import JobStore
from tests.daemon import REPO


def count_jobs(conn: psycopg.Connection[Any]) -> int:
    return conn.execute("SELECT count(*) FROM pgworkerd.jobs").fetchone()[0]


def test_enqueue_stores_the_job_as_given(way, pconn, conn):
    job_id = way.enqueue(
        pconn,
        "send_email",
        {"to": "a@example.com", "n": [1, 2.5]},
        queue="mail",
        priority=7,
        max_attempts=3,
        max_runtime=90,
    )
    row = JobStore().get(conn, job_id)
    assert row["kind"] == "send_email" and row["queue"] == "mail"
    assert row["payload"] == {"to": "a@example.com", "n": [1, 2.5]}
    assert row["priority"] == 7 and row["max_attempts"] == 3
    assert row["max_runtime"] == timedelta(seconds=90)
    assert row["state"] == "queued" and row["attempt"] == 0


def test_enqueue_commits_and_rolls_back_with_the_callers_transaction(way, db_dsn):
    with way.connect(db_dsn) as conn:
        way.enqueue(conn, "k", {"keep": True})
        conn.commit()
        with conn.transaction(force_rollback=True):
            way.enqueue(conn, "k", {"keep": False})
            way.enqueue_many(conn, [{"kind": "k", "payload": {"keep": False}}] * 3)
        conn.rollback()
    with psycopg.connect(db_dsn) as check:
        payloads = [r[0] for r in check.execute("SELECT payload FROM pgworkerd.jobs")]
    assert payloads == [{"keep": True}]


def test_delay_is_counted_from_the_database_clock(way, pconn, conn):
    now = conn.execute("SELECT now()").fetchone()[0]
    job_id = way.enqueue(pconn, "k", {}, delay=timedelta(minutes=5))
    run_at = JobStore().get(conn, job_id)["run_at"]
    assert timedelta(minutes=4, seconds=55) < run_at - now < timedelta(minutes=5, seconds=10)


def test_enqueue_many_returns_ids_in_order_from_one_statement(way, pconn, conn):
    specs = [{"kind": f"k{n % 3}", "payload": {"n": n}, "priority": n % 5} for n in range(10_000)]
    with way.count_statements() as execute:
        ids = way.enqueue_many(pconn, specs)
    assert execute.call_count == 1, "one statement for the whole list"
    assert len(ids) == 10_000 and len(set(ids)) == 10_000
    rows = dict(conn.execute("SELECT id, payload->>'n' FROM pgworkerd.jobs").fetchall())
    assert [int(rows[i]) for i in ids] == list(range(10_000))


def test_one_job_alone_is_stored_as_the_same_job_in_a_list(way, pconn, conn):
    # One job without a unique_key goes in by its own statement (jobs_insert_one), a
    # list by jobs_insert: every option must land the same way through both.
    spec = {
        "kind": "k",
        "payload": {"n": [1, "two"]},
        "queue": "mail",
        "priority": -3,
        "delay": 30,
        "max_attempts": 4,
        "max_runtime": timedelta(seconds=9),
        "key": "tenant:1",
    }
    with way.count_statements() as execute:
        alone = way.enqueue(
            pconn,
            spec["kind"],
            spec["payload"],
            **{k: v for k, v in spec.items() if k not in ("kind", "payload")},
        )
    assert execute.call_count == 1
    in_list = way.enqueue_many(pconn, [spec, spec])
    columns = (
        "queue, kind, payload, priority, state, attempt, max_attempts, max_runtime, key,"
        " unique_key, trace_context, errors, round(extract(epoch FROM run_at - created_at))"
    )
    rows = [
        conn.execute(f"SELECT {columns} FROM pgworkerd.jobs WHERE id = %s", (i,)).fetchone()
        for i in [alone, *in_list]
    ]
    assert rows[0] == rows[1] == rows[2]
    assert rows[0][-1] == 30 and rows[0][3] == -3 and rows[0][8] == "tenant:1"
    assert alone < in_list[0] < in_list[1], "ids from the one sequence, in order"


@pytest.mark.parametrize(
    "options",
    [
        pytest.param({}, id="no-options"),
        pytest.param(
            {"run_at": datetime(2031, 5, 6, 7, 8, 9, 123456, tzinfo=UTC), "priority": 2**31 - 1},
            id="run_at",
        ),
        pytest.param({"delay": 0.25, "max_runtime": 0.5, "max_attempts": 1}, id="fractions"),
    ],
)
def test_every_option_of_one_job_lands_as_in_a_list(way, pconn, conn, options):
    # jobs_insert_one takes its options as positional parameters, NULL when not given;
    # jobs_insert reads them from a JSON record: the same row either way.
    spec = {"kind": "k", "payload": {"s": "é\\u0000", "f": 0.1}, **options}
    alone = way.enqueue(pconn, "k", spec["payload"], **options)
    (in_list,) = way.enqueue_many(pconn, [spec])
    columns = (
        "queue, kind, payload, payload::text, priority, state, attempt, max_attempts,"
        " max_runtime, key, trace_context, errors,"
        " CASE WHEN %s THEN run_at END,"
        " CASE WHEN NOT %s THEN extract(epoch FROM run_at - created_at) END"
    )
    rows = [
        conn.execute(
            f"SELECT {columns} FROM pgworkerd.jobs WHERE id = %s",
            ("run_at" in options, "run_at" in options, i),
        ).fetchone()
        for i in (alone, in_list)
    ]
    assert rows[0] == rows[1]
    if "run_at" in options:
        assert rows[0][-2] == options["run_at"]
    else:  # delay from the transaction's start: exactly that many seconds
        assert rows[0][-1] == options.get("delay", 0)


BARE = statements("pgworkerd")["jobs_insert_bare"]
ONE = statements("pgworkerd")["jobs_insert_one"]


@pytest.mark.parametrize(
    ("options", "statement"),
    [
        pytest.param({}, BARE, id="none"),
        pytest.param({"queue": "mail"}, BARE, id="queue"),
        pytest.param({"priority": 0}, ONE, id="priority-0"),
        pytest.param({"queue": "mail", "priority": 3}, ONE, id="priority"),
        pytest.param({"delay": 0}, ONE, id="delay"),
        pytest.param({"run_at": datetime(2031, 1, 1, tzinfo=UTC)}, ONE, id="run_at"),
        pytest.param({"max_attempts": 2}, ONE, id="max_attempts"),
        pytest.param({"max_runtime": 5}, ONE, id="max_runtime"),
        pytest.param({"key": "tenant:1"}, ONE, id="key"),
    ],
)
def test_each_set_of_options_reaches_its_statement(way, pconn, conn, options, statement):
    # Only a job given no option but its queue goes in by jobs_insert_bare (three
    # parameters, the other columns' defaults); any other option, even at its default
    # value, by jobs_insert_one, which has a parameter for it.
    with way.count_statements() as execute:
        job_id = way.enqueue(pconn, "k", {"n": 1}, **options)
    assert [c.args[1] for c in execute.call_args_list] == [statement]
    row = JobStore().get(conn, job_id)
    assert row["queue"] == options.get("queue", "default") and row["payload"] == {"n": 1}


def test_the_bare_statement_writes_the_row_of_the_full_one(way, db_dsn, conn):
    # jobs_insert_bare leaves seven columns to their defaults; jobs_insert_one writes
    # them from NULL parameters. In one transaction (the same now()), every column but
    # the id must come out the same.
    with way.connect(db_dsn) as pconn, way.count_statements() as execute:
        bare = way.enqueue(pconn, "k", {"n": [1, "two"]}, queue="mail")
        full = way.enqueue(pconn, "k", {"n": [1, "two"]}, queue="mail", priority=0)
        pconn.commit()
    assert [c.args[1] for c in execute.call_args_list] == [BARE, ONE]
    rows = [
        conn.execute(
            "SELECT to_jsonb(j) - 'id' FROM pgworkerd.jobs AS j WHERE id = %s", (i,)
        ).fetchone()[0]
        for i in (bare, full)
    ]
    assert rows[0] == rows[1]
    assert rows[0]["run_at"] == rows[0]["created_at"] and rows[0]["priority"] == 0


def test_enqueue_on_a_connection_with_another_row_factory(way, db_dsn, conn):
    # The id is read from the result itself, not through the connection's row_factory:
    # a dict_row connection got KeyError(0) from enqueue before round 9.
    with way.connect(db_dsn, autocommit=True, row_factory=psycopg.rows.dict_row) as pconn:
        job_id = way.enqueue(pconn, "k", {"n": 1}, queue="q")
    assert isinstance(job_id, int) and JobStore().get(conn, job_id)["queue"] == "q"


def test_the_one_job_statement_is_prepared_and_keeps_one_plan(way, pconn, conn):
    # psycopg prepares a statement on its prepare_threshold-th execution (5 by default)
    # if its bytes and parameter types are the same each time: the one-job statement
    # must be the same bytes at every call, whatever the job.
    for n in range(8):
        way.enqueue(pconn, f"kind{n}", {"n": n}, queue=f"q{n % 3}")
    prepared = way.fetch_all(
        pconn,
        "SELECT statement FROM pg_prepared_statements WHERE statement LIKE '%INSERT INTO%jobs%'",
    )
    assert len(prepared) == 1, prepared
    assert count_jobs(conn) == 8


def test_enqueue_many_of_nothing_does_nothing(way, pconn):
    with way.count_statements() as execute:
        assert way.enqueue_many(pconn, []) == []
    assert execute.call_count == 0


# -- unique keys ---------------------------------------------------------------------------


def test_unique_key_returns_the_live_job_and_frees_up_when_it_finishes(way, pconn, conn):
    first = way.enqueue(pconn, "k", {"v": 1}, unique_key="daily-report")
    assert way.enqueue(pconn, "k", {"v": 2}, unique_key="daily-report") == first
    assert count_jobs(conn) == 1
    store = JobStore()
    (job,) = store.claim(conn, queues=["default"], limit=1, lease_ttl_s=30, worker="w")
    assert way.enqueue(pconn, "k", {"v": 3}, unique_key="daily-report") == first, (
        "a running job still holds its key"
    )
    store.complete(conn, [(job.lease, None)])
    third = way.enqueue(pconn, "k", {"v": 4}, unique_key="daily-report")
    assert third != first


def test_unique_key_repeated_within_one_batch(way, pconn, conn):
    ids = way.enqueue_many(
        pconn,
        [
            {"kind": "k", "payload": {"n": 0}, "unique_key": "a"},
            {"kind": "k", "payload": {"n": 1}},
            {"kind": "k", "payload": {"n": 2}, "unique_key": "a"},
            {"kind": "k", "payload": {"n": 3}, "unique_key": "b"},
        ],
    )
    assert ids[0] == ids[2] and len(set(ids)) == 3
    existing = way.enqueue_many(pconn, [{"kind": "k", "payload": {}, "unique_key": "b"}])
    assert existing == [ids[3]]
    assert count_jobs(conn) == 3


def test_concurrent_enqueues_of_one_unique_key_make_one_row(way, db_dsn):
    """docs/faults.md, "Concurrent enqueues of one unique key": both callers get the id
    of the single row."""
    with way.connect(db_dsn) as first, way.connect(db_dsn) as second:
        first_id = way.enqueue(first, "k", {}, unique_key="once")
        result: dict[str, Any] = {}

        def enqueue_second() -> None:
            try:
                result["id"] = way.enqueue(second, "k", {}, unique_key="once")
                second.commit()
            except Exception as exc:  # pragma: no cover - reported below
                result["error"] = exc

        thread = threading.Thread(target=enqueue_second)
        thread.start()
        waiting = _wait_for_lock_waiter(db_dsn)
        assert waiting, "the second enqueue should wait on the first's uncommitted key"
        first.commit()
        thread.join(timeout=30)
        assert result == {"id": first_id}
    with psycopg.connect(db_dsn) as check:
        assert count_jobs(check) == 1


def test_unique_key_is_free_again_when_the_holder_rolls_back(way, db_dsn):
    with way.connect(db_dsn) as first, way.connect(db_dsn) as second:
        way.enqueue(first, "k", {}, unique_key="once")
        result: dict[str, int] = {}
        thread = threading.Thread(
            target=lambda: result.update(id=way.enqueue(second, "k", {}, unique_key="once"))
        )
        thread.start()
        assert _wait_for_lock_waiter(db_dsn)
        first.rollback()
        thread.join(timeout=30)
        second.commit()
    with psycopg.connect(db_dsn) as check:
        assert [r[0] for r in check.execute("SELECT id FROM pgworkerd.jobs")] == [result["id"]]


def _wait_for_lock_waiter(dsn: str, timeout_s: float = 10) -> bool:
    """True once some backend of this database waits on a lock (polled, with a deadline)."""
    with psycopg.connect(dsn, autocommit=True) as observer:
        deadline = observer.execute(
            "SELECT clock_timestamp() + %s * interval '1s'", (timeout_s,)
        ).fetchone()[0]
        while True:
            row = observer.execute(
                "SELECT count(*) > 0, clock_timestamp() > %s FROM pg_stat_activity"
                " WHERE datname = current_database() AND wait_event_type = 'Lock'",
                (deadline,),
            ).fetchone()
            if row[0]:
                return True
            if row[1]:
                return False
            observer.execute("SELECT pg_sleep(0.01)")


# -- notifications -------------------------------------------------------------------------


def test_enqueue_notifies_the_queue_name_at_commit_only(way, db_dsn):
    with psycopg.connect(db_dsn, autocommit=True) as listener, way.connect(db_dsn) as conn:
        listener.execute(f'LISTEN "{notify_channel("pgworkerd")}"')
        way.enqueue(conn, "k", {"big": "x" * 20_000}, queue="mail")
        conn.rollback()
        way.enqueue(conn, "k", {}, queue="later", delay=60)
        way.enqueue_many(conn, [{"kind": "k", "payload": {}, "queue": "reports"}] * 5)
        way.enqueue(conn, "k", {}, queue="mail")
        conn.commit()
        received = [n.payload for n in listener.notifies(timeout=2, stop_after=3)]
    # A queue that got only a job for later is told too: an idle worker then sleeps
    # until that job's run_at instead of until its next poll.
    assert sorted(received) == ["later", "mail", "reports"], "one per queue, name only"


# -- bad input -----------------------------------------------------------------------------


class Cycle(list):
    pass


_cycle: list[Any] = Cycle()
_cycle.append(_cycle)

BAD_ENQUEUES = [
    pytest.param({"kind": ""}, "kind must not be empty", id="empty-kind"),
    pytest.param({"kind": "   "}, "kind must not be empty", id="blank-kind"),
    pytest.param({"kind": None}, "kind must be a string", id="kind-none"),
    pytest.param({"kind": ["k"]}, "kind must be a string", id="kind-unhashable"),
    pytest.param({"kind": "k" * 256}, "over the limit of 255", id="long-kind"),
    pytest.param({"kind": "a\x00b"}, "control characters", id="nul-in-kind"),
    pytest.param({"queue": ""}, "queue must not be empty", id="empty-queue"),
    pytest.param({"queue": 5}, "queue must be a string", id="queue-int"),
    pytest.param({"queue": ["q"]}, "queue must be a string", id="queue-unhashable"),
    pytest.param({"queue": "q\n"}, "control characters", id="newline-queue"),
    pytest.param({"kind": "a\x9bb"}, "control characters", id="c1-csi-in-kind"),
    pytest.param({"queue": "q\x85"}, "control characters", id="c1-nel-queue"),
    pytest.param({"payload": datetime.now(UTC)}, "not JSON-serialisable", id="datetime"),
    pytest.param({"payload": {1, 2}}, "not JSON-serialisable", id="set"),
    pytest.param({"payload": b"bytes"}, "not JSON-serialisable", id="bytes"),
    pytest.param({"payload": {"x": math.nan}}, "not JSON-serialisable", id="nan"),
    pytest.param({"payload": {"x": math.inf}}, "not JSON-serialisable", id="inf"),
    pytest.param({"payload": _cycle}, "not JSON-serialisable", id="cycle"),
    pytest.param({"payload": {"a": "x\x00y"}}, "NUL character", id="nul-value"),
    pytest.param({"payload": {"a\x00": 1}}, "NUL character", id="nul-key"),
    pytest.param(
        {"payload": "x" * (1024 * 1024)}, "over the limit of 1048576 bytes", id="oversized"
    ),
    pytest.param({"priority": "1"}, "priority must be an integer", id="priority-str"),
    pytest.param({"priority": 1.5}, "priority must be an integer", id="priority-float"),
    pytest.param({"priority": True}, "priority must be an integer", id="priority-bool"),
    pytest.param({"priority": 2**40}, "32 bits", id="priority-huge"),
    pytest.param({"delay": 5, "run_at": datetime.now(UTC)}, "not both", id="delay-and-run-at"),
    pytest.param({"delay": -1}, ">= 0", id="negative-delay"),
    pytest.param({"delay": math.nan}, "finite", id="nan-delay"),
    pytest.param({"delay": "5s"}, "seconds or a timedelta", id="delay-str"),
    pytest.param({"run_at": datetime(2030, 1, 1)}, "timezone-aware", id="naive-run-at"),
    pytest.param({"run_at": "2030-01-01"}, "must be a datetime", id="run-at-str"),
    pytest.param({"unique_key": ""}, "unique_key must not be empty", id="empty-unique-key"),
    pytest.param({"max_attempts": 0}, "max_attempts must be an integer from 1", id="attempts-0"),
    pytest.param({"max_attempts": "3"}, "max_attempts must be an integer", id="attempts-str"),
    pytest.param({"max_runtime": 0}, "> 0", id="runtime-0"),
    pytest.param({"max_runtime": 1e-7}, "at least a microsecond", id="runtime-below-1us"),
    pytest.param({"max_runtime": 1e15}, "at most 100 years", id="runtime-huge"),
    pytest.param({"delay": 1e12}, "delay must be at most 100 years", id="delay-huge"),
    pytest.param({"delay": timedelta.max}, "at most 100 years", id="delay-timedelta-max"),
]


@pytest.mark.parametrize(("changes", "message"), BAD_ENQUEUES)
def test_bad_input_is_refused_before_any_sql(way, db_dsn, conn, changes, message):
    args = {"kind": "k", "payload": {}} | changes
    with way.connect(db_dsn) as pconn:  # not autocommit: any statement would open a tx
        with pytest.raises(InvalidJob) as refused:
            way.enqueue(pconn, args.pop("kind"), args.pop("payload"), **args)
        assert message in str(refused.value)
        assert "\n" not in str(refused.value)
        assert pconn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE, (
            "no statement may run for a refused job"
        )
        with pytest.raises(InvalidJob, match=r"^jobs\[1\]: "):
            way.enqueue_many(
                pconn, [{"kind": "ok", "payload": {}}, {"kind": "k", "payload": {}} | changes]
            )
        assert pconn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
    assert count_jobs(conn) == 0


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("not a dict", "must be a dict"),
        ({"kind": "k"}, "lacks 'payload'"),
        ({"payload": {}}, "lacks 'kind'"),
        ({"kind": "k", "payload": {}, "colour": "red"}, "unknown key(s): colour"),
    ],
)
def test_enqueue_many_refuses_malformed_entries(way, pconn, conn, spec, message):
    with pytest.raises(InvalidJob, match=r"^jobs\[0\]") as refused:
        way.enqueue_many(pconn, [spec])
    assert message in str(refused.value)
    assert count_jobs(conn) == 0


def test_odd_but_valid_names_are_stored_as_data(way, pconn, conn):
    names = ["it's", 'q"; DROP TABLE pgworkerd.jobs; --', "émoji 🚀", "x" * 200]
    ids = way.enqueue_many(pconn, [{"kind": n, "payload": {"n": n}, "queue": n} for n in names])
    rows = conn.execute(
        "SELECT kind, queue FROM pgworkerd.jobs WHERE id = ANY(%s) ORDER BY id", (ids,)
    ).fetchall()
    assert rows == [(n, n) for n in names]


def test_payload_limit_is_configurable(way, pconn, monkeypatch):
    small = Producer(max_payload_bytes=100)
    with pytest.raises(InvalidJob, match="over the limit of 100 bytes"):
        way.enqueue(pconn, "k", {"x": "y" * 100}, producer=small)
    assert way.enqueue(pconn, "k", {"x": "y" * 10}, producer=small) > 0

    monkeypatch.setenv("PGWORKERD_MAX_PAYLOAD_BYTES", "50")
    default_producer.cache_clear()
    try:
        with pytest.raises(InvalidJob, match="over the limit of 50 bytes"):
            way.enqueue(pconn, "k", {"x": "y" * 60})
    finally:
        default_producer.cache_clear()


def test_schema_comes_from_the_environment(way, empty_db_dsn, monkeypatch):
    from pgworkerd.storage.migrations import migrate

    monkeypatch.setenv("PGWORKERD_DATABASE__SCHEMA", "jobs_elsewhere")
    default_producer.cache_clear()
    try:
        with (
            psycopg.connect(empty_db_dsn, autocommit=True) as conn,
            way.connect(empty_db_dsn, autocommit=True) as pconn,
        ):
            migrate(conn, "jobs_elsewhere")
            job_id = way.enqueue(pconn, "k", {})
            assert conn.execute("SELECT id FROM jobs_elsewhere.jobs").fetchone()[0] == job_id
    finally:
        default_producer.cache_clear()


def test_payload_may_hold_a_literal_backslash_u0000(way, pconn, conn):
    job_id = way.enqueue(pconn, "k", {"text": "\\u0000 is how JSON writes NUL"})
    assert JobStore().get(conn, job_id)["payload"]["text"].startswith("\\u0000")


def _loaded_by_a_first_enqueue(db_dsn: str, names: tuple[str, ...]) -> list[str]:
    """Which of `names` (modules, or packages with all their modules) a new Python has
    loaded after `import pgworkerd` and its first enqueues, one of each statement kind
    (no PGWORKERD_* variable set)."""
    script = (
        "import sys, psycopg, pgworkerd\n"
        f"with psycopg.connect({db_dsn!r}) as conn:\n"
        "    pgworkerd.enqueue(conn, 'k', {})\n"
        "    pgworkerd.enqueue(conn, 'k', {}, priority=1)\n"
        "    pgworkerd.enqueue_many(conn, [{'kind': 'k', 'payload': {}}])\n"
        f"names = {names!r}\n"
        "print(sorted(n for n in names if any(f'{m}.'.startswith(f'{n}.') for m in sys.modules)))\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.lower().startswith("pgworkerd_")}
    result = subprocess.run(
        [sys.executable, "-c", script],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    loaded: list[str] = ast.literal_eval(result.stdout.strip())
    return loaded


def test_a_first_enqueue_without_the_settings_names_does_not_load_pydantic(db_dsn):
    """pydantic and pydantic_settings (~0.25 s to import, in a web app's first request)
    load only when the environment names a setting (tests/unit/test_producer_settings.py)."""
    assert _loaded_by_a_first_enqueue(db_dsn, ("pydantic", "pydantic_settings")) == []


def test_a_first_enqueue_loads_nothing_of_the_daemon_or_the_handlers_side(db_dsn):
    """A web process's first enqueue pays for every module it loads (~25 ms with compiled
    modules when it loaded the claims' store, what a handler receives and its progress
    reporting; bench/results/first-call-round14-20261128.md): it loads the producer's
    statements (storage/inserts.py) and nothing the daemon or a handler needs."""
    daemon_side = (
        *("pgworkerd.supervisor", "pgworkerd.worker", "pgworkerd.housekeeping", "pgworkerd.ipc"),
        *("pgworkerd.cli", "pgworkerd.config", "pgworkerd.handlers", "pgworkerd.web"),
        *("pgworkerd.job", "pgworkerd.progress", "pgworkerd.logs", "pgworkerd.contrib.otel_worker"),
        *("pgworkerd.storage.store", "pgworkerd.storage.limits", "pgworkerd.storage.progress"),
        *("prometheus_client", "psutil", "setproctitle", "croniter", "yaml", "pydantic"),
    )
    assert _loaded_by_a_first_enqueue(db_dsn, daemon_side) == []
