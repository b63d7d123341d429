"""Network faults through a loopback proxy of our own (tests/proxy.py): a cut past the
lease (§8), a lost reply to a committed outcome (§6)."""

from __future__ import annotations

import threading
from typing import Any

import psycopg
import pytest


def test_the_proxy_cuts_heals_drops_and_loses_a_reply(proxy, db_dsn):
    """The fault injector itself: a blackholed query waits and completes after the
    heal; a drop breaks the connection; a lost reply's statement still commits."""
    with psycopg.connect(proxy.dsn(db_dsn), autocommit=True) as conn:
        assert conn.execute("SELECT 1").fetchone() == (1,)
        proxy.blackhole()
        answer: list[Any] = []
        waiter = threading.Thread(
            target=lambda: answer.append(conn.execute("SELECT 2").fetchone()))
        waiter.start()
        waiter.join(timeout=1.0)
        assert waiter.is_alive() and not answer, "the cut let a query through"
        proxy.heal()
        waiter.join(timeout=5)
        assert answer == [(2,)]
        assert proxy.drop() == 1
        with pytest.raises(psycopg.OperationalError):
            conn.execute("SELECT 3")
    with psycopg.connect(proxy.dsn(db_dsn), autocommit=True) as conn:
        conn.execute("CREATE TABLE lost_reply (x int)")
        proxy.lose_reply_to(b"INSERT INTO lost_reply")
        with pytest.raises(psycopg.OperationalError):
            conn.execute("INSERT INTO lost_reply VALUES (1)")
    assert proxy.replies_lost == 1
    with psycopg.connect(db_dsn) as direct:
        assert direct.execute("SELECT x FROM lost_reply").fetchall() == [(1,)]

