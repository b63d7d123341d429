"""How you might test your own handlers with pgworkerd.testing: the shop example's
(examples/shop_jobs.py). pgworkerd's suite runs this file as a user would
(tests/integration/test_testing.py), against a real PostgreSQL named by
PGWORKERD_DATABASE__URL; run it yourself with

    PGWORKERD_DATABASE__URL=postgresql://... pytest examples/test_shop_jobs.py
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

import pgworkerd
from examples import shop_jobs
from pgworkerd import config
from pgworkerd.testing import assert_enqueued, drain, migrate

Conn = psycopg.Connection[Any]


@pytest.fixture(scope="module")
def shop_config() -> config.Config:
    return config.load(Path(__file__).with_name("shop.yaml"))


@pytest.fixture
def conn(shop_config: config.Config) -> Iterator[Conn]:
    """An autocommit connection to a database with pgworkerd's schema and no jobs."""
    assert shop_config.database.url is not None, "set PGWORKERD_DATABASE__URL"
    url = shop_config.database.url.get_secret_value()
    with psycopg.connect(url, autocommit=True) as connection:
        migrate(connection, shop_config.database.schema_name)
        connection.execute("TRUNCATE pgworkerd.jobs")
        yield connection


def test_placing_an_order_enqueues_its_charge(conn: Conn) -> None:
    with conn.transaction():
        shop_jobs.place_order(conn, order_id=7, amount_cents=1250)
    job = assert_enqueued(conn, "charge_order", {"order": 7})
    assert job["payload"] == {"order": 7, "amount": 1250} and job["queue"] == "default"


def test_a_charged_order_gets_a_receipt(conn: Conn, shop_config: config.Config) -> None:
    charge = shop_jobs.place_order(conn, order_id=7, amount_cents=1250)
    outcomes = drain(conn, shop_config)
    # The charge ran, and so did the receipt it enqueued, in the same drain.
    assert [(o.kind, o.state) for o in outcomes] == [
        ("charge_order", "succeeded"),
        ("send_receipt", "succeeded"),
    ]
    assert pgworkerd.result(conn, charge) == {"order": 7, "charged": 1250}
    assert outcomes[1].result == "receipt for order 7 sent"
    progress = conn.execute(
        "SELECT progress, progress_stage FROM pgworkerd.jobs WHERE id = %s", (charge,)
    )
    assert progress.fetchone() == (90.0, "charged")


def test_a_declined_card_is_retried_then_dead(conn: Conn, shop_config: config.Config) -> None:
    order = shop_jobs.place_order(conn, order_id=8, amount_cents=500_000)
    (first,) = drain(conn, shop_config)
    assert (first.outcome, first.state, first.attempt) == ("failed", "queued", 1)
    assert "CardDeclined: order 8: card declined" in (first.error or "")
    # The retry waits for its backoff: drain runs each job at most once a call, and
    # only jobs that are ready, so a failing handler never makes it loop.
    conn.execute("UPDATE pgworkerd.jobs SET run_at = now() WHERE id = %s", (order,))
    assert [o.state for o in drain(conn, shop_config)] == ["queued"]
    conn.execute("UPDATE pgworkerd.jobs SET run_at = now() WHERE id = %s", (order,))
    (last,) = drain(conn, shop_config)
    assert (last.state, last.attempt) == ("dead", 3)
    assert pgworkerd.wait(conn, order, timeout=1) == "dead"
    with pytest.raises(AssertionError, match="no queued job of kind 'send_receipt'"):
        assert_enqueued(conn, "send_receipt")


def test_nothing_to_charge_is_discarded_and_only_the_queue_asked_runs(
    conn: Conn, shop_config: config.Config
) -> None:
    shop_jobs.place_order(conn, order_id=9, amount_cents=0)
    assert drain(conn, shop_config, queue="mail") == []
    (outcome,) = drain(conn, shop_config, queue="default")
    assert (outcome.outcome, outcome.state, outcome.error) == (
        "discarded",
        "dead",
        "order 9: nothing to charge",
    )
