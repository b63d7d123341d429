"""A real PostgreSQL for the suite: one throwaway cluster per session (or the server
that PGWORKERD_TEST_DSN names), a template database migrated once, and a fresh
database per test made from it with CREATE DATABASE ... TEMPLATE."""

from __future__ import annotations

import contextlib
import importlib.util
import os
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import pq, sql
from psycopg.conninfo import make_conninfo

from pgworkerd.storage.embedded import FAST_UNSAFE_SETTINGS, EmbeddedCluster, free_port
from pgworkerd.storage.migrations import migrate
from pgworkerd.storage.store import DEFAULT_SCHEMA, JobStore
from tests.dashboard import dashboards  # noqa: F401 (a fixture of the browser and process tiers)

# tests/django runs in a Python 3.12 venv of its own (`make test` runs it as a separate
# invocation): a plain `pytest` in .venv (3.11, no Django) leaves it out rather than fail
# to import Django.
collect_ignore = ["django"] if importlib.util.find_spec("django") is None else []


@pytest.fixture(scope="session")
def pg_admin_dsn() -> Iterator[str]:
    """A superuser DSN of a server the suite may create databases on."""
    existing = os.environ.get("PGWORKERD_TEST_DSN")
    if existing:
        yield existing
        return
    base = Path(tempfile.mkdtemp(prefix="pgworkerd-test-"))
    cluster = EmbeddedCluster(base_dir=base, port=free_port(), settings=FAST_UNSAFE_SETTINGS)
    try:
        cluster.ensure_running()
        yield cluster.dsn()
    finally:
        cluster.destroy()


@pytest.fixture(scope="session")
def template_db(pg_admin_dsn: str) -> Iterator[str]:
    """Name of a database holding the migrated schema, built once per session."""
    name = f"pgworkerd_template_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(pg_admin_dsn, autocommit=True) as admin:
        admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    with psycopg.connect(make_conninfo(pg_admin_dsn, dbname=name)) as conn:
        migrate(conn, DEFAULT_SCHEMA)
    _compact_catalogs(make_conninfo(pg_admin_dsn, dbname=name))
    yield name
    _drop_database(pg_admin_dsn, name)


def _compact_catalogs(dsn: str) -> None:
    """VACUUM FULL of the database's own system catalogs (not the shared ones, not the
    schema's tables, whose never-vacuumed statistics the planner reads). Every test's
    CREATE DATABASE ... TEMPLATE copies the template page by page: the migrations' DDL
    left dead catalog rows, and this takes it from 8.2 to 7.1 MB (each copy ~40-50 ms
    less at load ~3). The catalogs' rows, and so the schema, are unchanged (pg_dump -s
    of both differ only in pg_dump's random restrict key): see
    bench/results/ci-time-round9-20261127.md."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        catalogs = conn.execute(
            "SELECT oid::regclass::text FROM pg_class"
            " WHERE relnamespace = 'pg_catalog'::regnamespace AND relkind = 'r'"
            " AND NOT relisshared"
        ).fetchall()
        conn.execute(
            sql.SQL("VACUUM FULL {}").format(
                sql.SQL(", ").join(sql.SQL(catalog) for (catalog,) in catalogs)
            )
        )


@pytest.fixture
def empty_db_dsn(pg_admin_dsn: str) -> Iterator[str]:
    """A fresh database with no pgworkerd schema at all."""
    name = f"pgworkerd_empty_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(pg_admin_dsn, autocommit=True) as admin:
        admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    yield make_conninfo(pg_admin_dsn, dbname=name)
    _drop_database(pg_admin_dsn, name)


class FreshDatabases:
    """Copies of `template` (CREATE DATABASE ... TEMPLATE), one per take(), each made
    one ahead by a thread of its own while the test before runs, and dropped by that
    thread after its test: the copy (~0.1-0.25 s) overlaps the test's body instead of
    adding to it. Every take() is a copy no one had before (a new name each time,
    handed out once) made from the template as it is: nothing writes to the template,
    so a copy made ahead is the same as one made on demand.

    The thread runs its two statements on the libpq connection (`pgconn.exec_`), not
    through psycopg's Cursor.execute, which tests patch to count their own statements
    (producer_ways.count_statements) in every thread."""

    def __init__(self, admin_dsn: str, template: str, prefix: str) -> None:
        self.admin_dsn = admin_dsn
        self.template = template
        self.prefix = prefix
        self._thread = ThreadPoolExecutor(1, thread_name_prefix=f"{prefix}databases")
        self._ahead: Future[str] | None = None
        self._undropped: list[str] = []

    def take(self) -> str:
        """The name of a fresh copy, the caller's alone; the next one is started."""
        name = None
        if self._ahead is not None:
            with contextlib.suppress(psycopg.Error):  # made again below, here
                name = self._ahead.result()
            # Forgotten only once waited for: a take() interrupted in that wait (a test's
            # timeout, Ctrl-C) leaves it to close(), which drops it.
            self._ahead = None
        if name is None:
            name = self._new_name()
            _create_database(self.admin_dsn, name, self.template)
        self._ahead = self._thread.submit(self._create, self._new_name())
        return name

    def give_back(self, name: str) -> None:
        """Drop `name` (its test is over) in the background."""
        self._thread.submit(self._drop, name)

    def close(self) -> None:
        """Drop the copy made ahead and any the thread failed to drop (raising if it
        still cannot)."""
        if self._ahead is not None:
            with contextlib.suppress(psycopg.Error):
                self.give_back(self._ahead.result())
        self._thread.shutdown(wait=True)
        for name in self._undropped:
            _drop_database(self.admin_dsn, name)

    def _new_name(self) -> str:
        return f"{self.prefix}{uuid.uuid4().hex[:12]}"

    def _create(self, name: str) -> str:
        _exec_admin(self.admin_dsn, _create_statement(name, self.template))
        return name

    def _drop(self, name: str) -> None:
        try:
            _exec_admin(self.admin_dsn, _drop_statement(name))
        except psycopg.Error:
            self._undropped.append(name)


