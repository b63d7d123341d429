"""A small shop's jobs, for the example of testing handlers with pgworkerd.testing
(examples/test_shop_jobs.py, docs/testing.md).

Placing an order enqueues `charge_order` in the caller's transaction; charging it
enqueues `send_receipt`; a card the payment provider declines is dead-lettered."""

from __future__ import annotations

import os
from typing import Any

import psycopg

import pgworkerd


class CardDeclined(Exception):
    pass


def place_order(conn: psycopg.Connection[Any], order_id: int, amount_cents: int) -> int:
    """What a web request would do: the job commits or rolls back with the order."""
    return pgworkerd.enqueue(conn, "charge_order", {"order": order_id, "amount": amount_cents})


def charge_order(job: pgworkerd.Job) -> dict[str, Any]:
    order, amount = job.payload["order"], job.payload["amount"]
    job.progress(10, "contacting the payment provider")
    if amount <= 0:
        raise pgworkerd.Discard(f"order {order}: nothing to charge")
    if amount > 100_000:
        raise CardDeclined(f"order {order}: card declined for {amount} cents")
    job.progress(90, "charged")
    # A job the handler enqueues: on a connection of its own (your app's database
    # settings; here the one pgworkerd's config reads), committed at once.
    with psycopg.connect(os.environ["PGWORKERD_DATABASE__URL"], autocommit=True) as conn:
        pgworkerd.enqueue(conn, "send_receipt", {"order": order}, queue="mail")
    return {"order": order, "charged": amount}


def send_receipt(job: pgworkerd.Job) -> str:
    return f"receipt for order {job.payload['order']} sent"
