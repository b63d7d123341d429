"""Tasks of an imaginary shop: one with the default kind, one with every option."""

from __future__ import annotations

from typing import Any

import pgworkerd


@pgworkerd.task
def send_receipt(job: pgworkerd.Job) -> dict[str, Any]:
    return {"sent_to": job.payload["to"], "attempt": job.attempt}


@pgworkerd.task(kind="shop.refund", queue="payments", priority=7, max_attempts=2, max_runtime=30)
async def refund(job: pgworkerd.Job) -> str:
    return f"refunded {job.payload['amount']}"


NOT_A_TASK = 42