def _exec_admin(admin_dsn: str, statement: sql.Composed) -> None:
    """Run one statement on a new autocommit admin connection, by libpq itself."""
    with psycopg.connect(admin_dsn, autocommit=True) as admin:
        result = admin.pgconn.exec_(statement.as_bytes(admin))
        if result.status != pq.ExecStatus.COMMAND_OK:
            raise psycopg.OperationalError(result.error_message.decode(errors="replace"))


@pytest.fixture(scope="session")
def _fresh_databases(pg_admin_dsn: str, template_db: str) -> Iterator[FreshDatabases]:
    databases = FreshDatabases(pg_admin_dsn, template_db, "pgworkerd_test_")
    yield databases
    databases.close()


@pytest.fixture
def db_dsn(pg_admin_dsn: str, _fresh_databases: FreshDatabases) -> Iterator[str]:
    """A fresh, migrated database for one test (FreshDatabases: made ahead)."""
    name = _fresh_databases.take()
    yield make_conninfo(pg_admin_dsn, dbname=name)
    _fresh_databases.give_back(name)


@pytest.fixture
def conn(db_dsn: str) -> Iterator[psycopg.Connection[Any]]:
    """An autocommit connection to the test's database, as workers use."""
    with psycopg.connect(db_dsn, autocommit=True) as connection:
        yield connection


@pytest.fixture
def store() -> JobStore:
    return JobStore()


def _create_database(admin_dsn: str, name: str, template: str, strategy: str | None = None) -> None:
    """CREATE DATABASE `name` as a copy of `template`. Strategy FILE_COPY (PostgreSQL
    15+) copies the files whole after a checkpoint: for a big template, much cheaper
    than the default block by block copy that writes all of it to the WAL."""
    with psycopg.connect(admin_dsn, autocommit=True) as admin:
        admin.execute(_create_statement(name, template, strategy))


def _create_statement(name: str, template: str, strategy: str | None = None) -> sql.Composed:
    statement = sql.SQL("CREATE DATABASE {} TEMPLATE {}").format(
        sql.Identifier(name), sql.Identifier(template)
    )
    if strategy is not None:
        statement += sql.SQL(" STRATEGY = {}").format(sql.SQL(strategy))
    return statement


def _drop_database(admin_dsn: str, name: str) -> None:
    with psycopg.connect(admin_dsn, autocommit=True) as admin:
        admin.execute(_drop_statement(name))


def _drop_statement(name: str) -> sql.Composed:
    return sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))


@pytest.fixture
def history_conn(conn: psycopg.Connection[Any]) -> psycopg.Connection[Any]:
    """The test database's connection, with the `history` table test handlers write."""
    from tests.daemon import HISTORY_TABLE

    conn.execute(HISTORY_TABLE)
    return conn


@pytest.fixture
def recorder(history_conn: psycopg.Connection[Any]) -> psycopg.Connection[Any]:
    """history_conn with the transitions trigger of tests/invariants.py installed."""
    from tests import invariants

    invariants.install(history_conn)
    return history_conn


