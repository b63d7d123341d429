"""Every operator and function our statements call is one another schema's object
cannot take over (tests/integration/parse_trees.py says how that happens and how the
parse tree shows it). test_search_path plants the overloads a review found and runs the
paths; this reads every statement of queries.sql, and the workflows' release function,
as PostgreSQL parsed them, so that a new statement is held to the rule without anyone
guessing its overloads. A call passes when its parameter types are its arguments' own
types; or, for a function, when the statement names it `pg_catalog.` everywhere; for
an operator, `OPERATOR(pg_catalog.op)`."""

from __future__ import annotations

import re
from collections import Counter
from typing import Any

import psycopg

import pgworkerd
from pgworkerd.storage import queries
from pgworkerd.storage.store import JobStore
from tests.integration.parse_trees import Call, Catalog, trees_of
from tests.integration.store_helpers import claim

# psycopg's placeholders, and the `%%` of a literal percent sign.
_PLACEHOLDER = re.compile(r"%%|%\((\w+)\)s|%s")
# What PREPARE cannot take: they call no operator nor function of ours to check.
_UTILITY = ("SET ", "CREATE ", "LISTEN ", "UNLISTEN ")


def _numbered(text: str) -> str:
    """The statement with `$1`, `$2`... for psycopg's placeholders, as sent."""
    order: list[str] = []

    def number(match: re.Match[str]) -> str:
        if match[0] == "%%":
            return "%"
        key = match[1] or f"#{len(order)}"
        if key not in order:
            order.append(key)
        return f"${order.index(key) + 1}"

    return _PLACEHOLDER.sub(number, text)


def _unguarded(calls: list[Call], text: str) -> list[str]:
    """The calls that `text` does not name by pg_catalog: a function named without it
    anywhere in the statement (quoted or not), or more open calls of an operator than
    the statement writes `OPERATOR(pg_catalog.op)`."""
    left = []
    for call in calls:
        if call.kind == "function" and re.search(
            rf'(?<![\w.]){re.escape(call.name)}\s*\(|(?<![\w.])"{re.escape(call.name)}"\s*\(', text
        ):
            left.append(f"{call.signature}: {call.why}")
    operators = Counter(call.name for call in calls if call.kind == "operator")
    for name, count in operators.items():
        if text.count(f"OPERATOR(pg_catalog.{name})") < count:
            left += [f"{c.signature}: {c.why}" for c in calls if c.name == name]
    return left


def test_every_parameter_is_cast_to_its_type() -> None:
    """A parameter's type is the one psycopg gives its Python value (an int small enough
    goes as smallint): a call that took it through an implicit coercion could be taken
    over for some values and not others, so each is cast where the statement uses it."""
    statements = queries.statements("pgworkerd")
    uncast = {}
    for name in queries.names():
        text = statements[name].decode()
        bare = [
            match[0]
            for match in re.finditer(r"%\(\w+\)s|(?<!%)%s", text)
            if not text[match.end() :].startswith("::")
        ]
        if bare:
            uncast[name] = bare
    assert uncast == {}


def test_no_statement_calls_what_another_schema_could_take_over(
    conn: psycopg.Connection[Any],
) -> None:
    catalog = Catalog(conn)
    statements = queries.statements("pgworkerd")
    trees = trees_of(conn)
    open_calls = {}
    prepared = 0
    for number, name in enumerate(queries.names()):
        text = statements[name].decode()
        if text.lstrip().startswith(_UTILITY):
            continue
        trees.clear()
        conn.execute(f"PREPARE statement_{number} AS {_numbered(text)}".encode(), prepare=False)
        prepared += 1
        assert trees, f"{name}: no parse tree reported"
        calls = [call for tree, _ in trees for call in catalog.open_calls(tree)]
        if left := _unguarded(calls, text):
            open_calls[name] = sorted(set(left))
    assert prepared > 70
    assert open_calls == {}


def test_the_release_function_calls_nothing_another_schema_could_take_over(
    conn: psycopg.Connection[Any],
) -> None:
    """The release's functions (PL/pgSQL: note_outcome, release_noted and
    release_dependents, 0019) parse their statements when they first run them, in the
    session of whoever completes a job: the succeeded and the dead branch run here."""
    catalog = Catalog(conn)
    store = JobStore()
    first = pgworkerd.enqueue(conn, "k", {}, max_attempts=1)
    pgworkerd.enqueue_many(conn, [{"kind": "d", "payload": {}, "after": [first]}] * 2)
    doomed = pgworkerd.enqueue(conn, "k", {}, queue="other", max_attempts=1)
    pgworkerd.enqueue(conn, "d", {}, queue="other", after=[doomed])
    [job] = claim(store, conn, limit=1)
    [dead] = claim(store, conn, limit=1, queues=["other"])
    trees = trees_of(conn)
    store.complete(conn, [(job.lease, None)])
    assert store.fail(conn, dead.lease, "boom").state == "dead"
    names = ("note_outcome", "release_noted", "release_dependents")
    in_function = [tree for tree, context in trees if any(n in context for n in names)]
    assert len(in_function) >= 2, "the release's statements were parsed here"
    source = "\n".join(
        conn.execute(
            f"SELECT prosrc FROM pg_proc WHERE oid = 'pgworkerd.{name}'::regproc"
        ).fetchone()[0]
        for name in names
    )
    calls = [call for tree in in_function for call in catalog.open_calls(tree)]
    assert sorted(set(_unguarded(calls, source))) == []


def _open_in(
    conn: psycopg.Connection[Any],
    catalog: Catalog,
    trees: list[tuple[str, str]],
    statement: str,
) -> list[str]:
    trees.clear()
    conn.execute(f"PREPARE probe AS {statement}".encode(), prepare=False)
    conn.execute("DEALLOCATE probe")
    return _unguarded([call for tree, _ in trees for call in catalog.open_calls(tree)], statement)


def test_the_check_finds_each_way_a_call_is_left_open(conn: psycopg.Connection[Any]) -> None:
    """The check itself, on statements that each leave one call open (a review found
    the first three passing it) and on their guarded forms."""
    catalog = Catalog(conn)
    jobs = "FROM pgworkerd.jobs AS j"
    left_open = [
        "SELECT make_interval(secs => 1::numeric)",  # a named argument, coerced
        f"SELECT ARRAY[1] OPERATOR(pg_catalog.@>) ARRAY[1], j.attempt = 1 {jobs}",
        'SELECT "array_position"(ARRAY[1], 1)',  # quoted
        f"SELECT (j.attempt, 1) < (1, 2) {jobs}",  # a row comparison
        f"SELECT j.attempt >= j.max_attempts {jobs}",
        "SELECT unnest(ARRAY[1])",
        "SELECT ARRAY[1::bigint] @> ARRAY[1::bigint]",
    ]
    guarded = [
        "SELECT pg_catalog.make_interval(secs => 1::numeric)",
        f"SELECT j.attempt::int = 1, j.attempt::int >= j.max_attempts::int {jobs}",
        "SELECT pg_catalog.array_position(ARRAY[1], 1), pg_catalog.unnest(ARRAY[1])",
        f"SELECT (j.attempt::int, 1) < (1, 2) {jobs}",
        "SELECT ARRAY[1::bigint] OPERATOR(pg_catalog.@>) ARRAY[1::bigint]",
    ]
    trees = trees_of(conn)  # one notice handler for every probe
    assert [s for s in left_open if not _open_in(conn, catalog, trees, s)] == []
    assert {s: found for s in guarded if (found := _open_in(conn, catalog, trees, s))} == {}
