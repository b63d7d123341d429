"""storage/queries.py renders a schema's statements one at a time, at first use."""

from __future__ import annotations

import pytest

from pgworkerd.storage import queries


def test_a_look_up_renders_that_statement_alone() -> None:
    """A producer's first enqueue renders its insert, not the 82 other statements
    (bench/results/first-call-round14-20261128.md)."""
    statements = queries.statements("a schema of its own")
    assert list(statements) == []
    insert = statements["jobs_insert_bare"]
    assert list(statements) == ["jobs_insert_bare"]
    assert b'"a schema of its own".jobs' in insert
    assert statements["jobs_insert_bare"] is insert  # kept: rendered once


def test_every_statement_renders_the_same_whatever_was_rendered_before() -> None:
    """The fragments (claim_update and its variants among them) are kept per schema as
    statements first need them: the order of first look-ups changes no statement."""
    names = queries.names()
    assert "jobs_claim_one" in names and "claim_update" not in names
    forward, backward = queries.Statements("s"), queries.Statements("s")
    rendered = {name: forward[name] for name in names}
    assert {name: backward[name] for name in reversed(names)} == rendered


def test_a_fragment_or_an_unknown_name_is_not_a_statement() -> None:
    statements = queries.Statements("s")
    for name in ("claim_update", "claim_update_one", "no_such_statement"):
        with pytest.raises(KeyError):
            statements[name]