@pytest.fixture
def daemons(tmp_path: Path):
    """daemons(dsn, name, **config) -> a running `pgworkerd run`; all killed at the end.
    Keywords `history_dsn` and `env` go to Daemon (history off a faulty path, extra
    environment); the others are config."""
    from tests.daemon import Daemon, write_config

    started: list[Daemon] = []

    def start(
        dsn: str,
        name: str = "pgworkerd",
        *,
        history_dsn: str | None = None,
        env: dict[str, str] | None = None,
        **config: Any,
    ) -> Daemon:
        path = write_config(tmp_path / f"{name}.yaml", **config)
        daemon = Daemon(path, dsn, tmp_path / f"{name}.log", history_dsn=history_dsn, env=env)
        started.append(daemon)
        return daemon

    yield start
    for daemon in started:
        daemon.kill_everything()


@pytest.fixture
def start_daemon(db_dsn: str, daemons: Any, history_conn: psycopg.Connection[Any]):
    """start_daemon(name, **config) -> a running `pgworkerd run` on the test database."""
    return lambda name="pgworkerd", **config: daemons(db_dsn, name, **config)


@pytest.fixture
def proxy(pg_admin_dsn: str):
    """A loopback TCP proxy (tests/proxy.py) in front of the test server."""
    from psycopg.conninfo import conninfo_to_dict

    from tests.proxy import Proxy

    params = conninfo_to_dict(pg_admin_dsn)
    host = str(params.get("host") or "")
    if not host or host.startswith("/"):
        from tests.tools import missing

        missing(
            "the test server (PGWORKERD_TEST_DSN) listens on a Unix socket only: nothing to proxy",
            "give PGWORKERD_TEST_DSN a TCP host, or unset it: the suite's own server "
            "listens on 127.0.0.1",
        )
    started = Proxy(int(params.get("port") or 5432), host).start()
    yield started
    started.close()


@pytest.fixture(scope="session")
def _own_cluster_files() -> Iterator[Path]:
    """The files of a stopped cluster with the schema, made once a session for
    own_cluster to copy: initdb and the migration took ~1.3 s a test, a copy ~0.2 s."""
    base = Path(tempfile.mkdtemp(prefix="pgworkerd-own-template-"))
    cluster = EmbeddedCluster(base_dir=base, port=free_port(), settings=FAST_UNSAFE_SETTINGS)
    try:
        cluster.ensure_running()
        with psycopg.connect(cluster.dsn()) as conn:
            migrate(conn, DEFAULT_SCHEMA)
        cluster.stop("fast")  # a clean shutdown: the copies start without recovery
        cluster.log_file.unlink()
        yield base
    finally:
        cluster.destroy()


@pytest.fixture
def own_cluster(_own_cluster_files: Path) -> Iterator[EmbeddedCluster]:
    """A cluster of the test's own, with the schema: for tests that stop or restart it.
    A copy of the session's stopped one (`cp -a` keeps the server user's ownership)."""
    base = Path(tempfile.mkdtemp(prefix="pgworkerd-own-"))
    subprocess.run(["cp", "-a", f"{_own_cluster_files}/.", str(base)], check=True)
    cluster = EmbeddedCluster(base_dir=base, port=free_port(), settings=FAST_UNSAFE_SETTINGS)
    cluster.ensure_running()
    yield cluster
    cluster.destroy()


@pytest.fixture(scope="session")
def _stats_cluster() -> Iterator[tuple[str, str]]:
    """A cluster with pg_stat_statements (which must be preloaded at its start), and a
    database migrated with the extension for stats_dsn to copy: (admin DSN, its name).
    One a session: a cluster a test (initdb, start, migrate) cost ~2.5 s each of 7."""
    base = Path(tempfile.mkdtemp(prefix="pgworkerd-held-"))
    cluster = EmbeddedCluster(
        base_dir=base,
        port=free_port(),
        settings={**FAST_UNSAFE_SETTINGS, "shared_preload_libraries": "pg_stat_statements"},
    )
    try:
        cluster.ensure_running()
        template = "pgworkerd_stats_template"
        _create_database(cluster.dsn(), template, "template1")
        with psycopg.connect(cluster.dsn(template)) as conn:
            migrate(conn, DEFAULT_SCHEMA)
            conn.execute("CREATE EXTENSION pg_stat_statements")
        yield cluster.dsn(), template
    finally:
        cluster.destroy()


@pytest.fixture
def stats_dsn(_stats_cluster: tuple[str, str]) -> Iterator[str]:
    """A fresh database of its own on the pg_stat_statements cluster. The tests that use
    it count the buffers of their own database's statements (by dbid, or after a reset
    of their own), and run one at a time."""
    admin_dsn, template = _stats_cluster
    name = f"pgworkerd_stats_{uuid.uuid4().hex[:12]}"
    _create_database(admin_dsn, name, template)
    yield make_conninfo(admin_dsn, dbname=name)
    _drop_database(admin_dsn, name)
